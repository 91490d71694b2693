// Which clusters a ManagedClusterSet selects, as OCM's sdk builds the selector: by the clusterset label
// for ExclusiveClusterSetLabel (and an unset type), by spec.clusterSelector.labelSelector for
// LabelSelector. Both as the query the API server filters a list with, and in memory for one cluster.
import { ClusterLabel, type ManagedCluster, type ManagedClusterSet } from "./api/cluster.ts";
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
