// The addon-cluster-label function against a real hub, under its own RBAC: a ManagedCluster carries
// feature.open-cluster-management.io/addon-<a> after each add-on's Available, and loses it with the add-on.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { KubeClient } from "../../shared/kube/client.ts";
import { setCondition, type NewCondition } from "../../shared/conditions.ts";
import { NamespaceResource } from "../../shared/api/kube.ts";
import { ManagedClusterConditionType, ManagedClusterReason, ManagedClusterResource, type ManagedCluster } from "../../shared/api/cluster.ts";
import { AddOnConditionType, AddOnFeatureLabelPrefix, AddOnReason, ManagedClusterAddOnV1alpha1Resource, type ManagedClusterAddOnV1alpha1 } from "../../shared/api/addon.ts";
import { handleEvent, serve, type Io } from "../../shared/harness.ts";
import fn, { type Config } from "../../functions/addon-cluster-label/reconcile.ts";
import { objectEvent, postEvent, startFunctionServer } from "../support/functions.ts";
import { functionIo, startHub, type Hub } from "../support/fixtures.ts";

const HUB = "hub";
const suffix = () => Math.random().toString(36).slice(2, 7);

let plane: Hub;
let admin: KubeClient;
let io: Io<Config>;

beforeAll(async () => {
  plane = await startHub(HUB);
  admin = plane.admin;
  io = await functionIo(plane.cluster, fn.spec.name, { hubCluster: HUB }, [ManagedClusterResource, ManagedClusterAddOnV1alpha1Resource]);
});

afterAll(() => plane?.stop());

const clusterAvailable: NewCondition = { type: ManagedClusterConditionType.Available, status: "True", reason: ManagedClusterReason.ManagedClusterAvailable, message: "Managed cluster is available" };

async function newCluster(o: { available: boolean; labels?: Record<string, string> }): Promise<string> {
  const c = `cluster-${suffix()}`;
  await admin.create(ManagedClusterResource, { metadata: { name: c, labels: o.labels }, spec: { hubAcceptsClient: true } });
  await admin.create(NamespaceResource, { metadata: { name: c } });
  if (o.available) await admin.patch(ManagedClusterResource, c, { status: { conditions: setCondition([], clusterAvailable, new Date()) } }, { subresource: "status" });
  return c;
}

type Health = "True" | "False" | "Unknown" | "none";
async function addAddon(c: string, name: string, health: Health): Promise<void> {
  await admin.create<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, { metadata: { name, namespace: c }, spec: {} });
  if (health === "none") return;
  const reason = { True: AddOnReason.ManagedClusterAddOnLeaseUpdated, False: AddOnReason.ManagedClusterAddOnLeaseUpdateStopped, Unknown: AddOnReason.ManagedClusterAddOnLeaseNotFound }[health];
  await admin.patch(ManagedClusterAddOnV1alpha1Resource, name, { status: { conditions: setCondition([], { type: AddOnConditionType.Available, status: health, reason, message: "m" }, new Date()) } }, { namespace: c, subresource: "status" });
}

const featureLabels = async (c: string) =>
  Object.fromEntries(Object.entries((await admin.get<ManagedCluster>(ManagedClusterResource, c))!.metadata.labels ?? {}).filter(([k]) => k.startsWith(AddOnFeatureLabelPrefix)));
const reconcile = (c: string) => fn.spec.reconcile(io, { cluster: HUB, name: c });

describe("add-on feature labels", () => {
  const rows: { name: string; available: boolean; addons: [string, Health][]; stale?: string[]; then: Record<string, string> }[] = [
    {
      name: "labels each add-on available, unhealthy or unreachable after its Available condition",
      available: true,
      addons: [["a", "True"], ["b", "False"], ["c", "Unknown"], ["d", "none"]],
      then: { a: "available", b: "unhealthy", c: "unreachable", d: "unreachable" },
    },
    { name: "removes the labels of add-ons that are gone, and keeps other labels", available: true, addons: [["a", "True"]], stale: ["gone"], then: { a: "available" } },
    { name: "labels nothing before the cluster has an Available condition", available: false, addons: [["a", "True"]], then: {} },
  ];
  it.each(rows)("$name", async (row) => {
    const labels = Object.fromEntries([...(row.stale ?? []).map((a) => [`${AddOnFeatureLabelPrefix}${a}`, "available"]), ["env", "test"]]);
    const c = await newCluster({ available: row.available, labels });
    for (const [name, health] of row.addons) await addAddon(c, name, health);
    await reconcile(c);
    const expected = row.available ? Object.fromEntries(Object.entries(row.then).map(([a, v]) => [`${AddOnFeatureLabelPrefix}${a}`, v])) : Object.fromEntries((row.stale ?? []).map((a) => [`${AddOnFeatureLabelPrefix}${a}`, "available"]));
    expect(await featureLabels(c)).toEqual(expected);
    expect((await admin.get<ManagedCluster>(ManagedClusterResource, c))!.metadata.labels?.env).toBe("test");
  });

  it("follows an add-on's events: its health changing, then the add-on going, through the real HTTP server", async () => {
    const c = await newCluster({ available: true });
    await addAddon(c, "hello", "True");
    const server = await startFunctionServer(serve(fn.spec, () => io));
    try {
      const mca = { apiVersion: "addon.open-cluster-management.io/v1alpha1", kind: "ManagedClusterAddOn", ...(await admin.get<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, "hello", c))! };
      const { cluster: _dropped, ...noCluster } = objectEvent({ cluster: HUB, object: mca });
      expect((await postEvent(server.url, noCluster)).status).toBe(400);
      expect(await featureLabels(c)).toEqual({});
      expect((await postEvent(server.url, objectEvent({ cluster: HUB, object: mca, verb: "add" }))).status).toBe(204);
      expect(await featureLabels(c)).toEqual({ [`${AddOnFeatureLabelPrefix}hello`]: "available" });
      await admin.delete(ManagedClusterAddOnV1alpha1Resource, "hello", c);
      expect((await handleEvent(fn.spec, io, objectEvent({ cluster: HUB, object: mca, verb: "delete" }))).statusCode).toBe(204);
      expect(await featureLabels(c)).toEqual({});
    } finally {
      await server.close();
    }
  });
});
