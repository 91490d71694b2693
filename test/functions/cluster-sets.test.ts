// The cluster-sets function against a real hub with OCM's admission policies, under its own RBAC, shaped
// on OCM's integration tests (managedclusterset_test, default/global_managedclusterset_controller_test,
// managedclustersetbinding): the pinned sets, clusters joining default, set and binding status, events.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { KubeClient } from "../../shared/kube/client.ts";
import { NamespaceResource } from "../../shared/api/kube.ts";
import {
  ClusterSetAutoUpdateAnnotation,
  GlobalClusterSetName,
  ClusterLabel,
  DefaultClusterSetName,
  ManagedClusterResource,
  ManagedClusterSetBindingResource,
  ManagedClusterSetConditionType,
  ManagedClusterSetResource,
  type ManagedCluster,
  type ManagedClusterSet,
  type ManagedClusterSetBinding,
} from "../../shared/api/cluster.ts";
import type { LabelSelector } from "../../shared/api/meta.ts";
import { findCondition } from "../../shared/conditions.ts";
import { manualClock, rfc3339 } from "../../shared/clock.ts";
import { parseEvent } from "../../shared/events.ts";
import { handleEvent, serve, type Io } from "../../shared/harness.ts";
import clusterSets, { type Config } from "../../functions/cluster-sets/reconcile.ts";
import { objectEvent, postEvent, startFunctionServer, testIo, tickEvent } from "../support/functions.ts";
import { readyIdentity, startHub, type Hub } from "../support/fixtures.ts";

const HUB = "hub";
const suffix = () => Math.random().toString(36).slice(2, 7);
const HOLD = "test.ocm-functions.io/hold";
const SET_LABEL = ClusterLabel.ClusterSet;
const V1BETA2 = "cluster.open-cluster-management.io/v1beta2";

let plane: Hub;
let admin: KubeClient;
let kubeconfig: string;
let fn: KubeClient; // the function's own identity, for the admission control
const clock = manualClock();
let io: Io<Config>;

beforeAll(async () => {
  plane = await startHub(HUB);
  admin = plane.admin;
  kubeconfig = await readyIdentity(plane.cluster, clusterSets.spec.name, [ManagedClusterSetResource, ManagedClusterSetBindingResource, ManagedClusterResource]);
  io = testIo({ [HUB]: kubeconfig }, { hubCluster: HUB }, clock);
  fn = io.cluster(HUB);
});

afterAll(() => plane?.stop());

const reconcile = (name: string) => clusterSets.spec.reconcile(io, { cluster: HUB, name });
const readSet = (name: string) => admin.get<ManagedClusterSet>(ManagedClusterSetResource, name);
const readCluster = (name: string) => admin.get<ManagedCluster>(ManagedClusterResource, name);
const readBinding = (namespace: string, name: string) => admin.get<ManagedClusterSetBinding>(ManagedClusterSetBindingResource, name, namespace);
const emptyOf = async (set: string) => findCondition((await readSet(set))?.status?.conditions, ManagedClusterSetConditionType.ClusterSetEmpty);
const boundOf = async (namespace: string, name: string) => findCondition((await readBinding(namespace, name))?.status?.conditions, "Bound");
const setOf = async (cluster: string) => (await readCluster(cluster))?.metadata.labels?.[SET_LABEL];
const clusterVersions = async () => Object.fromEntries((await admin.list(ManagedClusterResource)).items.map((c) => [c.metadata.name, c.metadata.resourceVersion]));
const clusterCount = async () => (await admin.list(ManagedClusterResource)).items.length;
const selected = (n: number) => (n === 0 ? { status: "True", reason: "NoClusterMatched", message: "No ManagedCluster selected" } : { status: "False", reason: "ClustersSelected", message: `${n} ManagedClusters selected` });

async function makeCluster(labels?: Record<string, string>, o: { hold?: boolean } = {}): Promise<ManagedCluster> {
  return admin.create<ManagedCluster>(ManagedClusterResource, { metadata: { name: `cluster-${suffix()}`, labels, finalizers: o.hold ? [HOLD] : undefined }, spec: { hubAcceptsClient: false } });
}

async function makeSet(name: string, clusterSelector?: NonNullable<ManagedClusterSet["spec"]>["clusterSelector"], finalizers?: string[]): Promise<ManagedClusterSet> {
  return admin.create<ManagedClusterSet>(ManagedClusterSetResource, { metadata: { name, finalizers }, spec: clusterSelector ? { clusterSelector } : {} });
}

async function relabel(cluster: string, labels: Record<string, string | null>): Promise<ManagedCluster> {
  return admin.patch<ManagedCluster>(ManagedClusterResource, cluster, { metadata: { labels } });
}

const clusterEvent = (mc: ManagedCluster, verb: "add" | "update" | "delete" = "update", mode: "resource" | "ref" = "resource") =>
  objectEvent({ cluster: HUB, verb, mode, object: { apiVersion: "cluster.open-cluster-management.io/v1", kind: "ManagedCluster", ...mc } });
const setEvent = (name: string, verb: "add" | "update" | "delete" = "update", mode: "resource" | "ref" = "ref") =>
  objectEvent({ cluster: HUB, verb, mode, object: { apiVersion: V1BETA2, kind: "ManagedClusterSet", metadata: { name } } });
const bindingEvent = (namespace: string, name: string, verb: "add" | "update" | "delete" = "add") =>
  objectEvent({ cluster: HUB, verb, object: { apiVersion: V1BETA2, kind: "ManagedClusterSetBinding", metadata: { name, namespace }, spec: { clusterSet: name } } });

describe("the default and global sets", () => {
  const pinned = [
    { name: DefaultClusterSetName, selector: { selectorType: "ExclusiveClusterSetLabel" }, edited: { selectorType: "LabelSelector", labelSelector: { matchLabels: { vendor: "x" } } } },
    { name: GlobalClusterSetName, selector: { selectorType: "LabelSelector", labelSelector: {} }, edited: { selectorType: "ExclusiveClusterSetLabel" } },
  ] as const;

  it.each(pinned)("creates $name with its fixed selector", async ({ name, selector }) => {
    expect(await readSet(name)).toBeUndefined(); // nothing else on this hub makes it
    await reconcile(name);
    expect((await readSet(name))?.spec?.clusterSelector).toEqual(selector);
  });

  it.each(pinned)("recreates $name after it is deleted", async ({ name, selector }) => {
    await reconcile(name);
    const before = (await readSet(name))!;
    await admin.delete(ManagedClusterSetResource, name);
    expect(await readSet(name)).toBeUndefined();
    await reconcile(name);
    const after = (await readSet(name))!;
    expect(after.metadata.uid).not.toBe(before.metadata.uid);
    expect(after.spec?.clusterSelector).toEqual(selector);
  });

  it.each(pinned)("rolls a changed selector of $name back and keeps every other edit", async ({ name, selector, edited }) => {
    await reconcile(name);
    const set = (await readSet(name))!;
    const label = `edit-${suffix()}`;
    await admin.update(ManagedClusterSetResource, { ...set, metadata: { ...set.metadata, labels: { ...set.metadata.labels, [label]: "kept" } }, spec: { ...set.spec, clusterSelector: edited } });
    await reconcile(name);
    const after = (await readSet(name))!;
    expect(after.spec?.clusterSelector).toEqual(selector);
    expect(after.metadata.labels?.[label]).toBe("kept");
  });

  it.each(pinned)(`leaves the selector of $name alone while ${ClusterSetAutoUpdateAnnotation} is "false"`, async ({ name, selector, edited }) => {
    await reconcile(name);
    const set = (await readSet(name))!;
    const annotations = { ...set.metadata.annotations, [ClusterSetAutoUpdateAnnotation]: "false" };
    await admin.update(ManagedClusterSetResource, { ...set, metadata: { ...set.metadata, annotations }, spec: { ...set.spec, clusterSelector: edited } });
    await reconcile(name);
    expect((await readSet(name))?.spec?.clusterSelector).toEqual(edited);
    // any other value is not "false": the selector goes back
    await admin.patch(ManagedClusterSetResource, name, { metadata: { annotations: { [ClusterSetAutoUpdateAnnotation]: "true" } } });
    await reconcile(name);
    expect((await readSet(name))?.spec?.clusterSelector).toEqual(selector);
  });

  it("counts every cluster in global, and writes nothing when nothing changed", async () => {
    await makeCluster({ [SET_LABEL]: `elsewhere-${suffix()}` });
    await reconcile(GlobalClusterSetName);
    await reconcile(DefaultClusterSetName);
    expect(await emptyOf(GlobalClusterSetName)).toMatchObject(selected(await clusterCount()));
    const sets = await Promise.all([readSet(GlobalClusterSetName), readSet(DefaultClusterSetName)]);
    const clusters = await clusterVersions();
    clock.advance(60_000);
    await reconcile(GlobalClusterSetName);
    await reconcile(DefaultClusterSetName);
    const again = await Promise.all([readSet(GlobalClusterSetName), readSet(DefaultClusterSetName)]);
    expect(again.map((s) => s?.metadata.resourceVersion)).toEqual(sets.map((s) => s?.metadata.resourceVersion));
    expect(await clusterVersions()).toEqual(clusters);
  });
});

describe("clusters without a set join default", () => {
  it("labels an unlabelled and an empty-labelled cluster default, and leaves a labelled or deleting one alone", async () => {
    const other = `other-${suffix()}`;
    const [unlabelled, emptyLabel, labelled, deleting] = await Promise.all([makeCluster(), makeCluster({ [SET_LABEL]: "" }), makeCluster({ [SET_LABEL]: other }), makeCluster(undefined, { hold: true })]);
    await admin.delete(ManagedClusterResource, deleting.metadata.name);
    const deletingBefore = (await readCluster(deleting.metadata.name))!;
    try {
      await reconcile(DefaultClusterSetName);
      expect(await setOf(unlabelled.metadata.name)).toBe(DefaultClusterSetName);
      expect(await setOf(emptyLabel.metadata.name)).toBe(DefaultClusterSetName);
      expect(await setOf(labelled.metadata.name)).toBe(other);
      expect((await readCluster(deleting.metadata.name))?.metadata.resourceVersion).toBe(deletingBefore.metadata.resourceVersion);
      // default counts what it just labelled
      const inDefault = (await admin.list(ManagedClusterResource, { labelSelector: `${SET_LABEL}=${DefaultClusterSetName}` })).items.length;
      expect(inDefault).toBeGreaterThanOrEqual(2);
      expect(await emptyOf(DefaultClusterSetName)).toMatchObject(selected(inDefault));
    } finally {
      await admin.patch(ManagedClusterResource, deleting.metadata.name, { metadata: { finalizers: null } });
    }
  });

  it("runs under the admission policy: its identity may put a cluster into default and into no other set", async () => {
    const mc = await makeCluster({ [SET_LABEL]: DefaultClusterSetName });
    await expect(fn.patch(ManagedClusterResource, mc.metadata.name, { metadata: { labels: { [SET_LABEL]: `other-${suffix()}` } } })).rejects.toMatchObject({ code: 403, message: expect.stringContaining("cannot add/remove a ManagedCluster to/from ManagedClusterSet") });
    expect(await setOf(mc.metadata.name)).toBe(DefaultClusterSetName);
  });
});

describe("set status", () => {
  it("counts an exclusive set's clusters as they join, change set and leave, keeping the transition time while the status holds", async () => {
    const [a, b] = [`set-${suffix()}`, `set-${suffix()}`];
    await Promise.all([makeSet(a, { selectorType: "ExclusiveClusterSetLabel" }), makeSet(b)]);
    await reconcile(a);
    expect(await emptyOf(a)).toMatchObject(selected(0));

    const one = await makeCluster({ [SET_LABEL]: a });
    await reconcile(a);
    const first = (await emptyOf(a))!;
    expect(first).toMatchObject(selected(1));
    expect(first.lastTransitionTime).toBe(rfc3339(clock.now()));

    clock.advance(60_000);
    await makeCluster({ [SET_LABEL]: a });
    await reconcile(a);
    expect(await emptyOf(a)).toMatchObject({ ...selected(2), lastTransitionTime: first.lastTransitionTime });

    // the cluster's event names only its new set: the set it left is recounted too
    const moved = await relabel(one.metadata.name, { [SET_LABEL]: b });
    expect((await handleEvent(clusterSets.spec, io, clusterEvent(moved))).statusCode).toBe(204);
    expect(await emptyOf(a)).toMatchObject(selected(1));
    expect(await emptyOf(b)).toMatchObject(selected(1));

    clock.advance(60_000);
    await admin.delete(ManagedClusterResource, moved.metadata.name);
    expect((await handleEvent(clusterSets.spec, io, clusterEvent(moved, "delete", "ref"))).statusCode).toBe(204);
    expect(await emptyOf(b)).toMatchObject({ ...selected(0), lastTransitionTime: rfc3339(clock.now()) });
    expect(await emptyOf(a)).toMatchObject(selected(1));
  });

  describe("counts a LabelSelector set by its selector", () => {
    const key = `sel-${suffix()}.example.com/group`;
    const tier = `tier-${suffix()}`;
    beforeAll(async () => {
      await makeCluster({ [key]: "x", [tier]: "gold" });
      await makeCluster({ [key]: "y", [tier]: "silver" });
      await makeCluster({ [key]: "x" });
    });
    const exists = { key, operator: "Exists" };
    const rows: { name: string; selector: LabelSelector | undefined; count: number | "all" }[] = [
      { name: "matchLabels", selector: { matchLabels: { [key]: "x" } }, count: 2 },
      { name: "In", selector: { matchExpressions: [exists, { key: tier, operator: "In", values: ["gold", "silver"] }] }, count: 2 },
      { name: "NotIn, which a cluster without the label passes", selector: { matchExpressions: [exists, { key: tier, operator: "NotIn", values: ["gold"] }] }, count: 2 },
      { name: "DoesNotExist", selector: { matchExpressions: [exists, { key: tier, operator: "DoesNotExist" }] }, count: 1 },
      { name: "Exists", selector: { matchExpressions: [exists] }, count: 3 },
      { name: "matchLabels and expressions together", selector: { matchLabels: { [key]: "x" }, matchExpressions: [{ key: tier, operator: "In", values: ["gold"] }] }, count: 1 },
      { name: "a selector no cluster passes", selector: { matchLabels: { [key]: "z" } }, count: 0 },
      { name: "no labelSelector, which selects nothing", selector: undefined, count: 0 },
      { name: "an empty labelSelector, which selects every cluster", selector: {}, count: "all" },
    ];
    it.each(rows)("$name", async ({ selector, count }) => {
      const name = `set-${suffix()}`;
      await makeSet(name, { selectorType: "LabelSelector", ...(selector ? { labelSelector: selector } : {}) });
      await reconcile(name);
      expect(await emptyOf(name)).toMatchObject(selected(count === "all" ? await clusterCount() : count));
    });

    it("recounts when a cluster's labels change, on the cluster's event", async () => {
      const name = `set-${suffix()}`;
      await makeSet(name, { selectorType: "LabelSelector", labelSelector: { matchLabels: { [tier]: "bronze" } } });
      await reconcile(name);
      expect(await emptyOf(name)).toMatchObject(selected(0));
      const mc = await makeCluster({ [tier]: "bronze" });
      expect((await handleEvent(clusterSets.spec, io, clusterEvent(mc, "add"))).statusCode).toBe(204);
      expect(await emptyOf(name)).toMatchObject(selected(1));
      const changed = await relabel(mc.metadata.name, { [tier]: "gold" });
      expect((await handleEvent(clusterSets.spec, io, clusterEvent(changed))).statusCode).toBe(204);
      expect(await emptyOf(name)).toMatchObject(selected(0));
    });
  });

  it("leaves the status of an invalid selector and of a deleting set alone", async () => {
    const invalid = `set-${suffix()}`;
    await makeSet(invalid, { selectorType: "LabelSelector", labelSelector: { matchExpressions: [{ key: "tier", operator: "Near" }] } });
    const deleting = `set-${suffix()}`;
    await makeSet(deleting, undefined, [HOLD]);
    await admin.delete(ManagedClusterSetResource, deleting);
    const before = await Promise.all([readSet(invalid), readSet(deleting)]);
    await reconcile(invalid);
    await reconcile(deleting);
    const after = await Promise.all([readSet(invalid), readSet(deleting)]);
    expect(after.map((s) => s?.metadata.resourceVersion)).toEqual(before.map((s) => s?.metadata.resourceVersion));
    expect(after.map((s) => s?.status?.conditions ?? [])).toEqual([[], []]);
    await admin.patch(ManagedClusterSetResource, deleting, { metadata: { finalizers: null } });
  });
});

// The list itself is compared with OCM's own controller in test/managed-namespaces-conformance.test.ts;
// these are where ours goes further.
describe("managed namespaces", () => {
  const listOf = async (cluster: string) => (await readCluster(cluster))?.status?.managedNamespaces;
  const applied = { type: "NamespaceAvailable", status: "True", reason: "NamespaceApplied", message: "Namespace successfully applied and managed", lastTransitionTime: rfc3339(new Date(0)) };

  it("keeps the conditions the agent wrote on entries that stay, drops the entry that left, and writes nothing more once settled", async () => {
    const set = `set-${suffix()}`;
    await makeSet(set, undefined);
    await admin.patch(ManagedClusterSetResource, set, { spec: { managedNamespaces: [{ name: "ns-b" }, { name: "ns-a" }] } });
    const mc = await makeCluster({ [SET_LABEL]: set });
    await reconcile(set);
    expect(await listOf(mc.metadata.name!)).toEqual([
      { clusterSet: set, name: "ns-a" },
      { clusterSet: set, name: "ns-b" },
    ]);
    // the agent's conditions on both
    const c = (await readCluster(mc.metadata.name!))!;
    await admin.update(ManagedClusterResource, { ...c, status: { ...c.status, managedNamespaces: c.status!.managedNamespaces!.map((m) => ({ ...m, conditions: [applied] })) } }, "status");
    await admin.patch(ManagedClusterSetResource, set, { spec: { managedNamespaces: [{ name: "ns-a" }] } });
    await reconcile(set);
    expect(await listOf(mc.metadata.name!)).toEqual([{ clusterSet: set, name: "ns-a", conditions: [applied] }]);
    const rv = (await readCluster(mc.metadata.name!))?.metadata.resourceVersion;
    await reconcile(set);
    expect((await readCluster(mc.metadata.name!))?.metadata.resourceVersion).toBe(rv);
  });

  it("leaves a cluster's entries of a set whose selector turned invalid as they are, and still writes the other sets'", async () => {
    const [odd, plain] = [`set-a-${suffix()}`, `set-b-${suffix()}`];
    await makeSet(odd, { selectorType: "LabelSelector", labelSelector: { matchLabels: { tier: odd } } });
    await admin.patch(ManagedClusterSetResource, odd, { spec: { managedNamespaces: [{ name: "ns-odd" }] } });
    await makeSet(plain);
    await admin.patch(ManagedClusterSetResource, plain, { spec: { managedNamespaces: [{ name: "ns-plain" }] } });
    const mc = await makeCluster({ [SET_LABEL]: plain, tier: odd });
    await reconcile(odd);
    const both = [
      { clusterSet: odd, name: "ns-odd" },
      { clusterSet: plain, name: "ns-plain" },
    ].sort((x, y) => (x.clusterSet < y.clusterSet ? -1 : 1));
    expect(await listOf(mc.metadata.name!)).toEqual(both);
    // an operator no selector knows: the set can no longer be evaluated
    await admin.patch(ManagedClusterSetResource, odd, { spec: { clusterSelector: { selectorType: "LabelSelector", labelSelector: { matchLabels: null, matchExpressions: [{ key: "tier", operator: "Near" }] } } } });
    await admin.patch(ManagedClusterSetResource, plain, { spec: { managedNamespaces: [{ name: "ns-plain-2" }] } });
    await reconcile(odd);
    await reconcile(plain);
    expect(await listOf(mc.metadata.name!)).toEqual(both.map((e) => (e.clusterSet === plain ? { ...e, name: "ns-plain-2" } : e)));
  });

  it("leaves the list of a cluster being deleted alone, while a live member of the same set gets it", async () => {
    const set = `set-${suffix()}`;
    await makeSet(set);
    const mc = await makeCluster({ [SET_LABEL]: set }, { hold: true });
    const live = await makeCluster({ [SET_LABEL]: set });
    await admin.delete(ManagedClusterResource, mc.metadata.name!);
    await admin.patch(ManagedClusterSetResource, set, { spec: { managedNamespaces: [{ name: "ns-late" }] } });
    await reconcile(set);
    expect(await listOf(mc.metadata.name!)).toBeUndefined();
    expect(await listOf(live.metadata.name!)).toEqual([{ clusterSet: set, name: "ns-late" }]);
    await admin.patch(ManagedClusterResource, mc.metadata.name!, { metadata: { finalizers: null } });
  });
});

describe("bindings", () => {
  it("turns Bound True when the set appears and False when it goes, writing only on change", async () => {
    const set = `set-${suffix()}`;
    const [ns1, ns2] = [`ns-${suffix()}`, `ns-${suffix()}`];
    const unrelated = `set-${suffix()}`;
    await Promise.all([ns1, ns2].map((name) => admin.create(NamespaceResource, { metadata: { name } })));
    for (const [ns, name] of [[ns1, set], [ns2, set], [ns1, unrelated]] as const) {
      await admin.create(ManagedClusterSetBindingResource, { metadata: { name, namespace: ns }, spec: { clusterSet: name } });
    }

    expect((await handleEvent(clusterSets.spec, io, bindingEvent(ns1, set))).statusCode).toBe(204);
    for (const ns of [ns1, ns2]) expect(await boundOf(ns, set)).toMatchObject({ status: "False", reason: "ClusterSetNotFound", message: "" });
    expect(await boundOf(ns1, unrelated)).toBeUndefined(); // another set's binding is not this key's

    clock.advance(60_000);
    await makeSet(set);
    expect((await handleEvent(clusterSets.spec, io, setEvent(set, "add"))).statusCode).toBe(204);
    for (const ns of [ns1, ns2]) expect(await boundOf(ns, set)).toMatchObject({ status: "True", reason: "ClusterSetBound", message: "", lastTransitionTime: rfc3339(clock.now()) });

    const before = await readBinding(ns1, set);
    await reconcile(set);
    expect((await readBinding(ns1, set))?.metadata.resourceVersion).toBe(before?.metadata.resourceVersion);

    clock.advance(60_000);
    await admin.delete(ManagedClusterSetResource, set);
    expect((await handleEvent(clusterSets.spec, io, setEvent(set, "delete"))).statusCode).toBe(204);
    for (const ns of [ns1, ns2]) expect(await boundOf(ns, set)).toMatchObject({ status: "False", reason: "ClusterSetNotFound", lastTransitionTime: rfc3339(clock.now()) });
  });

  it("finds a binding whose set was deleted while no event came, on the resync tick", async () => {
    const set = `set-${suffix()}`;
    const ns = `ns-${suffix()}`;
    await admin.create(NamespaceResource, { metadata: { name: ns } });
    await makeSet(set);
    await admin.create(ManagedClusterSetBindingResource, { metadata: { name: set, namespace: ns }, spec: { clusterSet: set } });
    await reconcile(set);
    expect(await boundOf(ns, set)).toMatchObject({ status: "True" });
    await admin.delete(ManagedClusterSetResource, set);
    expect((await handleEvent(clusterSets.spec, io, tickEvent(HUB))).statusCode).toBe(204);
    expect(await boundOf(ns, set)).toMatchObject({ status: "False", reason: "ClusterSetNotFound" });
  });
});

describe("event delivery", () => {
  const keysOf = async (ce: Record<string, unknown>) => {
    const parsed = parseEvent(ce);
    if (!parsed.ok) throw new Error(parsed.reason);
    const keys = await clusterSets.spec.keys(parsed.event, io);
    return Array.isArray(keys) ? keys.map((k) => k.name).sort() : keys;
  };
  const allSets = async () => (await admin.list<ManagedClusterSet>(ManagedClusterSetResource)).items.map((s) => s.metadata.name);
  const allBindings = async () => (await admin.list<ManagedClusterSetBinding>(ManagedClusterSetBindingResource)).items.map((b) => b.metadata.name);

  it("maps each event kind to the sets it concerns", async () => {
    const set = `set-${suffix()}`;
    const orphan = `set-${suffix()}`;
    const ns = `ns-${suffix()}`;
    await admin.create(NamespaceResource, { metadata: { name: ns } });
    await makeSet(set);
    await admin.create(ManagedClusterSetBindingResource, { metadata: { name: orphan, namespace: ns }, spec: { clusterSet: orphan } });
    const mc = await makeCluster();
    const sets = [...new Set([DefaultClusterSetName, GlobalClusterSetName, ...(await allSets())])].sort();
    expect(sets).toContain(set);

    expect(await keysOf(setEvent(set, "update", "resource"))).toEqual([set]);
    expect(await keysOf(setEvent(set, "delete", "ref"))).toEqual([set]);
    expect(await keysOf(bindingEvent(ns, orphan, "delete"))).toEqual([orphan]);
    for (const verb of ["add", "delete"] as const) expect(await keysOf(clusterEvent(mc, verb, verb === "delete" ? "ref" : "resource"))).toEqual(sets);
    // an update moves no cluster into or out of a set that selects every cluster (global, and any other
    // with an empty selector), so those are not recounted: each would be a list of the whole fleet
    const everyCluster = new Set(
      (await admin.list<ManagedClusterSet>(ManagedClusterSetResource)).items
        .filter((x) => x.spec?.clusterSelector?.selectorType === "LabelSelector" && x.spec.clusterSelector.labelSelector && !Object.keys(x.spec.clusterSelector.labelSelector.matchLabels ?? {}).length && !(x.spec.clusterSelector.labelSelector.matchExpressions ?? []).length)
        .map((x) => x.metadata.name),
    );
    expect(everyCluster).toContain(GlobalClusterSetName);
    expect(await keysOf(clusterEvent(mc, "update", "resource"))).toEqual(sets.filter((x) => !everyCluster.has(x)));
    // a tick: every set, and every binding's set, existing or not
    const resync = [...new Set([...sets, ...(await allBindings())])].sort();
    expect(resync).toContain(orphan);
    expect(await keysOf(tickEvent(HUB))).toEqual(resync);
    expect(await keysOf(tickEvent())).toEqual(resync);

    expect(await keysOf(tickEvent("cluster1"))).toEqual({ skip: "tick for cluster cluster1, not the hub" });
    expect(await keysOf({ ...setEvent(set), cluster: "cluster1" })).toEqual({ skip: `ManagedClusterSet ${set} on cluster1 is not watched` });
    const lease = objectEvent({ cluster: HUB, object: { apiVersion: "coordination.k8s.io/v1", kind: "Lease", metadata: { name: set, namespace: ns } } });
    expect(await keysOf(lease)).toEqual({ skip: `Lease ${ns}/${set} on ${HUB} is not watched` });
  });

  it("answers a malformed event with 400 and changes nothing", async () => {
    const name = `set-${suffix()}`;
    const created = await makeSet(name);
    const event = setEvent(name, "add", "resource");
    for (const bad of [{ ...event, cluster: undefined }, { ...event, data: { metadata: { name: "someone-else" } } }, { ...event, type: "dev.knative.apiserver.resource.touch" }]) {
      expect((await handleEvent(clusterSets.spec, io, bad)).statusCode).toBe(400);
    }
    expect((await readSet(name))?.metadata.resourceVersion).toBe(created.metadata.resourceVersion);
    // control: the same event, well formed, writes the set's status
    expect((await handleEvent(clusterSets.spec, io, event)).statusCode).toBe(204);
    expect(await emptyOf(name)).toMatchObject(selected(0));
  });

  it("counts a new set's clusters on its event, through our CloudEvents HTTP server (shared/cloudevents-server.ts)", async () => {
    const name = `set-${suffix()}`;
    await makeCluster({ [SET_LABEL]: name });
    await makeSet(name);
    const server = await startFunctionServer(serve(clusterSets.spec, () => io));
    try {
      const reply = await postEvent(server.url, setEvent(name, "add", "resource"));
      expect(reply.status, reply.body).toBe(204);
      expect(await emptyOf(name)).toMatchObject(selected(1));
    } finally {
      await server.close();
    }
  });
});
