// Which clusters a ManagedClusterSet selects, as OCM's sdk builds the selector: by the clusterset label
// for ExclusiveClusterSetLabel (and an unset type), by spec.clusterSelector.labelSelector for
// LabelSelector. Both as the query the API server filters a list with, and in memory for one cluster.
import { ClusterLabel, ManagedClusterResource, ManagedClusterSetBindingResource, ManagedClusterSetResource, type ManagedCluster, type ManagedClusterSet, type ManagedClusterSetBinding } from "./api/cluster.ts";
import type { KubeClient } from "./kube/client.ts";
import { matches } from "./label-match.ts";
import { labelValueProblem, selectorQuery, type SelectorQuery } from "./selector-query.ts";

export function setSelector(set: ManagedClusterSet): SelectorQuery {
  const selector = set.spec?.clusterSelector;
  if (selector?.selectorType === "LabelSelector") return selectorQuery(selector.labelSelector);
  // a name no label value can hold is carried by no cluster
  if (labelValueProblem(set.metadata.name)) return { selects: "nothing" };
  return { selects: "matching", labelSelector: `${ClusterLabel.ClusterSet}=${set.metadata.name}` };
}

// Whether the set selects this cluster, with the same meaning as setSelector on the wire.
export function setSelects(set: ManagedClusterSet, cluster: Pick<ManagedCluster, "metadata">): boolean {
  const selector = set.spec?.clusterSelector;
  if (selector?.selectorType === "LabelSelector") {
    const ls = selector.labelSelector;
    const query = selectorQuery(ls);
    return "selects" in query && query.selects === "matching" && matches(ls!, cluster.metadata.labels);
  }
  return cluster.metadata.labels?.[ClusterLabel.ClusterSet] === set.metadata.name;
}

// The sets bound to a namespace, as OCM reckons them: a ManagedClusterSetBinding counts when the set it
// is named after exists (creating it needed managedclustersets/bind, which the admission policy checks).
export async function boundSets(hub: KubeClient, namespace: string): Promise<ManagedClusterSet[]> {
  const [bindings, sets] = await Promise.all([hub.list<ManagedClusterSetBinding>(ManagedClusterSetBindingResource, { namespace }), hub.list<ManagedClusterSet>(ManagedClusterSetResource)]);
  const bound = new Set(bindings.items.map((b) => b.metadata.name));
  return sets.items.filter((s) => bound.has(s.metadata.name)).sort((a, b) => (a.metadata.name < b.metadata.name ? -1 : 1));
}

// The clusters of the sets, none deleting, each set listed with its own selector so the API server sends
// only members. A set whose selector the API server would refuse selects nothing, and is logged.
export async function membersOfSets(hub: KubeClient, sets: readonly ManagedClusterSet[], log: { warn(fields: object, msg: string): void }): Promise<ManagedCluster[]> {
  const members = new Map<string, ManagedCluster>();
  for (const set of sets) {
    const query = setSelector(set);
    if ("invalid" in query) {
      log.warn({ set: set.metadata.name, reason: query.invalid }, "cluster set skipped: its selector is invalid");
      continue;
    }
    if (query.selects === "nothing") continue;
    const { items } = await hub.list<ManagedCluster>(ManagedClusterResource, { labelSelector: query.labelSelector || undefined });
    for (const c of items) if (!c.metadata.deletionTimestamp) members.set(c.metadata.name, c);
  }
  return [...members.values()];
}
