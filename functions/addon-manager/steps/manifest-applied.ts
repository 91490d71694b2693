// The deploy ManifestWorks of an AddOnTemplate add-on and ManifestApplied (addon-framework deploy
// controller): render the template, pack the objects into addon-<a>-deploy-<i>, write what changed,
// delete emptied works, and mirror the works' Applied condition.
import { isDeepStrictEqual } from "node:util";
import { findCondition, isTrue, removeCondition, setCondition, type NewCondition } from "../../../shared/conditions.ts";
import { isAlreadyExists } from "../../../shared/kube/errors.ts";
import { mcaControllerReference } from "../../../shared/addon-owners.ts";
import { ManifestWorkResource, WorkAnnotation, WorkConditionType, type ManifestConfigOption, type ManifestWork } from "../../../shared/api/work.ts";
import { AddOnAnnotation, AddOnConditionType, AddOnLabel, AddOnReason, type AddOnTemplate } from "../../../shared/api/addon.ts";
import { AddOnMessage } from "../../../shared/api/addon-strings.ts";
import { labelsQuery } from "../../../shared/selector-query.ts";
import type { KubeClient, KubeObject } from "../../../shared/kube/client.ts";
import { renderManifests } from "../render.ts";
import { configSpecHashes, covers, planWorks } from "../works.ts";
import type { AddOnStatus, Scene } from "../scene.ts";

export async function manifestApplied(s: Scene, status: AddOnStatus): Promise<void> {
  const set = (c: Omit<NewCondition, "type">) => (status.conditions = setCondition(status.conditions, { type: AddOnConditionType.ManifestApplied, ...c }, s.now));
  const skip = whyNotDeploying(s, status);
  if (skip) {
    s.io.log.info({ addon: s.mca.metadata.name, cluster: s.mca.metadata.namespace, reason: skip }, "not deploying");
    return;
  }
  const { template, problem } = s.configs;
  if (!template) {
    set({ status: "False", reason: AddOnReason.ManifestWorkApplyFailed, message: AddOnMessage.manifestsFailed(problem ?? "no template") });
    return;
  }
  let objects: KubeObject[];
  try {
    objects = renderManifests({ addon: s.mca.metadata.name, cluster: s.cluster!, template, adc: s.configs.adc, installNamespace: status.namespace ?? "" });
  } catch (err) {
    // a manifest that is not JSON after substitution: nothing to retry until the template changes
    set({ status: "False", reason: AddOnReason.ManifestWorkApplyFailed, message: AddOnMessage.manifestsFailed(err instanceof Error ? err.message : String(err)) });
    return;
  }
  const deployable = objects.filter((o) => !isPreDeleteHook(o));
  const cluster = s.mca.metadata.namespace!;
  const existing = (await s.hub.list<ManifestWork>(ManifestWorkResource, { namespace: cluster, labelSelector: labelsQuery({ [AddOnLabel.AddonName]: s.mca.metadata.name }, { absent: [AddOnLabel.AddonNamespace] }) })).items;
  const plan = planWorks({
    addon: s.mca.metadata.name,
    namespace: cluster,
    objects: deployable,
    existing,
    owner: mcaControllerReference(s.mca),
    configSpecHashes: configSpecHashes(status.configReferences ?? []),
    manifestConfigs: manifestConfigsFor(template, deployable),
  });

  for (const name of plan.remove) await s.hub.delete(ManifestWorkResource, name, cluster);
  const applied: ManifestWork[] = [];
  for (const work of plan.apply) {
    try {
      applied.push(await applyWork(s.hub, work, existing.find((w) => w.metadata.name === work.metadata.name)));
    } catch (err) {
      set({ status: "False", reason: AddOnReason.ManifestWorkApplyFailed, message: AddOnMessage.workApplyFailed(err instanceof Error ? err.message : String(err)) });
      s.errors.push(err);
      return;
    }
  }
  if (!plan.apply.length) {
    set({ status: "True", reason: AddOnReason.AddonManifestApplied, message: AddOnMessage.NoManifest });
    return;
  }
  const verdict = appliedVerdict(applied);
  if (verdict === "True") set({ status: "True", reason: AddOnReason.AddonManifestApplied, message: AddOnMessage.ManifestsApplied });
  else if (verdict === "False") set({ status: "False", reason: AddOnReason.AddonManifestAppliedFailed, message: AddOnMessage.ManifestsApplyFailed });
  // the work agent has not reported yet: an old failure would mislead, a success may stay
  else if (findCondition(status.conditions, AddOnConditionType.ManifestApplied)?.status === "False") status.conditions = removeCondition(status.conditions, AddOnConditionType.ManifestApplied);
}

function whyNotDeploying(s: Scene, status: AddOnStatus): string | undefined {
  if (!findCondition(status.conditions, AddOnConditionType.RegistrationApplied)) return "registration not applied yet";
  if (!s.cluster) return "the ManagedCluster does not exist";
  if (s.cluster.metadata.deletionTimestamp) return "the ManagedCluster is deleting";
  if (!isTrue(status.conditions, AddOnConditionType.Configured)) return "not configured yet";
  return undefined;
}

// Jobs and Pods marked addon-pre-delete (label or annotation) belong to the pre-delete hook work.
function isPreDeleteHook(o: KubeObject): boolean {
  if (o.kind !== "Job" && o.kind !== "Pod") return false;
  const m = o.metadata as { labels?: Record<string, string>; annotations?: Record<string, string> };
  return m.labels?.[AddOnAnnotation.AddonPreDelete] !== undefined || m.annotations?.[AddOnAnnotation.AddonPreDelete] !== undefined;
}

// WorkloadAvailability feedback for every Deployment and DaemonSet (what OCM probes template add-ons
// with), merged with the template's own manifestConfigs.
export function manifestConfigsFor(template: AddOnTemplate, objects: readonly KubeObject[]): ManifestConfigOption[] {
  const configs: ManifestConfigOption[] = objects
    .filter((o) => (o.apiVersion ?? "").startsWith("apps/") && (o.kind === "Deployment" || o.kind === "DaemonSet"))
    .map((o) => ({
      resourceIdentifier: { group: "apps", resource: o.kind === "Deployment" ? "deployments" : "daemonsets", name: o.metadata.name ?? "", namespace: o.metadata.namespace ?? "" },
      feedbackRules: [{ type: "WellKnownStatus" as const }],
    }));
  for (const mc of template.spec.agentSpec.manifestConfigs ?? []) {
    const same = configs.find((c) => isDeepStrictEqual(c.resourceIdentifier, mc.resourceIdentifier));
    if (!same) {
      configs.push(mc);
      continue;
    }
    for (const rule of mc.feedbackRules ?? []) same.feedbackRules = mergeFeedbackRule(same.feedbackRules ?? [], rule);
    if (mc.updateStrategy) same.updateStrategy = mc.updateStrategy;
  }
  return configs;
}

type FeedbackRule = NonNullable<ManifestConfigOption["feedbackRules"]>[number];

// addon-framework mergeFeedbackRule: one WellKnownStatus rule, JSON paths deduplicated by name.
function mergeFeedbackRule(rules: FeedbackRule[], rule: FeedbackRule): FeedbackRule[] {
  if (rule.type === "WellKnownStatus") return rules.some((r) => r.type === "WellKnownStatus") ? rules : [...rules, rule];
  const known = new Set(rules.flatMap((r) => (r.type === "JSONPaths" ? (r.jsonPaths ?? []).map((p) => p.name) : [])));
  const fresh = (rule.jsonPaths ?? []).filter((p) => !known.has(p.name));
  return fresh.length ? [...rules, { type: "JSONPaths", jsonPaths: fresh }] : rules;
}

// Writes the work when its manifests, labels or annotations differ, or the spec lacks a field we set
// (the API server adds defaults we leave out, so only our own fields are compared there).
async function applyWork(hub: KubeClient, desired: ManifestWork, existing: ManifestWork | undefined): Promise<ManifestWork> {
  if (!existing) {
    try {
      return await hub.create(ManifestWorkResource, desired);
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
      const now = await hub.get<ManifestWork>(ManifestWorkResource, desired.metadata.name, desired.metadata.namespace);
      return applyWork(hub, desired, now);
    }
  }
  const have = existing.spec ?? {};
  const want = desired.spec!;
  const unchanged =
    isDeepStrictEqual(have.workload, want.workload) &&
    covers(have.manifestConfigs, want.manifestConfigs) &&
    (have.manifestConfigs === undefined) === (want.manifestConfigs === undefined) &&
    covers(have.deleteOption, want.deleteOption) &&
    (have.deleteOption?.propagationPolicy === "SelectivelyOrphan") === (want.deleteOption !== undefined) &&
    covers(existing.metadata.labels, desired.metadata.labels) &&
    isDeepStrictEqual(existing.metadata.annotations?.[hashKey], desired.metadata.annotations?.[hashKey]);
  if (unchanged) return existing;
  const annotations = { ...existing.metadata.annotations };
  if (desired.metadata.annotations?.[hashKey] === undefined) delete annotations[hashKey];
  else annotations[hashKey] = desired.metadata.annotations[hashKey];
  return hub.update<ManifestWork>(ManifestWorkResource, {
    ...existing,
    metadata: { ...existing.metadata, labels: { ...existing.metadata.labels, ...desired.metadata.labels }, annotations },
    spec: { ...have, workload: want.workload, manifestConfigs: want.manifestConfigs, deleteOption: want.deleteOption },
  });
}

const hashKey = WorkAnnotation.ConfigSpecHash;

// False if any work failed to apply, True when all applied, undefined while any has not reported.
export function appliedVerdict(works: readonly ManifestWork[]): "True" | "False" | undefined {
  const statuses = works.map((w) => findCondition(w.status?.conditions, WorkConditionType.Applied)?.status);
  if (statuses.includes("False")) return "False";
  if (statuses.every((x) => x === "True")) return "True";
  return undefined;
}
