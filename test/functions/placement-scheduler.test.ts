// The placement-scheduler function against a real hub, under its own RBAC, in the shape of OCM's
// placement integration cases: eligible sets, predicates, taints and tolerations, numberOfClusters,
// prioritizers, decision groups, decisions split at 100, status conditions, and no write without cause;
// and SIG-Multicluster PlacementDecisions for a placement that asks for them.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import {
  ClusterLabel,
  ManagedClusterResource,
  ManagedClusterSetBindingResource,
  ManagedClusterSetResource,
  PlacementDecisionResource,
  PlacementResource,
  type ManagedCluster,
  type ManagedClusterSet,
  type Placement,
  type PlacementDecision,
  type Taint,
} from "../../shared/api/cluster.ts";
import { NamespaceResource } from "../../shared/api/kube.ts";
import { findCondition } from "../../shared/conditions.ts";
import { manualClock, rfc3339 } from "../../shared/clock.ts";
import { handleEvent, type Io } from "../../shared/harness.ts";
import fn, { type Config } from "../../functions/placement-scheduler/reconcile.ts";
import { Semver, compareSemver } from "../../functions/placement-scheduler/cel.ts";
import { SigDecisionsAnnotation } from "../../functions/placement-scheduler/sig-decisions.ts";
import { SigPlacementDecisionResource, type SigPlacementDecision } from "../../shared/api/inventory.ts";
import { objectEvent, testIo, tickEvent } from "../support/functions.ts";
import { readyIdentity, startHub, type Hub } from "../support/fixtures.ts";

const HUB = "hub";
const suffix = () => Math.random().toString(36).slice(2, 7);

let plane: Hub;
let kubeconfig: string;

beforeAll(async () => {
  plane = await startHub(HUB);
  kubeconfig = await readyIdentity(plane.cluster, fn.spec.name, [PlacementResource, PlacementDecisionResource, ManagedClusterResource, ManagedClusterSetResource, ManagedClusterSetBindingResource, SigPlacementDecisionResource]);
}, 120_000);

afterAll(() => plane?.stop());

// Each scene has its own namespace and its own exclusive set bound there, so scenes never see each
// other's clusters.
type Scene = { ns: string; set: string; clock: ReturnType<typeof manualClock>; io: Io<Config> };
async function scene(o: { bind?: boolean } = {}): Promise<Scene> {
  const id = suffix();
  const s = { ns: `placement-${id}`, set: `set-${id}`, clock: manualClock(), io: undefined as unknown as Io<Config> };
  s.io = testIo({ [HUB]: kubeconfig }, { hubCluster: HUB }, s.clock);
  await plane.admin.create(NamespaceResource, { metadata: { name: s.ns } });
  await plane.admin.create(ManagedClusterSetResource, { metadata: { name: s.set }, spec: { clusterSelector: { selectorType: "ExclusiveClusterSetLabel" } } });
  if (o.bind !== false) await bind(s, s.set);
  return s;
}
const bind = (s: Scene, set: string) => plane.admin.create(ManagedClusterSetBindingResource, { metadata: { name: set, namespace: s.ns }, spec: { clusterSet: set } });

type ClusterSpec = { labels?: Record<string, string>; claims?: Record<string, string>; taints?: Taint[]; cpu?: string; memory?: string; version?: string };
async function addCluster(s: Scene, short: string, c: ClusterSpec = {}): Promise<string> {
  const name = `${s.set}-${short}`;
  await plane.admin.create(ManagedClusterResource, {
    metadata: { name, labels: { [ClusterLabel.ClusterSet]: s.set, ...c.labels } },
    spec: { hubAcceptsClient: true, taints: c.taints },
  });
  const status: ManagedCluster["status"] = {};
  if (c.claims) status.clusterClaims = Object.entries(c.claims).map(([k, v]) => ({ name: k, value: v }));
  if (c.cpu || c.memory) {
    const resources = { ...(c.cpu ? { cpu: c.cpu } : {}), ...(c.memory ? { memory: c.memory } : {}) };
    status.allocatable = resources;
    status.capacity = resources;
  }
  if (c.version) status.version = { kubernetes: c.version };
  if (Object.keys(status).length) await plane.admin.patch(ManagedClusterResource, name, { status }, { subresource: "status" });
  return name;
}
const addClusters = (s: Scene, n: number, c: ClusterSpec = {}) => Promise.all(Array.from({ length: n }, (_, i) => addCluster(s, `c${String(i).padStart(3, "0")}`, c)));

async function place(s: Scene, name: string, spec: Placement["spec"] = {}, annotations?: Record<string, string>): Promise<Placement> {
  return plane.admin.create<Placement>(PlacementResource, { metadata: { name, namespace: s.ns, annotations }, spec });
}
const run = (s: Scene, name: string) => fn.spec.reconcile(s.io, { cluster: HUB, namespace: s.ns, name });
const readPlacement = async (s: Scene, name: string) => (await plane.admin.get<Placement>(PlacementResource, name, s.ns))!;
async function decisionObjects(s: Scene, name: string): Promise<PlacementDecision[]> {
  const { items } = await plane.admin.list<PlacementDecision>(PlacementDecisionResource, { namespace: s.ns, labelSelector: `${ClusterLabel.Placement}=${name}` });
  return items.sort((a, b) => a.metadata.name.localeCompare(b.metadata.name, "en", { numeric: true }));
}
const decided = async (s: Scene, name: string) => (await decisionObjects(s, name)).flatMap((d) => (d.status?.decisions ?? []).map((x) => x.clusterName.slice(s.set.length + 1)));
const condition = async (s: Scene, name: string, type: string) => findCondition((await readPlacement(s, name)).status?.conditions, type);
const satisfied = (s: Scene, name: string) => condition(s, name, "PlacementSatisfied");
const misconfigured = (s: Scene, name: string) => condition(s, name, "PlacementMisconfigured");

describe("eligible clusters", () => {
  it("without a binding: NoManagedClusterSetBindings and one empty decision", async () => {
    const s = await scene({ bind: false });
    await addClusters(s, 2);
    await place(s, "p");
    expect(await run(s, "p")).toEqual({ done: true });
    expect(await satisfied(s, "p")).toMatchObject({ status: "False", reason: "NoManagedClusterSetBindings", message: "No valid ManagedClusterSetBindings found in placement namespace" });
    const ds = await decisionObjects(s, "p");
    expect(ds.map((d) => d.metadata.name)).toEqual(["p-decision-1"]);
    expect(ds[0]!.status?.decisions ?? []).toEqual([]);
    expect((await readPlacement(s, "p")).status).toMatchObject({ numberOfSelectedClusters: 0, decisionGroups: [{ decisionGroupIndex: 0, decisionGroupName: "", decisions: ["p-decision-1"], clusterCount: 0 }] });
  });

  it("a binding whose set does not exist does not count", async () => {
    const s = await scene({ bind: false });
    await bind(s, `missing-${suffix()}`);
    await place(s, "p");
    await run(s, "p");
    expect(await satisfied(s, "p")).toMatchObject({ reason: "NoManagedClusterSetBindings" });
  });

  it("clusterSets naming no bound set: NoIntersection; an empty bound set: AllManagedClusterSetsEmpty", async () => {
    const s = await scene();
    await place(s, "other", { clusterSets: ["not-bound", "nor-this"] });
    await run(s, "other");
    expect(await satisfied(s, "other")).toMatchObject({ status: "False", reason: "NoIntersection", message: "None of ManagedClusterSets [not-bound,nor-this] is bound to placement namespace" });
    await place(s, "empty");
    await run(s, "empty");
    expect(await satisfied(s, "empty")).toMatchObject({ status: "False", reason: "AllManagedClusterSetsEmpty", message: `All ManagedClusterSets [${s.set}] have no member ManagedCluster` });
  });

  it("selects every cluster of the bound sets, writes an owned, labelled decision and the status", async () => {
    const s = await scene();
    await addClusters(s, 3);
    // a cluster of a set not bound here, and a LabelSelector set bound here that selects one more
    const outsider = await addCluster(s, "outsider", { labels: { [ClusterLabel.ClusterSet]: `unbound-${suffix()}`, picked: s.set } });
    const selectorSet = `sel-${suffix()}`;
    await plane.admin.create(ManagedClusterSetResource, { metadata: { name: selectorSet }, spec: { clusterSelector: { selectorType: "LabelSelector", labelSelector: { matchLabels: { picked: s.set } } } } });
    const p = await place(s, "p", { clusterSets: [s.set] });
    await run(s, "p");
    expect(await decided(s, "p")).toEqual(["c000", "c001", "c002"]);
    const [d] = await decisionObjects(s, "p");
    expect(d!.metadata).toMatchObject({
      name: "p-decision-1",
      labels: { [ClusterLabel.Placement]: "p", [ClusterLabel.DecisionGroupIndex]: "0", [ClusterLabel.DecisionGroupName]: "" },
      ownerReferences: [{ apiVersion: "cluster.open-cluster-management.io/v1beta1", kind: "Placement", name: "p", uid: p.metadata.uid, controller: true, blockOwnerDeletion: true }],
    });
    expect(await satisfied(s, "p")).toMatchObject({ status: "True", reason: "AllDecisionsScheduled", message: "All cluster decisions scheduled" });
    expect(await misconfigured(s, "p")).toMatchObject({ status: "False", reason: "Succeedconfigured", message: "Placement configurations check pass" });
    expect((await readPlacement(s, "p")).status).toMatchObject({ numberOfSelectedClusters: 3, decisionGroups: [{ decisionGroupIndex: 0, decisions: ["p-decision-1"], clusterCount: 3 }] });

    // bound too, and not narrowed by clusterSets: the selector set's member joins
    await bind(s, selectorSet);
    await place(s, "q");
    await run(s, "q");
    expect((await decisionObjects(s, "q")).flatMap((x) => x.status!.decisions.map((c) => c.clusterName))).toContain(outsider);
  });

  it("follows a cluster joining and leaving the set, and leaves deleting clusters out", async () => {
    const s = await scene();
    await addClusters(s, 2);
    await place(s, "p");
    await run(s, "p");
    expect(await decided(s, "p")).toEqual(["c000", "c001"]);
    const joining = await addCluster(s, "late");
    await run(s, "p");
    expect(await decided(s, "p")).toEqual(["c000", "c001", "late"]);
    await plane.admin.patch(ManagedClusterResource, joining, { metadata: { labels: { [ClusterLabel.ClusterSet]: `elsewhere-${suffix()}` } } });
    await run(s, "p");
    expect(await decided(s, "p")).toEqual(["c000", "c001"]);
    await plane.admin.patch(ManagedClusterResource, `${s.set}-c001`, { metadata: { finalizers: ["test.ocm-functions.io/hold"] } });
    await plane.admin.delete(ManagedClusterResource, `${s.set}-c001`);
    await run(s, "p");
    expect(await decided(s, "p")).toEqual(["c000"]);
    await plane.admin.patch(ManagedClusterResource, `${s.set}-c001`, { metadata: { finalizers: null } });
  });
});

describe("numberOfClusters", () => {
  it("larger than the fleet: all of it, and NotAllDecisionsScheduled with the shortfall", async () => {
    const s = await scene();
    await addClusters(s, 3);
    await place(s, "p", { numberOfClusters: 5 });
    await run(s, "p");
    expect(await decided(s, "p")).toHaveLength(3);
    expect(await satisfied(s, "p")).toMatchObject({ status: "False", reason: "NotAllDecisionsScheduled", message: "2 cluster decisions unscheduled" });
  });

  it("smaller than the fleet: that many, and they stay when better-named clusters join (Steady)", async () => {
    const s = await scene();
    await Promise.all(["m1", "m2", "m3", "m4"].map((n) => addCluster(s, n)));
    await place(s, "p", { numberOfClusters: 2 });
    await run(s, "p");
    // with equal scores the names decide
    expect(await decided(s, "p")).toEqual(["m1", "m2"]);
    await Promise.all(["a1", "a2"].map((n) => addCluster(s, n)));
    await run(s, "p");
    expect(await decided(s, "p")).toEqual(["m1", "m2"]);
    expect(await satisfied(s, "p")).toMatchObject({ status: "True" });
    // a decided cluster leaving is replaced by the next best
    await plane.admin.patch(ManagedClusterResource, `${s.set}-m1`, { metadata: { labels: { [ClusterLabel.ClusterSet]: `gone-${suffix()}` } } });
    await run(s, "p");
    expect(await decided(s, "p")).toEqual(["a1", "m2"]);
  });
});

describe("predicates", () => {
  it("label selectors, claim selectors and CEL; predicates are ORed, selectors within one ANDed", async () => {
    const s = await scene();
    await addCluster(s, "prod-east", { labels: { env: "prod" }, claims: { region: "east" }, version: "v1.31.2" });
    await addCluster(s, "prod-west", { labels: { env: "prod" }, claims: { region: "west" }, version: "v1.29.0" });
    await addCluster(s, "dev-east", { labels: { env: "dev" }, claims: { region: "east" }, version: "v1.30.0" });
    await place(s, "label", { predicates: [{ requiredClusterSelector: { labelSelector: { matchLabels: { env: "prod" } } } }] });
    await place(s, "both", { predicates: [{ requiredClusterSelector: { labelSelector: { matchLabels: { env: "prod" } }, claimSelector: { matchExpressions: [{ key: "region", operator: "In", values: ["east"] }] } } }] });
    await place(s, "either", {
      predicates: [
        { requiredClusterSelector: { labelSelector: { matchExpressions: [{ key: "env", operator: "NotIn", values: ["prod"] }] } } },
        { requiredClusterSelector: { claimSelector: { matchExpressions: [{ key: "region", operator: "In", values: ["west"] }] } } },
      ],
    });
    await place(s, "cel", { predicates: [{ requiredClusterSelector: { celSelector: { celExpressions: ['semver(managedCluster.status.version.kubernetes, true).isGreaterThan(semver("1.30.0"))', 'managedCluster.metadata.labels["env"] == "prod"'] } } }] });
    await place(s, "cel-json", { predicates: [{ requiredClusterSelector: { celSelector: { celExpressions: ['managedCluster.metadata.annotations["info"].parseJSON().tier == "gold"'] } } }] });
    await place(s, "cel-claims", { predicates: [{ requiredClusterSelector: { celSelector: { celExpressions: ['managedCluster.status.clusterClaims.exists(c, c.name == "region" && c.value == "east")'] } } }] });
    await place(s, "none", { predicates: [{ requiredClusterSelector: { labelSelector: { matchLabels: { env: "staging" } } } }] });
    await plane.admin.patch(ManagedClusterResource, `${s.set}-dev-east`, { metadata: { annotations: { info: '{"tier":"gold","rank":1}' } } });
    for (const p of ["label", "both", "either", "cel", "cel-claims", "cel-json", "none"]) await run(s, p);
    expect(await decided(s, "label")).toEqual(["prod-east", "prod-west"]);
    expect(await decided(s, "both")).toEqual(["prod-east"]);
    expect(await decided(s, "either")).toEqual(["dev-east", "prod-west"]);
    expect(await decided(s, "cel")).toEqual(["prod-east"]);
    expect(await decided(s, "cel-claims")).toEqual(["dev-east", "prod-east"]);
    expect(await decided(s, "cel-json")).toEqual(["dev-east"]);
    expect(await satisfied(s, "none")).toMatchObject({ status: "False", reason: "NoManagedClusterMatched", message: "No ManagedCluster matches any of the cluster predicate" });
  });

  it("a CEL expression that does not compile or a bad selector is PlacementMisconfigured", async () => {
    const s = await scene();
    await addClusters(s, 1);
    await place(s, "cel", { predicates: [{ requiredClusterSelector: { celSelector: { celExpressions: ["managedCluster.metadata.name =="] } } }] });
    await place(s, "scores", { predicates: [{ requiredClusterSelector: { celSelector: { celExpressions: ['managedCluster.scores("x").size() > 0'] } } }] });
    await run(s, "cel");
    await run(s, "scores");
    expect(await misconfigured(s, "cel")).toMatchObject({ status: "True", reason: "Misconfigured", message: expect.stringMatching(/^Predicate:compilation failed: /) });
    expect(await misconfigured(s, "scores")).toMatchObject({ status: "True", reason: "Misconfigured" });
    expect(await decided(s, "cel")).toEqual([]);
    expect(await satisfied(s, "cel")).toMatchObject({ status: "False", reason: "NoManagedClusterMatched" });
  });

  it("has Kubernetes' semver and quantity libraries, as OCM's placement controller declares them", async () => {
    const s = await scene();
    await addCluster(s, "big", { cpu: "8", memory: "32Gi", labels: { version: "1.31.2" } });
    await addCluster(s, "small", { cpu: "1500m", memory: "4Gi", labels: { version: "1.29.0-rc.1" } });
    const rows: [string, string, string[]][] = [
      ["semver", 'semver(managedCluster.metadata.labels["version"]).isLessThan(semver("1.30.0"))', ["small"]],
      ["semver-major", 'semver(managedCluster.metadata.labels["version"]).minor() == 31', ["big"]],
      ["quantity", 'quantity(managedCluster.status.allocatable.memory).isGreaterThan(quantity("8Gi"))', ["big"]],
      ["quantity-int", '!quantity(managedCluster.status.allocatable.cpu).isInteger()', ["small"]],
      ["not-semver", 'isSemver("v1.2.3") || semver("v1.2.3").major() == 1', []],
      ["normalized", 'isSemver("v1.2", true) && semver("v1.2", true).compareTo(semver("1.2.0")) == 0', ["big", "small"]],
    ];
    for (const [name, expression] of rows) await place(s, name, { predicates: [{ requiredClusterSelector: { celSelector: { celExpressions: [expression] } } }] });
    for (const [name, , want] of rows) {
      await run(s, name);
      expect([name, await decided(s, name)]).toEqual([name, want]);
    }
  });

  it("compares versions by Semantic Versioning precedence", () => {
    const cmp = (a: string, b: string) => compareSemver(new Semver(a, true), new Semver(b, true));
    expect(cmp("v1.30.10", "1.30.9")).toBe(1);
    expect(cmp("1.30.0-rc.1", "1.30.0")).toBe(-1);
    expect(cmp("1.30.0-rc.2", "1.30.0-rc.10")).toBe(-1);
    expect(cmp("1.30.0+build", "1.30.0")).toBe(0);
    expect(() => new Semver("v1.0.0")).toThrow(/not a semantic version/);
    expect(() => new Semver("latest", true)).toThrow(/not a semantic version/);
  });
});

describe("taints and tolerations", () => {
  const noSelect = (key: string, timeAdded: string, value?: string): Taint => ({ key, value, effect: "NoSelect", timeAdded });

  it("NoSelect keeps a cluster out unless tolerated; PreferNoSelect never does", async () => {
    const s = await scene();
    const at = rfc3339(s.clock.now());
    await addCluster(s, "clean");
    await addCluster(s, "tainted", { taints: [noSelect("gpu", at, "busy")] });
    await addCluster(s, "preferred", { taints: [{ key: "soft", effect: "PreferNoSelect", timeAdded: at }] });
    await place(s, "plain");
    await place(s, "equal", { tolerations: [{ key: "gpu", operator: "Equal", value: "busy" }] });
    await place(s, "wrong-value", { tolerations: [{ key: "gpu", value: "idle" }] });
    await place(s, "exists", { tolerations: [{ operator: "Exists" }] });
    for (const p of ["plain", "equal", "wrong-value", "exists"]) await run(s, p);
    expect(await decided(s, "plain")).toEqual(["clean", "preferred"]);
    expect(await decided(s, "equal")).toEqual(["clean", "preferred", "tainted"]);
    expect(await decided(s, "wrong-value")).toEqual(["clean", "preferred"]);
    expect(await decided(s, "exists")).toEqual(["clean", "preferred", "tainted"]);
  });

  it("tolerationSeconds holds a cluster until the taint is that old, and asks to be called back then", async () => {
    const s = await scene();
    await addCluster(s, "clean");
    const at = rfc3339(s.clock.now());
    const lag = s.clock.now().getTime() - Date.parse(at); // timeAdded keeps whole seconds
    await addCluster(s, "unreachable", { taints: [noSelect("cluster.open-cluster-management.io/unreachable", at)] });
    await place(s, "p", { tolerations: [{ key: "cluster.open-cluster-management.io/unreachable", operator: "Exists", tolerationSeconds: 300 }] });
    const first = await run(s, "p");
    expect(await decided(s, "p")).toEqual(["clean", "unreachable"]);
    // called back a second after the toleration runs out
    expect(first).toEqual({ recheckInMs: 301_000 - lag });
    s.clock.advance(200_000);
    expect(await run(s, "p")).toEqual({ recheckInMs: 101_000 - lag });
    s.clock.advance(101_000);
    expect(await run(s, "p")).toEqual({ done: true });
    expect(await decided(s, "p")).toEqual(["clean"]);
  });

  it("NoSelectIfNew keeps a decided cluster and keeps a new one out", async () => {
    const s = await scene();
    await addCluster(s, "old");
    await place(s, "p");
    await run(s, "p");
    const at = rfc3339(s.clock.now());
    await plane.admin.patch(ManagedClusterResource, `${s.set}-old`, { spec: { taints: [{ key: "draining", effect: "NoSelectIfNew", timeAdded: at }] } });
    await addCluster(s, "new", { taints: [{ key: "draining", effect: "NoSelectIfNew", timeAdded: at }] });
    await run(s, "p");
    expect(await decided(s, "p")).toEqual(["old"]);
  });

  it("a toleration without a key must use Exists, and Exists takes no value", async () => {
    const s = await scene();
    await addClusters(s, 1);
    await place(s, "no-key", { tolerations: [{ operator: "Equal", value: "x" }] });
    await place(s, "exists-value", { tolerations: [{ key: "k", operator: "Exists", value: "x" }] });
    await run(s, "no-key");
    await run(s, "exists-value");
    expect(await misconfigured(s, "no-key")).toMatchObject({ status: "True", message: "TaintToleration:If the key is empty, operator must be Exists." });
    expect(await misconfigured(s, "exists-value")).toMatchObject({ status: "True", message: "TaintToleration:If the operator is Exists, the value should be empty." });
  });
});

describe("prioritizers", () => {
  const exact = (builtIn: string, weight = 1): Placement["spec"]["prioritizerPolicy"] => ({ mode: "Exact", configurations: [{ scoreCoordinate: { type: "BuiltIn", builtIn }, weight }] });

  it("ResourceAllocatableCPU and ResourceAllocatableMemory pick the most allocatable, a negative weight the least", async () => {
    const s = await scene();
    await addCluster(s, "small", { cpu: "2", memory: "64Gi" });
    await addCluster(s, "medium", { cpu: "4500m", memory: "8Gi" });
    await addCluster(s, "large", { cpu: "8", memory: "16Gi" });
    await place(s, "cpu", { numberOfClusters: 1, prioritizerPolicy: exact("ResourceAllocatableCPU") });
    await place(s, "memory", { numberOfClusters: 2, prioritizerPolicy: exact("ResourceAllocatableMemory") });
    await place(s, "least-cpu", { numberOfClusters: 1, prioritizerPolicy: exact("ResourceAllocatableCPU", -1) });
    for (const p of ["cpu", "memory", "least-cpu"]) await run(s, p);
    expect(await decided(s, "cpu")).toEqual(["large"]);
    expect(await decided(s, "memory")).toEqual(["large", "small"]);
    expect(await decided(s, "least-cpu")).toEqual(["small"]);
  });

  it("Balance prefers clusters fewer other placements have chosen", async () => {
    const s = await scene();
    await Promise.all(["a", "b", "c"].map((n) => addCluster(s, n)));
    await place(s, "first", { numberOfClusters: 2, prioritizerPolicy: exact("Balance") });
    await run(s, "first");
    expect(await decided(s, "first")).toEqual(["a", "b"]);
    await place(s, "second", { numberOfClusters: 1, prioritizerPolicy: exact("Balance") });
    await run(s, "second");
    expect(await decided(s, "second")).toEqual(["c"]);
  });

  it("Additive mode keeps Steady and Balance beside the configured ones; Exact drops them", async () => {
    const s = await scene();
    await addCluster(s, "a", { cpu: "1" });
    await addCluster(s, "b", { cpu: "2" });
    // Additive with Steady at weight 3 and Balance at its default 1: equal scores at first, so the name decides
    await place(s, "additive", { numberOfClusters: 1, prioritizerPolicy: { mode: "Additive", configurations: [{ scoreCoordinate: { type: "BuiltIn", builtIn: "Steady" }, weight: 3 }] } });
    await run(s, "additive");
    expect(await decided(s, "additive")).toEqual(["a"]);
    // a decided: Balance 100 + Steady 300 + CPU -100 = 300 for a, against 100 + 0 + 100 = 200 for b
    const p = await readPlacement(s, "additive");
    p.spec.prioritizerPolicy!.configurations!.push({ scoreCoordinate: { type: "BuiltIn", builtIn: "ResourceAllocatableCPU" }, weight: 1 });
    await plane.admin.update(PlacementResource, p);
    await run(s, "additive");
    expect(await decided(s, "additive")).toEqual(["a"]);
    // Exact with CPU alone moves to b
    const q = await readPlacement(s, "additive");
    q.spec.prioritizerPolicy = exact("ResourceAllocatableCPU", 2);
    await plane.admin.update(PlacementResource, q);
    await run(s, "additive");
    expect(await decided(s, "additive")).toEqual(["b"]);
  });

  it("an unknown prioritizer or mode is PlacementMisconfigured", async () => {
    const s = await scene();
    await addClusters(s, 1);
    await place(s, "builtin", { prioritizerPolicy: exact("Fastest") });
    await place(s, "mode", { prioritizerPolicy: { mode: "Whatever" } });
    await run(s, "builtin");
    await run(s, "mode");
    expect(await misconfigured(s, "builtin")).toMatchObject({ status: "True", message: ":incorrect builtin prioritizer: Fastest" });
    expect(await misconfigured(s, "mode")).toMatchObject({ status: "True", message: ":incorrect prioritizer policy mode: Whatever" });
  });
});

describe("decision groups and decisions", () => {
  it("groups by selector first, then the rest by clustersPerDecisionGroup, each group its own decisions", async () => {
    const s = await scene();
    await Promise.all(["canary-1", "canary-2"].map((n) => addCluster(s, n, { labels: { stage: "canary" } })));
    await addClusters(s, 5);
    await place(s, "p", {
      decisionStrategy: { groupStrategy: { clustersPerDecisionGroup: "40%", decisionGroups: [{ groupName: "canary", groupClusterSelector: { labelSelector: { matchLabels: { stage: "canary" } } } }] } },
    });
    await run(s, "p");
    const ds = await decisionObjects(s, "p");
    const summary = ds.map((d) => [d.metadata.name, d.metadata.labels?.[ClusterLabel.DecisionGroupIndex], d.metadata.labels?.[ClusterLabel.DecisionGroupName], d.status!.decisions.map((x) => x.clusterName.slice(s.set.length + 1))]);
    // 7 clusters, 40% rounds up to 3 per group
    expect(summary).toEqual([
      ["p-decision-1", "0", "canary", ["canary-1", "canary-2"]],
      ["p-decision-2", "1", "", ["c000", "c001", "c002"]],
      ["p-decision-3", "2", "", ["c003", "c004"]],
    ]);
    expect((await readPlacement(s, "p")).status?.decisionGroups).toEqual([
      { decisionGroupIndex: 0, decisionGroupName: "canary", decisions: ["p-decision-1"], clusterCount: 2 },
      { decisionGroupIndex: 1, decisionGroupName: "", decisions: ["p-decision-2"], clusterCount: 3 },
      { decisionGroupIndex: 2, decisionGroupName: "", decisions: ["p-decision-3"], clusterCount: 2 },
    ]);
  });

  it("a clustersPerDecisionGroup that is no percentage is PlacementMisconfigured", async () => {
    const s = await scene();
    await addClusters(s, 2);
    await place(s, "p", { decisionStrategy: { groupStrategy: { clustersPerDecisionGroup: "half" } } });
    await run(s, "p");
    expect(await misconfigured(s, "p")).toMatchObject({ status: "True", message: ":half invalid type: string is not a percentage" });
  });

  it("250 clusters make 3 decisions of at most 100; shrinking deletes the extra ones", async () => {
    const s = await scene();
    const names = await addClusters(s, 250);
    await place(s, "p");
    await run(s, "p");
    const ds = await decisionObjects(s, "p");
    expect(ds.map((d) => [d.metadata.name, d.status!.decisions.length])).toEqual([["p-decision-1", 100], ["p-decision-2", 100], ["p-decision-3", 50]]);
    expect(ds.flatMap((d) => d.status!.decisions.map((x) => x.clusterName))).toEqual([...names].sort());
    expect((await readPlacement(s, "p")).status).toMatchObject({ numberOfSelectedClusters: 250, decisionGroups: [{ decisions: ["p-decision-1", "p-decision-2", "p-decision-3"], clusterCount: 250 }] });
    const p = await readPlacement(s, "p");
    p.spec.numberOfClusters = 150;
    await plane.admin.update(PlacementResource, p);
    await run(s, "p");
    expect((await decisionObjects(s, "p")).map((d) => [d.metadata.name, d.status!.decisions.length])).toEqual([["p-decision-1", 100], ["p-decision-2", 50]]);
  });

  it("writes nothing when nothing changed, puts back a deleted decision and restores a hand-edited one", async () => {
    const s = await scene();
    await addClusters(s, 2);
    await place(s, "p");
    await run(s, "p");
    const placementVersion = (await readPlacement(s, "p")).metadata.resourceVersion;
    const [d] = await decisionObjects(s, "p");
    await run(s, "p");
    expect((await readPlacement(s, "p")).metadata.resourceVersion).toBe(placementVersion);
    expect((await decisionObjects(s, "p"))[0]!.metadata.resourceVersion).toBe(d!.metadata.resourceVersion);

    await plane.admin.patch(PlacementDecisionResource, "p-decision-1", { status: { decisions: [{ clusterName: "intruder", reason: "" }] } }, { namespace: s.ns, subresource: "status" });
    await run(s, "p");
    expect(await decided(s, "p")).toEqual(["c000", "c001"]);
    await plane.admin.delete(PlacementDecisionResource, "p-decision-1", s.ns);
    await run(s, "p");
    expect(await decided(s, "p")).toEqual(["c000", "c001"]);
  });

  it("leaves a placement with scheduling disabled alone", async () => {
    const s = await scene();
    await addClusters(s, 1);
    await place(s, "p", {}, { "cluster.open-cluster-management.io/experimental-scheduling-disable": "true" });
    await run(s, "p");
    expect(await decisionObjects(s, "p")).toEqual([]);
    expect((await readPlacement(s, "p")).status?.conditions).toBeUndefined();
  });
});

describe("events", () => {
  const placementEvent = (p: Placement, verb: "add" | "update" = "update") =>
    objectEvent({ cluster: HUB, verb, object: { apiVersion: "cluster.open-cluster-management.io/v1beta1", kind: "Placement", ...p } });
  const keysOf = async (s: Scene, ce: Record<string, unknown>) => {
    const { parseEvent } = await import("../../shared/events.ts");
    const parsed = parseEvent(ce);
    if (!parsed.ok) throw new Error(parsed.reason);
    return fn.spec.keys(parsed.event, s.io);
  };

  it("skips the update that is only its own status write, not a fn.spec change", async () => {
    const s = await scene();
    await addClusters(s, 1);
    await place(s, "p");
    await run(s, "p");
    const written = await readPlacement(s, "p");
    expect(await keysOf(s, placementEvent(written))).toEqual({ skip: "status update of a generation already scheduled" });
    written.spec.numberOfClusters = 1;
    const changed = await plane.admin.update<Placement>(PlacementResource, written);
    expect(await keysOf(s, placementEvent(changed))).toEqual([{ cluster: HUB, namespace: s.ns, name: "p" }]);
  });

  it("skips a cluster set update that only rewrote its status, not one that changed its selector", async () => {
    const s = await scene();
    await place(s, "p");
    const setEvent = (set: ManagedClusterSet) => objectEvent({ cluster: HUB, verb: "update", object: { apiVersion: "cluster.open-cluster-management.io/v1beta2", kind: "ManagedClusterSet", ...set } });
    const set = (await plane.admin.get<ManagedClusterSet>(ManagedClusterSetResource, s.set))!;
    // as cluster-sets writes it: the count for the set's present generation
    const counted = await plane.admin.patch<ManagedClusterSet>(ManagedClusterSetResource, s.set, { status: { conditions: [{ type: "ClusterSetEmpty", status: "True", reason: "NoClusterMatched", message: "No ManagedCluster selected", lastTransitionTime: rfc3339(s.clock.now()), observedGeneration: set.metadata.generation }] } }, { subresource: "status" });
    expect(await keysOf(s, setEvent(counted))).toEqual({ skip: "status update of a cluster set whose selector is unchanged" });
    const changed = await plane.admin.patch<ManagedClusterSet>(ManagedClusterSetResource, s.set, { spec: { clusterSelector: { selectorType: "LabelSelector", labelSelector: { matchLabels: { x: "y" } } } } });
    expect(changed.metadata.generation).toBeGreaterThan(set.metadata.generation!);
    expect(await keysOf(s, setEvent(changed))).toEqual([{ cluster: HUB, namespace: s.ns, name: "p" }]);
  });

  it("maps a cluster to the placements that can select it or have decided it, and a binding to its namespace", async () => {
    const s = await scene();
    const [c] = await addClusters(s, 1);
    await place(s, "p");
    await place(s, "narrowed", { clusterSets: ["another"] });
    await run(s, "p");
    const cluster = (await plane.admin.get<ManagedCluster>(ManagedClusterResource, c!))!;
    const clusterEvent = (mc: ManagedCluster, verb: "update" | "delete") => objectEvent({ cluster: HUB, verb, object: { apiVersion: "cluster.open-cluster-management.io/v1", kind: "ManagedCluster", ...mc } });
    expect(await keysOf(s, clusterEvent(cluster, "update"))).toEqual([{ cluster: HUB, namespace: s.ns, name: "p" }]);
    // it left the set: p decided it, so p still hears of it
    const left = { ...cluster, metadata: { ...cluster.metadata, labels: { [ClusterLabel.ClusterSet]: "elsewhere" } } };
    expect(await keysOf(s, clusterEvent(left, "update"))).toEqual([{ cluster: HUB, namespace: s.ns, name: "p" }]);
    expect(await keysOf(s, clusterEvent(cluster, "delete"))).toEqual([{ cluster: HUB, namespace: s.ns, name: "p" }]);
    const binding = (await plane.admin.get(ManagedClusterSetBindingResource, s.set, s.ns))!;
    const keys = await keysOf(s, objectEvent({ cluster: HUB, verb: "delete", object: { apiVersion: "cluster.open-cluster-management.io/v1beta2", kind: "ManagedClusterSetBinding", ...binding } }));
    expect(keys).toEqual([{ cluster: HUB, namespace: s.ns, name: "p" }]);
  });

  it("a tick wakes every placement; a malformed event is refused with 400 and changes nothing", async () => {
    const s = await scene();
    await place(s, "p");
    const keys = await keysOf(s, tickEvent(HUB));
    expect(keys).toContainEqual({ cluster: HUB, namespace: s.ns, name: "p" });
    const reply = await handleEvent(fn.spec, s.io, { specversion: "1.0", id: "x", source: "test", type: "dev.knative.apiserver.resource.update" });
    expect(reply.statusCode).toBe(400);
    expect(await decisionObjects(s, "p")).toEqual([]);
  });
});

describe("SIG-Multicluster PlacementDecisions (KEP-5313), for a placement that asks", () => {
  const asks = { [SigDecisionsAnnotation]: "true" };
  async function sigObjects(s: Scene, name: string): Promise<SigPlacementDecision[]> {
    const { items } = await plane.admin.list<SigPlacementDecision>(SigPlacementDecisionResource, { namespace: s.ns, labelSelector: `multicluster.x-k8s.io/placement-key=${name}` });
    return items.sort((a, b) => a.metadata.name.localeCompare(b.metadata.name, "en", { numeric: true }));
  }

  it("mirrors each decision as one of at most 100 ClusterProfile references, labelled, indexed from 0, owned by the placement; none for a placement that does not ask", async () => {
    const s = await scene();
    const names = await addClusters(s, 150);
    const p = await place(s, "p", {}, asks);
    await place(s, "quiet");
    await run(s, "p");
    await run(s, "quiet");
    const sig = await sigObjects(s, "p");
    expect(sig.map((d) => [d.metadata.name, d.metadata.labels?.["multicluster.x-k8s.io/decision-index"], d.decisions.length])).toEqual([["p-decision-1", "0", 100], ["p-decision-2", "1", 50]]);
    expect(sig[0]!.metadata).toMatchObject({
      labels: { "x-k8s.io/cluster-manager": "open-cluster-management", "multicluster.x-k8s.io/placement-key": "p", "multicluster.x-k8s.io/decision-key": "p" },
      ownerReferences: [{ apiVersion: "cluster.open-cluster-management.io/v1beta1", kind: "Placement", name: "p", uid: p.metadata.uid, controller: true, blockOwnerDeletion: true }],
    });
    expect(sig[0]!.schedulerName).toBe("open-cluster-management");
    expect(sig.flatMap((d) => d.decisions)).toEqual([...names].sort().map((name) => ({ clusterProfileRef: { name, namespace: s.ns } })));
    // the same clusters as OCM's own decisions
    expect(sig.flatMap((d) => d.decisions.map((x) => x.clusterProfileRef.name))).toEqual((await decisionObjects(s, "p")).flatMap((d) => d.status!.decisions.map((x) => x.clusterName)));
    expect(await sigObjects(s, "quiet")).toEqual([]);
  });

  it("follows the decisions, writes nothing when nothing changed, puts back a deleted or edited one, and removes all once the placement stops asking", async () => {
    const s = await scene();
    await addClusters(s, 2);
    await place(s, "p", { numberOfClusters: 1 }, asks);
    await run(s, "p");
    const [first] = await sigObjects(s, "p");
    expect(first!.decisions).toHaveLength(1);
    await run(s, "p");
    expect((await sigObjects(s, "p"))[0]!.metadata.resourceVersion).toBe(first!.metadata.resourceVersion);
    // edited by hand: the scheduler's decision is written back
    await plane.admin.patch(SigPlacementDecisionResource, "p-decision-1", { decisions: [{ clusterProfileRef: { name: "elsewhere" } }] }, { namespace: s.ns });
    await run(s, "p");
    expect((await sigObjects(s, "p"))[0]!.decisions).toEqual(first!.decisions);
    // deleted: its delete event brings it back
    await plane.admin.delete(SigPlacementDecisionResource, "p-decision-1", s.ns);
    const reply = await handleEvent(fn.spec, s.io, objectEvent({ cluster: HUB, verb: "delete", object: { ...first!, apiVersion: "multicluster.x-k8s.io/v1alpha1", kind: "PlacementDecision" } }));
    expect(reply.statusCode, reply.body).toBe(204);
    expect((await sigObjects(s, "p")).map((d) => d.decisions)).toEqual([first!.decisions]);
    // grows to both clusters
    await plane.admin.patch(PlacementResource, "p", { spec: { numberOfClusters: 2 } }, { namespace: s.ns });
    await run(s, "p");
    expect((await sigObjects(s, "p"))[0]!.decisions).toHaveLength(2);
    // stops asking
    await plane.admin.patch(PlacementResource, "p", { metadata: { annotations: { [SigDecisionsAnnotation]: null } } }, { namespace: s.ns });
    await run(s, "p");
    expect(await sigObjects(s, "p")).toEqual([]);
    expect(await decisionObjects(s, "p")).toHaveLength(1);
  });

  it("leaves alone a SIG decision of the same placement key that another scheduler wrote", async () => {
    const s = await scene();
    await addClusters(s, 1);
    const theirs = await plane.admin.create<SigPlacementDecision>(SigPlacementDecisionResource, { metadata: { name: "theirs", namespace: s.ns, labels: { "multicluster.x-k8s.io/placement-key": "p" } }, decisions: [], schedulerName: "someone-else" });
    await place(s, "p", {}, asks);
    await run(s, "p");
    const all = await sigObjects(s, "p");
    expect(all.map((d) => [d.metadata.name, d.schedulerName])).toEqual([["p-decision-1", "open-cluster-management"], ["theirs", "someone-else"]]);
    expect(all[1]!.metadata.resourceVersion).toBe(theirs.metadata.resourceVersion);
  });
});
