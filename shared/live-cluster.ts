// The ManagedCluster a hub function's key names, as long as there is something to do for it: none when
// it is gone, or when it is being deleted (logged, since an event named it).
import { ManagedClusterResource, type ManagedCluster } from "./api/cluster.ts";
import type { Io, Key } from "./harness.ts";

export async function liveCluster(io: Io<unknown>, key: Key): Promise<ManagedCluster | undefined> {
  const cluster = await io.cluster(key.cluster).get<ManagedCluster>(ManagedClusterResource, key.name);
  if (cluster?.metadata.deletionTimestamp) {
    io.log.info({ cluster: key.name }, "skipped: cluster is deleting");
    return undefined;
  }
  return cluster;
}
