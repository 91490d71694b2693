// Rolls a fleet-level AgentConfig out to the clusters its Placement decides: writes each cluster's own
// `agent` AgentConfig in the order and at the pace of its rollout strategy (plan.ts), and stops writing
// once more clusters than maxRolledBack refused or rolled the config back. The clusters it has not
// reached keep their last-known-good. Its status names the phase, the clusters updated and those that
// rolled back.
//
// It acts for the config's namespace only (issue 23): it reads only the decisions the scheduler wrote,
// writes only clusters of the ManagedClusterSets bound to that namespace (judged here, at assignment
// time, since a decision is the tenant's to write), and never takes over a cluster's config written by
// hand or by another rollout that still exists. The clusters it leaves out are named in its status.
import { HubClusterSchema, type HubCluster } from "../../shared/settings.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import type { ObjectEvent } from "../../shared/events.ts";
import { defineFunction, type KeysOrSkip } from "../../shared/sdk.ts";
import type { KubeClient } from "../../shared/kube/client.ts";
import { patchStatusIfChanged } from "../../shared/apply.ts";
import { setCondition, type NewCondition } from "../../shared/conditions.ts";
import { boundSets, membersOfSets } from "../../shared/cluster-set-members.ts";
import { RolloutLabel, RolloutNamespaceAnnotation, clusterState, settingsHash, type ClusterState } from "../../shared/agent-config.ts";
import {
  AgentConfigName,
  AgentConfigResource,
  ExcludedListLimit,
  RolloutConditionType,
  RolloutPhase,
  RolloutReason,
  type AgentConfig,
  type ExclusionReason,
} from "../../shared/api/agent-config.ts";
import {
  ClusterLabel,
  PlacementDecisionResource,
  PlacementDisableAnnotation,
  PlacementResource,
  type Placement,
  type PlacementDecision,
} from "../../shared/api/cluster.ts";
import { plan, type Target } from "./plan.ts";
import { labelsQuery } from "../../shared/selector-query.ts";

export type Config = HubCluster;

// Resource mode: a cluster's own config names the rollout that wrote it in its labels, and a decision
// its placement.
export default defineFunction({
  name: "agent-config-rollout",
  config: HubClusterSchema,
  watches: (c) => [
    { cluster: c.hubCluster, resource: AgentConfigResource, verbs: ["add", "update"], root: true, keys: configKeys },
    // the placement deciding other clusters
    { cluster: c.hubCluster, resource: PlacementDecisionResource, verbs: ["add", "update"], keys: decisionKeys },
  ],
  resyncSeconds: 60,
  // only the fleet-level configs: the clusters' own are reconciled through the rollout that wrote them
  resync: (io, tick) => (tick.cluster && tick.cluster !== io.config.hubCluster ? { skip: `tick for cluster ${tick.cluster}, not the hub` } : fleetKeys(io, () => true)),
  // The agent-config-rollout function (functions/agent-config-rollout) on the hub: reads fleet-level
  // AgentConfigs, their Placements' decisions and each cluster's own AgentConfig, and the cluster sets
  // bound to the fleet-level config's namespace with their clusters (it writes only those clusters);
  // writes the clusters' own AgentConfigs (create, or a PUT of one named `agent` with the resourceVersion
  // read) and the fleet-level ones' status. It never updates a fleet-level config's spec.
  writes: (c) => [
    { cluster: c.hubCluster, why: "each cluster's own AgentConfig (updates are a PUT with the resourceVersion read)", apiGroups: ["config.ocm-functions.io"], resources: ["agentconfigs"], verbs: ["create"] },
    { cluster: c.hubCluster, why: "a create cannot be limited by name (RBAC never sees one); an update can", apiGroups: ["config.ocm-functions.io"], resources: ["agentconfigs"], resourceNames: ["agent"], verbs: ["update"] },
    { cluster: c.hubCluster, why: "the fleet-level config's status", apiGroups: ["config.ocm-functions.io"], resources: ["agentconfigs/status"], verbs: ["patch"] },
    { cluster: c.hubCluster, why: "the fleet-level config's Placement", apiGroups: ["cluster.open-cluster-management.io"], resources: ["placements"], verbs: ["get"] },
    { cluster: c.hubCluster, why: "the sets bound to the config's namespace, and their clusters: only those are written", apiGroups: ["cluster.open-cluster-management.io"], resources: ["managedclustersetbindings", "managedclusters"], verbs: ["list"] },
    { cluster: c.hubCluster, why: "the bound sets' selectors", apiGroups: ["cluster.open-cluster-management.io"], resources: ["managedclustersets"], verbs: ["list"] },
  ],
  reconcile,
});

const isFleetLevel = (c: AgentConfig) => c.metadata.name !== AgentConfigName && !!c.spec?.placementRef?.name;

export async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const hub = io.cluster(key.cluster);
  const namespace = key.namespace ?? "";
  const fleet = await hub.get<AgentConfig>(AgentConfigResource, key.name, namespace);
  if (!fleet || fleet.metadata.deletionTimestamp || !isFleetLevel(fleet)) return done;
  const placement = fleet.spec!.placementRef!.name;
  const hash = settingsHash(fleet.spec?.settings ?? {});
  // every cluster's own config in one list: the rollout's earlier writes and any made by hand
  const [decided, bound, existing] = await Promise.all([
    decidedClusters(hub, namespace, placement),
    boundClusters(io, hub, namespace),
    hub.list<AgentConfig>(AgentConfigResource, { fieldSelector: `metadata.name=${AgentConfigName}` }),
  ]);
  const perCluster = new Map(existing.items.map((c) => [c.metadata.namespace!, c]));
  const { targets, excluded } = await writable(hub, fleet, decided.targets, bound, perCluster);
  // Clusters a reconcile claimed for this config (in status, below) count as in flight even before
  // their own config shows it: a wave is never handed out twice, nor past a halt.
  const claimed = new Set(fleet.status?.assigned?.hash === hash ? (fleet.status.rollout?.updated ?? []) : []);
  const states = new Map<string, ClusterState>(
    targets.map((t) => {
      const state = clusterState(perCluster.get(t.cluster), hash);
      return [t.cluster, state === "pending" && claimed.has(t.cluster) ? "progressing" : state];
    }),
  );
  const next = plan({ strategy: fleet.spec?.rolloutStrategy, targets, states, maxRolledBack: fleet.spec?.maxRolledBack });
  const updated = [...new Set([...next.updated, ...next.update])].sort();
  // The claim first: the status write carries the resourceVersion this plan was made from, so of two
  // reconciles planning from one state only one goes on; the other's 409 sends it back to read the claim.
  const now = io.clock.now();
  const generation = fleet.metadata.generation;
  let conditions = setCondition(fleet.status?.conditions, { ...decided.condition, observedGeneration: generation }, now);
  conditions = setCondition(conditions, { ...excludedCondition(namespace, excluded), observedGeneration: generation }, now);
  const rollout = { phase: next.phase, updated, rolledBack: next.rolledBack, ...(excluded.length ? { excluded: excluded.slice(0, ExcludedListLimit) } : {}) };
  const status = { ...fleet.status, assigned: { hash }, rollout, conditions };
  if (await patchStatusIfChanged(hub, AgentConfigResource, fleet, status))
    io.log.info({ config: key, phase: next.phase, updated: updated.length, rolledBack: next.rolledBack, excluded: excluded.length }, "rollout status updated");
  if (next.phase === RolloutPhase.Halted) return done;
  // This wave, and any claimed cluster an earlier reconcile did not get to (it failed between the two)
  for (const cluster of updated) if (clusterState(perCluster.get(cluster), hash) === "pending") await assign(io, hub, fleet, cluster, perCluster.get(cluster));
  return done;
}

// The cluster's own config, made or brought to the fleet's settings with a PUT carrying the
// resourceVersion read (so a config someone else wrote after writable() looked is never overwritten);
// its status stays the agent's.
async function assign(io: Io<Config>, hub: KubeClient, fleet: AgentConfig, cluster: string, present: AgentConfig | undefined): Promise<void> {
  const metadata = {
    labels: { ...present?.metadata.labels, [RolloutLabel]: fleet.metadata.name },
    annotations: { ...present?.metadata.annotations, [RolloutNamespaceAnnotation]: fleet.metadata.namespace! },
  };
  const spec = { settings: fleet.spec?.settings ?? {}, ...(fleet.spec?.trialSeconds ? { trialSeconds: fleet.spec.trialSeconds } : {}) };
  if (present) await hub.update<AgentConfig>(AgentConfigResource, { ...present, metadata: { ...present.metadata, ...metadata }, spec });
  else await hub.create<AgentConfig>(AgentConfigResource, { metadata: { name: AgentConfigName, namespace: cluster, ...metadata }, spec });
  io.log.info({ cluster, from: `${fleet.metadata.namespace}/${fleet.metadata.name}` }, "agent config assigned");
}

type Decided = { targets: Target[]; condition: NewCondition };

// The clusters the scheduler decided for the placement, with their decision group. A decision counts
// only when the Placement controls it (ownerReference with controller and the Placement's uid, as the
// scheduler writes them) and the Placement does not turn the scheduler off: under the
// scheduling-disable annotation its decisions are whoever wrote them. Membership (writable) is still
// the boundary, since the namespace's tenant may write a decision that looks like the scheduler's.
async function decidedClusters(hub: KubeClient, namespace: string, name: string): Promise<Decided> {
  const ref = `${namespace}/${name}`;
  const [placement, { items }] = await Promise.all([
    hub.get<Placement>(PlacementResource, name, namespace),
    hub.list<PlacementDecision>(PlacementDecisionResource, { namespace, labelSelector: labelsQuery({ [ClusterLabel.Placement]: name }) }),
  ]);
  const untrusted = (reason: string, message: string): Decided => ({ targets: [], condition: { type: RolloutConditionType.DecisionsTrusted, status: "False", reason, message } });
  if (!placement || placement.metadata.deletionTimestamp) return untrusted(RolloutReason.PlacementNotFound, `placement ${ref} does not exist: no cluster is decided`);
  if (placement.metadata.annotations?.[PlacementDisableAnnotation] === "true")
    return untrusted(RolloutReason.SchedulingDisabled, `placement ${ref} has ${PlacementDisableAnnotation}: "true", so its decisions are not the scheduler's: none is used`);
  const uid = placement.metadata.uid;
  const controlled = (d: PlacementDecision) =>
    (d.metadata.ownerReferences ?? []).some((o) => o.controller === true && o.kind === PlacementResource.kind && o.apiVersion.startsWith(`${PlacementResource.group}/`) && o.name === name && o.uid === uid);
  const own = items.filter(controlled);
  const seen = new Set<string>();
  const targets = own.flatMap((d) => {
    const group = Number(d.metadata.labels?.[ClusterLabel.DecisionGroupIndex] ?? 0) || 0;
    const groupName = d.metadata.labels?.[ClusterLabel.DecisionGroupName] ?? "";
    return (d.status?.decisions ?? []).filter((x) => !seen.has(x.clusterName) && seen.add(x.clusterName)).map((x) => ({ cluster: x.clusterName, group, groupName }));
  });
  const foreign = items.filter((d) => !controlled(d)).map((d) => d.metadata.name!).sort();
  if (foreign.length)
    return { targets, condition: { type: RolloutConditionType.DecisionsTrusted, status: "False", reason: RolloutReason.DecisionsNotOwned, message: `decisions ${names(foreign)} are not controlled by placement ${ref} (uid ${uid}): not used` } };
  return { targets, condition: { type: RolloutConditionType.DecisionsTrusted, status: "True", reason: RolloutReason.DecisionsFromScheduler, message: `${own.length} decisions of placement ${ref}, all written by the scheduler` } };
}

// The clusters of the ManagedClusterSets bound to the namespace, as the scheduler reckons them.
async function boundClusters(io: Io<Config>, hub: KubeClient, namespace: string): Promise<Set<string>> {
  return new Set((await membersOfSets(hub, await boundSets(hub, namespace), io.log)).map((c) => c.metadata.name));
}

type Excluded = { cluster: string; reason: ExclusionReason };

// Of the decided clusters, those this rollout may write: members of a set bound to its namespace whose
// own config is absent, already this rollout's, or left by a rollout whose fleet-level config is gone.
// A config written by hand (no rollout named on it) or by another rollout that still exists is not
// taken over: an admin hands it over by deleting it or by naming this rollout on it.
async function writable(hub: KubeClient, fleet: AgentConfig, decided: readonly Target[], bound: ReadonlySet<string>, perCluster: ReadonlyMap<string, AgentConfig>): Promise<{ targets: Target[]; excluded: Excluded[] }> {
  const targets: Target[] = [];
  const excluded: Excluded[] = [];
  const ownerExists = new Map<string, Promise<boolean>>();
  for (const t of decided) {
    if (!bound.has(t.cluster)) {
      excluded.push({ cluster: t.cluster, reason: RolloutReason.NotInBoundClusterSet });
      continue;
    }
    const present = perCluster.get(t.cluster);
    const from = present?.metadata.labels?.[RolloutLabel];
    const ns = present?.metadata.annotations?.[RolloutNamespaceAnnotation];
    let mine = !present || (from === fleet.metadata.name && ns === fleet.metadata.namespace);
    if (!mine && from && ns) {
      const key = `${ns}/${from}`;
      if (!ownerExists.has(key)) ownerExists.set(key, hub.get<AgentConfig>(AgentConfigResource, from, ns).then((c) => !!c && !c.metadata.deletionTimestamp));
      mine = !(await ownerExists.get(key));
    }
    if (mine) targets.push(t);
    else excluded.push({ cluster: t.cluster, reason: RolloutReason.ConfigOwnedElsewhere });
  }
  excluded.sort((a, b) => (a.cluster < b.cluster ? -1 : a.cluster > b.cluster ? 1 : 0));
  return { targets, excluded };
}

const exclusionText: Record<ExclusionReason, (ns: string) => string> = {
  [RolloutReason.NotInBoundClusterSet]: (ns) => `in no ManagedClusterSet bound to namespace ${ns}`,
  [RolloutReason.ConfigOwnedElsewhere]: () => "their agent config was written by hand or by another rollout",
};

function excludedCondition(namespace: string, excluded: readonly Excluded[]): NewCondition {
  const type = RolloutConditionType.ClustersExcluded;
  if (excluded.length === 0) return { type, status: "False", reason: RolloutReason.NoneExcluded, message: `every decided cluster is in a ManagedClusterSet bound to namespace ${namespace} and its config is this rollout's to write` };
  const reasons = [RolloutReason.NotInBoundClusterSet, RolloutReason.ConfigOwnedElsewhere] as const;
  const parts = reasons.flatMap((r) => {
    const clusters = excluded.filter((e) => e.reason === r).map((e) => e.cluster);
    return clusters.length ? [`${names(clusters)} (${exclusionText[r](namespace)})`] : [];
  });
  return { type, status: "True", reason: reasons.find((r) => excluded.some((e) => e.reason === r))!, message: `${excluded.length} decided clusters not written: ${parts.join("; ")}` };
}

// At most ten names, then how many more.
const names = (list: readonly string[]) => (list.length > 10 ? `${list.slice(0, 10).join(", ")} and ${list.length - 10} more` : list.join(", "));

// ---- which fleet-level configs an event concerns

async function fleetKeys(io: Io<Config>, wanted: (c: AgentConfig) => boolean): Promise<Key[]> {
  const hub = io.config.hubCluster;
  const { items } = await io.cluster(hub).list<AgentConfig>(AgentConfigResource);
  return items.filter((c) => isFleetLevel(c) && wanted(c)).map((c) => ({ cluster: hub, namespace: c.metadata.namespace, name: c.metadata.name }));
}

async function configKeys(event: ObjectEvent, io: Io<Config>): Promise<KeysOrSkip> {
  const hub = io.config.hubCluster;
  if (event.ref.name !== AgentConfigName) return [{ cluster: hub, namespace: event.ref.namespace, name: event.ref.name }];
  // a cluster's own config: its status moved, so the rollout that wrote it may go on
  const c = (event.object as AgentConfig | undefined) ?? (await io.cluster(hub).get<AgentConfig>(AgentConfigResource, event.ref.name, event.ref.namespace));
  const from = c?.metadata.labels?.[RolloutLabel];
  const ns = c?.metadata.annotations?.[RolloutNamespaceAnnotation];
  return from && ns ? [{ cluster: hub, namespace: ns, name: from }] : { skip: "a cluster's config no rollout wrote" };
}

function decisionKeys(event: ObjectEvent, io: Io<Config>): Promise<Key[]> {
  const placement = (event.object?.metadata as { labels?: Record<string, string> } | undefined)?.labels?.[ClusterLabel.Placement];
  return fleetKeys(io, (c) => c.metadata.namespace === event.ref.namespace && (placement === undefined || c.spec?.placementRef?.name === placement));
}
