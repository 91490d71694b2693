// The cluster-profiles function against a real hub serving the Cluster Inventory API's ClusterProfile,
// under its own RBAC: a profile per cluster of each set bound to a namespace, laid out as OCM's
// ClusterProfile controllers lay it out, following its cluster, gone with the cluster, binding or set;
// nothing written when nothing changed; another manager's profile left alone; fed by a real relay,
// every event judged from the state handed with it.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { KubeClient } from "../../shared/kube/client.ts";
import { ClusterRoleResource, NamespaceResource, RoleBindingResource, RoleResource } from "../../shared/api/kube.ts";
import {
  ClusterLabel,
  ClusterSetBindingReason,
  ManagedClusterConditionType,
  ManagedClusterReason,
  ManagedClusterResource,
  ManagedClusterSetBindingResource,
  ManagedClusterSetResource,
  type ManagedCluster,
  type ManagedClusterSet,
  type ManagedClusterSetBinding,
} from "../../shared/api/cluster.ts";
import { ClusterProfileResource, type ClusterProfile } from "../../shared/api/inventory.ts";
import { setCondition, type NewCondition } from "../../shared/conditions.ts";
import { manualClock } from "../../shared/clock.ts";
import { handleEvent, jsonLog, type Io } from "../../shared/harness.ts";
import fn, { type Config } from "../../functions/cluster-profiles/reconcile.ts";
import { startRelay, type Relay } from "../../components/relay/relay.ts";
import { relayConfigFor } from "../../dev/local/run-function.ts";
import { startFunction } from "../../dev/local/functions.ts";
import { objectEvent, testIo, tickEvent } from "../support/functions.ts";
import { readyIdentity, startHub, type Hub } from "../support/fixtures.ts";
import { recordingRequests } from "../support/requests.ts";
import { profileTable } from "../../cli/cluster-table.ts";
import { eventually } from "../support/eventually.ts";

const HUB = "hub";
const suffix = () => Math.random().toString(36).slice(2, 7);
const HOLD = "test.ocm-functions.io/hold";
const CA = Buffer.from("-----BEGIN CERTIFICATE-----\nnot checked here\n-----END CERTIFICATE-----\n").toString("base64");

let hub: Hub;
let admin: KubeClient;
let kubeconfig: string;
const clock = manualClock();
let io: Io<Config>;

beforeAll(async () => {
  hub = await startHub(HUB);
  admin = hub.admin;
  kubeconfig = await readyIdentity(hub.cluster, fn.spec.name, [ClusterProfileResource, ManagedClusterResource, ManagedClusterSetResource, ManagedClusterSetBindingResource]);
  io = testIo({ [HUB]: kubeconfig }, { hubCluster: HUB }, clock);
});
afterAll(() => hub?.stop());

const V1 = "cluster.open-cluster-management.io/v1";
const V1BETA2 = "cluster.open-cluster-management.io/v1beta2";
const deliver = async (event: Record<string, unknown>) => {
  const reply = await handleEvent(fn.spec, io, event);
  expect(reply.statusCode, reply.body).toBe(204);
};
const clusterEvent = (mc: ManagedCluster, verb: "add" | "update" | "delete" = "update") => objectEvent({ cluster: HUB, verb, object: { apiVersion: V1, kind: "ManagedCluster", ...mc } });
const bindingEvent = (b: ManagedClusterSetBinding, verb: "add" | "update" | "delete" = "update") => objectEvent({ cluster: HUB, verb, object: { apiVersion: V1BETA2, kind: "ManagedClusterSetBinding", ...b } });
const setEvent = (s: ManagedClusterSet, verb: "add" | "update" | "delete" = "update") => objectEvent({ cluster: HUB, verb, object: { apiVersion: V1BETA2, kind: "ManagedClusterSet", ...s } });
const profileEvent = (p: ClusterProfile, verb: "add" | "update" | "delete" = "update") => objectEvent({ cluster: HUB, verb, object: { apiVersion: "multicluster.x-k8s.io/v1alpha1", kind: "ClusterProfile", ...p } });

const readProfile = (namespace: string, name: string) => admin.get<ClusterProfile>(ClusterProfileResource, name, namespace);
const profileNames = async (namespace: string) => (await admin.list<ClusterProfile>(ClusterProfileResource, { namespace })).items.map((p) => p.metadata.name).sort();

const available: NewCondition = { type: ManagedClusterConditionType.Available, status: "True", reason: ManagedClusterReason.ManagedClusterAvailable, message: "Managed cluster is available" };
const joined: NewCondition = { type: ManagedClusterConditionType.Joined, status: "True", reason: ManagedClusterReason.ManagedClusterJoined, message: "Managed cluster joined" };

// A set, a namespace bound to it (Bound, as cluster-sets writes it once the set exists), and its name.
async function boundSet(o: { bound?: boolean } = {}): Promise<{ set: string; namespace: string; binding: ManagedClusterSetBinding }> {
  const set = `set-${suffix()}`;
  const namespace = `consumer-${suffix()}`;
  await admin.create<ManagedClusterSet>(ManagedClusterSetResource, { metadata: { name: set }, spec: {} });
  await admin.create(NamespaceResource, { metadata: { name: namespace } });
  let binding = await admin.create<ManagedClusterSetBinding>(ManagedClusterSetBindingResource, { metadata: { name: set, namespace }, spec: { clusterSet: set } });
  if (o.bound !== false) binding = await bind(binding, "True");
  return { set, namespace, binding };
}

const bind = (b: ManagedClusterSetBinding, status: "True" | "False") =>
  admin.patch<ManagedClusterSetBinding>(
    ManagedClusterSetBindingResource,
    b.metadata.name,
    { status: { conditions: [{ type: "Bound", status, reason: status === "True" ? ClusterSetBindingReason.ClusterSetBound : ClusterSetBindingReason.ClusterSetNotFound, message: "", lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, "Z") }] } },
    { namespace: b.metadata.namespace, subresource: "status" },
  );

// A joined, available cluster in `set`, with a claim, a version and its API server's URL and CA.
async function joinedCluster(set: string | undefined, o: { claims?: { name: string; value: string }[]; hold?: boolean } = {}): Promise<ManagedCluster> {
  const name = `cluster-${suffix()}`;
  await admin.create<ManagedCluster>(ManagedClusterResource, {
    metadata: { name, labels: set ? { [ClusterLabel.ClusterSet]: set } : {}, finalizers: o.hold ? [HOLD] : undefined },
    spec: { hubAcceptsClient: true, managedClusterClientConfigs: [{ url: `https://${name}.example.com:6443`, caBundle: CA }] },
  });
  return admin.patch<ManagedCluster>(
    ManagedClusterResource,
    name,
    { status: { conditions: setCondition(setCondition([], joined, clock.now()), available, clock.now()), version: { kubernetes: "v1.35.4" }, clusterClaims: o.claims ?? [{ name: "id.k8s.io", value: name }] } },
    { subresource: "status" },
  );
}

describe("profiles for the clusters of bound sets", () => {
  it("publishes a profile of each cluster of a set bound to a namespace, labelled, described and with status as OCM writes them, and none of a cluster of an unbound set", async () => {
    const { set, namespace, binding } = await boundSet();
    const c = await joinedCluster(set, { claims: [{ name: "id.k8s.io", value: "c-1" }, { name: "platform.open-cluster-management.io", value: "Other" }] });
    const other = await joinedCluster(`unbound-${suffix()}`);
    await deliver(bindingEvent(binding, "add"));
    expect(await profileNames(namespace)).toEqual([c.metadata.name]);
    const p = (await readProfile(namespace, c.metadata.name))!;
    expect(p.metadata.labels).toEqual({ "x-k8s.io/cluster-manager": "open-cluster-management", "multicluster.x-k8s.io/clusterset": set, "open-cluster-management.io/cluster-name": c.metadata.name });
    expect(p.spec).toEqual({ displayName: c.metadata.name, clusterManager: { name: "open-cluster-management" } });
    expect(p.status?.version).toEqual({ kubernetes: "v1.35.4" });
    expect(p.status?.properties).toEqual([{ name: "id.k8s.io", value: "c-1" }, { name: "platform.open-cluster-management.io", value: "Other" }]);
    expect(p.status?.conditions?.map(({ type, status, reason, message }) => ({ type, status, reason, message }))).toEqual([
      { type: "ControlPlaneHealthy", status: "True", reason: available.reason, message: available.message },
      { type: "Joined", status: "True", reason: joined.reason, message: joined.message },
    ]);
    expect(p.status?.accessProviders).toEqual([
      { name: "open-cluster-management", cluster: { server: `https://${c.metadata.name}.example.com:6443`, "certificate-authority-data": CA, extensions: [{ name: "client.authentication.k8s.io/exec", extension: { clusterName: c.metadata.name } }] } },
    ]);
    expect(await admin.list(ClusterProfileResource, { labelSelector: `open-cluster-management.io/cluster-name=${other.metadata.name}` })).toMatchObject({ items: [] });
    // what `ocmf get clusterprofiles -n` shows of it
    const lines = (await profileTable(admin, { namespace })).split("\n").map((l) => l.split(/\s{3,}/));
    expect(lines.map((l) => l.slice(0, 7))).toEqual([
      ["NAMESPACE", "NAME", "MANAGER", "HEALTHY", "JOINED", "VERSION", "SERVER"],
      [namespace, c.metadata.name, "open-cluster-management", "True", "True", "v1.35.4", `https://${c.metadata.name}.example.com:6443`],
    ]);
    expect(await profileTable(admin, { namespace: `nothing-${suffix()}` })).toBe("");
  });

  it("publishes nothing for a binding that is not Bound, and publishes once it is", async () => {
    const { set, namespace, binding } = await boundSet({ bound: false });
    const c = await joinedCluster(set);
    await deliver(bindingEvent(binding, "add"));
    expect(await profileNames(namespace)).toEqual([]);
    await deliver(bindingEvent(await bind(binding, "True")));
    expect(await profileNames(namespace)).toEqual([c.metadata.name]);
  });

  it("publishes a cluster in every namespace its sets are bound to, from the cluster's own event", async () => {
    const a = await boundSet();
    const b = await boundSet();
    // a LabelSelector set selecting by a label, bound to b's namespace too
    const wide = `wide-${suffix()}`;
    await admin.create(ManagedClusterSetResource, { metadata: { name: wide }, spec: { clusterSelector: { selectorType: "LabelSelector", labelSelector: { matchLabels: { tier: wide } } } } });
    await bind(await admin.create<ManagedClusterSetBinding>(ManagedClusterSetBindingResource, { metadata: { name: wide, namespace: b.namespace }, spec: { clusterSet: wide } }), "True");
    const c = await joinedCluster(a.set);
    const labelled = await admin.patch<ManagedCluster>(ManagedClusterResource, c.metadata.name, { metadata: { labels: { tier: wide } } });
    await deliver(clusterEvent(labelled, "add"));
    expect(await profileNames(a.namespace)).toEqual([c.metadata.name]);
    expect(await profileNames(b.namespace)).toEqual([c.metadata.name]);
    // its exclusive set is what the label says, in both
    expect((await readProfile(b.namespace, c.metadata.name))?.metadata.labels?.["multicluster.x-k8s.io/clusterset"]).toBe(a.set);
  });

  it("labels a profile with an empty clusterset when its cluster has no exclusive set, as OCM does", async () => {
    const { namespace } = await boundSet();
    const wide = `wide-${suffix()}`;
    await admin.create(ManagedClusterSetResource, { metadata: { name: wide }, spec: { clusterSelector: { selectorType: "LabelSelector", labelSelector: { matchLabels: { tier: wide } } } } });
    await bind(await admin.create<ManagedClusterSetBinding>(ManagedClusterSetBindingResource, { metadata: { name: wide, namespace }, spec: { clusterSet: wide } }), "True");
    const c = await joinedCluster(undefined);
    const labelled = await admin.patch<ManagedCluster>(ManagedClusterResource, c.metadata.name, { metadata: { labels: { tier: wide } } });
    await deliver(clusterEvent(labelled, "add"));
    expect((await readProfile(namespace, c.metadata.name))?.metadata.labels?.["multicluster.x-k8s.io/clusterset"]).toBe("");
  });
});

describe("profiles follow their clusters", () => {
  it("follows Available, version, claims and the API server's address, and keeps conditions and access providers of others", async () => {
    const { set, namespace } = await boundSet();
    const c = await joinedCluster(set);
    await deliver(clusterEvent(c, "add"));
    // someone else's condition and provider on the profile (a credentials syncer's)
    const p = (await readProfile(namespace, c.metadata.name))!;
    const theirs = { name: "someone-else", cluster: { server: "https://proxy.example.com/c" } };
    await admin.patch(ClusterProfileResource, p.metadata.name, { status: { conditions: [...p.status!.conditions!, { type: "example.com/Ready", status: "True", reason: "Fine", message: "", lastTransitionTime: "2026-01-01T00:00:00Z" }], accessProviders: [theirs, ...p.status!.accessProviders!] } }, { namespace, subresource: "status" });

    clock.advance(60_000);
    const down: NewCondition = { type: ManagedClusterConditionType.Available, status: "Unknown", reason: ManagedClusterReason.ManagedClusterLeaseUpdateStopped, message: "Registration agent stopped updating its lease." };
    const mc = (await admin.get<ManagedCluster>(ManagedClusterResource, c.metadata.name))!;
    await admin.patch(ManagedClusterResource, c.metadata.name, { spec: { managedClusterClientConfigs: [{ url: "https://moved.example.com:6443", caBundle: CA }] } });
    const changed = await admin.patch<ManagedCluster>(ManagedClusterResource, c.metadata.name, { status: { conditions: setCondition(mc.status!.conditions, down, clock.now()), version: { kubernetes: "v1.36.0" }, clusterClaims: [{ name: "region.open-cluster-management.io", value: "eu" }] } }, { subresource: "status" });
    await deliver(clusterEvent(changed));

    const after = (await readProfile(namespace, c.metadata.name))!;
    const healthy = after.status!.conditions!.find((x) => x.type === "ControlPlaneHealthy")!;
    expect({ status: healthy.status, reason: healthy.reason, lastTransitionTime: healthy.lastTransitionTime }).toEqual({ status: "Unknown", reason: down.reason, lastTransitionTime: clock.now().toISOString().replace(/\.\d+Z$/, "Z") });
    expect(after.status!.conditions!.map((x) => x.type)).toEqual(["ControlPlaneHealthy", "Joined", "example.com/Ready"]);
    expect(after.status!.version).toEqual({ kubernetes: "v1.36.0" });
    expect(after.status!.properties).toEqual([{ name: "region.open-cluster-management.io", value: "eu" }]);
    expect(after.status!.accessProviders!.map((a) => [a.name, a.cluster?.server])).toEqual([
      ["someone-else", "https://proxy.example.com/c"],
      ["open-cluster-management", "https://moved.example.com:6443"],
    ]);
  });

  it("leaves out a claim the Cluster Inventory API refuses (an empty value) and writes the rest", async () => {
    const { set, namespace } = await boundSet();
    const c = await joinedCluster(set, { claims: [{ name: "empty.example.com", value: "" }, { name: "id.k8s.io", value: "kept" }] });
    await deliver(clusterEvent(c, "add"));
    expect((await readProfile(namespace, c.metadata.name))?.status?.properties).toEqual([{ name: "id.k8s.io", value: "kept" }]);
  });

  it("writes nothing when nothing changed: a second event, a resync tick and our own write coming back leave every resourceVersion as it was", async () => {
    const { set, namespace } = await boundSet();
    const c = await joinedCluster(set);
    await deliver(clusterEvent(c, "add"));
    const before = (await readProfile(namespace, c.metadata.name))!;
    const rec = recordingRequests(io);
    const again = await handleEvent(fn.spec, rec.io, clusterEvent(c));
    expect(again.statusCode).toBe(204);
    await handleEvent(fn.spec, rec.io, profileEvent(before));
    await handleEvent(fn.spec, rec.io, tickEvent());
    expect(rec.writes()).toEqual([]);
    expect((await readProfile(namespace, c.metadata.name))?.metadata.resourceVersion).toBe(before.metadata.resourceVersion);
  });

  it("puts back a profile deleted by hand and a status edited by hand", async () => {
    const { set, namespace } = await boundSet();
    const c = await joinedCluster(set);
    await deliver(clusterEvent(c, "add"));
    const first = (await readProfile(namespace, c.metadata.name))!;
    await admin.patch(ClusterProfileResource, c.metadata.name, { status: { version: { kubernetes: "v0.0.1" } } }, { namespace, subresource: "status" });
    await deliver(profileEvent((await readProfile(namespace, c.metadata.name))!));
    expect((await readProfile(namespace, c.metadata.name))?.status?.version).toEqual({ kubernetes: "v1.35.4" });
    await admin.delete(ClusterProfileResource, c.metadata.name, namespace);
    await deliver(profileEvent(first, "delete"));
    const back = (await readProfile(namespace, c.metadata.name))!;
    expect(back.metadata.uid).not.toBe(first.metadata.uid);
    expect(back.status?.version).toEqual({ kubernetes: "v1.35.4" });
  });
});

describe("profiles go with their cluster, binding or set", () => {
  it("removes the profile when its cluster leaves the set, is being deleted, or is gone", async () => {
    const { set, namespace } = await boundSet();
    const [leaving, deleting] = await Promise.all([joinedCluster(set), joinedCluster(set, { hold: true })]);
    for (const c of [leaving, deleting]) await deliver(clusterEvent(c, "add"));
    expect(await profileNames(namespace)).toEqual([leaving.metadata.name, deleting.metadata.name].sort());
    // moved out: the event carries only the new labels, and the profile there says where it was
    await deliver(clusterEvent(await admin.patch<ManagedCluster>(ManagedClusterResource, leaving.metadata.name, { metadata: { labels: { [ClusterLabel.ClusterSet]: `elsewhere-${suffix()}` } } })));
    await admin.delete(ManagedClusterResource, deleting.metadata.name);
    await deliver(clusterEvent((await admin.get<ManagedCluster>(ManagedClusterResource, deleting.metadata.name))!));
    expect(await profileNames(namespace)).toEqual([]);
    await admin.patch(ManagedClusterResource, deleting.metadata.name, { metadata: { finalizers: null } });
  });

  it("removes every profile of a namespace whose binding is deleted, or whose set is deleted", async () => {
    const one = await boundSet();
    const two = await boundSet();
    const [a, b] = await Promise.all([joinedCluster(one.set), joinedCluster(two.set)]);
    for (const x of [one, two]) await deliver(bindingEvent(x.binding, "add"));
    expect([await profileNames(one.namespace), await profileNames(two.namespace)]).toEqual([[a.metadata.name], [b.metadata.name]]);
    await admin.delete(ManagedClusterSetBindingResource, one.set, one.namespace);
    await deliver(bindingEvent(one.binding, "delete"));
    const set = (await admin.get<ManagedClusterSet>(ManagedClusterSetResource, two.set))!;
    await admin.delete(ManagedClusterSetResource, two.set);
    await deliver(setEvent(set, "delete"));
    expect([await profileNames(one.namespace), await profileNames(two.namespace)]).toEqual([[], []]);
  });

  it("finds on a resync tick a profile left from a binding deleted while no event came, and removes it", async () => {
    const { set, namespace } = await boundSet();
    const c = await joinedCluster(set);
    await deliver(clusterEvent(c, "add"));
    await admin.delete(ManagedClusterSetBindingResource, set, namespace);
    expect(await profileNames(namespace)).toEqual([c.metadata.name]);
    await deliver(tickEvent());
    expect(await profileNames(namespace)).toEqual([]);
  });

  it("leaves alone a profile of the same name that another cluster manager publishes", async () => {
    const { set, namespace } = await boundSet();
    const c = await joinedCluster(set);
    await admin.create(ClusterProfileResource, { metadata: { name: c.metadata.name, namespace, labels: { "x-k8s.io/cluster-manager": "someone-else" } }, spec: { displayName: "theirs", clusterManager: { name: "someone-else" } } });
    const before = (await readProfile(namespace, c.metadata.name))!;
    await deliver(clusterEvent(c, "add"));
    await admin.delete(ManagedClusterSetBindingResource, set, namespace);
    await deliver(tickEvent());
    expect(await readProfile(namespace, c.metadata.name)).toMatchObject({ metadata: { resourceVersion: before.metadata.resourceVersion }, spec: { displayName: "theirs" } });
  });
});

// A consumer (MultiKueue, Argo CD) with the rights a namespace's owner would give it: bindings and
// profiles in its own namespace, and the right to bind one set.
async function consumer(namespace: string, mayBind: string): Promise<KubeClient> {
  const user = `consumer-${suffix()}`;
  const subjects = [{ kind: "User", apiGroup: "rbac.authorization.k8s.io", name: user }];
  await admin.create(RoleResource, { metadata: { name: user, namespace }, rules: [
    { apiGroups: ["cluster.open-cluster-management.io"], resources: ["managedclustersetbindings"], verbs: ["get", "list", "create", "delete"] },
    // generous: it may write profiles and their status in its own namespace
    { apiGroups: ["multicluster.x-k8s.io"], resources: ["clusterprofiles", "clusterprofiles/status"], verbs: ["get", "list", "watch", "create", "update", "patch"] },
  ] });
  await admin.create(RoleBindingResource, { metadata: { name: user, namespace }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: user }, subjects });
  await admin.create(ClusterRoleResource, { metadata: { name: user }, rules: [{ apiGroups: ["cluster.open-cluster-management.io"], resources: ["managedclustersets/bind"], resourceNames: [mayBind], verbs: ["create"] }] });
  await admin.create(RoleBindingResource, { metadata: { name: `${user}-bind`, namespace }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: user }, subjects });
  const client = KubeClient.fromKubeconfig(await hub.cluster.kubeconfigFor({ user }));
  await eventually(() => client.list(ClusterProfileResource, { namespace }));
  return client;
}

describe("attacks under a consumer's own identity", () => {
  it("a consumer may not bind a set it has no bind right for, so none of that set's clusters is published in its namespace, nor read elsewhere", async () => {
    const mine = await boundSet();
    const theirs = await boundSet();
    const [c, secret] = await Promise.all([joinedCluster(mine.set), joinedCluster(theirs.set)]);
    const attacker = await consumer(mine.namespace, mine.set);
    await deliver(clusterEvent(c, "add"));
    await deliver(clusterEvent(secret, "add"));
    await expect(attacker.create(ManagedClusterSetBindingResource, { metadata: { name: theirs.set, namespace: mine.namespace }, spec: { clusterSet: theirs.set } })).rejects.toThrow(`is not allowed to bind cluster set "${theirs.set}"`);
    await deliver(tickEvent());
    expect((await attacker.list<ClusterProfile>(ClusterProfileResource, { namespace: mine.namespace })).items.map((p) => p.metadata.name)).toEqual([c.metadata.name]);
    await expect(attacker.list(ClusterProfileResource, { namespace: theirs.namespace })).rejects.toThrow(/forbidden/);
    await expect(attacker.get(ClusterProfileResource, secret.metadata.name, theirs.namespace)).rejects.toThrow(/forbidden/);
  });

  it("a profile a consumer forges under our manager's name for a cluster outside its sets is deleted; one it edits is put back", async () => {
    const mine = await boundSet();
    const other = await boundSet();
    const [c, outside] = await Promise.all([joinedCluster(mine.set), joinedCluster(other.set)]);
    await deliver(clusterEvent(c, "add"));
    const attacker = await consumer(mine.namespace, mine.set);
    const labels = { "x-k8s.io/cluster-manager": "open-cluster-management", "open-cluster-management.io/cluster-name": outside.metadata.name };
    const forged = await attacker.create<ClusterProfile>(ClusterProfileResource, { metadata: { name: outside.metadata.name, namespace: mine.namespace, labels }, spec: { displayName: outside.metadata.name, clusterManager: { name: "open-cluster-management" } } });
    await attacker.patch(ClusterProfileResource, forged.metadata.name, { status: { accessProviders: [{ name: "open-cluster-management", cluster: { server: "https://attacker.example.com" } }] } }, { namespace: mine.namespace, subresource: "status" });
    await deliver(profileEvent(forged, "add"));
    expect(await readProfile(mine.namespace, outside.metadata.name)).toBeUndefined();
    // the consumer points its real profile's access provider elsewhere: the hub writes the cluster's own back
    const real = (await attacker.get<ClusterProfile>(ClusterProfileResource, c.metadata.name, mine.namespace))!;
    const edited = await attacker.update<ClusterProfile>(ClusterProfileResource, { ...real, status: { ...real.status, accessProviders: [{ name: "open-cluster-management", cluster: { server: "https://attacker.example.com" } }] } }, "status");
    await deliver(profileEvent(edited));
    expect((await readProfile(mine.namespace, c.metadata.name))?.status?.accessProviders?.map((a) => a.cluster?.server)).toEqual([`https://${c.metadata.name}.example.com:6443`]);
  });
});

describe("fed by a real relay", () => {
  it("publishes and removes profiles as a binding, a cluster and a set change; a change that alters no profile is judged from the state handed with it, with no request at all", async () => {
    const rec = recordingRequests(testIo({ [HUB]: kubeconfig }, { hubCluster: HUB }));
    const server = await startFunction(fn.spec, rec.io);
    let relay: Relay | undefined;
    try {
      relay = startRelay({ ...relayConfigFor(fn, { hubCluster: HUB }, { [HUB]: kubeconfig }, server.url), resync: { intervalMs: 0 }, log: jsonLog("relay", "quiet") });
      await relay.ready;
      const sink = () => relay!.status().sinks[0]!;
      const { set, namespace } = await boundSet();
      const c = await joinedCluster(set);
      await eventually(async () => expect(await profileNames(namespace)).toEqual([c.metadata.name]), { timeoutMs: 20_000 });
      // another cluster joins the set
      const d = await joinedCluster(set);
      await eventually(async () => expect(await profileNames(namespace)).toEqual([c.metadata.name, d.metadata.name].sort()), { timeoutMs: 20_000 });
      await eventually(async () => expect((await readProfile(namespace, d.metadata.name))?.status?.version).toEqual({ kubernetes: "v1.35.4" }), { timeoutMs: 20_000 });
      await eventually(() => expect(sink().pending + sink().inFlight).toBe(0));
      // a label no set selects by: the event wakes d's profile, judged from what the relay hands, and costs nothing
      rec.requests.length = 0;
      const received = sink().received;
      await admin.patch(ManagedClusterResource, d.metadata.name, { metadata: { labels: { "example.com/team": "blue" } } });
      await eventually(() => expect(sink().received).toBeGreaterThan(received));
      await eventually(() => expect(sink().pending + sink().inFlight).toBe(0));
      expect(rec.requests).toEqual([]);
      // the first leaves the set, then the set goes
      await admin.patch(ManagedClusterResource, c.metadata.name, { metadata: { labels: { [ClusterLabel.ClusterSet]: `elsewhere-${suffix()}` } } });
      await eventually(async () => expect(await profileNames(namespace)).toEqual([d.metadata.name]), { timeoutMs: 20_000 });
      await admin.delete(ManagedClusterSetResource, set);
      await eventually(async () => expect(await profileNames(namespace)).toEqual([]), { timeoutMs: 20_000 });
    } finally {
      await relay?.stop();
      await server.close();
    }
  });
});
