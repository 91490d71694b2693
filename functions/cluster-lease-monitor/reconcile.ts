// Judges from a ManagedCluster's lease on the hub whether its agent is alive and its clock in step
// with the hub (ocm-protocol §4.3): Available=Unknown once the lease is too old, and ClockSynced. It
// creates a missing lease and schedules the next look for the moment the lease would expire.
import { createClusterLease, gracePeriodMs, leaseExpiresAt, type Lease } from "../../shared/cluster-lease.ts";
import { z } from "zod";
import { HubClusterSchema } from "../../shared/settings.ts";
import { asNumber, fromEnv } from "../../shared/env-settings.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import type { ObjectEvent, TickEvent } from "../../shared/events.ts";
import { defineFunction, type KeysOrSkip } from "../../shared/sdk.ts";
import type { KubeClient } from "../../shared/kube/client.ts";
import { recordEvent } from "../../shared/kube/event-recorder.ts";
import { patchStatusIfChanged } from "../../shared/apply.ts";
import { findCondition, hasCondition, setCondition, type NewCondition } from "../../shared/conditions.ts";
import { LeaseResource } from "../../shared/api/kube.ts";
import {
  ClusterAnnotation,
  ClusterLabel,
  ManagedClusterConditionType,
  ManagedClusterLeaseName,
  ManagedClusterReason,
  ManagedClusterResource,
  type ManagedCluster,
} from "../../shared/api/cluster.ts";
import { ClusterEventReason, LeaseDurationTimes, ManagedClusterMessage, availableUnknownEventMessage } from "../../shared/api/health.ts";

export const ConfigSchema = HubClusterSchema.extend({
  // How many lease durations without a renewal make a cluster Unknown, and how far the agent's clock
  // may drift. Agents renew every 1 to 1.25 durations (jitter) plus a request's latency, so below 1.5
  // a healthy cluster would flap.
  leaseGraceMultiplier: fromEnv("OCM_LEASE_GRACE_MULTIPLIER", z.number().min(1.5).default(LeaseDurationTimes), asNumber),
});
export type Config = z.infer<typeof ConfigSchema>;

export type { Lease };

// The root kind is ManagedCluster (a deleted or never accepted one has nothing to judge). Only the cluster leases
// carry the cluster-name label, so node and leader-election leases never reach the function.
export default defineFunction({
  name: "cluster-lease-monitor",
  config: ConfigSchema,
  // Each event comes with the other half of the judgement (the cluster with its lease, the lease with
  // its cluster) and each tick with both lists, from the source's cache: a look costs no read.
  watches: (c) => [
    { cluster: c.hubCluster, resource: ManagedClusterResource, mode: "Resource", verbs: ["add", "update"], root: true, related: [{ resource: LeaseResource, namespace: "{name}", name: ManagedClusterLeaseName }], onTick: true },
    // A renewal (an update) wakes nothing: each look asks to be called back when the lease would
    // expire, and that recheck is sent with the lease as the source's cache holds it then (renewed
    // since, or not). So a healthy fleet costs the hub no call per renewal, a stopped agent is found at
    // the moment its lease expires, and a clock out of step at the next look or resync tick.
    { cluster: c.hubCluster, resource: LeaseResource, labelSelector: ClusterLabel.ClusterName, mode: "Either", verbs: ["add", "delete"], keys: keysOfLease, related: [{ resource: ManagedClusterResource, name: "{namespace}" }], onTick: true },
  ],
  resyncSeconds: 60,
  resync,
  // nothing to judge before acceptance (wasEverAccepted); as data, so the relay does not wake it for that
  settled: [{ lacksCondition: ManagedClusterConditionType.HubAccepted }],
  // The cluster-lease-monitor function (functions/cluster-lease-monitor) on the hub.
  //
  // Leases are read and created cluster-wide: each cluster's lease lives in its own namespace <c>, and
  // those namespaces appear as clusters are accepted. A Role per namespace would need someone to create
  // it on accept (a grant this function cannot make itself), and a watch over all cluster leases is one
  // cluster-wide watch anyway. The function never updates or deletes a lease: renewing is the agent's.
  writes: (c) => [
    { cluster: c.hubCluster, why: "Available=Unknown and ClockSynced", apiGroups: ["cluster.open-cluster-management.io"], resources: ["managedclusters/status"], verbs: ["patch", "update"] },
    { cluster: c.hubCluster, why: "managed-cluster-lease in every cluster namespace; create when missing", apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["create"] },
    { cluster: c.hubCluster, why: "the AvailableUnknown event in namespace <c>", apiGroups: [""], resources: ["events"], verbs: ["create"] },
  ],
  reconcile,
});

// A resync tick looks at the clusters that need a look, judged from one list of clusters and one of
// leases: a missing lease, an expired one not yet marked, a clock condition to change. A fresh lease
// is left to its recheck at expiry (and to this tick, should that recheck be lost), so a steady fleet
// costs two lists a tick, not two reads per cluster.
async function resync(io: Io<Config>, tick: TickEvent): Promise<KeysOrSkip> {
  const cluster = io.config.hubCluster;
  if (tick.cluster && tick.cluster !== cluster) return { skip: `tick for cluster ${tick.cluster}, where this function reconciles nothing` };
  const hub = io.cluster(cluster);
  const [clusters, leases] = await Promise.all([
    hub.list<ManagedCluster>(ManagedClusterResource),
    hub.list<Lease>(LeaseResource, { labelSelector: ClusterLabel.ClusterName }),
  ]);
  const leaseOf = new Map(leases.items.filter((l) => l.metadata.name === ManagedClusterLeaseName).map((l) => [l.metadata.namespace, l]));
  const now = io.clock.now();
  const multiplier = io.config.leaseGraceMultiplier;
  return clusters.items.filter((c) => needsLook(c, leaseOf.get(c.metadata.name), now, multiplier)).map((c) => ({ cluster, name: c.metadata.name! }));
}

export function needsLook(cluster: ManagedCluster, lease: Lease | undefined, now: Date, multiplier: number): boolean {
  if (!wasEverAccepted(cluster)) return false;
  if (!lease) return true;
  return judgeLease({ lease, cluster, now, multiplier }).condition !== undefined || judgeClock({ lease, cluster, now, multiplier }) !== undefined;
}

// A lease wakes the cluster whose namespace it lives in.
function keysOfLease(event: ObjectEvent): KeysOrSkip {
  const { name, namespace } = event.ref;
  if (name !== ManagedClusterLeaseName) return { skip: `lease ${namespace ?? ""}/${name} is not a cluster lease` };
  return namespace ? [{ cluster: event.cluster, name: namespace }] : { skip: "cluster lease without a namespace" };
}

export async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const hub = io.cluster(key.cluster);
  const cluster = await hub.get<ManagedCluster>(ManagedClusterResource, key.name);
  if (!cluster) return done;
  if (!wasEverAccepted(cluster)) {
    io.log.info({ cluster: key.name }, "skipped: never accepted");
    return done;
  }
  const now = io.clock.now();
  const multiplier = io.config.leaseGraceMultiplier;
  let lease = await hub.get<Lease>(LeaseResource, ManagedClusterLeaseName, key.name);
  if (!lease) {
    if (cluster.metadata.deletionTimestamp) {
      // nothing will renew a lease for a cluster on its way out
      await writeConditions({ io, hub, now }, cluster, [availableUnknown]);
      return done;
    }
    lease = await createClusterLease(hub, key.name, now);
    io.log.info({ cluster: key.name }, "lease was missing: created it");
  }
  const verdict = judgeLease({ lease, cluster, now, multiplier });
  const clock = judgeClock({ lease, cluster, now, multiplier });
  await writeConditions({ io, hub, now }, cluster, [verdict.condition, clock].filter((c) => c !== undefined));
  if (verdict.expired) io.log.info({ cluster: key.name }, "lease expired: agent stopped renewing it");
  return { recheckInMs: verdict.recheckInMs };
}

// OCM watches every cluster that ever had the HubAccepted condition, also after a deny.
export const wasEverAccepted = (c: ManagedCluster) => findCondition(c.status?.conditions, ManagedClusterConditionType.HubAccepted) !== undefined;

export type LeaseVerdict = { expired: boolean; condition?: NewCondition; recheckInMs: number };

// Expired once now ≥ last renewal + grace. A fresh lease is looked at again exactly when it would
// expire; an expired one after another grace period, as OCM requeues (renewals wake us anyway).
// Recovery is the agent's: it sets Available=True itself, so nothing here stands in its way.
export function judgeLease(o: { lease: Lease; cluster: ManagedCluster; now: Date; multiplier: number }): LeaseVerdict {
  const grace = gracePeriodMs(o.cluster, o.multiplier);
  const expiresAt = leaseExpiresAt(o.lease, o.cluster, o.multiplier);
  const now = o.now.getTime();
  if (now < expiresAt) return { expired: false, recheckInMs: expiresAt - now };
  // OCM leaves an Unknown condition alone, whatever its reason
  const alreadyUnknown = findCondition(o.cluster.status?.conditions, ManagedClusterConditionType.Available)?.status === "Unknown";
  return { expired: true, condition: alreadyUnknown ? undefined : availableUnknown, recheckInMs: grace };
}

// OCM compares the hub's now with renewTime at the moment it sees a renewal, and at no other time.
// A function also runs on ticks and cluster events, later. While the lease is fresh that changes
// nothing (the renewal is less than a grace period old, so now − renewTime < grace either way), but
// once it has expired "now" can no longer tell a dead agent from a clock running behind. Then the
// hub's time of the renewal comes from the lease itself: the API server stamps the managedFields
// entry of whoever wrote renewTime. Without such an entry, now it is.
export function judgeClock(o: { lease: Lease; cluster: ManagedCluster; now: Date; multiplier: number }): NewCondition | undefined {
  const renewTime = o.lease.spec?.renewTime;
  if (!renewTime) return undefined;
  const renewedAt = Date.parse(renewTime);
  const grace = gracePeriodMs(o.cluster, o.multiplier);
  const now = o.now.getTime();
  const seenAt = now < renewedAt + grace ? now : (renewalSeenAt(o.lease) ?? now);
  const skipped = o.cluster.metadata.annotations?.[ClusterAnnotation.SkipClockSyncCheck] === "true";
  const want = skipped || Math.abs(seenAt - renewedAt) < grace ? clockSynced : clockOutOfSync;
  return hasCondition(o.cluster.status?.conditions, want) ? undefined : want;
}

// When the API server last stored a change by the writer that owns spec.renewTime (whole seconds).
export function renewalSeenAt(lease: Lease): number | undefined {
  const owner = lease.metadata.managedFields?.find((e) => e.fieldsV1?.["f:spec"]?.["f:renewTime"] !== undefined);
  const at = owner?.time ? Date.parse(owner.time) : NaN;
  return Number.isNaN(at) ? undefined : at;
}

// One status patch for all judgements, and the hub event when the cluster has just become Unknown.
async function writeConditions(ctx: { io: Io<Config>; hub: KubeClient; now: Date }, cluster: ManagedCluster, changes: readonly NewCondition[]): Promise<void> {
  if (changes.length === 0) return;
  const { io, hub, now } = ctx;
  const conditions = changes.reduce((list, c) => setCondition(list, c, now), cluster.status?.conditions ?? []);
  const written = await patchStatusIfChanged(hub, ManagedClusterResource, cluster, { ...cluster.status, conditions });
  if (!written) return;
  const name = cluster.metadata.name;
  io.log.info({ cluster: name, conditions: changes.map((c) => `${c.type}=${c.status}/${c.reason}`) }, "status updated");
  if (changes.some((c) => c.type === ManagedClusterConditionType.Available && c.status === "Unknown")) {
    await recordEvent(hub, {
      regarding: { apiVersion: `${ManagedClusterResource.group}/${ManagedClusterResource.version}`, kind: ManagedClusterResource.kind, name, uid: cluster.metadata.uid, namespace: name },
      type: "Warning",
      reason: ClusterEventReason.AvailableUnknown,
      message: availableUnknownEventMessage(name),
      component: "cluster-lease-monitor",
      now,
    });
  }
}

const availableUnknown: NewCondition = {
  type: ManagedClusterConditionType.Available,
  status: "Unknown",
  reason: ManagedClusterReason.ManagedClusterLeaseUpdateStopped,
  message: ManagedClusterMessage.LeaseUpdateStopped,
};
const clockSynced: NewCondition = {
  type: ManagedClusterConditionType.ClockSynced,
  status: "True",
  reason: ManagedClusterReason.ManagedClusterClockSynced,
  message: ManagedClusterMessage.ClockSynced,
};
const clockOutOfSync: NewCondition = {
  type: ManagedClusterConditionType.ClockSynced,
  status: "False",
  reason: ManagedClusterReason.ManagedClusterClockOutOfSync,
  message: ManagedClusterMessage.ClockOutOfSync,
};
