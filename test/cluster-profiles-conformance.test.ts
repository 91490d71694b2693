// ClusterProfiles against OCM's own (issue 29 item 1): OCM v1.2.0's `registration controller` with
// --feature-gates=ClusterProfile=true (its lifecycle and status controllers, and its binding controller
// for Bound) on one control plane serving OCM's CRDs and the Cluster Inventory API's ClusterProfile
// CRD, our cluster-profiles (and cluster-sets for Bound) on another serving ours; the same sets,
// bindings and clusters on both, changed in the same steps. After each step the profiles in every
// namespace must be the same on both hubs, and what the step expects. Ours is called with the events
// each change makes, under its own RBAC.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parse } from "yaml";
import { inventoryApiModuleDir } from "../dev/control-plane/binaries.ts";
import { registrationBesideOurs, type Beside } from "./support/ocm-programs.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { NamespaceResource } from "../shared/api/kube.ts";
import {
  ClusterLabel,
  ManagedClusterConditionType,
  ManagedClusterReason,
  ManagedClusterResource,
  ManagedClusterSetBindingResource,
  ManagedClusterSetResource,
  type ManagedCluster,
  type ManagedClusterSet,
  type ManagedClusterSetBinding,
} from "../shared/api/cluster.ts";
import { ClusterProfileResource, type ClusterProfile } from "../shared/api/inventory.ts";
import { setCondition, type NewCondition } from "../shared/conditions.ts";
import { handleEvent, type FunctionSpec, type Io } from "../shared/harness.ts";
import profiles from "../functions/cluster-profiles/reconcile.ts";
import clusterSets from "../functions/cluster-sets/reconcile.ts";
import { objectEvent, testIo } from "./support/functions.ts";
import { readyIdentity } from "./support/fixtures.ts";
import { eventually } from "./support/eventually.ts";

const OURS = "ours";

let both: Beside | undefined;
let ocm: KubeClient;
let ours: KubeClient;
let profilesIo: Io<{ hubCluster: string }>;
let setsIo: Io<{ hubCluster: string }>;

const inventoryCrd = () => parse(readFileSync(join(inventoryApiModuleDir(), "config", "crd", "bases", "multicluster.x-k8s.io_clusterprofiles.yaml"), "utf8")) as object;

beforeAll(async () => {
  both = await registrationBesideOurs({ crds: [inventoryCrd()], args: ["--feature-gates=ClusterProfile=true"] });
  ({ ocm, ours } = both);
  const watched = [ClusterProfileResource, ManagedClusterSetResource, ManagedClusterSetBindingResource, ManagedClusterResource];
  profilesIo = testIo({ [OURS]: await readyIdentity(both.ourPlane, profiles.spec.name, watched) }, { hubCluster: OURS });
  setsIo = testIo({ [OURS]: await readyIdentity(both.ourPlane, clusterSets.spec.name, watched.slice(1)) }, { hubCluster: OURS });
}, 180_000);

afterAll(() => both?.stop());

const apiVersion = (r: { group: string; version: string }) => `${r.group}/${r.version}`;
async function deliver<C>(spec: FunctionSpec<C>, io: Io<C>, object: KubeObject, verb: "add" | "update" | "delete", r: { group: string; version: string; kind: string }): Promise<void> {
  const reply = await handleEvent(spec, io, objectEvent({ cluster: OURS, verb, object: { ...object, apiVersion: apiVersion(r), kind: r.kind } }));
  expect(reply.statusCode, reply.body).toBe(204);
}

// The same change on both hubs; ours hears of it (cluster-sets first for a binding: it writes Bound).
async function onBoth<T extends KubeObject>(r: typeof ManagedClusterResource | typeof ManagedClusterSetResource | typeof ManagedClusterSetBindingResource, verb: "add" | "update" | "delete", change: (hub: KubeClient) => Promise<T | undefined>): Promise<void> {
  await change(ocm);
  let done = await change(ours);
  if (!done) return;
  if (r.kind === ManagedClusterSetBindingResource.kind && verb !== "delete") {
    await deliver(clusterSets.spec, setsIo, done, verb, r);
    done = (await ours.get<T>(r, done.metadata.name!, done.metadata.namespace)) ?? done;
  }
  await deliver(profiles.spec, profilesIo, done, verb, r);
}

// What a profile says, but for the times and the object's identity; our access provider is ours alone
// (OCM v1.2.0 writes none without its cluster-proxy add-on), so it is compared on its own.
type Seen = { labels: Record<string, string>; spec: unknown; status: unknown };
async function profilesOn(hub: KubeClient): Promise<Record<string, Seen>> {
  const { items } = await hub.list<ClusterProfile>(ClusterProfileResource);
  return Object.fromEntries(
    items.map((p) => {
      const { accessProviders: _ours, ...status } = p.status ?? {};
      const conditions = status.conditions?.map(({ type, status: s, reason, message }) => ({ type, status: s, reason, message }));
      return [`${p.metadata.namespace}/${p.metadata.name}`, { labels: p.metadata.labels ?? {}, spec: p.spec, status: { ...status, ...(conditions ? { conditions } : {}) } }];
    }),
  );
}

// Every namespace's profiles on OCM's hub settle on the expectation (namespace/name → its exclusive set
// label), and ours hold the same, field for field.
async function expectBoth(expected: Record<string, string>): Promise<void> {
  const names = (seen: Record<string, Seen>) => Object.fromEntries(Object.entries(seen).map(([k, v]) => [k, v.labels["multicluster.x-k8s.io/clusterset"]]));
  let theirs: Record<string, Seen> = {};
  await eventually(
    async () => {
      both!.alive();
      theirs = await profilesOn(ocm);
      expect(names(theirs)).toEqual(expected);
      // OCM patches labels and status in separate passes: wait for both
      for (const [key, seen] of Object.entries(theirs)) expect(seen.labels["open-cluster-management.io/cluster-name"], key).toBe(key.split("/")[1]);
    },
    { timeoutMs: 30_000 },
  );
  // and the status OCM's status controller writes last
  await eventually(async () => expect(await profilesOn(ours)).toEqual((theirs = await profilesOn(ocm))), { timeoutMs: 15_000 });
}

const available = (status: "True" | "Unknown"): NewCondition =>
  status === "True"
    ? { type: ManagedClusterConditionType.Available, status, reason: ManagedClusterReason.ManagedClusterAvailable, message: "Managed cluster is available" }
    : { type: ManagedClusterConditionType.Available, status, reason: ManagedClusterReason.ManagedClusterLeaseUpdateStopped, message: "Registration agent stopped updating its lease." };
const joined: NewCondition = { type: ManagedClusterConditionType.Joined, status: "True", reason: ManagedClusterReason.ManagedClusterJoined, message: "Managed cluster joined" };
const now = new Date("2026-12-02T00:00:00Z");

// Not accepted, so neither hub's lease or acceptance controllers touch the conditions set here.
async function makeCluster(hub: KubeClient, name: string, labels: Record<string, string>, claims: { name: string; value: string }[]): Promise<ManagedCluster> {
  await hub.create<ManagedCluster>(ManagedClusterResource, { metadata: { name, labels }, spec: { hubAcceptsClient: false, managedClusterClientConfigs: [{ url: `https://${name}.example.com:6443` }] } });
  return hub.patch<ManagedCluster>(ManagedClusterResource, name, { status: { conditions: setCondition(setCondition([], joined, now), available("True"), now), version: { kubernetes: "v1.35.4" }, clusterClaims: claims } }, { subresource: "status" });
}

describe("OCM's ClusterProfile controllers and our cluster-profiles publish alike", { timeout: 180_000 }, () => {
  it("one profile per cluster of each bound set in each namespace, labelled and with status alike, through joins, a cluster's health and set changing, a binding's and a set's deletion", async () => {
    await onBoth(ManagedClusterSetResource, "add", (hub) => hub.create<ManagedClusterSet>(ManagedClusterSetResource, { metadata: { name: "alpha" }, spec: {} }));
    await onBoth(ManagedClusterSetResource, "add", (hub) => hub.create<ManagedClusterSet>(ManagedClusterSetResource, { metadata: { name: "beta" }, spec: { clusterSelector: { selectorType: "LabelSelector", labelSelector: { matchLabels: { env: "prod" } } } } }));
    for (const ns of ["ns-a", "ns-b"]) await Promise.all([ocm, ours].map((hub) => hub.create(NamespaceResource, { metadata: { name: ns } })));
    const clusters: [string, Record<string, string>, { name: string; value: string }[]][] = [
      ["c-one", { [ClusterLabel.ClusterSet]: "alpha", env: "prod" }, [{ name: "id.k8s.io", value: "one" }, { name: "region.open-cluster-management.io", value: "eu" }]],
      ["c-two", { [ClusterLabel.ClusterSet]: "alpha" }, [{ name: "id.k8s.io", value: "two" }]],
      ["c-three", { env: "prod" }, []],
    ];
    for (const [name, labels, claims] of clusters) await onBoth(ManagedClusterResource, "add", (hub) => makeCluster(hub, name, labels, claims));
    for (const [ns, set] of [["ns-a", "alpha"], ["ns-b", "alpha"], ["ns-b", "beta"]] as const)
      await onBoth(ManagedClusterSetBindingResource, "add", (hub) => hub.create<ManagedClusterSetBinding>(ManagedClusterSetBindingResource, { metadata: { name: set, namespace: ns }, spec: { clusterSet: set } }));
    await expectBoth({ "ns-a/c-one": "alpha", "ns-a/c-two": "alpha", "ns-b/c-one": "alpha", "ns-b/c-two": "alpha", "ns-b/c-three": "" });
    const ourOne = (await ours.get<ClusterProfile>(ClusterProfileResource, "c-one", "ns-a"))!;
    expect(ourOne.status?.accessProviders?.map((a) => a.cluster?.server)).toEqual(["https://c-one.example.com:6443"]);

    // c-one's agent stops renewing; c-two leaves alpha for beta's label only
    await onBoth(ManagedClusterResource, "update", async (hub) => {
      const mc = (await hub.get<ManagedCluster>(ManagedClusterResource, "c-one"))!;
      return hub.patch<ManagedCluster>(ManagedClusterResource, "c-one", { status: { conditions: setCondition(mc.status?.conditions, available("Unknown"), new Date(now.getTime() + 60_000)) } }, { subresource: "status" });
    });
    await onBoth(ManagedClusterResource, "update", (hub) => hub.patch<ManagedCluster>(ManagedClusterResource, "c-two", { metadata: { labels: { [ClusterLabel.ClusterSet]: null, env: "prod" } } }));
    await expectBoth({ "ns-a/c-one": "alpha", "ns-b/c-one": "alpha", "ns-b/c-two": "", "ns-b/c-three": "" });

    // ns-b's binding of beta goes, then the set alpha
    await onBoth(ManagedClusterSetBindingResource, "delete", async (hub) => {
      const b = await hub.get<ManagedClusterSetBinding>(ManagedClusterSetBindingResource, "beta", "ns-b");
      await hub.delete(ManagedClusterSetBindingResource, "beta", "ns-b");
      return b;
    });
    await expectBoth({ "ns-a/c-one": "alpha", "ns-b/c-one": "alpha" });
    await onBoth(ManagedClusterSetResource, "delete", async (hub) => {
      const s = await hub.get<ManagedClusterSet>(ManagedClusterSetResource, "alpha");
      await hub.delete(ManagedClusterSetResource, "alpha");
      return s;
    });
    await expectBoth({});
  });
});
