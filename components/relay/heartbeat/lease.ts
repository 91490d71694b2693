// One renewal of the cluster lease on the hub (OCM §5.2): managed-cluster-lease with renewTime moved to
// now, written with the resourceVersion it was read at; nothing else in the lease changes.
import { LeaseResource } from "../../../shared/api/kube.ts";
import { ManagedClusterLeaseName } from "../../../shared/api/cluster-constants.ts";
import { microTime } from "../../../shared/clock.ts";
import type { KubeClient, KubeObject } from "../../../shared/kube/client.ts";
import { classifyError } from "../../../shared/kube/errors.ts";

export type Lease = KubeObject & { spec?: { holderIdentity?: string; leaseDurationSeconds?: number; renewTime?: string; [k: string]: unknown } };

export type Renewal = { renewed: true; renewTime: string; lease: Lease } | { renewed: false; reason: string };

// known: the lease as this sidecar last wrote it. Writing on top of it skips a read each period; a 409
// (someone else changed it) or a 404 (it went) sends us back to reading it. Other errors are thrown
// for the caller to classify.
export async function renewLease(o: { hub: KubeClient; cluster: string; now: Date; known?: Lease }): Promise<Renewal> {
  const lease = o.known ?? (await o.hub.get<Lease>(LeaseResource, ManagedClusterLeaseName, o.cluster));
  // The hub's lease controller creates it; an agent that created it would race that controller.
  if (!lease) return { renewed: false, reason: `lease ${o.cluster}/${ManagedClusterLeaseName} does not exist: the hub creates it` };
  const renewTime = microTime(o.now);
  try {
    const written = await o.hub.update<Lease>(LeaseResource, { ...lease, spec: { ...lease.spec, renewTime } });
    return { renewed: true, renewTime, lease: written };
  } catch (err) {
    const kind = classifyError(err);
    if (o.known && (kind === "conflict" || kind === "not-found")) return renewLease({ ...o, known: undefined });
    throw err;
  }
}
