// Available of an AddOnTemplate add-on (addon-framework's health check with the WorkloadAvailability
// prober OCM gives every template add-on): healthCheck mode Customized, so the spoke's lease controller
// leaves the add-on alone, and Available judged from the deploy works' status on the hub: each work's
// Available condition, then the WellKnownStatus feedback the work agent read from every Deployment
// (but those of zero replicas) and DaemonSet the template renders. manifestApplied's manifestConfigsFor
// asks the works for that feedback.
import { findCondition, setCondition, type NewCondition } from "../../../shared/conditions.ts";
import { labelsQuery } from "../../../shared/selector-query.ts";
import { ManagedClusterConditionType } from "../../../shared/api/cluster.ts";
import { ManifestWorkResource, WorkConditionType, type ManifestCondition, type ManifestWork } from "../../../shared/api/work.ts";
import { AddOnConditionType, AddOnLabel, AddOnReason, HealthCheckMode } from "../../../shared/api/addon.ts";
import { AddOnMessage, preDeleteHookWorkName } from "../../../shared/api/addon-strings.ts";
import type { KubeObject } from "../../../shared/kube/client.ts";
import { renderManifests } from "../render.ts";
import type { AddOnStatus, Scene } from "../scene.ts";

type FeedbackValue = NonNullable<NonNullable<ManifestCondition["statusFeedback"]>["values"]>[number];
// What is probed: a rendered Deployment or DaemonSet.
export type Workload = { group: "apps"; resource: "deployments" | "daemonsets"; namespace: string; name: string };

// OCM runs this in its deploy controller, which starts only once RegistrationApplied exists and the
// cluster does; the mode is set whenever it runs, the probe only once ManifestApplied exists.
export async function health(s: Scene, status: AddOnStatus): Promise<void> {
  if (!findCondition(status.conditions, AddOnConditionType.RegistrationApplied) || !s.cluster) return;
  status.healthCheck = { mode: HealthCheckMode.Customized };
  if (!findCondition(status.conditions, AddOnConditionType.ManifestApplied)) return;
  // the cluster's own Unknown is copied onto its add-ons (clusterHealth), not probed
  if (findCondition(s.cluster.status?.conditions, ManagedClusterConditionType.Available)?.status === "Unknown") return;

  const set = (c: Omit<NewCondition, "type">) => (status.conditions = setCondition(status.conditions, { type: AddOnConditionType.Available, ...c }, s.now));
  const addon = s.mca.metadata.name;
  const works = (
    await s.hub.list<ManifestWork>(ManifestWorkResource, { namespace: s.mca.metadata.namespace, labelSelector: labelsQuery({ [AddOnLabel.AddonName]: addon }, { absent: [AddOnLabel.AddonNamespace] }) })
  ).items.filter((w) => !w.metadata.name.startsWith(preDeleteHookWorkName(addon)));
  if (!works.length) return void set({ status: "Unknown", reason: AddOnReason.WorkNotFound, message: AddOnMessage.WorkNotFound });

  const manifests: ManifestCondition[] = [];
  // OCM's prefix has no trailing dash: addon-<a>-deploy
  for (const w of works.filter((x) => x.metadata.name.startsWith(`addon-${addon}-deploy`))) {
    const available = findCondition(w.status?.conditions, WorkConditionType.Available);
    if (!available) return void set({ status: "Unknown", reason: AddOnReason.WorkNotApplied, message: AddOnMessage.WorkNotAppliedYet });
    if (available.status === "False") return void set({ status: "False", reason: AddOnReason.WorkNotApplied, message: available.message ?? "" });
    manifests.push(...(w.status?.resourceStatus?.manifests ?? []));
  }

  const { template, problem } = s.configs;
  if (!template) {
    // OCM cannot render the manifests either and leaves Available as it was; RegistrationApplied and
    // ManifestApplied already say why, and the template's own event wakes the add-on
    s.io.log.info({ addon, cluster: s.mca.metadata.namespace, reason: problem }, "health not probed: no template to render");
    return;
  }
  let objects: KubeObject[];
  try {
    objects = renderManifests({ addon, cluster: s.cluster, template, adc: s.configs.adc, installNamespace: status.namespace ?? "" });
  } catch (err) {
    // ManifestApplied reports the same failure
    s.io.log.info({ addon, cluster: s.mca.metadata.namespace, reason: err instanceof Error ? err.message : String(err) }, "health not probed: the template does not render");
    return;
  }
  set(probeVerdict(addon, probedWorkloads(objects), manifests));
}

// Deployments (not those of zero replicas) and DaemonSets of group apps, in the template's order. An
// object whose spec does not decode as one (replicas not a number) is none, as in OCM.
export function probedWorkloads(objects: readonly KubeObject[]): Workload[] {
  const out: Workload[] = [];
  for (const o of objects) {
    if ((o.apiVersion ?? "").split("/")[0] !== "apps" || !o.apiVersion?.includes("/")) continue;
    const id = { group: "apps" as const, namespace: o.metadata.namespace ?? "", name: o.metadata.name ?? "" };
    if (o.kind === "Deployment") {
      const replicas = (o.spec as { replicas?: unknown } | undefined)?.replicas ?? 1;
      if (typeof replicas !== "number" || replicas === 0) continue;
      out.push({ ...id, resource: "deployments" });
    } else if (o.kind === "DaemonSet") out.push({ ...id, resource: "daemonsets" });
  }
  return out;
}

// The framework's verdict from the probed workloads and the manifests' feedback: Unknown while no
// workload has any feedback yet, False at the first that is not available, else True. A template
// with no workload is available once its works are.
export function probeVerdict(addon: string, workloads: readonly Workload[], manifests: readonly ManifestCondition[]): Omit<NewCondition, "type"> {
  const results = workloads.flatMap((w) =>
    manifests
      .filter((m) => {
        const r = m.resourceMeta;
        return (r.group ?? "") === w.group && (r.resource ?? "") === w.resource && (r.namespace ?? "") === w.namespace && (r.name ?? "") === w.name && (m.statusFeedback?.values?.length ?? 0) > 0;
      })
      .map((m) => ({ w, values: m.statusFeedback!.values! })),
  );
  if (workloads.length && !results.length) return { status: "Unknown", reason: AddOnReason.NoProbeResult, message: AddOnMessage.NoProbeResult };
  for (const r of results) {
    const err = unavailable(r.w, r.values);
    if (err) return { status: "False", reason: AddOnReason.ProbeUnavailable, message: AddOnMessage.probeUnavailable(err) };
  }
  return { status: "True", reason: AddOnReason.ProbeAvailable, message: AddOnMessage.probeAvailable(addon) };
}

// Why a workload is not available, in the framework's words, or undefined when it is: a Deployment
// needs one ready replica (or wants none), a DaemonSet every scheduled pod ready.
function unavailable(w: Workload, values: readonly FeedbackValue[]): string | undefined {
  // the last value of either name counts, whatever the workload's kind (so OCM reads them); OCM
  // dereferences it as an integer without looking (a value of another type stops its manager), here
  // that is a reason to be unavailable
  const integer = (names: readonly string[]): number | string | undefined => {
    const v = values.findLast((x) => names.includes(x.name));
    if (!v) return undefined;
    return v.fieldValue.type === "Integer" && v.fieldValue.integer !== undefined ? v.fieldValue.integer : `the value of ${v.name} is not an integer`;
  };
  const readyReplicas = integer(["ReadyReplicas", "NumberReady"]);
  const desiredReplicas = integer(["Replicas", "DesiredNumberScheduled"]);
  if (typeof readyReplicas === "string") return readyReplicas;
  if (typeof desiredReplicas === "string") return desiredReplicas;
  if (readyReplicas === undefined) return "readyReplica is not probed";
  if (desiredReplicas === undefined) return "desiredNumberReplicas is not probed";
  if (w.resource === "deployments" && (desiredReplicas === 0 || readyReplicas >= 1)) return undefined;
  if (w.resource === "daemonsets" && readyReplicas === desiredReplicas) return undefined;
  return `desiredNumberReplicas is ${desiredReplicas} but readyReplica is ${readyReplicas} for ${w.resource} ${w.namespace}/${w.name}`;
}
