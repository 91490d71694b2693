// status.configReferences and Configured (OCM addon-configuration controller with the framework's
// config spec hashing): desired configs are the CMA defaults, overridden per kind by the install
// strategy's placement that selects the cluster, overridden per kind by the add-on's own spec.configs.
// Rollout is All: every add-on takes its desired configs at once.
import { placementClusters } from "../../../shared/placement-decisions.ts";
import { setCondition } from "../../../shared/conditions.ts";
import { AddOnConditionType, AddOnDeploymentConfigV1alpha1Resource, AddOnGroup, AddOnReason, AddOnTemplateResource, type AddOnConfig, type ClusterManagementAddOnV1alpha1 } from "../../../shared/api/addon.ts";
import { AddOnConfigResource, AddOnMessage, ReservedNoDefaultConfigName } from "../../../shared/api/addon-strings.ts";
import type { ApiResource } from "../../../shared/api/meta.ts";
import type { KubeObject } from "../../../shared/kube/client.ts";
import { readDesiredConfigs, type AddOnStatus, type Scene } from "../scene.ts";
import { specHash } from "../spec-hash.ts";

type ConfigRef = NonNullable<AddOnStatus["configReferences"]>[number];
export type DesiredConfig = { group: string; resource: string; namespace?: string; name: string };

// The configs this function can read and hash itself; others keep the hash their add-on's manager wrote.
const hashable: Record<string, ApiResource> = {
  [AddOnConfigResource.AddOnDeploymentConfigs]: AddOnDeploymentConfigV1alpha1Resource,
  [AddOnConfigResource.AddOnTemplates]: AddOnTemplateResource,
};

export async function configured(s: Scene, status: AddOnStatus): Promise<void> {
  const cma = s.cma!;
  const desired = desiredConfigs(cma, await placementConfigs(s, cma), s.mca.spec.configs ?? []);
  const observed = await Promise.all(desired.map((d) => observe(s, d)));
  status.configReferences = mergeConfigReferences(status.configReferences ?? [], desired, observed);
  status.conditions = setCondition(status.conditions, { type: AddOnConditionType.Configured, status: "True", reason: AddOnReason.ConfigurationsConfigured, message: AddOnMessage.Configured }, s.now);
  s.configs = await readDesiredConfigs(s, status);
}

// The configs of the last install-strategy placement that selects this cluster (OCM: later
// placements override earlier ones), or undefined when none does.
async function placementConfigs(s: Scene, cma: ClusterManagementAddOnV1alpha1): Promise<AddOnConfig[] | undefined> {
  if (cma.spec.installStrategy?.type !== "Placements") return undefined;
  let configs: AddOnConfig[] | undefined;
  for (const p of cma.spec.installStrategy.placements ?? []) {
    const clusters = await placementClusters(s.hub, p);
    if (clusters?.has(s.mca.metadata.namespace!)) configs = (p.configs as AddOnConfig[] | undefined) ?? [];
  }
  return configs;
}

const grKey = (c: { group?: string; resource: string }) => `${c.group ?? ""}/${c.resource}`;
const sameReferent = (a: { namespace?: string; name: string }, b: { namespace?: string; name: string }) => a.name === b.name && (a.namespace ?? "") === (b.namespace ?? "");

// Lowest to highest precedence; a higher level replaces every config of a kind it names, keeping its
// own order and dropping duplicates. Sorted by group, then resource, as OCM writes them.
export function desiredConfigs(cma: ClusterManagementAddOnV1alpha1, placement: readonly AddOnConfig[] | undefined, own: readonly AddOnConfig[]): DesiredConfig[] {
  const byKind = new Map<string, DesiredConfig[]>();
  const add = (list: DesiredConfig[], c: DesiredConfig) => {
    if (!list.some((x) => sameReferent(x, c))) list.push(c);
  };
  for (const sc of cma.spec.supportedConfigs ?? []) {
    const d = sc.defaultConfig;
    if (!d?.name || d.name === ReservedNoDefaultConfigName) continue;
    const list = byKind.get(grKey(sc)) ?? [];
    add(list, referenced({ group: sc.group, resource: sc.resource, namespace: d.namespace, name: d.name }));
    byKind.set(grKey(sc), list);
  }
  for (const level of [placement ?? [], own]) {
    const replaced = new Set<string>();
    for (const c of level) {
      if (!replaced.has(grKey(c))) {
        byKind.set(grKey(c), []);
        replaced.add(grKey(c));
      }
      add(byKind.get(grKey(c))!, referenced(c));
    }
  }
  return [...byKind.values()].flat().sort((a, b) => (a.group === b.group ? (a.resource < b.resource ? -1 : a.resource > b.resource ? 1 : 0) : a.group < b.group ? -1 : 1));
}

const referenced = (c: { group?: string; resource: string; namespace?: string; name: string }): DesiredConfig => ({
  group: c.group ?? "",
  resource: c.resource,
  ...(c.namespace ? { namespace: c.namespace } : {}),
  name: c.name,
});

type Observed = { specHash?: string; generation?: number };

async function observe(s: Scene, d: DesiredConfig): Promise<Observed> {
  const resource = d.group === AddOnGroup ? hashable[d.resource] : undefined;
  if (!resource) return {};
  const obj = await s.hub.get<KubeObject & { metadata: { generation?: number } }>(resource, d.name, d.namespace);
  // OCM leaves the hash empty while the config does not exist
  if (!obj) return { specHash: "" };
  return { specHash: specHash(obj), generation: obj.metadata.generation };
}

// Existing references keep their lastAppliedConfig (Progressing moves it) when still desired; a
// config this function cannot hash keeps the hash its add-on's own manager recorded.
export function mergeConfigReferences(existing: readonly ConfigRef[], desired: readonly DesiredConfig[], observed: readonly Observed[]): ConfigRef[] {
  return desired.map((d, k) => {
    const before = existing.find((e) => grKey(e) === grKey(d) && e.desiredConfig && sameReferent(e.desiredConfig, d));
    const o = observed[k]!;
    const referent = { ...(d.namespace ? { namespace: d.namespace } : {}), name: d.name };
    const hash = o.specHash ?? before?.desiredConfig?.specHash ?? "";
    const generation = o.generation ?? before?.lastObservedGeneration;
    return {
      group: d.group,
      resource: d.resource,
      ...referent,
      ...(generation !== undefined ? { lastObservedGeneration: generation } : {}),
      desiredConfig: { ...referent, specHash: hash },
      ...(before?.lastAppliedConfig ? { lastAppliedConfig: before.lastAppliedConfig } : {}),
    };
  });
}
