// The agent-config-rollout function against a real hub, under its own RBAC: a fleet-level AgentConfig
// reaches the clusters its Placement decides at the pace of its strategy, and halts once more clusters
// than maxRolledBack rolled it back, leaving the rest on their last-known-good. The clusters' verdicts
// are written into their AgentConfig status as their agents write them (test/functions/agent-config.test.ts
// tests that side).
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { ClusterLabel, PlacementDecisionResource, PlacementResource, ManagedClusterResource, type RolloutStrategy } from "../../shared/api/cluster.ts";
import { NamespaceResource } from "../../shared/api/kube.ts";
import { AgentConfigConditionType, AgentConfigName, AgentConfigReason, AgentConfigResource, type AgentConfig, type AgentSettings } from "../../shared/api/agent-config.ts";
import { settingsHash } from "../../shared/agent-config.ts";
import { manualClock, rfc3339 } from "../../shared/clock.ts";
import { handleEvent, type Io } from "../../shared/harness.ts";
import { spec, type Config } from "../../functions/agent-config-rollout/reconcile.ts";
import { RolloutLabel, countOf } from "../../shared/agent-config.ts";
import { objectEvent, testIo, tickEvent } from "../support/functions.ts";
import { readyIdentity, startHub, type Hub } from "../support/fixtures.ts";

const HUB = "hub";
const suffix = () => Math.random().toString(36).slice(2, 7);
const clock = manualClock();

let plane: Hub;
let io: Io<Config>;

beforeAll(async () => {
  plane = await startHub(HUB);
  io = testIo({ [HUB]: await readyIdentity(plane.cluster, spec.name, [AgentConfigResource, PlacementDecisionResource]) }, { hubCluster: HUB }, clock);
}, 120_000);
afterAll(() => plane?.stop());

type Fleet = { ns: string; clusters: string[] };
// n clusters with namespaces, and a Placement whose decisions (one per group) name them, as
// placement-scheduler writes them.
async function fleet(groups: number[]): Promise<Fleet> {
  const id = suffix();
  const ns = `fleet-${id}`;
  await plane.admin.create(NamespaceResource, { metadata: { name: ns } });
  await plane.admin.create(PlacementResource, { metadata: { name: "all", namespace: ns }, spec: {} });
  const clusters: string[] = [];
  let decision = 1;
  for (const [group, size] of groups.entries()) {
    const names = Array.from({ length: size }, (_, i) => `${id}-g${group}-c${i}`);
    clusters.push(...names);
    await Promise.all(names.map(async (c) => {
      await plane.admin.create(ManagedClusterResource, { metadata: { name: c }, spec: { hubAcceptsClient: true } });
      await plane.admin.create(NamespaceResource, { metadata: { name: c } });
    }));
    const name = `all-decision-${decision++}`;
    await plane.admin.create(PlacementDecisionResource, { metadata: { name, namespace: ns, labels: { [ClusterLabel.Placement]: "all", [ClusterLabel.DecisionGroupIndex]: String(group), [ClusterLabel.DecisionGroupName]: "" } } });
    await plane.admin.patch(PlacementDecisionResource, name, { status: { decisions: names.map((clusterName) => ({ clusterName, reason: "" })) } }, { namespace: ns, subresource: "status" });
  }
  return { ns, clusters };
}

const settings: AgentSettings = { statusSyncIntervalSeconds: 30, logLevel: "debug" };
async function rollout(f: Fleet, strategy: RolloutStrategy, maxRolledBack?: number | string): Promise<void> {
  await plane.admin.create<AgentConfig>(AgentConfigResource, { metadata: { name: "tuning", namespace: f.ns }, spec: { settings, placementRef: { name: "all" }, rolloutStrategy: strategy, maxRolledBack } });
}
const run = (f: Fleet) => spec.reconcile(io, { cluster: HUB, namespace: f.ns, name: "tuning" });

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
    const replicaA = spec.reconcile({ ...io, cluster: () => client }, { cluster: HUB, namespace: f.ns, name: "tuning" });
    await isHolding;
    // Meanwhile b rolls back too, and replica B, which is not held, sees the halt.
    await verdict(b!, "rolledBack");
    await spec.reconcile(testIo({ [HUB]: await readyIdentity(plane.cluster, spec.name, [AgentConfigResource]) }, { hubCluster: HUB }, clock), { cluster: HUB, namespace: f.ns, name: "tuning" });
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

describe("events", () => {
  const keysOf = async (ce: Record<string, unknown>) => {
    const { parseEvent } = await import("../../shared/events.ts");
    const parsed = parseEvent(ce);
    if (!parsed.ok) throw new Error(parsed.reason);
    return spec.keys(parsed.event, io);
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
    const reply = await handleEvent(spec, io, { specversion: "1.0", id: "x", source: "test", type: "dev.knative.apiserver.resource.update" });
    expect(reply.statusCode).toBe(400);
  });
});
