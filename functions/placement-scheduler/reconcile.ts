// Schedules Placements as OCM's placement controller does: the clusters of the sets bound to the
// placement's namespace, filtered, scored and cut to numberOfClusters (schedule.ts), written as
// PlacementDecisions of at most 100 clusters and summed up in the Placement's status; for a placement
// that asks, also as SIG-Multicluster PlacementDecisions (sig-decisions.ts).
import { HubClusterSchema, type HubCluster } from "../../shared/settings.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import type { ObjectEvent } from "../../shared/events.ts";
import { defineFunction, type KeysOrSkip } from "../../shared/sdk.ts";
import type { KubeClient } from "../../shared/kube/client.ts";
import { patchStatusIfChanged } from "../../shared/apply.ts";
import { findCondition, setCondition } from "../../shared/conditions.ts";
import { membersOfSets, setSelects } from "../../shared/cluster-set-members.ts";
import { fieldSelectorOf, labelsQuery } from "../../shared/selector-query.ts";
import {
  ClusterLabel,
  ManagedClusterResource,
  ManagedClusterSetBindingResource,
  ManagedClusterSetConditionType,
  ManagedClusterSetResource,
  PlacementConditionType,
  PlacementDecisionResource,
  PlacementResource,
  type ManagedCluster,
  type ManagedClusterSet,
  type ManagedClusterSetBinding,
  type Placement,
  type PlacementDecision,
} from "../../shared/api/cluster.ts";
import {
  Prioritizer,
  SchedulingDisabledAnnotation,
  decisionGroups,
  misconfiguredCondition,
  placementDecisions,
  prioritizerWeights,
  satisfiedCondition,
  schedule,
} from "./schedule.ts";
import { sigDecisions, sigDecisionsWanted, writeSigDecisions } from "./sig-decisions.ts";
import { ClusterManagerName, InventoryLabel, SigDecisionLabel, SigPlacementDecisionResource } from "../../shared/api/inventory.ts";

// Only which cluster is the hub (shared/settings.ts); events from any other cluster are not ours.
export type Config = HubCluster;

// Resource mode where the payload is read (a Placement's status, a decision's or a cluster's labels, a
// set's generation). Our own decision writes are not watched (each would wake the function for nothing):
// a deleted decision is written again, and a hand edit of one is undone by the resync.
export default defineFunction({
  name: "placement-scheduler",
  config: HubClusterSchema,
  watches: (c) => [
    // with its SIG decisions: judging whether any are to go reads nothing
    { cluster: c.hubCluster, resource: PlacementResource, verbs: ["add", "update"], root: true, keys: placementKeys, related: [{ resource: SigPlacementDecisionResource, namespace: "{namespace}", labelSelector: `${SigDecisionLabel.PlacementKey}={name}` }] },
    // A cluster's change comes with what placementsForCluster judges it by, and wakes nothing on a hub
    // without Placements.
    {
      cluster: c.hubCluster,
      resource: ManagedClusterResource,
      keys: placementsForCluster,
      related: [{ resource: PlacementResource, required: true }, { resource: ManagedClusterSetResource }, { resource: ManagedClusterSetBindingResource }, { resource: PlacementDecisionResource }],
    },
    // the set's selector or its going: cluster-sets' count in its status (rewritten as clusters join)
    // wakes nothing
    { cluster: c.hubCluster, resource: ManagedClusterSetResource, keys: setKeys, changes: ["spec", "metadata.deletionTimestamp"] },
    { cluster: c.hubCluster, resource: ManagedClusterSetBindingResource, verbs: ["add", "delete"], keys: bindingKeys },
    { cluster: c.hubCluster, resource: PlacementDecisionResource, verbs: ["delete"], keys: decisionKeys },
    { cluster: c.hubCluster, resource: SigPlacementDecisionResource, verbs: ["delete"], keys: sigDecisionKeys },
  ],
  resyncSeconds: 60,
  // The placement-scheduler function (functions/placement-scheduler) on the hub: reads placements, the
  // sets and bindings that make clusters eligible, the clusters and every placement's decisions (the
  // Balance prioritizer counts them); writes its placements' status and their PlacementDecisions.
  writes: (c) => [
    { cluster: c.hubCluster, why: "its placements' status", apiGroups: ["cluster.open-cluster-management.io"], resources: ["placements/status"], verbs: ["patch"] },
    { cluster: c.hubCluster, why: "Decisions carry an owner reference with blockOwnerDeletion, which the OwnerReferencesPermissionEnforcement admission plugin lets only those who may update the owner's finalizers set.", apiGroups: ["cluster.open-cluster-management.io"], resources: ["placements/finalizers"], verbs: ["update"] },
    { cluster: c.hubCluster, why: "its placements' decisions", apiGroups: ["cluster.open-cluster-management.io"], resources: ["placementdecisions"], verbs: ["create", "patch", "delete"] },
    { cluster: c.hubCluster, why: "the decisions' chosen clusters", apiGroups: ["cluster.open-cluster-management.io"], resources: ["placementdecisions/status"], verbs: ["patch"] },
    { cluster: c.hubCluster, why: "the SIG PlacementDecisions of placements that ask for them", apiGroups: ["multicluster.x-k8s.io"], resources: ["placementdecisions"], verbs: ["create", "patch", "delete"] },
  ],
  reconcile,
});

export async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const hub = io.cluster(key.cluster);
  const namespace = key.namespace ?? "";
  const placement = await hub.get<Placement>(PlacementResource, key.name, namespace);
  if (!placement || placement.metadata.deletionTimestamp) return done;
  if (placement.metadata.annotations?.[SchedulingDisabledAnnotation] === "true") {
    io.log.info({ placement: key }, "skipped: scheduling is disabled by annotation");
    return done;
  }
  const [bindings, sets, own] = await Promise.all([
    hub.list<ManagedClusterSetBinding>(ManagedClusterSetBindingResource, { namespace }),
    hub.list<ManagedClusterSet>(ManagedClusterSetResource),
    hub.list<PlacementDecision>(PlacementDecisionResource, { namespace, labelSelector: labelsQuery({ [ClusterLabel.Placement]: key.name }) }),
  ]);
  // A binding counts when its set exists; the placement's clusterSets, when given, narrow them.
  const setsByName = new Map(sets.items.map((s) => [s.metadata.name, s]));
  const valid = bindings.items.filter((b) => setsByName.has(b.metadata.name));
  const inSpec = placement.spec.clusterSets ?? [];
  const eligible = [...new Set(valid.map((b) => b.metadata.name))].filter((n) => inSpec.length === 0 || inSpec.includes(n)).sort();
  const available = await membersOfSets(hub, eligible.map((n) => setsByName.get(n)!), io.log);
  const decided = new Set(own.items.flatMap((d) => (d.status?.decisions ?? []).map((x) => x.clusterName)));

  const weights = prioritizerWeights(placement);
  const otherDecisions = weights instanceof Map && weights.has(`BuiltIn/${Prioritizer.Balance}`) ? await decisionCountsElsewhere(hub, placement) : new Map<string, number>();
  const now = io.clock.now();
  const result = schedule({ placement, clusters: available, decided, otherDecisions, now });
  const { groups, problem: groupProblem } = decisionGroups(placement, result.selected);
  const problem = groupProblem ?? result.problem;
  const wanted = placementDecisions(placement, groups);
  await writeDecisions(io, hub, wanted.decisions, own.items);
  await writeSigDecisions(io, hub, placement, sigDecisionsWanted(placement) ? sigDecisions(placement, wanted.decisions) : []);

  const generation = placement.metadata.generation;
  let conditions = setCondition(placement.status?.conditions, { ...misconfiguredCondition(problem), observedGeneration: generation }, now);
  const satisfied = satisfiedCondition({
    clusterSetsInSpec: inSpec,
    eligibleSets: eligible,
    bindings: valid.length,
    available: available.length,
    selected: result.selected.length,
    unscheduled: result.unscheduled,
  });
  conditions = setCondition(conditions, { ...satisfied, observedGeneration: generation }, now);
  const status = { ...placement.status, numberOfSelectedClusters: result.selected.length, decisionGroups: wanted.groups, conditions };
  if (await patchStatusIfChanged(hub, PlacementResource, placement, status))
    io.log.info({ placement: key, selected: result.selected.length, satisfied: satisfied.reason, problem }, "placement status updated");
  if (!result.recheckAt) return done;
  // a toleration runs out then: look again just after
  return { recheckInMs: Math.max(0, result.recheckAt.getTime() - now.getTime()) + 1000 };
}

// Creates, updates and deletes this placement's PlacementDecisions until they are `wanted`; each write
// carries the resourceVersion read, and nothing is written for a decision that is already right.
async function writeDecisions(io: Io<Config>, hub: KubeClient, wanted: readonly PlacementDecision[], present: readonly PlacementDecision[]): Promise<void> {
  const byName = new Map(present.map((d) => [d.metadata.name, d]));
  for (const want of wanted) {
    let have = byName.get(want.metadata.name);
    if (!have) {
      // a create that loses a race answers AlreadyExists: the source's retry reads it again
      have = await hub.create<PlacementDecision>(PlacementDecisionResource, { ...want, status: undefined });
      io.log.info({ decision: want.metadata.name }, "placement decision created");
    }
    const labels = want.metadata.labels!;
    if (Object.entries(labels).some(([k, v]) => have!.metadata.labels?.[k] !== v)) {
      have = await hub.patch<PlacementDecision>(PlacementDecisionResource, want.metadata.name, { metadata: { resourceVersion: have.metadata.resourceVersion, labels } }, { namespace: want.metadata.namespace });
    }
    const before = { ...have, status: { decisions: have.status?.decisions ?? [] } };
    if (await patchStatusIfChanged(hub, PlacementDecisionResource, before, want.status!))
      io.log.info({ decision: want.metadata.name, clusters: want.status!.decisions.length }, "placement decision updated");
  }
  const keep = new Set(wanted.map((d) => d.metadata.name));
  for (const d of present) {
    if (keep.has(d.metadata.name)) continue;
    if (await hub.delete(PlacementDecisionResource, d.metadata.name, d.metadata.namespace, { uid: d.metadata.uid })) io.log.info({ decision: d.metadata.name }, "placement decision deleted");
  }
}

// For Balance: how many decisions of every other placement name each cluster.
async function decisionCountsElsewhere(hub: KubeClient, p: Placement): Promise<Map<string, number>> {
  const { items } = await hub.list<PlacementDecision>(PlacementDecisionResource);
  const counts = new Map<string, number>();
  for (const d of items) {
    if (d.metadata.namespace === p.metadata.namespace && d.metadata.labels?.[ClusterLabel.Placement] === p.metadata.name) continue;
    for (const x of d.status?.decisions ?? []) counts.set(x.clusterName, (counts.get(x.clusterName) ?? 0) + 1);
  }
  return counts;
}

// ---- which placements an event concerns

const placementKey = (hub: string, p: Pick<Placement, "metadata">): Key => ({ cluster: hub, namespace: p.metadata.namespace, name: p.metadata.name });

function placementKeys(event: ObjectEvent): KeysOrSkip {
  // Our own status write comes back as an update: its conditions already name this generation.
  if (event.verb === "update" && event.object && scheduledThisGeneration(event.object as Placement)) return { skip: "status update of a generation already scheduled" };
  return [{ cluster: event.cluster, namespace: event.ref.namespace ?? "", name: event.ref.name }];
}

async function decisionKeys(event: ObjectEvent, io: Io<Config>): Promise<Key[]> {
  const namespace = event.ref.namespace ?? "";
  const owner = (event.object?.metadata as { labels?: Record<string, string> } | undefined)?.labels?.[ClusterLabel.Placement];
  if (owner) return [{ cluster: event.cluster, namespace, name: owner }];
  return placementsIn(io, (p) => p.metadata.namespace === namespace);
}

// A deleted SIG decision of ours is written again if its placement still asks for it.
function sigDecisionKeys(event: ObjectEvent): KeysOrSkip {
  const labels = (event.object?.metadata as { labels?: Record<string, string> } | undefined)?.labels;
  const placement = labels?.[SigDecisionLabel.PlacementKey];
  if (!placement || labels?.[InventoryLabel.ClusterManager] !== ClusterManagerName) return { skip: "a SIG placement decision not of ours" };
  return [{ cluster: event.cluster, namespace: event.ref.namespace ?? "", name: placement }];
}

const bindingKeys = (event: ObjectEvent, io: Io<Config>) => placementsIn(io, (p) => p.metadata.namespace === (event.ref.namespace ?? "") && usesSet(p, event.ref.name));

async function setKeys(event: ObjectEvent, io: Io<Config>): Promise<KeysOrSkip> {
  // cluster-sets' count written for the set's present generation: membership changes reach us as cluster events
  if (event.verb === "update" && event.object && statusOnlySetUpdate(event.object as ManagedClusterSet)) return { skip: "status update of a cluster set whose selector is unchanged" };
  const { items } = await io.cluster(event.cluster).list<ManagedClusterSetBinding>(ManagedClusterSetBindingResource, { fieldSelector: fieldSelectorOf({ "metadata.name": event.ref.name }) });
  const namespaces = new Set(items.map((b) => b.metadata.namespace));
  return placementsIn(io, (p) => namespaces.has(p.metadata.namespace) && usesSet(p, event.ref.name));
}

const usesSet = (p: Placement, set: string) => (p.spec.clusterSets ?? []).length === 0 || p.spec.clusterSets!.includes(set);

function scheduledThisGeneration(p: Placement): boolean {
  const g = p.metadata.generation;
  const conditions = p.status?.conditions;
  return (
    g !== undefined &&
    [PlacementConditionType.PlacementSatisfied, PlacementConditionType.PlacementMisconfigured].every((t) => findCondition(conditions, t)?.observedGeneration === g)
  );
}

function statusOnlySetUpdate(set: ManagedClusterSet): boolean {
  const g = set.metadata.generation;
  return g !== undefined && findCondition(set.status?.conditions, ManagedClusterSetConditionType.ClusterSetEmpty)?.observedGeneration === g;
}

async function placementsIn(io: Io<Config>, wanted: (p: Placement) => boolean): Promise<Key[]> {
  const hub = io.config.hubCluster;
  const { items } = await io.cluster(hub).list<Placement>(PlacementResource);
  return items.filter(wanted).map((p) => placementKey(hub, p));
}

// A cluster matters to the placements that can select it now (through a set bound to their namespace)
// and to those that have decided it (it may have just left).
async function placementsForCluster(event: ObjectEvent, io: Io<Config>): Promise<Key[]> {
  const hub = io.config.hubCluster;
  const client = io.cluster(hub);
  // a deleted cluster is in no set any more; Reference mode carries no labels, so those are read
  const cluster = event.verb === "delete" ? undefined : ((event.object as ManagedCluster | undefined) ?? (await client.get<ManagedCluster>(ManagedClusterResource, event.ref.name)));
  const [sets, bindings, placements, decisions] = await Promise.all([
    client.list<ManagedClusterSet>(ManagedClusterSetResource),
    client.list<ManagedClusterSetBinding>(ManagedClusterSetBindingResource),
    client.list<Placement>(PlacementResource),
    client.list<PlacementDecision>(PlacementDecisionResource),
  ]);
  const memberOf = new Set(cluster ? sets.items.filter((s) => setSelects(s, cluster)).map((s) => s.metadata.name) : []);
  const boundHere = new Map<string, string[]>();
  for (const b of bindings.items) if (memberOf.has(b.metadata.name)) boundHere.set(b.metadata.namespace!, [...(boundHere.get(b.metadata.namespace!) ?? []), b.metadata.name]);
  const deciding = new Set(
    decisions.items.filter((d) => (d.status?.decisions ?? []).some((x) => x.clusterName === event.ref.name)).map((d) => `${d.metadata.namespace}/${d.metadata.labels?.[ClusterLabel.Placement] ?? ""}`),
  );
  return placements.items
    .filter((p) => deciding.has(`${p.metadata.namespace}/${p.metadata.name}`) || (boundHere.get(p.metadata.namespace!) ?? []).some((s) => usesSet(p, s)))
    .map((p) => placementKey(hub, p));
}
