// The cluster lease the hub makes and the agent renews (ocm-protocol §1.8, §4.3): one place that makes
// it, for the cluster-acceptor (on acceptance) and the cluster-lease-monitor (when it is missing).
import { LeaseResource } from "./api/kube.ts";
import { ClusterLabel, ManagedClusterLeaseName } from "./api/cluster.ts";
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
