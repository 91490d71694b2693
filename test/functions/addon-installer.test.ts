// The addon-installer function against a real hub, under its own RBAC: Manual installs nothing, a
// Placements strategy keeps an add-on in exactly the clusters its placements' decisions name, and
// self-managed add-ons are left alone; every cluster that fails is logged, not only the first.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import type { LocalCluster } from "../../dev/control-plane/clusters.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { ConfigMapResource, NamespaceResource } from "../../shared/api/kube.ts";
import { ClusterLabel, ManagedClusterResource, PlacementDecisionResource, PlacementResource } from "../../shared/api/cluster.ts";
import {
  AddOnAnnotation,
  AddOnLifecycle,
  ClusterManagementAddOnV1alpha1Resource,
  DefaultAddOnInstallNamespace,
  ManagedClusterAddOnV1alpha1Resource,
  type ClusterManagementAddOnV1alpha1,
  type ManagedClusterAddOnV1alpha1,
} from "../../shared/api/addon.ts";
import { handleEvent, serve, type Io } from "../../shared/harness.ts";
import fn, { type Config } from "../../functions/addon-installer/reconcile.ts";
import { objectEvent, postEvent, startFunctionServer, tickEvent } from "../support/functions.ts";
import { functionIo, startHub, type Hub } from "../support/fixtures.ts";

const HUB = "hub";
const NS = "default"; // where the placements live
const suffix = () => Math.random().toString(36).slice(2, 7);

let plane: Hub;
let hub: LocalCluster;
let admin: KubeClient;
let io: Io<Config>;

beforeAll(async () => {
  plane = await startHub(HUB);
  ({ cluster: hub, admin } = plane);
  io = await functionIo(hub, fn.spec.name, { hubCluster: HUB }, [ClusterManagementAddOnV1alpha1Resource, ManagedClusterAddOnV1alpha1Resource, PlacementDecisionResource]);
});

afterAll(() => plane?.stop());

async function newCluster(annotations?: Record<string, string>): Promise<string> {
  const c = `cluster-${suffix()}`;
  await admin.create(ManagedClusterResource, { metadata: { name: c, annotations }, spec: { hubAcceptsClient: true } });
  await admin.create(NamespaceResource, { metadata: { name: c } });
  return c;
}

async function newPlacement(): Promise<string> {
  const name = `placement-${suffix()}`;
  await admin.create(PlacementResource, { metadata: { name, namespace: NS }, spec: {} });
  return name;
}

// The placement controller's output: one decision object listing the clusters.
async function decide(placement: string, clusters: string[]): Promise<KubeObject> {
  const name = `${placement}-decision-1`;
  const existing = await admin.get<KubeObject>(PlacementDecisionResource, name, NS);
  if (!existing) await admin.create<KubeObject>(PlacementDecisionResource, { metadata: { name, namespace: NS, labels: { [ClusterLabel.Placement]: placement } } });
  return admin.patch<KubeObject>(PlacementDecisionResource, name, { status: { decisions: clusters.map((clusterName) => ({ clusterName, reason: "" })) } }, { namespace: NS, subresource: "status" });
}

async function newAddon(o: { type: "Manual" | "Placements"; placements?: string[]; self?: boolean }): Promise<ClusterManagementAddOnV1alpha1> {
  return admin.create<ClusterManagementAddOnV1alpha1>(ClusterManagementAddOnV1alpha1Resource, {
    metadata: { name: `addon-${suffix()}`, ...(o.self ? { annotations: { [AddOnAnnotation.Lifecycle]: AddOnLifecycle.Self } } : {}) },
    spec: { installStrategy: { type: o.type, ...(o.placements ? { placements: o.placements.map((name) => ({ namespace: NS, name })) } : {}) } },
  });
}

const installedOn = async (addon: string) =>
  (await admin.list<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, { fieldSelector: `metadata.name=${addon}` })).items
    .filter((a) => !a.metadata.deletionTimestamp)
    .map((a) => a.metadata.namespace!)
    .sort();
const reconcile = (addon: string) => fn.spec.reconcile(io, { cluster: HUB, name: addon });

describe("install strategies", () => {
  type Row = { name: string; type: "Manual" | "Placements"; self?: boolean; decided: number[]; byHand: number[]; then: number[] };
  // clusters are numbered 0..2; decided: chosen by the placement; byHand: add-ons someone created
  const rows: Row[] = [
    { name: "installs nothing under Manual, and leaves hand-made add-ons alone", type: "Manual", decided: [0, 1], byHand: [2], then: [2] },
    { name: "installs in every cluster the placement decides on", type: "Placements", decided: [0, 1], byHand: [], then: [0, 1] },
    { name: "deletes the add-on from clusters the placements do not select, hand-made ones too (OCM)", type: "Placements", decided: [0], byHand: [2], then: [0] },
    { name: "leaves a self-managed add-on's installs to the add-on", type: "Placements", self: true, decided: [0, 1], byHand: [2], then: [2] },
  ];
  it.each(rows)("$name", async (row) => {
    const clusters = [await newCluster(), await newCluster(), await newCluster()].sort();
    const placement = await newPlacement();
    await decide(placement, row.decided.map((i) => clusters[i]!));
    const cma = await newAddon({ type: row.type, placements: row.type === "Placements" ? [placement] : undefined, self: row.self });
    for (const i of row.byHand) await admin.create(ManagedClusterAddOnV1alpha1Resource, { metadata: { name: cma.metadata.name, namespace: clusters[i] }, spec: {} });
    expect((await handleEvent(fn.spec, io, objectEvent({ cluster: HUB, object: { apiVersion: "addon.open-cluster-management.io/v1alpha1", kind: "ClusterManagementAddOn", ...cma } }))).statusCode).toBe(204);
    expect(await installedOn(cma.metadata.name)).toEqual(row.then.map((i) => clusters[i]!).sort());
  });

  it("follows the decisions as clusters join and leave the placement, through PlacementDecision events", async () => {
    const [a, b] = [await newCluster({ [AddOnAnnotation.HostingClusterName]: "hosting-1", "other.io/x": "y" }), await newCluster()];
    const placement = await newPlacement();
    await decide(placement, [a]);
    const cma = await newAddon({ type: "Placements", placements: [placement] });
    await reconcile(cma.metadata.name);
    expect(await installedOn(cma.metadata.name)).toEqual([a]);
    const installed = (await admin.get<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, cma.metadata.name, a))!;
    expect(installed.metadata.ownerReferences).toEqual([expect.objectContaining({ apiVersion: "addon.open-cluster-management.io/v1alpha1", kind: "ClusterManagementAddOn", name: cma.metadata.name, uid: cma.metadata.uid, controller: true })]);
    // the cluster's addon.open-cluster-management.io annotations are copied, others are not
    expect(installed.metadata.annotations).toEqual({ [AddOnAnnotation.HostingClusterName]: "hosting-1" });
    expect(installed.spec.installNamespace).toBe(DefaultAddOnInstallNamespace);

    const moved = await decide(placement, [b]);
    const event = objectEvent({ cluster: HUB, object: { apiVersion: "cluster.open-cluster-management.io/v1beta1", kind: "PlacementDecision", ...moved } });
    expect((await handleEvent(fn.spec, io, event)).statusCode).toBe(204);
    expect(await installedOn(cma.metadata.name)).toEqual([b]);

    // a decision naming a cluster that does not exist installs nothing there, and no error stops the rest
    await decide(placement, [b, "no-such-cluster"]);
    await reconcile(cma.metadata.name);
    expect(await installedOn(cma.metadata.name)).toEqual([b]);
  });

  it("puts back an add-on deleted by hand when its ManagedClusterAddOn event arrives, and ignores a missing Placement", async () => {
    const c = await newCluster();
    const placement = await newPlacement();
    await decide(placement, [c]);
    const cma = await newAddon({ type: "Placements", placements: [placement, "missing-placement"] });
    await reconcile(cma.metadata.name);
    const mca = (await admin.get<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, cma.metadata.name, c))!;
    await admin.delete(ManagedClusterAddOnV1alpha1Resource, cma.metadata.name, c);
    const event = objectEvent({ cluster: HUB, object: { apiVersion: "addon.open-cluster-management.io/v1alpha1", kind: "ManagedClusterAddOn", ...mca }, verb: "delete" });
    expect((await handleEvent(fn.spec, io, event)).statusCode).toBe(204);
    expect(await installedOn(cma.metadata.name)).toEqual([c]);
  });
});

describe("events", () => {
  it("installs through our CloudEvents HTTP server (shared/cloudevents-server.ts), answers 400 to a malformed event, and resyncs on a tick", async () => {
    const c = await newCluster();
    const placement = await newPlacement();
    await decide(placement, [c]);
    const cma = await newAddon({ type: "Placements", placements: [placement] });
    const object = { apiVersion: "addon.open-cluster-management.io/v1alpha1", kind: "ClusterManagementAddOn", ...cma };
    const server = await startFunctionServer(serve(fn.spec, () => io));
    try {
      const { cluster: _dropped, ...noCluster } = objectEvent({ cluster: HUB, object });
      expect((await postEvent(server.url, noCluster)).status).toBe(400);
      expect(await installedOn(cma.metadata.name)).toEqual([]);
      expect((await postEvent(server.url, objectEvent({ cluster: HUB, object, verb: "add" }))).status).toBe(204);
      expect(await installedOn(cma.metadata.name)).toEqual([c]);
    } finally {
      await server.close();
    }
    const other = await newCluster();
    await decide(placement, [c, other]);
    expect((await handleEvent(fn.spec, io, tickEvent(HUB))).statusCode).toBe(204);
    expect(await installedOn(cma.metadata.name)).toEqual([c, other].sort());
  });
});

describe("failures", () => {
  it("logs every cluster whose install failed, each with the CloudEvent id, function and key, and still installs on the others", async () => {
    const [ok, leavingA, leavingB] = [await newCluster(), await newCluster(), await newCluster()];
    // two clusters' namespaces are being terminated (a finalizer holds them): an add-on cannot be created there
    for (const c of [leavingA, leavingB]) {
      await admin.create(ConfigMapResource, { metadata: { name: "held", namespace: c, finalizers: ["test.ocm-functions.io/hold"] } });
      await admin.delete(NamespaceResource, c);
    }
    try {
      const placement = await newPlacement();
      await decide(placement, [ok, leavingA, leavingB]);
      const cma = await newAddon({ type: "Placements", placements: [placement] });
      const lines: { level: string; msg: string; [k: string]: unknown }[] = [];
      const write = (level: string) => (fields: object, msg: string) => lines.push({ level, msg, ...fields });
      const logged: Io<Config> = { ...io, log: { info: write("info"), warn: write("warn"), error: write("error") } };
      const event = objectEvent({ cluster: HUB, object: { apiVersion: "addon.open-cluster-management.io/v1alpha1", kind: "ClusterManagementAddOn", ...cma } });
      const reply = await handleEvent(fn.spec, logged, event);
      // both failures are admission's (a namespace being terminated): terminal, not retried
      expect(reply.statusCode, reply.body).toBe(422);
      const failed = lines.filter((l) => l.level !== "info");
      const key = { cluster: HUB, name: cma.metadata.name };
      expect(failed).toEqual([leavingA, leavingB].sort().map((c) => expect.objectContaining({ decision: "terminal", ce: event.id, fn: "addon-installer", key, error: expect.stringContaining(`namespace ${c} because it is being terminated`) })));
      expect(await installedOn(cma.metadata.name)).toEqual([ok]);
    } finally {
      for (const c of [leavingA, leavingB]) await admin.patch(ConfigMapResource, "held", { metadata: { finalizers: null } }, { namespace: c });
    }
  });
});
