// Keeps a ManagedCluster's availability taints in step with its Available condition on the hub
// (ocm-protocol §4.4): unreachable while Unknown or missing, unavailable while False, none while True.
import { HubClusterSchema, type HubCluster } from "../../shared/settings.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import { liveCluster } from "../../shared/live-cluster.ts";
import { defineFunction } from "../../shared/sdk.ts";
import { findCondition } from "../../shared/conditions.ts";
import { rfc3339 } from "../../shared/clock.ts";
import { ManagedClusterConditionType, ManagedClusterResource, TaintEffect, TaintKey, type ManagedCluster, type Taint } from "../../shared/api/cluster.ts";

// Only which cluster is the hub (shared/settings.ts); events from any other cluster are not ours.
export type Config = HubCluster;

// The root kind is ManagedCluster: a change wakes its own cluster, and the resync tick every cluster,
// unless the cluster as the event carries it (or the tick lists it) already has the taints it should.
// Deletions wake nothing: a cluster that is gone has no taints to keep.
export default defineFunction({
  name: "cluster-taints",
  config: HubClusterSchema,
  watches: (c) => [{ cluster: c.hubCluster, resource: ManagedClusterResource, mode: "Resource", verbs: ["add", "update"], root: true }],
  resyncSeconds: 60,
  settled: (c, io) => isSettled(c as ManagedCluster, io.clock.now()),
  // The cluster-taints function (functions/cluster-taints) on the hub: reads clusters and rewrites
  // spec.taints with a PUT carrying the resourceVersion it read. No status, no patch, nothing else.
  writes: (c) => [
    { cluster: c.hubCluster, why: "spec.taints, a PUT with the resourceVersion read", apiGroups: ["cluster.open-cluster-management.io"], resources: ["managedclusters"], verbs: ["update"] },
  ],
  reconcile,
});

export async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const hub = io.cluster(key.cluster);
  const cluster = await liveCluster(io, key);
  if (!cluster) return done;
  const taints = decideTaints(cluster, io.clock.now());
  if (!taints) return done;
  const next = structuredClone(cluster);
  next.spec = { ...next.spec, taints };
  // as Go's omitempty writes it
  if (taints.length === 0) delete next.spec.taints;
  // PUT with the resourceVersion just read: a concurrent writer gets a conflict, and the retry re-reads
  await hub.update<ManagedCluster>(ManagedClusterResource, next);
  io.log.info({ cluster: key.name, taints: taints.map((t) => t.key) }, "taints updated to follow Available");
  return done;
}

export const isSettled = (cluster: ManagedCluster, now: Date) => !!cluster.metadata.deletionTimestamp || decideTaints(cluster, now) === undefined;

export const unreachableTaint = { key: TaintKey.Unreachable, effect: TaintEffect.NoSelect } as const satisfies Taint;
export const unavailableTaint = { key: TaintKey.Unavailable, effect: TaintEffect.NoSelect } as const satisfies Taint;

// The taint list Available asks for, or undefined when the present one already fits. Taints are the
// same when key, value and effect are (OCM's identity); other taints are kept as they are.
export function decideTaints(cluster: ManagedCluster, now: Date): Taint[] | undefined {
  const status = findCondition(cluster.status?.conditions, ManagedClusterConditionType.Available)?.status;
  const [add, remove]: [Taint[], Taint[]] =
    status === "True" ? [[], [unreachableTaint, unavailableTaint]]
    : status === "False" ? [[unavailableTaint], [unreachableTaint]]
    : [[unreachableTaint], [unavailableTaint]]; // missing or Unknown
  const before = cluster.spec?.taints ?? [];
  const kept = before.filter((t) => !remove.some((r) => isSameTaint(t, r)));
  // OCM's webhook stamps timeAdded on a new taint; without a webhook the writer does. An existing
  // taint keeps its own.
  const added = add.filter((a) => !kept.some((t) => isSameTaint(t, a))).map((a) => ({ ...a, timeAdded: rfc3339(now) }));
  if (added.length === 0 && kept.length === before.length) return undefined;
  return [...kept, ...added];
}

export const isSameTaint = (a: Pick<Taint, "key" | "value" | "effect">, b: Pick<Taint, "key" | "value" | "effect">) =>
  a.key === b.key && (a.value ?? "") === (b.value ?? "") && a.effect === b.effect;
