// examples/placement-configmap end to end: a hub and two spokes joined as local mode joins them
// (dev/local/fleet.ts: registration, the placement scheduler, each spoke's work-applier, the relays),
// and the example run as the SDK runs any function locally (dev/local/run-function.ts), under an
// identity with only its rbac.yaml. The test writes on the hub as its admin (the ConfigMap, the
// Placement, a work deleted by hand), and as a spoke's agent (marks on a work the function did not
// make, issue 23), and reads the spokes; it calls no reconcile.
import { randomBytes, randomUUID } from "node:crypto";
import { join } from "node:path";
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { startClusters, type LocalClusters } from "../../dev/control-plane/clusters.ts";
import { identityFor } from "../../dev/control-plane/identities.ts";
import { startFleet, type Fleet } from "../../dev/local/fleet.ts";
import { runFunction, type RunningFunction } from "../../dev/local/run-function.ts";
import { ConfigMapResource, NamespaceResource, SecretResource } from "../../shared/api/kube.ts";
import { AgentNamespaceDefault, HubKubeconfigSecretName, HubSecretKey } from "../../shared/api/registration.ts";
import { clientWithSecretFiles, type Secret } from "../../shared/hub-credentials.ts";
import { classifyError } from "../../shared/kube/errors.ts";
import { ClusterLabel, DefaultClusterSetName, ManagedClusterConditionType, ManagedClusterResource, ManagedClusterSetBindingResource, PlacementDecisionResource, PlacementResource, type ManagedCluster, type PlacementDecision } from "../../shared/api/cluster.ts";
import { ManifestWorkResource, type ManifestWork } from "../../shared/api/work.ts";
import { isTrue } from "../../shared/conditions.ts";
import { CopiesFinalizer, copiesSelector, deleteOwner, ownedBy, ownerOf } from "../../shared/cross-cluster-owner.ts";
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
const config: Config = { hub: "hub", copySealKey: randomBytes(32).toString("base64") };
const quiet = { info() {}, warn() {}, error() {} };
// What the function warned about, as [message, the object's namespace/name].
const warnings: [string, string][] = [];
const recording = { ...quiet, warn: (fields: object, msg: string) => void warnings.push([msg, objectOf(fields)]) };
const objectOf = (fields: object) => {
  const o = (fields as { object?: { namespace?: string; name?: string } }).object;
  return o ? `${o.namespace}/${o.name}` : "";
};

type ConfigMap = KubeObject & { data?: Record<string, string> };
type Work = ManifestWork & KubeObject;

let clusters: LocalClusters | undefined;
let fleet: Fleet | undefined;
let running: RunningFunction | undefined;
let kubeconfig: string; // the function's identity on the hub, bound to rbac.yaml
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

  kubeconfig = await identityFor(clusters.get("hub"), "placement-configmap", "", join(dir, "rbac.yaml"));
  await startFunction();
}, FLEET_START_MS);

// A test stops the function and starts it again: a new server and relay, which lists everything anew.
async function startFunction(): Promise<void> {
  running = await runFunction(placementConfigMap, { config, kubeconfigs: { hub: kubeconfig }, log: recording });
  await running.relay.ready;
}

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
const bothCopies = async (name: string) => [(await copyOn(C1, name))?.data, (await copyOn(C2, name))?.data];
// The owner uid a work names; the works of a source, by its label, as [cluster, owner uid].
const ownerUid = (w: Work) => ownerOf(w, "hub")?.uid;
const worksWithOwners = async (name: string) =>
  (await hub.list<Work>(ManifestWorkResource, { labelSelector: `${SourceLabel}=${sourceHash(NS, name)}` })).items.map((w) => [w.metadata.namespace, ownerUid(w)]).sort();
// Gives the function a few of its 2 s rechecks to do something wrong, before the test says it did not.
const settle = () => new Promise((r) => setTimeout(r, 5_000));

// The Placement choosing both spokes; made here if the test that makes it first did not run.
async function everywhere(): Promise<string> {
  if (!(await hub.get(PlacementResource, "everywhere", NS))) await hub.create(PlacementResource, placement("everywhere", ["gold", "silver"]));
  await eventually(async () => expect(await decided("everywhere")).toEqual([C1, C2]), wait);
  return "everywhere";
}

// A source on both spokes: created, then waited for until both copies carry its data.
async function placedOnBoth(name: string, data: Record<string, string>): Promise<ConfigMap> {
  const cm = await createSource(name, await everywhere(), data);
  await eventually(async () => expect(await bothCopies(name)).toEqual([data, data]), wait);
  await eventually(async () => expect(await placed(name)).toEqual({ [C1]: "Available", [C2]: "Available" }), wait);
  return cm;
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

// What issue 13 asks of every example beyond the plain lifecycle: a new incarnation of the source
// met after downtime, orphaning on request, and a spoke that cannot act while its source is deleted.
describe("a ConfigMap's works across incarnations, orphaning and partitions", { timeout: 3 * STEP_MS }, () => {
  it("adopts the works of a source deleted and recreated (a new uid) while the function was down", async () => {
    const NAME = "recreated";
    const old = await placedOnBoth(NAME, { v: "1" });
    await running!.stop();
    let fresh: ConfigMap | undefined;
    try {
      // removed behind the function's back: the finalizer taken off by hand, so the DELETE really goes
      await hub.patch(ConfigMapResource, NAME, { metadata: { finalizers: null } }, { namespace: NS });
      await hub.delete(ConfigMapResource, NAME, NS);
      await eventually(async () => expect(await source(NAME)).toBeUndefined(), wait);
      fresh = await createSource(NAME, "everywhere", { v: "2" });
      expect(fresh.metadata.uid).not.toBe(old.metadata.uid);
      // the works still name the old incarnation: there is something for the function to put right
      expect(await worksWithOwners(NAME)).toEqual([[C1, old.metadata.uid], [C2, old.metadata.uid]]);
    } finally {
      await startFunction();
    }
    // the works now belong to the new incarnation, and carry its content to both spokes
    await eventually(async () => expect(await bothCopies(NAME)).toEqual([{ v: "2" }, { v: "2" }]), wait);
    await eventually(async () => expect(await worksWithOwners(NAME)).toEqual([[C1, fresh!.metadata.uid], [C2, fresh!.metadata.uid]]), wait);
    expect((await hub.list(ManifestWorkResource, { labelSelector: copiesSelector(old, "hub") })).items).toEqual([]);
    await eventually(async () => expect(await placed(NAME)).toEqual({ [C1]: "Available", [C2]: "Available" }), wait);
    expect((await source(NAME))?.metadata.finalizers).toContain(CopiesFinalizer);

    // the new incarnation's deletion finds the adopted works by its own marks, and waits for them
    await hub.delete(ConfigMapResource, NAME, NS);
    await eventually(async () => expect(await source(NAME)).toBeUndefined(), wait);
    expect(await worksOf(NAME)).toEqual([]);
    await eventually(async () => expect(await bothCopies(NAME)).toEqual([undefined, undefined]), wait);
  });

  it("orphans the works on request: the source goes, the works and so the spoke copies stay", async () => {
    const NAME = "orphaned";
    await placedOnBoth(NAME, { kept: "yes" });
    const before = await Promise.all([C1, C2].map((c) => workOn(c, NAME)));
    // as the library asks it: the delete-policy annotation, then a DELETE with propagationPolicy Orphan
    const admin = { cluster: () => hub, log: quiet };
    expect(await deleteOwner(admin, { cluster: "hub", resource: ConfigMapResource, namespace: NS, name: NAME }, "Orphan")).toBe(true);
    await eventually(async () => expect(await source(NAME)).toBeUndefined(), wait);
    await settle(); // the source's delete event reaches the function, which must not collect the works
    for (const [i, c] of [C1, C2].entries()) {
      const work = (await workOn(c, NAME))!;
      expect(work.metadata.uid).toBe(before[i]!.metadata.uid); // the same work, never deleted
      expect(work.metadata.deletionTimestamp).toBeUndefined();
      expect(ownerOf(work, c)).toBeUndefined(); // released: no owner marks left
    }
    expect(await bothCopies(NAME)).toEqual([{ kept: "yes" }, { kept: "yes" }]);

    // released, they are anyone's to delete, and the function does not make them again
    for (const c of [C1, C2]) await hub.delete(ManifestWorkResource, workName(NS, NAME), c);
    await eventually(async () => expect(await bothCopies(NAME)).toEqual([undefined, undefined]), wait);
    // a work goes once its agent, having removed the copy, takes its own finalizer off
    await eventually(async () => expect(await worksOf(NAME)).toEqual([]), wait);
  });

  it("waits for a spoke whose work agent cannot act during the deletion, and finishes when it is back", async () => {
    const NAME = "partitioned";
    await placedOnBoth(NAME, { p: "1" });
    // C1's work agent acts only on what its relay delivers (events, and the rechecks it asks for):
    // with the relay stopped it can neither remove the copy nor release its work's finalizer.
    await fleet!.stopRelay(C1);
    try {
      await hub.delete(ConfigMapResource, NAME, NS);
      // the reachable spoke is cleaned up...
      await eventually(async () => expect(await copyOn(C2, NAME)).toBeUndefined(), wait);
      await eventually(async () => expect(await worksOf(NAME)).toEqual([C1]), wait);
      // ...and the source waits, held by its finalizer, for the work C1's agent cannot finish
      await settle();
      const held = (await source(NAME))!;
      expect(held.metadata.deletionTimestamp).toBeDefined();
      expect(held.metadata.finalizers).toContain(CopiesFinalizer);
      expect((await workOn(C1, NAME))?.metadata.deletionTimestamp).toBeDefined();
      expect((await copyOn(C1, NAME))?.data).toEqual({ p: "1" });
    } finally {
      await fleet!.startRelay(C1);
    }
    await eventually(async () => expect(await copyOn(C1, NAME)).toBeUndefined(), wait);
    await eventually(async () => expect(await source(NAME)).toBeUndefined(), wait);
    expect(await worksOf(NAME)).toEqual([]);
  });
});

// A spoke's work agent may update the works in its cluster's namespace on the hub, never delete them.
// Marks it writes on a work the function did not make must not get that work deleted (issue 23).
describe("a ManifestWork the function did not make", { timeout: STEP_MS }, () => {
  // cluster1's agent on the hub: the identity its hub-kubeconfig-secret holds.
  async function agentOf(cluster: string): Promise<KubeClient> {
    const secret = (await spokes.get(cluster)!.get<Secret>(SecretResource, HubKubeconfigSecretName, AgentNamespaceDefault))!;
    return clientWithSecretFiles(Buffer.from(secret.data![HubSecretKey.Kubeconfig]!, "base64").toString(), secret);
  }
  // The admin's own work in cluster1's namespace, which the function has nothing to do with.
  const adminsWork = (name: string) =>
    hub.create<Work>(ManifestWorkResource, { metadata: { name, namespace: C1 }, spec: { workload: { manifests: [{ apiVersion: "v1", kind: "ConfigMap", metadata: { name, namespace: "default" }, data: { owner: "admin" } }] } } });
  // The agent writes owner marks naming `owner` onto the work, with the label that makes the function list it.
  // Read and update, again on a conflict: the work agent itself writes the work meanwhile (its finalizer).
  async function markAsAgent(agent: KubeClient, work: Work, owner: KubeObject): Promise<void> {
    const marks = ownedBy(owner, "hub");
    await eventually(async () => {
      const current = (await agent.get<Work>(ManifestWorkResource, work.metadata.name!, C1))!;
      const labels = { ...current.metadata.labels, ...marks.labels, [SourceLabel]: sourceHash(NS, owner.metadata.name!) };
      await agent.update(ManifestWorkResource, { ...current, metadata: { ...current.metadata, labels, annotations: { ...current.metadata.annotations, ...marks.annotations } } });
    }, wait);
  }

  it("keeps the admin's work that cluster1's agent, which may update but not delete works, marked as the work of an absent ConfigMap", async () => {
    const agent = await agentOf(C1);
    try {
      const work = await adminsWork(`admins-${randomBytes(3).toString("hex")}`);
      await expect(agent.delete(ManifestWorkResource, work.metadata.name!, C1)).rejects.toSatisfy((e: unknown) => classifyError(e) === "forbidden");
      const absent = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: `gone-${randomBytes(3).toString("hex")}`, namespace: NS, uid: randomUUID() } };
      await markAsAgent(agent, work, absent);
      // the work's event reaches the function, which looks at it and leaves it alone
      const stillThere = async () => expect((await hub.get<Work>(ManifestWorkResource, work.metadata.name!, C1))?.metadata.uid).toBe(work.metadata.uid);
      await eventually(async () => {
        await stillThere();
        expect(warnings).toContainEqual(["left alone: forged or foreign cross-cluster owner marks", `${C1}/${work.metadata.name}`]);
      }, wait);
      await settle();
      await stillThere();
    } finally {
      agent.close();
    }
  });

  it("keeps the admin's work that cluster1's agent marked as the work of a ConfigMap placed only elsewhere", async () => {
    const agent = await agentOf(C1);
    try {
      const NAME = "lure";
      if (!(await hub.get(PlacementResource, "silver-only", NS))) await hub.create(PlacementResource, placement("silver-only", ["silver"]));
      await eventually(async () => expect(await decided("silver-only")).toEqual([C2]), wait);
      const lure = await createSource(NAME, "silver-only", { v: "1" });
      await eventually(async () => expect(await placed(NAME)).toEqual({ [C2]: "Available" }), wait);
      const work = await adminsWork(`admins-${randomBytes(3).toString("hex")}`);
      await markAsAgent(agent, work, lure);
      // cluster1 is not chosen: a work of the lure's there would be dropped, and this one is not its work
      await hub.patch(ConfigMapResource, NAME, { data: { v: "2" } }, { namespace: NS });
      await eventually(async () => expect((await copyOn(C2, NAME))?.data).toEqual({ v: "2" }), wait);
      await settle();
      expect((await hub.get<Work>(ManifestWorkResource, work.metadata.name!, C1))?.metadata.uid).toBe(work.metadata.uid);
      expect(await placed(NAME)).toEqual({ [C2]: "Available" });
    } finally {
      agent.close();
    }
  });
});

describe("the definition", () => {
  it("subscribes to the kinds it watches, and nothing else", () => {
    const kinds = new Set(placementConfigMap.subscriptions(config).map((s) => s.filters.kind ?? s.filters.type));
    expect(kinds).toEqual(new Set(["ConfigMap", "PlacementDecision", "ManifestWork", "dev.knative.sources.ping"]));
  });

  it("reads its settings from the environment, and refuses a copy seal key too short to keep its copies its own", () => {
    const key = randomBytes(32).toString("base64");
    expect(placementConfigMap.configFromEnv({ HUB: "central", COPY_SEAL_KEY: key })).toEqual({ hub: "central", copySealKey: key });
    expect(placementConfigMap.configFromEnv({ COPY_SEAL_KEY: key })).toEqual({ hub: "hub", copySealKey: key });
    expect(() => placementConfigMap.configFromEnv({})).toThrow();
    expect(() => placementConfigMap.configFromEnv({ COPY_SEAL_KEY: randomBytes(8).toString("base64") })).toThrow(/the copy seal key has 8 bytes, not at least 32/);
  });
});
