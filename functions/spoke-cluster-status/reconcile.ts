// The spoke agent's ManagedCluster status (OCM §5.3): ordered steps on a copy of the status, patched
// once at the end and only when something changed. Order matters: a cluster the hub has not accepted
// gets nothing written, and an API server failing its health check has no resources or claims to report.
// The agent settings (docs/agent-config.md) give the recheck interval and the claim limit, and whether
// status writes succeed under them is kept in the agent-health record statusSync.
//
// The checkpoint is read on every reconcile, as a function remembers nothing: one GET of a small
// ConfigMap on the spoke. The health record costs one more GET, and a write only when the hash or the
// outcome changes. Nothing extra reaches the hub.
import { isDeepStrictEqual } from "node:util";
import { ClusterClaimResource, ManagedClusterConditionType, ManagedClusterResource, type ManagedCluster } from "../../shared/api/cluster.ts";
import { NamespaceResource, NodeResource, SecretResource } from "../../shared/api/kube.ts";
import { ClusterEventReason } from "../../shared/api/health.ts";
import { availableEventMessage, ClockOutOfSyncMessage, SpokeStatusEventReason, unavailableEventMessage } from "../../shared/api/spoke-status.ts";
import { findCondition } from "../../shared/conditions.ts";
import { HealthKey, mergeSettings, readActiveSettings, recordHealth, type AgentSettings, type HealthObservation } from "../../shared/agent-config.ts";
import { isConflict } from "../../shared/kube/errors.ts";
import { patchStatusIfChanged } from "../../shared/apply.ts";
import type { ObjectEvent } from "../../shared/events.ts";
import { asAgent } from "../../shared/agent-hub.ts";
import { managedClusterOf } from "../../shared/settings.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import { defineFunction } from "../../shared/sdk.ts";
import type { KubeClient, KubeObject } from "../../shared/kube/client.ts";
import { recordEvent } from "../../shared/kube/event-recorder.ts";
import { ConfigSchema, type Config } from "./config.ts";
import type { Notice, Status, StatusSettings, Step, StepContext, StepResult } from "./step.ts";
import { available } from "./steps/available.ts";
import { claims } from "./steps/claims.ts";
import { joined } from "./steps/joined.ts";
import { resources } from "./steps/resources.ts";
import { isManagedNamespace, managedNamespaces } from "./steps/managed-namespaces.ts";
import { fieldSelectorOf } from "../../shared/selector-query.ts";

export { ConfigSchema, type Config };
export type { Notice, Status, StatusSettings, Step, StepContext, StepResult } from "./step.ts";

export function statusSettings(c: Config, hash: string, active: AgentSettings): StatusSettings {
  const s = mergeSettings({ clusterClaimLimit: c.maxCustomClusterClaims }, active);
  return { hash, maxCustomClusterClaims: s.clusterClaimLimit ?? c.maxCustomClusterClaims, ...(s.statusSyncIntervalSeconds ? { statusSyncIntervalMs: s.statusSyncIntervalSeconds * 1000 } : {}) };
}
// OCM's order: availability before resources and claims, because a failing API server has nothing
// trustworthy to report; nothing at all until the hub has accepted the cluster.
const steps: readonly Step[] = [joined, available, resources, claims, managedNamespaces];

// One key per agent: its cluster. The ManagedCluster on the hub (the relay watches it by name), the hub
// kubeconfig secret, any node or claim on the spoke (they may change capacity, allocatable or the
// exposed claims) and any namespace labelled as a hub's managed one wake it; so does every resync tick.
export default defineFunction({
  name: "spoke-cluster-status",
  config: ConfigSchema,
  watches: (c) => [
    { cluster: c.hubCluster, resource: ManagedClusterResource, fieldSelector: fieldSelectorOf({ "metadata.name": c.clusterName }), mode: "Resource", keys: (e) => (e.ref.name === c.clusterName ? [clusterKey(c)] : skipOf(e)) },
    { cluster: c.managementCluster, resource: SecretResource, namespace: c.agentNamespace, mode: "Either", keys: (e) => (e.ref.name === c.hubSecret ? [clusterKey(c)] : skipOf(e)) },
    { cluster: managedClusterOf(c), resource: NodeResource, mode: "Either", keys: () => [clusterKey(c)] },
    { cluster: managedClusterOf(c), resource: ClusterClaimResource, mode: "Either", keys: () => [clusterKey(c)] },
    // a managed namespace deleted or relabelled by someone else is put back (steps/managed-namespaces.ts)
    { cluster: managedClusterOf(c), resource: NamespaceResource, mode: "Resource", keys: (e) => (isManagedNamespace(e.object) ? [clusterKey(c)] : skipOf(e)) },
  ],
  resyncSeconds: 60,
  // the cluster's key whatever cluster the tick names: it is the only thing this function reconciles
  // one tick per interval: the relay ticks once for each cluster it watches (the hub, the management
  // cluster, in Hosted mode the managed one too), and this key is the same whichever it names
  resync: (io, tick) => (tick.cluster && tick.cluster !== io.config.managementCluster ? { skip: `tick for cluster ${tick.cluster}` } : [clusterKey(io.config)]),
  // spoke-cluster-status on the spoke: read the agent's hub credentials and settings (the agent-config
  // checkpoint), keep the kube-apiserver probe's failure streak and its statusSync health record, read nodes
  // and ClusterClaims, probe the API server, and make the managed namespaces of the cluster's sets. Hub
  // writes (status, events) use the cluster's own identity.
  writes: (c) => [
    { cluster: c.managementCluster, namespace: c.agentNamespace, why: "<cluster>-kube-apiserver-probe: when the current run of failed health probes began. get also reads the agent-config checkpoint and agent-health; create makes agent-health when no one has yet", apiGroups: [""], resources: ["configmaps"], verbs: ["get", "create", "update", "delete"] },
    { cluster: c.managementCluster, namespace: c.agentNamespace, why: "key statusSync of agent-health, merged in when its hash or outcome changes", apiGroups: [""], resources: ["configmaps"], resourceNames: ["agent-health"], verbs: ["patch"] },
    { cluster: managedClusterOf(c), why: "the managed namespaces of the cluster's sets: read and created; labelled (a merge patch of one label) clusterset.open-cluster-management.io/<hub hash> \"true\", or \"false\" once one leaves the list, found by a list on that label. Never deleted, so no delete.", apiGroups: [""], resources: ["namespaces"], verbs: ["create", "patch"] },
    { cluster: managedClusterOf(c), role: "kube-apiserver-probe", why: "the health and version endpoints: stock clusters grant them to every authenticated user, hardened ones do not", nonResourceURLs: ["/livez", "/healthz", "/version"], verbs: ["get"] },
  ],
  reconcile,
});

const clusterKey = (c: Config): Key => ({ cluster: c.managementCluster, name: c.clusterName });
const skipOf = (e: ObjectEvent) => ({ skip: `not this cluster's object: ${e.ref.kind} ${e.ref.namespace ?? ""}/${e.ref.name}` });

export async function reconcile(io: Io<Config>, _key: Key): Promise<Outcome> {
  const c = io.config;
  return asAgent(io, async ({ hub, spoke, managed, now }) => {
    const active = await readActiveSettings(spoke, c.agentNamespace);
    const settings = statusSettings(c, active.hash, active.settings);
    let synced: Synced;
    try {
      synced = await syncStatus({ now, hub, spoke, managed, io, notices: [], settings });
    } catch (err) {
      // A conflict is someone else's write: the harness's retry re-reads and says how this one went.
      if (!isConflict(err)) {
        await recordStatusSync(io, spoke, { hash: settings.hash, ok: false, error: err instanceof Error ? err.message : String(err) }, now).catch((recordErr: unknown) =>
          io.log.warn({ error: recordErr instanceof Error ? recordErr.message : String(recordErr) }, "health record not written"),
        );
      }
      throw err;
    }
    // Neither a withheld write (clocks out of sync) nor a cluster that is gone (its creation calls us
    // again) says anything about whether writes work.
    if (synced.status === "no-cluster") return done;
    if (synced.status !== "withheld") await recordStatusSync(io, spoke, { hash: settings.hash, ok: true }, now);

    // As OCM aggregates a step's error after patching what the steps before it settled.
    if ("error" in synced.ran) throw synced.ran.error;
    const recheckInMs = Math.min(synced.ran.recheckInMs ?? Infinity, settings.statusSyncIntervalMs ?? Infinity);
    return recheckInMs === Infinity ? done : { recheckInMs };
  });
}

type Synced = { status: "written" | "unchanged" | "withheld" | "no-cluster"; ran: { recheckInMs?: number } | { error: unknown } };

// Reads the ManagedCluster, runs the steps and writes the difference. Throws what the hub answered when
// it could not be read or written; a step's own failure is returned, for after the record.
async function syncStatus(o: Omit<StepContext, "cluster">): Promise<Synced> {
  const { io, hub } = o;
  const c = io.config;
  const cluster = await hub.get<ManagedCluster & KubeObject>(ManagedClusterResource, c.clusterName);
  if (!cluster) return { status: "no-cluster", ran: {} };
  const ctx: StepContext = { ...o, cluster };
  const before: Status = cluster.status ?? {};
  const draft: Status = structuredClone(before);
  const ran = await runSteps(draft, ctx);
  const after = JSON.parse(JSON.stringify(draft)) as Status; // a field a step set to undefined is gone
  const changed = !isDeepStrictEqual(before, after);

  let status: Synced["status"] = "unchanged";
  if (findCondition(after.conditions, ManagedClusterConditionType.ClockSynced)?.status === "False") {
    // OCM returns an error here and retries with backoff. Nothing on the spoke can change the hub's
    // verdict, and the hub's next judgement updates the ManagedCluster, whose event calls us again,
    // so a retry would only repeat this line. The event marks a write actually withheld.
    io.log.warn({ cluster: c.clusterName, withheld: changed }, "status not written: the hub says the clocks are out of sync");
    if (changed) ctx.notices.push({ type: "Normal", reason: SpokeStatusEventReason.ClockOutOfSync, message: ClockOutOfSyncMessage });
    status = "withheld";
  } else if (changed) {
    await patchStatusIfChanged(hub, ManagedClusterResource, { ...cluster, status: before }, after);
    io.log.info({ cluster: c.clusterName }, "status written");
    const notice = availabilityNotice(c.clusterName, before, after);
    if (notice) ctx.notices.push(notice);
    status = "written";
  }
  await recordNotices(io, hub, cluster, ctx);
  return { status, ran };
}

// Key statusSync of agent-health: rewritten only when the hash or the outcome changes.
async function recordStatusSync(io: Io<Config>, spoke: KubeClient, observed: HealthObservation, now: Date): Promise<void> {
  if (await recordHealth(spoke, io.config.agentNamespace, HealthKey.StatusSync, observed, now)) {
    io.log.info({ hash: observed.hash, ok: observed.ok, error: observed.error }, `health record written: status writes under this config now ${observed.ok ? "succeed" : "fail"}`);
  }
}

// The soonest recheck any step asked for.
async function runSteps(draft: Status, ctx: StepContext): Promise<{ recheckInMs?: number } | { error: unknown }> {
  let recheckInMs: number | undefined;
  const soonest = (ms: number) => Math.min(ms, recheckInMs ?? Infinity);
  for (const step of steps) {
    let result: StepResult;
    try {
      result = await step(draft, ctx);
    } catch (error) {
      ctx.io.log.warn({ step: step.name, error: error instanceof Error ? error.message : String(error) }, "step failed: the chain stops, what came before is written");
      return { error };
    }
    if (result === "stop") break;
    if (result === "continue") continue;
    if ("stopAndRecheckInMs" in result) return { recheckInMs: soonest(result.stopAndRecheckInMs) };
    recheckInMs = soonest(result.continueAndRecheckInMs);
  }
  return recheckInMs === undefined ? {} : { recheckInMs };
}

// OCM tells the hub when the Available status it wrote changed to True or False (never for Unknown,
// which is the hub's own verdict).
export function availabilityNotice(cluster: string, before: Status, after: Status): Notice | undefined {
  const was = findCondition(before.conditions, ManagedClusterConditionType.Available)?.status;
  const is = findCondition(after.conditions, ManagedClusterConditionType.Available)?.status;
  if (is === was) return undefined;
  if (is === "True") return { type: "Normal", reason: ClusterEventReason.Available, message: availableEventMessage(cluster) };
  if (is === "False") return { type: "Warning", reason: ClusterEventReason.Unavailable, message: unavailableEventMessage(cluster) };
  return undefined;
}

// Events are best effort, as client-go's recorder makes them: a lost event must not undo or repeat
// the status work, so a failure is logged and the reconcile goes on.
async function recordNotices(io: Io<Config>, hub: KubeClient, cluster: ManagedCluster & KubeObject, ctx: StepContext): Promise<void> {
  const name = cluster.metadata.name;
  const regarding = { apiVersion: `${ManagedClusterResource.group}/${ManagedClusterResource.version}`, kind: ManagedClusterResource.kind, name, uid: cluster.metadata.uid, namespace: name };
  for (const [i, n] of ctx.notices.entries()) {
    // Event names are <object>.<time>: one millisecond apart, two events of one reconcile keep their own names.
    const at = new Date(ctx.now.getTime() + i);
    await recordEvent(hub, { regarding, type: n.type, reason: n.reason, message: n.message, component: "spoke-cluster-status", now: at }).catch((err: unknown) =>
      io.log.warn({ reason: n.reason, error: err instanceof Error ? err.message : String(err) }, "event not recorded"),
    );
  }
}
