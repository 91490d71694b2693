// examples/placement-configmap end to end: a hub and two spokes joined as local mode joins them
// (dev/local/fleet.ts: registration, the placement scheduler, each spoke's work-applier, the relays),
// and the example run as the SDK runs any function locally (dev/local/run-function.ts), under an
// identity with only its rbac.yaml. The test writes on the hub as its admin (the ConfigMap, the
// Placement, a work deleted by hand) and reads the spokes; it calls no reconcile.
import { join } from "node:path";
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { startClusters, type LocalClusters } from "../../dev/control-plane/clusters.ts";
import { identityFor } from "../../dev/control-plane/identities.ts";
import { startFleet, type Fleet } from "../../dev/local/fleet.ts";
import { runFunction, type RunningFunction } from "../../dev/local/run-function.ts";
import { ConfigMapResource, NamespaceResource } from "../../shared/api/kube.ts";
import { ClusterLabel, DefaultClusterSetName, ManagedClusterConditionType, ManagedClusterResource, ManagedClusterSetBindingResource, PlacementDecisionResource, PlacementResource, type ManagedCluster, type PlacementDecision } from "../../shared/api/cluster.ts";
import { ManifestWorkResource, type ManifestWork } from "../../shared/api/work.ts";
import { isTrue } from "../../shared/conditions.ts";
import { CopiesFinalizer, ownerOf } from "../../shared/cross-cluster-owner.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import placementConfigMap, { PlacedAnnotation, PlacementLabel, SourceLabel, sourceHash, workName, type Config } from "../../examples/placement-configmap/function.ts";
import { eventually } from "../support/eventually.ts";

// Own timeouts: three control planes, the fleet's functions and the joins take up to a minute or two
// on a loaded 2-core machine; each step waits on the scheduler, this function and a work agent.
const FLEET_START_MS = 240_000;
const STEP_MS = 60_000;
const wait = { timeoutMs: 45_000, intervalMs: 200 };

const C1 = "cluster1";
const C2 = "cluster2";
const NS = "fleet-settings"; // on the hub: the ConfigMap, its Placement and the set binding
const TIER = "examples.ocm-functions.io/tier"; // the clusters' label the Placement selects on
const dir = join(import.meta.dirname, "../../examples/placement-configmap");
const config: Config = { hub: "hub" };

type ConfigMap = KubeObject & { data?: Record<string, string> };
type Work = ManifestWork & KubeObject;

let clusters: LocalClusters | undefined;
let fleet: Fleet | undefined;
let running: RunningFunction | undefined;
let hub: KubeClient; // the hub's admin
const spokes = new Map<string, KubeClient>(); // each spoke's admin: the test's eyes there

beforeAll(async () => {
  clusters = await startClusters({ names: ["hub", C1, C2], log: () => {} });
  fleet = await startFleet({ clusters, spokes: [{ name: C1, autoApprove: true }, { name: C2, autoApprove: true }], resyncMs: 5_000 });
  hub = fleet.hub;
  for (const c of [C1, C2]) spokes.set(c, KubeClient.fromKubeconfig(clusters.get(c).adminKubeconfig));
  await Promise.all(
    [C1, C2].map((c) =>
      eventually(async () => {
        const mc = await hub.get<ManagedCluster & KubeObject>(ManagedClusterResource, c);
        expect(isTrue(mc?.status?.conditions, ManagedClusterConditionType.Joined)).toBe(true);
        expect(isTrue(mc?.status?.conditions, ManagedClusterConditionType.Available)).toBe(true);
      }, { timeoutMs: 120_000, intervalMs: 500 }),
    ),
  );
  await hub.patch(ManagedClusterResource, C1, { metadata: { labels: { [TIER]: "gold" } } });
  await hub.patch(ManagedClusterResource, C2, { metadata: { labels: { [TIER]: "silver" } } });
  await hub.create(NamespaceResource, { metadata: { name: NS } });
  await hub.create(ManagedClusterSetBindingResource, { metadata: { name: DefaultClusterSetName, namespace: NS }, spec: { clusterSet: DefaultClusterSetName } });

  const kubeconfig = await identityFor(clusters.get("hub"), "placement-configmap", "", join(dir, "rbac.yaml"));
  running = await runFunction(placementConfigMap, { config, kubeconfigs: { hub: kubeconfig }, log: { info() {}, warn() {}, error() {} } });
  await running.relay.ready;
}, FLEET_START_MS);

afterAll(async () => {
  await running?.stop();
  for (const c of spokes.values()) c.close();
  await fleet?.stop();
  await clusters?.stop();
}, 60_000);

// ---- reading and writing the fleet

const placement = (name: string, tiers: string[]) => ({
  metadata: { name, namespace: NS },
  spec: { clusterSets: [DefaultClusterSetName], predicates: [{ requiredClusterSelector: { labelSelector: { matchExpressions: [{ key: TIER, operator: "In", values: tiers }] } } }] },
});
const choose = (name: string, tiers: string[]) => hub.patch(PlacementResource, name, { spec: placement(name, tiers).spec }, { namespace: NS });
async function decided(name: string): Promise<string[]> {
  const { items } = await hub.list<PlacementDecision & KubeObject>(PlacementDecisionResource, { namespace: NS, labelSelector: `${ClusterLabel.Placement}=${name}` });
  return items.flatMap((d) => (d.status?.decisions ?? []).map((x) => x.clusterName)).sort();
}
const source = (name: string) => hub.get<ConfigMap>(ConfigMapResource, name, NS);
const copyOn = (cluster: string, name: string) => spokes.get(cluster)!.get<ConfigMap>(ConfigMapResource, name, NS);
const workOn = (cluster: string, name: string) => hub.get<Work>(ManifestWorkResource, workName(NS, name), cluster);
const worksOf = async (name: string) => (await hub.list<Work>(ManifestWorkResource, { labelSelector: `${SourceLabel}=${sourceHash(NS, name)}` })).items.map((w) => w.metadata.namespace).sort();
const placed = async (name: string) => JSON.parse(((await source(name))?.metadata.annotations as Record<string, string> | undefined)?.[PlacedAnnotation] ?? "{}") as Record<string, string>;

function createSource(name: string, placementName: string, data: Record<string, string>): Promise<ConfigMap> {
  return hub.create<ConfigMap>(ConfigMapResource, { metadata: { name, namespace: NS, labels: { [PlacementLabel]: placementName } }, data });
}

describe("a ConfigMap placed on the clusters of a Placement", { timeout: STEP_MS }, () => {
  const NAME = "settings";
  const PLACEMENT = "tiered";

  it("reaches the chosen cluster through its ManifestWork, and the summary says it is there", async () => {
    await hub.create(PlacementResource, placement(PLACEMENT, ["gold"]));
    await eventually(async () => expect(await decided(PLACEMENT)).toEqual([C1]), wait);
    const cm = await createSource(NAME, PLACEMENT, { level: "debug" });

    await eventually(async () => expect((await copyOn(C1, NAME))?.data).toEqual({ level: "debug" }), wait);
    await eventually(async () => expect(await placed(NAME)).toEqual({ [C1]: "Available" }), wait);
    expect(await copyOn(C2, NAME)).toBeUndefined();
    expect(await worksOf(NAME)).toEqual([C1]);
    const work = (await workOn(C1, NAME))!;
    expect(ownerOf(work, "hub")).toMatchObject({ cluster: "hub", kind: "ConfigMap", namespace: NS, name: NAME, uid: cm.metadata.uid });
    expect((await source(NAME))?.metadata.finalizers).toContain(CopiesFinalizer);

    // a change to the source reaches the spoke
    await hub.patch(ConfigMapResource, NAME, { data: { level: "info" } }, { namespace: NS });
    await eventually(async () => expect((await copyOn(C1, NAME))?.data).toEqual({ level: "info" }), wait);
  });

  it("follows the decisions: a cluster chosen gets it, a cluster dropped loses it", async () => {
    await choose(PLACEMENT, ["gold", "silver"]);
    await eventually(async () => expect((await copyOn(C2, NAME))?.data).toEqual({ level: "info" }), wait);
    await eventually(async () => expect(await placed(NAME)).toEqual({ [C1]: "Available", [C2]: "Available" }), wait);

    await choose(PLACEMENT, ["silver"]);
    await eventually(async () => expect(await copyOn(C1, NAME)).toBeUndefined(), wait);
    await eventually(async () => expect(await worksOf(NAME)).toEqual([C2]), wait);
    await eventually(async () => expect(await placed(NAME)).toEqual({ [C2]: "Available" }), wait);
    expect((await copyOn(C2, NAME))?.data).toEqual({ level: "info" });
    expect(await spokes.get(C1)!.get(NamespaceResource, NS)).toBeDefined(); // orphaned by the work's deleteOption
  });

  it("makes a ManifestWork deleted by hand again", async () => {
    const before = (await workOn(C2, NAME))!;
    await hub.delete(ManifestWorkResource, before.metadata.name!, C2);
    await eventually(async () => {
      const again = await workOn(C2, NAME);
      expect(again?.metadata.uid).toBeDefined();
      expect(again?.metadata.uid).not.toBe(before.metadata.uid);
    }, wait);
    await eventually(async () => expect((await copyOn(C2, NAME))?.data).toEqual({ level: "info" }), wait);
    await eventually(async () => expect(await placed(NAME)).toEqual({ [C2]: "Available" }), wait);
  });

  it("deletes the works when the source is deleted, and the work agent removes the copies", async () => {
    await hub.delete(ConfigMapResource, NAME, NS);
    // the source waits, held by the owner finalizer, until its works are gone
    await eventually(async () => expect(await source(NAME)).toBeUndefined(), wait);
    expect(await worksOf(NAME)).toEqual([]);
    await eventually(async () => expect(await copyOn(C2, NAME)).toBeUndefined(), wait);
    expect(await copyOn(C1, NAME)).toBeUndefined();
  });
});

describe("a ConfigMap whose label is taken off", { timeout: STEP_MS }, () => {
  it("loses its works and is released: no finalizer, no summary", async () => {
    await hub.create(PlacementResource, placement("everywhere", ["gold", "silver"]));
    await eventually(async () => expect(await decided("everywhere")).toEqual([C1, C2]), wait);
    await createSource("released", "everywhere", { a: "1" });
    await eventually(async () => expect(await placed("released")).toEqual({ [C1]: "Available", [C2]: "Available" }), wait);

    await hub.patch(ConfigMapResource, "released", { metadata: { labels: { [PlacementLabel]: null } } }, { namespace: NS });
    await eventually(async () => expect(await worksOf("released")).toEqual([]), wait);
    await eventually(async () => {
      const cm = (await source("released"))!;
      expect(cm.metadata.finalizers ?? []).not.toContain(CopiesFinalizer);
      expect((cm.metadata.annotations as Record<string, string> | undefined)?.[PlacedAnnotation]).toBeUndefined();
    }, wait);
    await eventually(async () => expect([await copyOn(C1, "released"), await copyOn(C2, "released")]).toEqual([undefined, undefined]), wait);
  });
});

describe("the definition", () => {
  it("subscribes to the kinds it watches, and nothing else", () => {
    const kinds = new Set(placementConfigMap.subscriptions(config).map((s) => s.filters.kind ?? s.filters.type));
    expect(kinds).toEqual(new Set(["ConfigMap", "PlacementDecision", "ManifestWork", "dev.knative.sources.ping"]));
  });

  it("reads its settings from the environment", () => {
    expect(placementConfigMap.configFromEnv({ HUB: "central" })).toEqual({ hub: "central" });
    expect(placementConfigMap.configFromEnv({})).toEqual({ hub: "hub" });
  });
});
