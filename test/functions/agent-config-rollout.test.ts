// The agent-config-rollout function against a real hub, under its own RBAC: a fleet-level AgentConfig
// reaches the clusters its Placement decides at the pace of its strategy, and halts once more clusters
// than maxRolledBack rolled it back, leaving the rest on their last-known-good. The clusters' verdicts
// are written into their AgentConfig status as their agents write them (test/functions/agent-config.test.ts
// tests that side).
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import {
  ClusterLabel,
  ManagedClusterResource,
  ManagedClusterSetBindingResource,
  ManagedClusterSetResource,
  PlacementDecisionResource,
  PlacementResource,
  type Placement,
  type RolloutStrategy,
} from "../../shared/api/cluster.ts";
import { NamespaceResource, RoleBindingResource, RoleResource } from "../../shared/api/kube.ts";
import { KubeClient } from "../../shared/kube/client.ts";
import { AgentConfigConditionType, AgentConfigName, AgentConfigReason, AgentConfigResource, type AgentConfig, type AgentSettings } from "../../shared/api/agent-config.ts";
import { settingsHash } from "../../shared/agent-config.ts";
import { manualClock, rfc3339 } from "../../shared/clock.ts";
import { handleEvent, type Io } from "../../shared/harness.ts";
import fn, { type Config } from "../../functions/agent-config-rollout/reconcile.ts";
import { RolloutLabel, RolloutNamespaceAnnotation, countOf } from "../../shared/agent-config.ts";
import { objectEvent, testIo, tickEvent } from "../support/functions.ts";
import { readyIdentity, startHub, type Hub } from "../support/fixtures.ts";
import { eventually } from "../support/eventually.ts";

const HUB = "hub";
const suffix = () => Math.random().toString(36).slice(2, 7);
const clock = manualClock();

let plane: Hub;
let io: Io<Config>;

beforeAll(async () => {
  plane = await startHub(HUB);
  io = testIo({ [HUB]: await readyIdentity(plane.cluster, fn.spec.name, [AgentConfigResource, PlacementDecisionResource]) }, { hubCluster: HUB }, clock);
}, 120_000);
afterAll(() => plane?.stop());

type Fleet = { ns: string; clusters: string[] };
// n clusters with namespaces, members of a ManagedClusterSet bound to the fleet's namespace, and a
// Placement whose decisions (one per group) name them, as placement-scheduler writes them: labelled with
// the placement and controlled by it (its uid).
async function fleet(groups: number[]): Promise<Fleet> {
  const id = suffix();
  const ns = `fleet-${id}`;
  const set = `set-${id}`;
  await plane.admin.create(NamespaceResource, { metadata: { name: ns } });
  await plane.admin.create(ManagedClusterSetResource, { metadata: { name: set }, spec: { clusterSelector: { selectorType: "ExclusiveClusterSetLabel" } } });
  await plane.admin.create(ManagedClusterSetBindingResource, { metadata: { name: set, namespace: ns }, spec: { clusterSet: set } });
  const placement = await plane.admin.create<Placement>(PlacementResource, { metadata: { name: "all", namespace: ns }, spec: {} });
  const clusters: string[] = [];
  let decision = 1;
  for (const [group, size] of groups.entries()) {
    const names = Array.from({ length: size }, (_, i) => `${id}-g${group}-c${i}`);
    clusters.push(...names);
    await Promise.all(names.map((c) => managedCluster(c, set)));
    await decide(ns, `all-decision-${decision++}`, names, { placement, group });
  }
  return { ns, clusters };
}

async function managedCluster(name: string, set: string): Promise<void> {
  await plane.admin.create(ManagedClusterResource, { metadata: { name, labels: { [ClusterLabel.ClusterSet]: set } }, spec: { hubAcceptsClient: true } });
  await plane.admin.create(NamespaceResource, { metadata: { name } });
}

// A PlacementDecision naming `clusters`, written by `client` (the admin unless given): labelled with
// the placement and, when `owned`, controlled by it as the scheduler's are.
async function decide(ns: string, name: string, clusters: string[], o: { placement: Placement; group?: number; owned?: boolean; client?: KubeClient }): Promise<void> {
  const client = o.client ?? plane.admin;
  const p = o.placement.metadata;
  const ownerReferences = o.owned === false ? undefined : [{ apiVersion: "cluster.open-cluster-management.io/v1beta1", kind: "Placement", name: p.name!, uid: p.uid!, controller: true }];
  await client.create(PlacementDecisionResource, {
    metadata: { name, namespace: ns, labels: { [ClusterLabel.Placement]: p.name!, [ClusterLabel.DecisionGroupIndex]: String(o.group ?? 0), [ClusterLabel.DecisionGroupName]: "" }, ...(ownerReferences ? { ownerReferences } : {}) },
  });
  await client.patch(PlacementDecisionResource, name, { status: { decisions: clusters.map((clusterName) => ({ clusterName, reason: "" })) } }, { namespace: ns, subresource: "status" });
}

const settings: AgentSettings = { statusSyncIntervalSeconds: 30, logLevel: "debug" };
async function rollout(f: Fleet, strategy: RolloutStrategy, maxRolledBack?: number | string): Promise<void> {
  await plane.admin.create<AgentConfig>(AgentConfigResource, { metadata: { name: "tuning", namespace: f.ns }, spec: { settings, placementRef: { name: "all" }, rolloutStrategy: strategy, maxRolledBack } });
}
const run = (f: Fleet) => fn.spec.reconcile(io, { cluster: HUB, namespace: f.ns, name: "tuning" });

const configOf = (cluster: string) => plane.admin.get<AgentConfig>(AgentConfigResource, AgentConfigName, cluster);
async function assigned(f: Fleet): Promise<string[]> {
  const configs = await Promise.all(f.clusters.map(async (c) => [c, await configOf(c)] as const));
  return configs.filter(([, c]) => c && settingsHash(c.spec?.settings ?? {}) === settingsHash(settings)).map(([c]) => c);
}
const fleetStatus = async (f: Fleet) => (await plane.admin.get<AgentConfig>(AgentConfigResource, "tuning", f.ns))!.status;

// What the cluster's agent writes once it has judged the config.
async function verdict(cluster: string, outcome: "active" | "rolledBack"): Promise<void> {
  const hash = settingsHash(settings);
  const lkg = outcome === "active" ? hash : settingsHash({});
  const reason = outcome === "active" ? AgentConfigReason.ConfigActive : AgentConfigReason.ConfigRolledBack;
  await plane.admin.patch(AgentConfigResource, AgentConfigName, {
    status: {
      assigned: { hash },
      active: { hash: lkg },
      lastKnownGood: { hash: lkg },
      conditions: [{ type: AgentConfigConditionType.AgentConfigOK, status: outcome === "active" ? "True" : "False", reason, message: "", lastTransitionTime: rfc3339(clock.now()) }],
    },
  }, { namespace: cluster, subresource: "status" });
}

describe("rollout strategies", () => {
  it("All: every decided cluster at once, labelled with the rollout, and Succeeded when every cluster made it last-known-good", async () => {
    const f = await fleet([3]);
    await rollout(f, { type: "All" });
    await run(f);
    expect(await assigned(f)).toEqual(f.clusters);
    const one = (await configOf(f.clusters[0]!))!;
    expect(one.metadata.labels?.[RolloutLabel]).toBe("tuning");
    expect(one.spec).toEqual({ settings });
    expect(await fleetStatus(f)).toMatchObject({ rollout: { phase: "Progressing", updated: f.clusters, rolledBack: [] } });
    for (const c of f.clusters) await verdict(c, "active");
    await run(f);
    expect(await fleetStatus(f)).toMatchObject({ rollout: { phase: "Succeeded", updated: f.clusters, rolledBack: [] } });
  });

  it("Progressive: at most maxConcurrency clusters on trial at a time", async () => {
    const f = await fleet([5]);
    await rollout(f, { type: "Progressive", progressive: { maxConcurrency: 2 } });
    await run(f);
    expect(await assigned(f)).toEqual(f.clusters.slice(0, 2));
    await run(f); // nothing has finished: no more
    expect(await assigned(f)).toEqual(f.clusters.slice(0, 2));
    await verdict(f.clusters[0]!, "active");
    await run(f);
    expect(await assigned(f)).toEqual(f.clusters.slice(0, 3));
  });

  it("ProgressivePerGroup: the next decision group starts when the one before has finished", async () => {
    const f = await fleet([2, 3]);
    await rollout(f, { type: "ProgressivePerGroup" });
    await run(f);
    expect(await assigned(f)).toEqual(f.clusters.slice(0, 2));
    await verdict(f.clusters[0]!, "active");
    await run(f);
    expect(await assigned(f)).toEqual(f.clusters.slice(0, 2));
    await verdict(f.clusters[1]!, "active");
    await run(f);
    expect(await assigned(f)).toEqual(f.clusters);
  });
});

describe("the halt", () => {
  it("a progressive rollout over 10 clusters halts once more than maxRolledBack rolled back, and the rest keep their last-known-good", async () => {
    const f = await fleet([10]);
    await rollout(f, { type: "Progressive", progressive: { maxConcurrency: 3 } }, "10%"); // one of ten tolerated
    await run(f);
    const [a, b, c] = f.clusters;
    expect(await assigned(f)).toEqual([a, b, c]);
    await verdict(a!, "rolledBack");
    await verdict(b!, "active");
    await run(f);
    // one rollback is within 10%: the rollout goes on, two more slots
    expect(await assigned(f)).toEqual(f.clusters.slice(0, 5));
    await verdict(c!, "rolledBack");
    await run(f);
    const status = (await fleetStatus(f))!;
    expect(status.rollout).toEqual({ phase: "Halted", updated: f.clusters.slice(0, 5), rolledBack: [a, c] });
    // and it stays halted: nothing more is written, the other five were never given the config
    await verdict(f.clusters[3]!, "active");
    await verdict(f.clusters[4]!, "active");
    await run(f);
    expect(await assigned(f)).toEqual(f.clusters.slice(0, 5));
    for (const other of f.clusters.slice(5)) expect(await configOf(other)).toBeUndefined();
  });

  it("is a hard stop with two replicas: a wave planned before the halt was claimed first, and nothing outside the claims is ever assigned", async () => {
    const f = await fleet([6]);
    await rollout(f, { type: "Progressive", progressive: { maxConcurrency: 2 } }, 1);
    await run(f);
    const [a, b, c] = f.clusters;
    await verdict(a!, "rolledBack"); // one rollback is tolerated; b is still on trial
    // Replica A plans the next wave (c) and is held before its writes to the clusters reach the hub.
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let holding!: () => void;
    const isHolding = new Promise<void>((resolve) => (holding = resolve));
    const slow = io.cluster(HUB);
    const client = new Proxy(slow, {
      get(target, prop, receiver) {
        if (prop !== "create" && prop !== "update") return Reflect.get(target, prop, receiver);
        return async (...args: unknown[]) => {
          if ((args[0] as { kind?: string }).kind === AgentConfigResource.kind && args[2] === undefined) {
            holding();
            await held;
          }
          return (Reflect.get(target, prop, receiver) as (...x: unknown[]) => unknown).apply(target, args);
        };
      },
    });
    const replicaA = fn.spec.reconcile({ ...io, cluster: () => client }, { cluster: HUB, namespace: f.ns, name: "tuning" });
    await isHolding;
    // Meanwhile b rolls back too, and replica B, which is not held, sees the halt.
    await verdict(b!, "rolledBack");
    await fn.spec.reconcile(testIo({ [HUB]: await readyIdentity(plane.cluster, fn.spec.name, [AgentConfigResource]) }, { hubCluster: HUB }, clock), { cluster: HUB, namespace: f.ns, name: "tuning" });
    const halted = (await fleetStatus(f))!.rollout!;
    expect(halted.phase).toBe("Halted");
    release();
    await replicaA;
    // A's wave was claimed before the halt was seen, so it is in the halt's list; nothing else got the config
    expect(halted.updated).toEqual([a, b, c]);
    expect(await assigned(f)).toEqual(halted.updated);
    await run(f);
    expect(await assigned(f)).toEqual([a, b, c]);
    expect((await fleetStatus(f))!.rollout).toEqual({ phase: "Halted", updated: [a, b, c], rolledBack: [a, b] });
  });

  it("reads maxRolledBack as an int or a percentage rounded down", () => {
    expect(countOf("10%", 10, 0)).toBe(1);
    expect(countOf("15%", 10, 0)).toBe(1);
    expect(countOf(3, 10, 0)).toBe(3);
    expect(countOf(undefined, 10, 7)).toBe(7);
    expect(() => countOf("lots", 10, 0)).toThrow(/neither an int nor a percentage/);
  });
});

// Issue 23: the rollout acts only for its namespace. A fleet-level config in namespace N reaches only
// clusters of ManagedClusterSets bound to N (OCM's rule for every namespace-scoped consumer of
// clusters), judged by the rollout itself; it reads only the decisions the scheduler wrote, and it
// never takes over a cluster's config written by hand or by another rollout that still exists.
describe("who the rollout acts for", () => {
  const conditionOf = async (ns: string, name: string, type: string) => (await plane.admin.get<AgentConfig>(AgentConfigResource, name, ns))?.status?.conditions?.find((c) => c.type === type);

  // A tenant of `ns` who may create Placements, PlacementDecisions and AgentConfigs there, and fill in
  // a decision's clusters (its status subresource), and nothing else: no binding, no other namespace.
  async function tenant(ns: string): Promise<KubeClient> {
    const user = `tenant-${ns}`;
    await plane.admin.create(RoleResource, {
      metadata: { name: "tenant", namespace: ns },
      rules: [
        { apiGroups: ["cluster.open-cluster-management.io"], resources: ["placements", "placementdecisions"], verbs: ["create"] },
        { apiGroups: ["cluster.open-cluster-management.io"], resources: ["placementdecisions/status"], verbs: ["patch"] },
        { apiGroups: ["config.ocm-functions.io"], resources: ["agentconfigs"], verbs: ["create"] },
      ],
    });
    await plane.admin.create(RoleBindingResource, {
      metadata: { name: "tenant", namespace: ns },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "tenant" },
      subjects: [{ kind: "User", apiGroup: "rbac.authorization.k8s.io", name: user }],
    });
    return KubeClient.fromKubeconfig(await plane.cluster.kubeconfigFor({ user }));
  }

  // cluster1 and cluster2, members of a set bound to another team's namespace only
  async function othersClusters(id: string): Promise<string[]> {
    const set = `prod-${id}`;
    const teamA = `team-a-${id}`;
    await plane.admin.create(NamespaceResource, { metadata: { name: teamA } });
    await plane.admin.create(ManagedClusterSetResource, { metadata: { name: set }, spec: { clusterSelector: { selectorType: "ExclusiveClusterSetLabel" } } });
    await plane.admin.create(ManagedClusterSetBindingResource, { metadata: { name: set, namespace: teamA }, spec: { clusterSet: set } });
    const clusters = [`${id}-cluster1`, `${id}-cluster2`];
    for (const c of clusters) await managedCluster(c, set);
    return clusters;
  }

  const hostile: AgentSettings = { statusSyncIntervalSeconds: 1, logLevel: "debug" };

  it("a team-b tenant with no binding gets nothing written into cluster1 or cluster2 through a scheduling-disabled Placement and a hand-written decision, and the status says why", async () => {
    const id = suffix();
    const clusters = await othersClusters(id);
    const ns = `team-b-${id}`;
    await plane.admin.create(NamespaceResource, { metadata: { name: ns } });
    const attacker = await tenant(ns);
    // all of it under the tenant's own identity
    const placement = await eventually(() =>
      attacker.create<Placement>(PlacementResource, { metadata: { name: "mine", namespace: ns, annotations: { "cluster.open-cluster-management.io/experimental-scheduling-disable": "true" } }, spec: {} }),
    );
    await decide(ns, "mine-decision-1", clusters, { placement, owned: false, client: attacker });
    await attacker.create<AgentConfig>(AgentConfigResource, { metadata: { name: "tuning", namespace: ns }, spec: { settings: hostile, placementRef: { name: "mine" }, trialSeconds: 3600 } });

    await fn.spec.reconcile(io, { cluster: HUB, namespace: ns, name: "tuning" });

    for (const c of clusters) expect(await configOf(c)).toBeUndefined();
    expect(await conditionOf(ns, "tuning", "PlacementDecisionsTrusted")).toMatchObject({ status: "False", reason: "SchedulingDisabled" });
    expect((await plane.admin.get<AgentConfig>(AgentConfigResource, "tuning", ns))!.status?.rollout).toMatchObject({ updated: [] });
  });

  it("a decision forged to look like the scheduler's (controlled by the Placement, its uid) reaches only the clusters of the sets bound to the namespace; the others are listed as excluded and never written", async () => {
    const id = suffix();
    const clusters = await othersClusters(id);
    // team-b has a set of its own, bound to it by the admin, with one cluster
    const ns = `team-b-${id}`;
    const own = `team-b-set-${id}`;
    const mine = `${id}-cluster3`;
    await plane.admin.create(NamespaceResource, { metadata: { name: ns } });
    await plane.admin.create(ManagedClusterSetResource, { metadata: { name: own }, spec: { clusterSelector: { selectorType: "ExclusiveClusterSetLabel" } } });
    await plane.admin.create(ManagedClusterSetBindingResource, { metadata: { name: own, namespace: ns }, spec: { clusterSet: own } });
    await managedCluster(mine, own);
    const attacker = await tenant(ns);
    const placement = await eventually(() => attacker.create<Placement>(PlacementResource, { metadata: { name: "mine", namespace: ns }, spec: {} }));
    await decide(ns, "mine-decision-1", [...clusters, mine], { placement, client: attacker });
    await attacker.create<AgentConfig>(AgentConfigResource, { metadata: { name: "tuning", namespace: ns }, spec: { settings: hostile, placementRef: { name: "mine" } } });

    await fn.spec.reconcile(io, { cluster: HUB, namespace: ns, name: "tuning" });

    for (const c of clusters) expect(await configOf(c)).toBeUndefined();
    expect((await configOf(mine))?.spec).toEqual({ settings: hostile });
    const status = (await plane.admin.get<AgentConfig>(AgentConfigResource, "tuning", ns))!.status!;
    expect(status.rollout).toMatchObject({ updated: [mine], excluded: clusters.map((cluster) => ({ cluster, reason: "NotInBoundClusterSet" })) });
    expect(status.conditions?.find((c) => c.type === "ClustersExcluded")).toMatchObject({ status: "True", reason: "NotInBoundClusterSet" });
    // and a later run still writes nothing there
    await fn.spec.reconcile(io, { cluster: HUB, namespace: ns, name: "tuning" });
    for (const c of clusters) expect(await configOf(c)).toBeUndefined();
  });

  it("never takes over a cluster's config written by hand or by another namespace's rollout that still exists, lists them as excluded, and takes over one whose rollout is gone", async () => {
    const f = await fleet([3]);
    const [byHand, others, orphan] = f.clusters as [string, string, string];
    const other = `other-${suffix()}`;
    await plane.admin.create(NamespaceResource, { metadata: { name: other } });
    await plane.admin.create<AgentConfig>(AgentConfigResource, { metadata: { name: "theirs", namespace: other }, spec: { settings: { logLevel: "warn" }, placementRef: { name: "p" } } });
    const written = (rollout?: [string, string]): { labels: Record<string, string>; annotations: Record<string, string> } =>
      rollout ? { labels: { [RolloutLabel]: rollout[1] }, annotations: { [RolloutNamespaceAnnotation]: rollout[0] } } : { labels: {}, annotations: {} };
    await plane.admin.create<AgentConfig>(AgentConfigResource, { metadata: { name: AgentConfigName, namespace: byHand, ...written() }, spec: { settings: { logLevel: "error" } } });
    await plane.admin.create<AgentConfig>(AgentConfigResource, { metadata: { name: AgentConfigName, namespace: others, ...written([other, "theirs"]) }, spec: { settings: { logLevel: "warn" } } });
    await plane.admin.create<AgentConfig>(AgentConfigResource, { metadata: { name: AgentConfigName, namespace: orphan, ...written([other, "gone"]) }, spec: { settings: { logLevel: "warn" } } });
    await rollout(f, { type: "All" });
    await run(f);

    expect((await configOf(byHand))!.spec).toEqual({ settings: { logLevel: "error" } });
    expect((await configOf(others))!.spec).toEqual({ settings: { logLevel: "warn" } });
    expect((await configOf(others))!.metadata.labels?.[RolloutLabel]).toBe("theirs");
    expect(await assigned(f)).toEqual([orphan]);
    expect((await configOf(orphan))!.metadata.annotations?.[RolloutNamespaceAnnotation]).toBe(f.ns);
    const status = (await fleetStatus(f))!;
    expect(status.rollout).toMatchObject({ updated: [orphan], excluded: [byHand, others].sort().map((cluster) => ({ cluster, reason: "ConfigOwnedElsewhere" })) });
    expect(status.conditions?.find((c) => c.type === "ClustersExcluded")).toMatchObject({ status: "True", reason: "ConfigOwnedElsewhere" });
  });

  it("a decision the Placement does not control is not read, while the scheduler's beside it still are", async () => {
    const f = await fleet([1, 1]);
    const [scheduled, handWritten] = f.clusters as [string, string];
    // the second group's decision loses its owner: someone else's now, though its cluster is bound
    const placement = (await plane.admin.get<Placement>(PlacementResource, "all", f.ns))!;
    await plane.admin.delete(PlacementDecisionResource, "all-decision-2", f.ns);
    await decide(f.ns, "all-decision-2", [handWritten], { placement, group: 1, owned: false });
    await rollout(f, { type: "All" });
    await run(f);
    expect(await assigned(f)).toEqual([scheduled]);
    expect(await conditionOf(f.ns, "tuning", "PlacementDecisionsTrusted")).toMatchObject({ status: "False", reason: "DecisionsNotOwned", message: expect.stringContaining("all-decision-2") });
  });

  it("its own identity may update a cluster's agent config but not a fleet-level config's spec", async () => {
    const f = await fleet([1]);
    await rollout(f, { type: "All" });
    await run(f);
    const self = io.cluster(HUB);
    const own = (await configOf(f.clusters[0]!))!;
    await self.update<AgentConfig>(AgentConfigResource, { ...own, spec: { settings: { logLevel: "info" } } });
    const fleetConfig = (await plane.admin.get<AgentConfig>(AgentConfigResource, "tuning", f.ns))!;
    await expect(self.update<AgentConfig>(AgentConfigResource, { ...fleetConfig, spec: { ...fleetConfig.spec, placementRef: { name: "elsewhere" } } })).rejects.toMatchObject({ code: 403 });
    expect((await plane.admin.get<AgentConfig>(AgentConfigResource, "tuning", f.ns))!.spec?.placementRef).toEqual({ name: "all" });
  });

  it("with a bound set and the scheduler's decisions, reports the decisions trusted and no cluster excluded", async () => {
    const f = await fleet([2]);
    await rollout(f, { type: "All" });
    await run(f);
    expect(await assigned(f)).toEqual(f.clusters);
    expect(await conditionOf(f.ns, "tuning", "PlacementDecisionsTrusted")).toMatchObject({ status: "True", reason: "DecisionsFromScheduler" });
    expect(await conditionOf(f.ns, "tuning", "ClustersExcluded")).toMatchObject({ status: "False", reason: "NoneExcluded" });
  });
});

describe("events", () => {
  const keysOf = async (ce: Record<string, unknown>) => {
    const { parseEvent } = await import("../../shared/events.ts");
    const parsed = parseEvent(ce);
    if (!parsed.ok) throw new Error(parsed.reason);
    return fn.spec.keys(parsed.event, io);
  };

  it("a cluster's own config wakes the rollout that wrote it; one no rollout wrote wakes nothing", async () => {
    const f = await fleet([1]);
    await rollout(f, { type: "All" });
    await run(f);
    const written = (await configOf(f.clusters[0]!))!;
    const event = (c: AgentConfig) => objectEvent({ cluster: HUB, verb: "update", object: { apiVersion: "config.ocm-functions.io/v1alpha1", kind: "AgentConfig", ...c } });
    expect(await keysOf(event(written))).toEqual([{ cluster: HUB, namespace: f.ns, name: "tuning" }]);
    const byHand = { ...written, metadata: { ...written.metadata, labels: {}, annotations: {} } };
    expect(await keysOf(event(byHand))).toEqual({ skip: "a cluster's config no rollout wrote" });
    expect(await keysOf(tickEvent(HUB))).toContainEqual({ cluster: HUB, namespace: f.ns, name: "tuning" });
  });

  it("a malformed event is refused with 400 and changes nothing", async () => {
    const reply = await handleEvent(fn.spec, io, { specversion: "1.0", id: "x", source: "test", type: "dev.knative.apiserver.resource.update" });
    expect(reply.statusCode).toBe(400);
  });
});
