// Keys for hub functions whose root kind is ManagedCluster: a tick wakes every cluster, a ManagedCluster
// event its own, and other kinds map to a cluster through the function's own `related` rule.
import { ManagedClusterResource, type ManagedCluster } from "./api/cluster.ts";
import type { FunctionEvent, ObjectEvent } from "./events.ts";
import type { Io, Key } from "./harness.ts";

export type Keys = Key[] | { skip: string };

export async function managedClusterKeys(
  event: FunctionEvent,
  io: Io<{ hubCluster: string }>,
  related: (event: ObjectEvent, hub: string) => Keys | Promise<Keys> = (e) => ({ skip: `not a kind this function watches: ${e.ref.kind}` }),
): Promise<Keys> {
  const hub = io.config.hubCluster;
  if (event.type === "tick") {
    if (event.cluster && event.cluster !== hub) return { skip: `tick for cluster ${event.cluster}, not the hub` };
    const { items } = await io.cluster(hub).list<ManagedCluster>(ManagedClusterResource);
    return items.map((c) => ({ cluster: hub, name: c.metadata.name }));
  }
  if (event.cluster !== hub) return { skip: `event from cluster ${event.cluster}, not the hub` };
  const { kind, apiVersion, name } = event.ref;
  if (kind === ManagedClusterResource.kind && apiVersion.startsWith(`${ManagedClusterResource.group}/`)) return [{ cluster: hub, name }];
  return related(event, hub);
}
