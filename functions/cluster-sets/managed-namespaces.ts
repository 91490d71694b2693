// Each ManagedCluster's status.managedNamespaces, as OCM's managed-namespace controller fills it: one
// entry per namespace in spec.managedNamespaces of every set the cluster belongs to, named with its set,
// sorted by set and then by name. A set being deleted contributes nothing, and neither does any set to a
// cluster being deleted (that status is left alone). The agent on the cluster creates the namespaces and
// writes each entry's conditions (functions/spoke-cluster-status/steps/managed-namespaces.ts).
//
// Run for one set, it rewrites the clusters that set concerns: those it selects now and those whose
// status still names it (a cluster that left the set, or every member of a deleted set). Each such
// cluster's list is computed from all sets, so whichever set's reconcile comes first writes the whole
// answer and the others find nothing to change.
import { isDeepStrictEqual } from "node:util";
import { ManagedClusterResource, ManagedClusterSetResource, type ClusterSetManagedNamespace, type ManagedCluster, type ManagedClusterSet } from "../../shared/api/cluster.ts";
import { setSelector, setSelects } from "../../shared/cluster-set-members.ts";
import { patchStatusIfChanged } from "../../shared/apply.ts";
import type { Io } from "../../shared/harness.ts";
import type { KubeClient, KubeObject } from "../../shared/kube/client.ts";

type Cluster = ManagedCluster & KubeObject;

export async function writeManagedNamespaces<C>(io: Io<C>, hub: KubeClient, setName: string): Promise<void> {
  const [sets, clusters] = await Promise.all([hub.list<ManagedClusterSet>(ManagedClusterSetResource), hub.list<Cluster>(ManagedClusterResource)]);
  const set = sets.items.find((s) => s.metadata.name === setName);
  const invalid = invalidSets(sets.items);
  if (invalid.has(setName)) io.log.warn({ set: setName }, "managed namespaces of the set left as they are on its clusters: its label selector is invalid");
  for (const cluster of clusters.items) {
    if (cluster.metadata.deletionTimestamp) continue; // OCM leaves a deleting cluster's status alone
    const concerned = (set !== undefined && setSelects(set, cluster)) || (cluster.status?.managedNamespaces ?? []).some((m) => m.clusterSet === setName);
    if (!concerned) continue;
    const next = managedNamespacesOf(cluster, sets.items, invalid);
    const before = cluster.status?.managedNamespaces ?? [];
    if (isDeepStrictEqual(before, next)) continue;
    // resourceVersion in the patch: a write of the agent's conditions since the list is a conflict and a retry
    await patchStatusIfChanged(hub, ManagedClusterResource, cluster, { ...cluster.status, managedNamespaces: next.length > 0 ? next : undefined });
    io.log.info({ cluster: cluster.metadata.name, namespaces: next.map((m) => `${m.clusterSet}/${m.name}`) }, "managed namespaces written");
  }
}

// Sets whose selector cannot be evaluated. OCM fails every cluster's sync while one exists and so
// changes no list at all; here only that set's entries stay as they were.
function invalidSets(sets: readonly ManagedClusterSet[]): Set<string> {
  return new Set(sets.filter((s) => "invalid" in setSelector(s)).map((s) => s.metadata.name));
}

// The cluster's list from all sets: the entries of sets that select it (not those being deleted), an
// invalid set's entries as they stand. An entry already there keeps the conditions the agent wrote.
export function managedNamespacesOf(cluster: ManagedCluster, sets: readonly ManagedClusterSet[], invalid: ReadonlySet<string> = invalidSets(sets)): ClusterSetManagedNamespace[] {
  const current = cluster.status?.managedNamespaces ?? [];
  const entries: ClusterSetManagedNamespace[] = current.filter((m) => invalid.has(m.clusterSet)).map((m) => structuredClone(m));
  for (const set of sets) {
    const name = set.metadata.name;
    if (invalid.has(name) || set.metadata.deletionTimestamp || !setSelects(set, cluster)) continue;
    for (const ns of set.spec?.managedNamespaces ?? []) {
      const kept = current.find((m) => m.clusterSet === name && m.name === ns.name);
      entries.push(kept?.conditions ? { name: ns.name, clusterSet: name, conditions: structuredClone(kept.conditions) } : { name: ns.name, clusterSet: name });
    }
  }
  return entries.sort(bySetThenName);
}

// Go's string order is byte order; set and namespace names are ASCII, where code units order alike.
const compare = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
const bySetThenName = (a: ClusterSetManagedNamespace, b: ClusterSetManagedNamespace) => compare(a.clusterSet, b.clusterSet) || compare(a.name, b.name);
