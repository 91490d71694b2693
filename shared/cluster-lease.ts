// The cluster lease the hub makes and the agent renews (ocm-protocol §1.8, §4.3): one place that makes
// it, for the cluster-acceptor (on acceptance) and the cluster-lease-monitor (when it is missing), and
// one rule for when it has expired, for the lease monitor (which marks the cluster Unknown) and
// spoke-cluster-status (which claims no availability while the hub may judge it so: issue 24).
import { LeaseResource } from "./api/kube.ts";
import { ClusterLabel, DefaultLeaseDurationSeconds, ManagedClusterLeaseName, type ManagedCluster } from "./api/cluster.ts";
import { microTime } from "./clock.ts";
import type { KubeClient, KubeObject } from "./kube/client.ts";
import { isAlreadyExists } from "./kube/errors.ts";

export type Lease = KubeObject & {
  metadata: { creationTimestamp?: string; managedFields?: ManagedFieldsEntry[] };
  spec?: { holderIdentity?: string; renewTime?: string; acquireTime?: string; leaseDurationSeconds?: number };
};
type ManagedFieldsEntry = { manager?: string; operation?: string; time?: string; fieldsV1?: { "f:spec"?: Record<string, unknown> } };

// Both functions may make it for one cluster at once: whoever creates it first wins, and the other
// reads what was made.
export async function createClusterLease(hub: KubeClient, cluster: string, now: Date): Promise<Lease> {
  try {
    return await hub.create<Lease>(LeaseResource, {
      metadata: { name: ManagedClusterLeaseName, namespace: cluster, labels: { [ClusterLabel.ClusterName]: cluster } },
      spec: { holderIdentity: ManagedClusterLeaseName, renewTime: microTime(now) },
    });
  } catch (err) {
    if (!isAlreadyExists(err)) throw err;
    const lease = await hub.get<Lease>(LeaseResource, ManagedClusterLeaseName, cluster);
    if (!lease) throw err; // created and deleted again meanwhile: the retry sees which
    return lease;
  }
}

// OCM: a leaseDurationSeconds of 0 (or unset) means 60 s, for backward compatibility. The agent renews
// once per duration (the heartbeat), so whoever waits for a renewal waits this long.
export function leaseDurationMs(cluster: ManagedCluster | undefined): number {
  return (cluster?.spec?.leaseDurationSeconds || DefaultLeaseDurationSeconds) * 1_000;
}

// OCM: grace = 5 × leaseDurationSeconds, and 0 means the default (FIX #183: a zero grace period
// rewrote the condition without end).
export function gracePeriodMs(cluster: ManagedCluster, multiplier: number): number {
  return multiplier * leaseDurationMs(cluster);
}

// A lease nobody ever renewed counts from its creation (OCM would crash on it).
export const lastRenewal = (lease: Lease): number => Date.parse(lease.spec?.renewTime ?? lease.spec?.acquireTime ?? lease.metadata.creationTimestamp ?? "") || 0;

// The moment the lease expires: its last renewal plus the grace. Expired once now has reached it.
export const leaseExpiresAt = (lease: Lease, cluster: ManagedCluster, multiplier: number): number => lastRenewal(lease) + gracePeriodMs(cluster, multiplier);
