// The clusters a Placement selects, read from its PlacementDecisions (label
// cluster.open-cluster-management.io/placement) as OCM's add-on controllers read them.
import { ClusterLabel, PlacementDecisionResource, PlacementResource, type Placement, type PlacementDecision } from "./api/cluster.ts";
import type { KubeClient } from "./kube/client.ts";
import { labelsQuery } from "./selector-query.ts";

export type PlacementRef = { namespace: string; name: string };

// undefined when the Placement itself does not exist (OCM ignores such a reference); otherwise the
// union of its decisions' cluster names.
export async function placementClusters(hub: KubeClient, ref: PlacementRef): Promise<Set<string> | undefined> {
  if (!(await hub.get<Placement>(PlacementResource, ref.name, ref.namespace))) return undefined;
  const { items } = await hub.list<PlacementDecision>(PlacementDecisionResource, { namespace: ref.namespace, labelSelector: labelsQuery({ [ClusterLabel.Placement]: ref.name }) });
  return new Set(items.flatMap((d) => (d.status?.decisions ?? []).map((x) => x.clusterName)));
}
