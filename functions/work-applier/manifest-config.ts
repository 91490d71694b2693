// Which manifestConfigs entry speaks for a manifest (OCM's FindManifestConfiguration): entries match by
// group, resource and `*`-wildcarded namespace and name; the first match with each setting wins.
import type { ManifestConfigOption } from "../../shared/api/work.ts";

export type ResourceMeta = { ordinal: number; group?: string; version?: string; kind?: string; resource?: string; name?: string; namespace?: string };

export function wildcardMatch(value: string, pattern: string): boolean {
  if (value === pattern || pattern === "*") return true;
  const re = new RegExp(`^${pattern.split("*").map((s) => s.replace(/[.+?^${}()|[\]\\]/g, "\\$&")).join(".*")}$`);
  return re.test(value);
}

export function findManifestConfig(meta: ResourceMeta, options: readonly ManifestConfigOption[] | undefined): ManifestConfigOption | undefined {
  let found: ManifestConfigOption | undefined;
  for (const o of options ?? []) {
    const id = o.resourceIdentifier;
    const matches = (id.group ?? "") === (meta.group ?? "") && id.resource === (meta.resource ?? "") && wildcardMatch(meta.namespace ?? "", id.namespace ?? "") && wildcardMatch(meta.name ?? "", id.name);
    if (!matches) continue;
    found ??= { resourceIdentifier: { group: meta.group, resource: meta.resource ?? "", name: meta.name ?? "", namespace: meta.namespace } };
    if (!found.conditionRules?.length && o.conditionRules?.length) found.conditionRules = o.conditionRules;
    if (!found.feedbackRules?.length && o.feedbackRules?.length) found.feedbackRules = o.feedbackRules;
    if (!found.updateStrategy && o.updateStrategy) found.updateStrategy = o.updateStrategy;
    found.feedbackScrapeType = o.feedbackScrapeType;
  }
  if (!found || (!found.conditionRules?.length && !found.feedbackRules?.length && !found.updateStrategy)) return undefined;
  return found;
}
