// Rolls a fleet-level AgentConfig out to the clusters its Placement decides: writes each cluster's own
// `agent` AgentConfig in the order and at the pace of its rollout strategy (plan.ts), and stops writing
// once more clusters than maxRolledBack refused or rolled the config back. The clusters it has not
// reached keep their last-known-good. Its status names the phase, the clusters updated and those that
// rolled back.
import { HubClusterSchema, hubClusterFromEnv, type HubCluster } from "../../shared/settings.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import type { ObjectEvent } from "../../shared/events.ts";
import { defineFunction, type KeysOrSkip } from "../../shared/sdk.ts";
import type { KubeClient } from "../../shared/kube/client.ts";
import { patchStatusIfChanged } from "../../shared/apply.ts";
import { RolloutLabel, RolloutNamespaceAnnotation, clusterState, settingsHash, type ClusterState } from "../../shared/agent-config.ts";
import { AgentConfigName, AgentConfigResource, RolloutPhase, type AgentConfig } from "../../shared/api/agent-config.ts";
import { ClusterLabel, PlacementDecisionResource, PlacementResource, type Placement, type PlacementDecision } from "../../shared/api/cluster.ts";
import { plan, type Target } from "./plan.ts";

export const ConfigSchema = HubClusterSchema;
export type Config = HubCluster;
export const configFromEnv = hubClusterFromEnv;

// Resource mode: a cluster's own config names the rollout that wrote it in its labels, and a decision
// its placement.
export const fn = defineFunction({
  name: "agent-config-rollout",
  config: ConfigSchema,
  env: configFromEnv,
  watches: (c) => [
    { cluster: c.hubCluster, resource: AgentConfigResource, verbs: ["add", "update"], root: true, keys: configKeys },
    // the placement deciding other clusters
    { cluster: c.hubCluster, resource: PlacementDecisionResource, verbs: ["add", "update"], keys: decisionKeys },
  ],
  resyncSeconds: 60,
  // only the fleet-level configs: the clusters' own are reconciled through the rollout that wrote them
  resync: (io, tick) => (tick.cluster && tick.cluster !== io.config.hubCluster ? { skip: `tick for cluster ${tick.cluster}, not the hub` } : fleetKeys(io, () => true)),
  reconcile,
});
export const spec = fn.spec;

const isFleetLevel = (c: AgentConfig) => c.metadata.name !== AgentConfigName && !!c.spec?.placementRef?.name;

export async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const hub = io.cluster(key.cluster);
  const namespace = key.namespace ?? "";
  const fleet = await hub.get<AgentConfig>(AgentConfigResource, key.name, namespace);
  if (!fleet || fleet.metadata.deletionTimestamp || !isFleetLevel(fleet)) return done;
  const placement = fleet.spec!.placementRef!.name;
  const hash = settingsHash(fleet.spec?.settings ?? {});
  // every cluster's own config in one list: the rollout's earlier writes and any made by hand
  const [targets, existing] = await Promise.all([decidedClusters(hub, namespace, placement), hub.list<AgentConfig>(AgentConfigResource, { fieldSelector: `metadata.name=${AgentConfigName}` })]);
  const perCluster = new Map(existing.items.map((c) => [c.metadata.namespace!, c]));
  // Clusters a reconcile claimed for this config (in status, below) count as in flight even before
  // their own config shows it: a wave is never handed out twice, nor past a halt.
  const claimed = new Set(fleet.status?.assigned?.hash === hash ? (fleet.status.rollout?.updated ?? []) : []);
  const states = new Map<string, ClusterState>(
    (targets ?? []).map((t) => {
      const state = clusterState(perCluster.get(t.cluster), hash);
      return [t.cluster, state === "pending" && claimed.has(t.cluster) ? "progressing" : state];
    }),
  );
  const next = plan({ strategy: fleet.spec?.rolloutStrategy, targets: targets ?? [], states, maxRolledBack: fleet.spec?.maxRolledBack });
  const updated = [...new Set([...next.updated, ...next.update])].sort();
  // The claim first: the status write carries the resourceVersion this plan was made from, so of two
  // reconciles planning from one state only one goes on; the other's 409 sends it back to read the claim.
  const status = { ...fleet.status, assigned: { hash }, rollout: { phase: next.phase, updated, rolledBack: next.rolledBack } };
  if (await patchStatusIfChanged(hub, AgentConfigResource, fleet, status))
    io.log.info({ config: key, phase: next.phase, updated: updated.length, rolledBack: next.rolledBack }, "rollout status updated");
  if (next.phase === RolloutPhase.Halted) return done;
  // This wave, and any claimed cluster an earlier reconcile did not get to (it failed between the two)
  for (const cluster of updated) if (clusterState(perCluster.get(cluster), hash) === "pending") await assign(io, hub, fleet, cluster, perCluster.get(cluster));
  return done;
}

// The cluster's own config, made or brought to the fleet's settings with a PUT carrying the
// resourceVersion read; its status stays the agent's.
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

// The placement's decided clusters with their decision group, or none while the Placement is missing.
async function decidedClusters(hub: KubeClient, namespace: string, placement: string): Promise<Target[] | undefined> {
  if (!(await hub.get<Placement>(PlacementResource, placement, namespace))) return undefined;
  const { items } = await hub.list<PlacementDecision>(PlacementDecisionResource, { namespace, labelSelector: `${ClusterLabel.Placement}=${placement}` });
  return items.flatMap((d) => {
    const group = Number(d.metadata.labels?.[ClusterLabel.DecisionGroupIndex] ?? 0) || 0;
    const groupName = d.metadata.labels?.[ClusterLabel.DecisionGroupName] ?? "";
    return (d.status?.decisions ?? []).map((x) => ({ cluster: x.clusterName, group, groupName }));
  });
}

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
