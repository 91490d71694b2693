// One acceptance as the benches time it: an accepted ManagedCluster created until a watch shows
// HubAccepted=True (a watch, not polling, which would load the API server the acceptor is measured on).
import type { KubeClient } from "../shared/kube/client.ts";
import { ManagedClusterResource, ManagedClusterConditionType, type ManagedCluster } from "../shared/api/cluster.ts";
import { isTrue } from "../shared/conditions.ts";

// ms from the create's send to the watch's event; undefined when it did not come within timeoutMs.
export async function createdToAccepted(admin: KubeClient, name: string, timeoutMs: number): Promise<number | undefined> {
  const fieldSelector = `metadata.name=${name}`;
  const { resourceVersion } = await admin.list(ManagedClusterResource, { fieldSelector });
  let seen: (at: number) => void = () => {};
  const accepted = new Promise<number>((resolve) => (seen = resolve));
  const w = admin.watch(ManagedClusterResource, { fieldSelector, resourceVersion }, (e) => {
    if (isTrue((e.object as ManagedCluster).status?.conditions, ManagedClusterConditionType.HubAccepted)) seen(performance.now());
  });
  let timer: NodeJS.Timeout | undefined;
  try {
    const start = performance.now();
    await admin.create(ManagedClusterResource, { metadata: { name }, spec: { hubAcceptsClient: true, leaseDurationSeconds: 60 } });
    const at = await Promise.race([accepted, new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), timeoutMs)))]);
    return at === undefined ? undefined : at - start;
  } finally {
    clearTimeout(timer);
    w.stop();
  }
}
