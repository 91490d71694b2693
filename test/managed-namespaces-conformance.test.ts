// The hub's half of a ManagedClusterSet's managed namespaces (issue 24 item 5) against OCM's own: OCM
// v1.2.0's `registration controller` (its managed-namespace controller runs without a feature gate) on
// one control plane serving OCM's own CRDs (open-cluster-management.io/api, the version tools/ocm builds
// with), our cluster-sets function on another serving ours, the same sets and clusters on both, changed
// in the same steps. After each step every cluster's status.managedNamespaces must be the same on both
// hubs, and what the step expects. Ours is called with the events each change makes, under its own RBAC.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { registrationBesideOurs, type Beside } from "./support/ocm-programs.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { ClusterLabel, ManagedClusterResource, ManagedClusterSetBindingResource, ManagedClusterSetResource, type ManagedCluster, type ManagedClusterSet } from "../shared/api/cluster.ts";
import { handleEvent, type Io } from "../shared/harness.ts";
import fn, { type Config } from "../functions/cluster-sets/reconcile.ts";
import { objectEvent, testIo } from "./support/functions.ts";
import { readyIdentity } from "./support/fixtures.ts";
import { eventually } from "./support/eventually.ts";

const OURS = "ours";
const SET_LABEL = ClusterLabel.ClusterSet;

let both: Beside | undefined;
let ocm: KubeClient;
let ours: KubeClient;
let io: Io<Config>;

beforeAll(async () => {
  both = await registrationBesideOurs();
  ({ ocm, ours } = both);
  io = testIo({ [OURS]: await readyIdentity(both.ourPlane, fn.spec.name, [ManagedClusterSetResource, ManagedClusterSetBindingResource, ManagedClusterResource]) }, { hubCluster: OURS });
}, 180_000);

afterAll(() => both?.stop());

type Entry = { clusterSet: string; name: string };
type Expected = Record<string, Entry[] | undefined>; // cluster → its list; undefined: no managedNamespaces at all

// Our function, told of a change as the event source would tell it.
async function deliver(object: KubeObject, verb: "add" | "update" | "delete", kind: string, apiVersion: string): Promise<void> {
  const reply = await handleEvent(fn.spec, io, objectEvent({ cluster: OURS, verb, mode: verb === "delete" ? "ref" : "resource", object: { ...object, apiVersion, kind } }));
  expect(reply.statusCode, reply.body).toBe(204);
}
const SET_API = `${ManagedClusterSetResource.group}/${ManagedClusterSetResource.version}`;
const CLUSTER_API = `${ManagedClusterResource.group}/${ManagedClusterResource.version}`;

// The same change on both hubs; ours hears of it.
async function onBoth<T extends KubeObject>(kind: "ManagedClusterSet" | "ManagedCluster", verb: "add" | "update" | "delete", change: (hub: KubeClient) => Promise<T | void>): Promise<void> {
  await change(ocm);
  const done = await change(ours);
  const apiVersion = kind === "ManagedCluster" ? CLUSTER_API : SET_API;
  if (done) await deliver(done, verb, kind, apiVersion);
}

const listsOn = async (hub: KubeClient, clusters: readonly string[]) =>
  Object.fromEntries(await Promise.all(clusters.map(async (c) => [c, (await hub.get<ManagedCluster>(ManagedClusterResource, c))?.status?.managedNamespaces] as const)));

// Every cluster's list on OCM's hub settles on the expectation, and ours holds the same.
async function expectBoth(expected: Expected): Promise<void> {
  const clusters = Object.keys(expected);
  await eventually(
    async () => {
      both!.alive();
      expect(await listsOn(ocm, clusters)).toEqual(expected);
    },
    { timeoutMs: 30_000 },
  );
  expect(await listsOn(ours, clusters)).toEqual(await listsOn(ocm, clusters));
}

const setSpec = (names: readonly string[], clusterSelector?: NonNullable<ManagedClusterSet["spec"]>["clusterSelector"]) => ({
  ...(clusterSelector ? { clusterSelector } : {}),
  managedNamespaces: names.map((name) => ({ name })),
});

describe("OCM's managed-namespace controller and our cluster-sets fill status.managedNamespaces alike", { timeout: 120_000 }, () => {
  it("from every set a cluster is in, sorted by set then name, through joins, moves, edits of the sets and a set's deletion", async () => {
    // a cluster in exclusive set alpha and in LabelSelector set beta, one only in alpha, one only in beta, one in gamma (no namespaces)
    await onBoth("ManagedClusterSet", "add", (hub) => hub.create<ManagedClusterSet>(ManagedClusterSetResource, { metadata: { name: "alpha" }, spec: setSpec(["ns-z", "ns-y"]) }));
    await onBoth("ManagedClusterSet", "add", (hub) =>
      hub.create<ManagedClusterSet>(ManagedClusterSetResource, { metadata: { name: "beta" }, spec: setSpec(["ns-p"], { selectorType: "LabelSelector", labelSelector: { matchLabels: { env: "prod" } } }) }),
    );
    await onBoth("ManagedClusterSet", "add", (hub) => hub.create<ManagedClusterSet>(ManagedClusterSetResource, { metadata: { name: "gamma" }, spec: {} }));
    const clusters: Record<string, Record<string, string>> = {
      "c-one": { [SET_LABEL]: "alpha", env: "prod" },
      "c-two": { [SET_LABEL]: "alpha" },
      "c-three": { env: "prod" },
      "c-four": { [SET_LABEL]: "gamma" },
    };
    for (const [name, labels] of Object.entries(clusters))
      await onBoth("ManagedCluster", "add", (hub) => hub.create<ManagedCluster>(ManagedClusterResource, { metadata: { name, labels }, spec: { hubAcceptsClient: false } }));
    const alphaYZ = [
      { clusterSet: "alpha", name: "ns-y" },
      { clusterSet: "alpha", name: "ns-z" },
    ];
    const betaP = { clusterSet: "beta", name: "ns-p" };
    await expectBoth({ "c-one": [...alphaYZ, betaP], "c-two": alphaYZ, "c-three": [betaP], "c-four": undefined });

    // c-one moves from alpha to gamma
    await onBoth("ManagedCluster", "update", (hub) => hub.patch<ManagedCluster>(ManagedClusterResource, "c-one", { metadata: { labels: { [SET_LABEL]: "gamma" } } }));
    await expectBoth({ "c-one": [betaP], "c-two": alphaYZ, "c-three": [betaP], "c-four": undefined });

    // alpha's list changes, gamma gets one
    await onBoth("ManagedClusterSet", "update", (hub) => hub.patch<ManagedClusterSet>(ManagedClusterSetResource, "alpha", { spec: { managedNamespaces: [{ name: "ns-x" }] } }));
    await onBoth("ManagedClusterSet", "update", (hub) => hub.patch<ManagedClusterSet>(ManagedClusterSetResource, "gamma", { spec: { managedNamespaces: [{ name: "ns-g" }] } }));
    const gammaG = { clusterSet: "gamma", name: "ns-g" };
    await expectBoth({ "c-one": [betaP, gammaG], "c-two": [{ clusterSet: "alpha", name: "ns-x" }], "c-three": [betaP], "c-four": [gammaG] });

    // beta is deleted: its namespaces leave every list, and a list left empty goes
    await onBoth("ManagedClusterSet", "delete", async (hub) => {
      const set = await hub.get<ManagedClusterSet>(ManagedClusterSetResource, "beta");
      await hub.delete(ManagedClusterSetResource, "beta");
      return set;
    });
    await expectBoth({ "c-one": [gammaG], "c-two": [{ clusterSet: "alpha", name: "ns-x" }], "c-three": undefined, "c-four": [gammaG] });
  });

  it("refuses on both hubs, by their CRDs, a set whose managed namespace is not a DNS-1123 label of at most 63 characters, and stores nothing", async () => {
    for (const hub of [ocm, ours]) {
      for (const name of ["Not-A-Label", "a".repeat(64), "ns/../x"]) {
        await expect(hub.create(ManagedClusterSetResource, { metadata: { name: "bad-names" }, spec: { managedNamespaces: [{ name }] } })).rejects.toThrow(/422|Invalid/);
      }
      expect(await hub.get(ManagedClusterSetResource, "bad-names")).toBeUndefined();
    }
  });
});
