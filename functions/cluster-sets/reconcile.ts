// Keeps ManagedClusterSets and their bindings on the hub as OCM's DefaultClusterSet, GlobalClusterSet,
// ManagedClusterSet, ManagedNamespace and ManagedClusterSetBinding controllers do: "default" and "global"
// exist with their fixed selectors, clusters without a set join "default" (OCM's mutating webhook, gate
// DefaultClusterSet), each set says whether it selects any cluster (ClusterSetEmpty), each cluster's
// status lists the managed namespaces of its sets (managed-namespaces.ts), and each binding says whether
// its set exists (Bound). The root kind is ManagedClusterSet, keyed by name; a binding is named after its set.
import { isDeepStrictEqual } from "node:util";
import { HubClusterSchema, type HubCluster } from "../../shared/settings.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import type { ObjectEvent, TickEvent } from "../../shared/events.ts";
import { defineFunction, type KeysOrSkip } from "../../shared/sdk.ts";
import type { KubeClient } from "../../shared/kube/client.ts";
import { isAlreadyExists } from "../../shared/kube/errors.ts";
import { hasCondition, setCondition, type NewCondition } from "../../shared/conditions.ts";
import { patchStatusIfChanged } from "../../shared/apply.ts";
import { setSelector } from "../../shared/cluster-set-members.ts";
import { writeManagedNamespaces } from "./managed-namespaces.ts";
import { fieldSelectorOf } from "../../shared/selector-query.ts";
import {
  ClusterLabel,
  DefaultClusterSetName,
  ManagedClusterResource,
  ManagedClusterSetBindingResource,
  ManagedClusterSetConditionType,
  ManagedClusterSetReason,
  ClusterSetBindingConditionType,
  ClusterSetBindingReason,
  GlobalClusterSetName,
  ClusterSetAutoUpdateAnnotation,
  ManagedClusterSetResource,
  type ManagedCluster,
  type ManagedClusterSet,
  type ManagedClusterSetBinding,
} from "../../shared/api/cluster.ts";

type ClusterSelector = NonNullable<NonNullable<ManagedClusterSet["spec"]>["clusterSelector"]>;

// The selectors OCM pins on its two sets; every other field of them stays the user's.
export const fixedSelectors: Readonly<Record<string, ClusterSelector>> = {
  [DefaultClusterSetName]: { selectorType: "ExclusiveClusterSetLabel" },
  [GlobalClusterSetName]: { selectorType: "LabelSelector", labelSelector: {} },
};

// Only which cluster is the hub (shared/settings.ts); events from any other cluster are not ours.
export type Config = HubCluster;

export default defineFunction({
  name: "cluster-sets",
  config: HubClusterSchema,
  // Every kind in either mode: the keys are names. Each event comes with the fleet as the source's
  // cache holds it (every ManagedCluster), so a set is counted, its clusters' managed namespaces judged
  // and the clusters without a set found from that, not from a list of the fleet per set and per event.
  watches: (c) => [
    { cluster: c.hubCluster, resource: ManagedClusterSetResource, mode: "Either", root: true, related: [fleet] },
    // OCM's admission holds a binding's name equal to spec.clusterSet, so the name is the set's key.
    { cluster: c.hubCluster, resource: ManagedClusterSetBindingResource, mode: "Either", keys: (e) => keysFor(c.hubCluster, [e.ref.name]), related: [{ resource: ManagedClusterSetResource }, fleet], onTick: true },
    // with the sets and bindings too, so mapping a cluster's change to the sets to recount, and each
    // set's bindings, read nothing. Only what the sets are judged by wakes it: a cluster's labels (its
    // sets), its deletion, and the managed namespaces this function writes into its status; its
    // conditions, lease-driven or not, never do.
    { cluster: c.hubCluster, resource: ManagedClusterResource, mode: "Either", keys: clusterKeys, related: [{ resource: ManagedClusterSetResource }, { resource: ManagedClusterSetBindingResource }, fleet], onTick: true, changes: ["metadata.labels", "metadata.deletionTimestamp", "status.managedNamespaces"] },
  ],
  resyncSeconds: 60,
  resync,
  // The cluster-sets function (functions/cluster-sets) on the hub: lists sets, bindings and clusters;
  // creates "default" and "global" and PUTs their selector back; patches set and binding status; labels
  // clusters without a set into "default" with a merge patch of metadata.labels; patches each cluster's
  // status.managedNamespaces from the sets it belongs to.
  writes: (c) => [
    { cluster: c.hubCluster, why: "creates default and global and PUTs their selector back", apiGroups: ["cluster.open-cluster-management.io"], resources: ["managedclustersets"], verbs: ["create", "update"] },
    { cluster: c.hubCluster, why: "set and binding status", apiGroups: ["cluster.open-cluster-management.io"], resources: ["managedclustersets/status", "managedclustersetbindings/status"], verbs: ["patch"] },
    { cluster: c.hubCluster, why: "status.managedNamespaces, a merge patch carrying the resourceVersion it was computed from", apiGroups: ["cluster.open-cluster-management.io"], resources: ["managedclusters/status"], verbs: ["patch"] },
    { cluster: c.hubCluster, why: "clusters counted by label selector, and those without a set labelled into \"default\"", apiGroups: ["cluster.open-cluster-management.io"], resources: ["managedclusters"], verbs: ["patch"] },
    { cluster: c.hubCluster, why: "the admission policy's check for changing a cluster's clusterset label: the only set this function puts clusters into is \"default\", and it never takes a cluster out of one", apiGroups: ["cluster.open-cluster-management.io"], resources: ["managedclustersets/join"], resourceNames: ["default"], verbs: ["create"] },
  ],
  reconcile,
});

const fleet = { resource: ManagedClusterResource };

const keysFor = (hub: string, names: readonly string[]): Key[] => [...new Set(names)].map((name) => ({ cluster: hub, name }));

// Bindings too: a set deleted while the watch was down leaves bindings whose set no longer exists.
async function resync(io: Io<Config>, tick: TickEvent): Promise<KeysOrSkip> {
  const hub = io.config.hubCluster;
  if (tick.cluster && tick.cluster !== hub) return { skip: `tick for cluster ${tick.cluster}, not the hub` };
  const [sets, bindings] = await Promise.all([setNames(io.cluster(hub)), io.cluster(hub).list<ManagedClusterSetBinding>(ManagedClusterSetBindingResource)]);
  return keysFor(hub, [DefaultClusterSetName, GlobalClusterSetName, ...sets, ...bindings.items.map((b) => b.metadata.name)]);
}

// The event carries only the cluster's new labels, so a set it left cannot be told from it: recount
// every set, and default, which labels a cluster that has no set.
async function clusterKeys(event: ObjectEvent, io: Io<Config>): Promise<Key[]> {
  const hub = io.config.hubCluster;
  const sets = (await io.cluster(hub).list<ManagedClusterSet>(ManagedClusterSetResource)).items;
  // An update cannot move a cluster into or out of a set that selects every cluster (global): only an
  // add or a delete changes that count, and it is a list of the whole fleet.
  const recount = event.verb === "update" ? sets.filter((s) => !selectsEveryCluster(s)) : sets;
  const pinned = event.verb === "update" ? [DefaultClusterSetName] : [DefaultClusterSetName, GlobalClusterSetName];
  return keysFor(hub, [...pinned, ...recount.map((s) => s.metadata.name)]);
}

function selectsEveryCluster(set: ManagedClusterSet): boolean {
  const c = set.spec?.clusterSelector;
  return c?.selectorType === "LabelSelector" && !!c.labelSelector && Object.keys(c.labelSelector.matchLabels ?? {}).length === 0 && (c.labelSelector.matchExpressions ?? []).length === 0;
}

const setNames = async (hub: KubeClient) => (await hub.list<ManagedClusterSet>(ManagedClusterSetResource)).items.map((s) => s.metadata.name);

// In order: the pinned sets exist first, so their status and bindings see them; clusters join default
// before the sets are counted, so default's count includes them.
export async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const hub = io.cluster(key.cluster);
  let set = await hub.get<ManagedClusterSet>(ManagedClusterSetResource, key.name);
  const fixed = fixedSelectors[key.name];
  if (fixed) set = await keepFixedSet(io, hub, { name: key.name, fixed, found: set });
  if (key.name === DefaultClusterSetName) await labelClustersWithoutSet(io, hub);
  if (set && !set.metadata.deletionTimestamp) await writeSetStatus(io, hub, set);
  await writeManagedNamespaces(io, hub, key.name);
  await writeBindingStatuses(io, hub, { set: key.name, exists: set !== undefined });
  return done;
}

// OCM's default and global controllers: create the set when missing; put its selector back when changed,
// unless the set's autoupdate annotation is "false".
type FixedSet = { name: string; fixed: ClusterSelector; found: ManagedClusterSet | undefined; raced?: boolean };
async function keepFixedSet(io: Io<Config>, hub: KubeClient, { name, fixed, found: set, raced = false }: FixedSet): Promise<ManagedClusterSet> {
  if (!set) {
    try {
      const created = await hub.create<ManagedClusterSet>(ManagedClusterSetResource, { metadata: { name }, spec: { clusterSelector: structuredClone(fixed) } });
      io.log.info({ set: name }, "created the set with its fixed selector");
      return created;
    } catch (err) {
      // another writer made it first: read what it made, once
      if (!isAlreadyExists(err) || raced) throw err;
      return keepFixedSet(io, hub, { name, fixed, found: await hub.get<ManagedClusterSet>(ManagedClusterSetResource, name), raced: true });
    }
  }
  if (set.metadata.annotations?.[ClusterSetAutoUpdateAnnotation] === "false") {
    io.log.info({ set: name }, `selector left alone: ${ClusterSetAutoUpdateAnnotation} is "false"`);
    return set;
  }
  if (isSameSelector(set.spec?.clusterSelector, fixed)) return set;
  const next = structuredClone(set);
  next.spec = { ...next.spec, clusterSelector: structuredClone(fixed) };
  // PUT with the resourceVersion just read: a concurrent writer gets a conflict, and the retry re-reads
  const updated = await hub.update<ManagedClusterSet>(ManagedClusterSetResource, next);
  io.log.info({ set: name, was: set.spec?.clusterSelector }, "selector rolled back to the fixed one");
  return updated;
}

// As apimachinery's semantic equality compares them: an empty list or map is the same as none, but a
// labelSelector that is there (even empty) differs from one that is not.
export function isSameSelector(a: ClusterSelector | undefined, b: ClusterSelector | undefined): boolean {
  return isDeepStrictEqual(canonicalSelector(a), canonicalSelector(b));
}

function canonicalSelector(s: ClusterSelector | undefined) {
  const ls = s?.labelSelector;
  const labels = Object.entries(ls?.matchLabels ?? {}).sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0));
  const expressions = (ls?.matchExpressions ?? []).map((e) => [e.key, e.operator, e.values ?? []]);
  return { selectorType: s?.selectorType ?? "", labelSelector: ls ? { labels, expressions } : null };
}

// OCM's mutating webhook (gate DefaultClusterSet) labels a cluster whose clusterset label is missing or
// empty with "default"; with no mutating webhook here, the default set's reconcile does it. Changing
// the label needs create on managedclustersets/join for "default" (manifests/hub/admission-policies.yaml).
async function labelClustersWithoutSet(io: Io<Config>, hub: KubeClient): Promise<void> {
  const label = ClusterLabel.ClusterSet;
  const [missing, empty] = await Promise.all([
    hub.list<ManagedCluster>(ManagedClusterResource, { labelSelector: `!${label}` }),
    hub.list<ManagedCluster>(ManagedClusterResource, { labelSelector: `${label}=` }),
  ]);
  for (const cluster of [...missing.items, ...empty.items]) {
    const name = cluster.metadata.name;
    if (cluster.metadata.deletionTimestamp) {
      io.log.info({ cluster: name }, "skipped joining default: cluster is deleting");
      continue;
    }
    // resourceVersion in the patch: a concurrent writer of the labels gets a conflict, not a lost update
    await hub.patch<ManagedCluster>(ManagedClusterResource, name, { metadata: { resourceVersion: cluster.metadata.resourceVersion, labels: { [label]: DefaultClusterSetName } } });
    io.log.info({ cluster: name }, `cluster had no set: labelled ${label}=${DefaultClusterSetName}`);
  }
}

export function clusterSetEmptyCondition(count: number): NewCondition {
  return count === 0
    ? { type: ManagedClusterSetConditionType.ClusterSetEmpty, status: "True", reason: ManagedClusterSetReason.NoClusterMatched, message: "No ManagedCluster selected" }
    : { type: ManagedClusterSetConditionType.ClusterSetEmpty, status: "False", reason: ManagedClusterSetReason.ClustersSelected, message: `${count} ManagedClusters selected` };
}

async function writeSetStatus(io: Io<Config>, hub: KubeClient, set: ManagedClusterSet): Promise<void> {
  const query = setSelector(set);
  if ("invalid" in query) {
    // OCM's controller fails on it too and writes nothing; retrying cannot fix the spec
    io.log.warn({ set: set.metadata.name, reason: query.invalid }, "status left alone: the set's label selector is invalid");
    return;
  }
  const count = query.selects === "nothing" ? 0 : (await hub.list<ManagedCluster>(ManagedClusterResource, { labelSelector: query.labelSelector })).items.length;
  // observedGeneration: placement-scheduler tells a status-only update of the set from a changed selector by it
  const condition = { ...clusterSetEmptyCondition(count), observedGeneration: set.metadata.generation };
  if (hasCondition(set.status?.conditions, condition)) return;
  await patchStatusIfChanged(hub, ManagedClusterSetResource, set, { ...set.status, conditions: setCondition(set.status?.conditions, condition, io.clock.now()) });
  io.log.info({ set: set.metadata.name, count }, condition.message);
}

export function boundCondition(setExists: boolean): NewCondition {
  return setExists
    ? { type: ClusterSetBindingConditionType.Bound, status: "True", reason: ClusterSetBindingReason.ClusterSetBound, message: "" }
    : { type: ClusterSetBindingConditionType.Bound, status: "False", reason: ClusterSetBindingReason.ClusterSetNotFound, message: "" };
}

async function writeBindingStatuses(io: Io<Config>, hub: KubeClient, { set: setName, exists }: { set: string; exists: boolean }): Promise<void> {
  const { items } = await hub.list<ManagedClusterSetBinding>(ManagedClusterSetBindingResource, { fieldSelector: fieldSelectorOf({ "metadata.name": setName }) });
  const condition = boundCondition(exists);
  for (const binding of items) {
    const where = { binding: `${binding.metadata.namespace}/${binding.metadata.name}`, set: setName };
    if (binding.spec?.clusterSet !== setName) {
      // admission refuses such a binding; one made before the policy is not this set's
      io.log.warn({ ...where, clusterSet: binding.spec?.clusterSet }, "skipped: binding names another set than its own name");
      continue;
    }
    if (hasCondition(binding.status?.conditions, condition)) continue;
    await patchStatusIfChanged(hub, ManagedClusterSetBindingResource, binding, { ...binding.status, conditions: setCondition(binding.status?.conditions, condition, io.clock.now()) });
    io.log.info({ ...where, bound: condition.status }, condition.reason);
  }
}
