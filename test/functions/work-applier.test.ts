// The work agent against a real hub and spoke (a fleet with one auto-approved cluster), under its own
// spoke identity and the cluster's hub identity: ManifestWorks applied in kind order, reported, updated,
// pruned, deleted, orphaned, shared, and refused when too big (OCM's work_test and deleteoption_test).
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { startFleet, type Fleet } from "../../dev/local/fleet.ts";
import { startClusters, type LocalClusters } from "../../dev/control-plane/clusters.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { ConfigMapResource, DeploymentResource, NamespaceResource } from "../../shared/api/kube.ts";
import { AppliedManifestWorkResource, ManifestWorkResource, WorkFinalizer, type AppliedManifestWork, type ManifestWork, type ManifestWorkSpec } from "../../shared/api/work.ts";
import { findCondition, isTrue } from "../../shared/conditions.ts";
import { manualClock } from "../../shared/clock.ts";
import { handleEvent, reconcileKey, serve, type Io, type Outcome } from "../../shared/harness.ts";
import { parseEvent } from "../../shared/events.ts";
import fn, { hubHashOf, appliedWorkName, type Config } from "../../functions/work-applier/reconcile.ts";
import { applyOrder } from "../../functions/work-applier/order.ts";
import { evaluate, parseJsonPath } from "../../functions/work-applier/jsonpath.ts";
import { isOwnedByTheWork, mergeOwnerRefs } from "../../functions/work-applier/ownership.ts";
import { aggregateAvailable } from "../../functions/work-applier/status.ts";
import { identityFor, objectEvent, postEvent, startFunctionServer, testIo, tickEvent } from "../support/functions.ts";
import { eventually } from "../support/eventually.ts";
import { joinedThenQuiet } from "../support/fixtures.ts";

// Own timeouts, not the runner's defaults: starting the fleet (control planes, functions, relays) and
// joining take up to a minute or two on a loaded 2-core machine; a test waits up to 30 s for objects
// applied on a live fleet.
const FLEET_START_MS = 240_000;
const FLEET_TEST_MS = 90_000;

const SPOKE = "cluster1";

let clusters: LocalClusters;
let fleet: Fleet;
let hub: KubeClient; // hub admin: the ManifestWork author
let spoke: KubeClient; // spoke admin: the test's eyes on the spoke
let io: Io<Config>;
let identityKubeconfig: string; // the work-applier's spoke identity
let hubHash: string;
const clock = manualClock();

beforeAll(async () => {
  // No admission policies on this hub: the agent's own refusal of what OCM's webhook rejects is under
  // test, so the hub must let such works through, as a hub without the webhook or policies would.
  clusters = await startClusters({ names: ["hub", SPOKE], admission: false });
  fleet = await startFleet({ clusters, spokes: [{ name: SPOKE, autoApprove: true }], resyncMs: 60_000 });
  hub = fleet.hub;
  spoke = KubeClient.fromKubeconfig(fleet.clusters.get(SPOKE).adminKubeconfig);
  const config = fn.definition.config.parse({ managementCluster: SPOKE, clusterName: SPOKE });
  identityKubeconfig = await identityFor(fleet.clusters.get(SPOKE), fn.spec.name);
  io = testIo({ [SPOKE]: identityKubeconfig }, config, clock);
  hubHash = hubHashOf(fleet.clusters.get("hub").url);
  // Joined, and the cluster's identity already holds the work role in its namespace. From here on the
  // tests' calls are the work agent's only invocations: the fleet's own work-applier would otherwise
  // race them for the same works.
  await joinedThenQuiet(fleet, SPOKE, io, (asCluster) => asCluster.list(ManifestWorkResource, { namespace: SPOKE }));
}, FLEET_START_MS);
afterAll(async () => {
  spoke?.close();
  await fleet?.stop();
  await clusters?.stop();
});

const suffix = () => Math.random().toString(36).slice(2, 7);
type Work = ManifestWork & KubeObject;
type Applied = AppliedManifestWork & KubeObject;
type Manifest = Record<string, unknown>;

const namespace = (name: string): Manifest => ({ apiVersion: "v1", kind: "Namespace", metadata: { name } });
const configMap = (ns: string, name: string, data: Record<string, string>): Manifest => ({ apiVersion: "v1", kind: "ConfigMap", metadata: { name, namespace: ns }, data });
const deployment = (ns: string, name: string, image = "nginx:1.27"): Manifest => ({
  apiVersion: "apps/v1",
  kind: "Deployment",
  metadata: { name, namespace: ns },
  spec: { replicas: 1, selector: { matchLabels: { app: name } }, template: { metadata: { labels: { app: name } }, spec: { containers: [{ name: "main", image }] } } },
});

async function createWork(name: string, manifests: Manifest[], extra: Partial<ManifestWorkSpec> = {}, labels?: Record<string, string>): Promise<Work> {
  return hub.create<Work>(ManifestWorkResource, { metadata: { name, namespace: SPOKE, labels }, spec: { workload: { manifests }, ...extra } });
}
async function editWork(name: string, edit: (spec: ManifestWorkSpec) => ManifestWorkSpec): Promise<void> {
  const w = (await readWork(name))!;
  await hub.update(ManifestWorkResource, { ...w, spec: edit(structuredClone(w.spec ?? {})) });
}
const readWork = (name: string) => hub.get<Work>(ManifestWorkResource, name, SPOKE);
const readApplied = (work: string) => spoke.get<Applied>(AppliedManifestWorkResource, appliedWorkName(hubHash, work));
const run = (name: string): Promise<Outcome> => reconcileKey(fn.spec, io, { cluster: "hub", namespace: SPOKE, name });
const conditionOf = (w: Work | undefined, type: string) => findCondition(w?.status?.conditions, type);
const manifestCondition = (w: Work | undefined, ordinal: number, type: string) => findCondition(w?.status?.resourceStatus?.manifests?.find((m) => m.resourceMeta.ordinal === ordinal)?.conditions, type);

// Runs the agent until the work is gone (deletion waits for namespaces to terminate).
async function runUntilGone(name: string): Promise<void> {
  await eventually(async () => {
    await run(name);
    expect(await readWork(name)).toBeUndefined();
  }, { timeoutMs: 45_000 });
}

describe("applying a work", { timeout: FLEET_TEST_MS }, () => {
  it("applies a Namespace, ConfigMap and Deployment in kind order and reports Applied and Available", async () => {
    const id = suffix();
    const ns = `ns-${id}`;
    const name = `work-${id}`;
    // Listed before their namespace: only OCM's kind order makes the namespaced creates succeed.
    await createWork(name, [configMap(ns, "cm", { a: "1" }), deployment(ns, "web"), namespace(ns)], {}, { app: "demo" });
    await run(name);

    const w = (await readWork(name))!;
    expect(w.metadata.finalizers).toContain(WorkFinalizer.ManifestWorkCleanup);
    expect(conditionOf(w, "Applied")).toMatchObject({ status: "True", reason: "AppliedManifestWorkComplete", message: "Apply manifest work complete", observedGeneration: 1 });
    expect(conditionOf(w, "Available")).toMatchObject({ status: "True", reason: "ResourcesAvailable", message: "All resources are available", observedGeneration: 1 });
    expect(w.status?.resourceStatus?.manifests?.map((m) => m.resourceMeta)).toEqual([
      // OCM writes every field: "" for the core group and for a cluster-scoped object's namespace
      { ordinal: 0, group: "", version: "v1", kind: "ConfigMap", resource: "configmaps", name: "cm", namespace: ns },
      { ordinal: 1, group: "apps", version: "v1", kind: "Deployment", resource: "deployments", name: "web", namespace: ns },
      { ordinal: 2, group: "", version: "v1", kind: "Namespace", resource: "namespaces", name: ns, namespace: "" },
    ]);
    for (const ordinal of [0, 1, 2]) {
      expect(manifestCondition(w, ordinal, "Applied")).toMatchObject({ status: "True", reason: "AppliedManifestComplete", message: "Apply manifest complete", observedGeneration: 1 });
      expect(manifestCondition(w, ordinal, "Available")).toMatchObject({ status: "True", reason: "ResourceAvailable", message: "Resource is available" });
      expect(manifestCondition(w, ordinal, "StatusFeedbackSynced")).toMatchObject({ status: "True", reason: "NoStatusFeedbackSynced" });
    }

    const applied = (await readApplied(name))!;
    expect(applied.spec).toEqual({ hubHash, agentID: hubHash, manifestWorkName: name });
    expect(applied.metadata.labels).toEqual({ app: "demo" });
    expect(applied.metadata.finalizers).toEqual([WorkFinalizer.AppliedManifestWorkCleanup]);
    const cm = (await spoke.get<KubeObject>(ConfigMapResource, "cm", ns))!;
    const deploy = (await spoke.get<KubeObject>(DeploymentResource, "web", ns))!;
    const nsObj = (await spoke.get<KubeObject>(NamespaceResource, ns))!;
    expect(applied.status?.appliedResources).toEqual([
      // sorted by group, version, resource, namespace, name, as OCM records them
      { group: "", version: "v1", resource: "configmaps", namespace: ns, name: "cm", uid: cm.metadata.uid },
      { group: "", version: "v1", resource: "namespaces", namespace: "", name: ns, uid: nsObj.metadata.uid },
      { group: "apps", version: "v1", resource: "deployments", namespace: ns, name: "web", uid: deploy.metadata.uid },
    ]);
    const owner = { apiVersion: "work.open-cluster-management.io/v1", kind: "AppliedManifestWork", name: applied.metadata.name, uid: applied.metadata.uid };
    for (const o of [cm, deploy, nsObj]) expect(o.metadata.ownerReferences).toEqual([owner]);

    // Nothing changed: a second run writes nothing anywhere.
    await run(name);
    expect((await readWork(name))!.metadata.resourceVersion).toBe(w.metadata.resourceVersion);
    expect((await readApplied(name))!.metadata.resourceVersion).toBe(applied.metadata.resourceVersion);
    expect((await spoke.get<KubeObject>(ConfigMapResource, "cm", ns))!.metadata.resourceVersion).toBe(cm.metadata.resourceVersion);
    expect((await spoke.get<KubeObject>(DeploymentResource, "web", ns))!.metadata.resourceVersion).toBe(deploy.metadata.resourceVersion);

    await hub.delete(ManifestWorkResource, name, SPOKE);
    await runUntilGone(name);
    expect(await readApplied(name)).toBeUndefined();
    await eventually(async () => expect(await spoke.get(NamespaceResource, ns)).toBeUndefined(), { timeoutMs: 30_000 });
  });
});

describe("changing a work", { timeout: FLEET_TEST_MS }, () => {
  it("updates the spoke object when its manifest changes, and reverts edits made on the spoke", async () => {
    const name = `work-${suffix()}`;
    const cm = `cm-${suffix()}`;
    await createWork(name, [configMap("default", cm, { a: "1" })]);
    await run(name);
    const first = (await readWork(name))!;

    clock.advance(60_000);
    await editWork(name, (s) => ({ ...s, workload: { manifests: [configMap("default", cm, { a: "2" })] } }));
    await run(name);
    expect((await spoke.get<KubeObject & { data?: object }>(ConfigMapResource, cm, "default"))!.data).toEqual({ a: "2" });
    const second = (await readWork(name))!;
    expect(conditionOf(second, "Applied")).toMatchObject({ status: "True", observedGeneration: 2, lastTransitionTime: conditionOf(first, "Applied")!.lastTransitionTime });
    // the manifest's Applied is from a new generation: replaced, so its transition time starts over
    expect(manifestCondition(second, 0, "Applied")).toMatchObject({ status: "True", observedGeneration: 2 });
    expect(manifestCondition(second, 0, "Applied")!.lastTransitionTime).not.toBe(manifestCondition(first, 0, "Applied")!.lastTransitionTime);

    // Edits on the spoke are reverted; annotations and finalizers others added are kept.
    const live = (await spoke.get<KubeObject>(ConfigMapResource, cm, "default"))!;
    await spoke.update(ConfigMapResource, { ...live, metadata: { ...live.metadata, annotations: { "example.com/note": "kept" }, finalizers: ["example.com/hold"] }, data: { a: "edited on the spoke" } });
    const stable = manifestCondition(await readWork(name), 0, "Applied");
    await run(name);
    const reverted = (await spoke.get<KubeObject & { data?: object; metadata: { annotations?: object; finalizers?: string[] } }>(ConfigMapResource, cm, "default"))!;
    expect(reverted.data).toEqual({ a: "2" });
    expect(reverted.metadata.annotations).toEqual({ "example.com/note": "kept" });
    expect(reverted.metadata.finalizers).toEqual(["example.com/hold"]);
    expect(manifestCondition(await readWork(name), 0, "Applied")).toEqual(stable); // conditions stay put under spoke edits
    await spoke.patch(ConfigMapResource, cm, { metadata: { finalizers: null } }, { namespace: "default" });
  });

  it("applies a CRD and its custom resource, the resource once the CRD is served", async () => {
    const group = `t${suffix()}.example.com`;
    const name = `work-${suffix()}`;
    const crd = {
      apiVersion: "apiextensions.k8s.io/v1",
      kind: "CustomResourceDefinition",
      metadata: { name: `widgets.${group}` },
      spec: {
        group,
        scope: "Namespaced",
        names: { plural: "widgets", singular: "widget", kind: "Widget", listKind: "WidgetList" },
        versions: [{ name: "v1", served: true, storage: true, schema: { openAPIV3Schema: { type: "object", properties: { spec: { type: "object", properties: { size: { type: "integer" } } } } } } }],
      },
    };
    const widget = { apiVersion: `${group}/v1`, kind: "Widget", metadata: { name: "w", namespace: "default" }, spec: { size: 1 } };
    await createWork(name, [widget, crd]);
    const first = await run(name);
    // the first run may find the kind not served yet: Applied=False and a quick retry, nothing pruned
    if (!isTrue((await readWork(name))!.status?.conditions, "Applied")) {
      expect(manifestCondition(await readWork(name), 0, "Applied")).toMatchObject({ status: "False", reason: "AppliedManifestFailed", message: 'Failed to apply manifest: the server doesn\'t have a resource type "Widget"' });
      expect(first).toEqual({ recheckInMs: 1_000 });
    }
    await eventually(async () => {
      await run(name);
      expect(conditionOf(await readWork(name), "Applied")).toMatchObject({ status: "True" });
    }, { timeoutMs: 20_000 });
    expect((await readWork(name))!.status?.resourceStatus?.manifests?.[0]?.resourceMeta).toEqual({ ordinal: 0, group, version: "v1", kind: "Widget", resource: "widgets", name: "w", namespace: "default" });
    const widgets = { group, version: "v1", kind: "Widget", plural: "widgets", namespaced: true } as const;
    expect(await spoke.get(widgets, "w", "default")).toMatchObject({ spec: { size: 1 } });

    await hub.delete(ManifestWorkResource, name, SPOKE);
    await runUntilGone(name);
    expect(await spoke.get({ group: "apiextensions.k8s.io", version: "v1", kind: "CustomResourceDefinition", plural: "customresourcedefinitions", namespaced: false }, `widgets.${group}`)).toBeUndefined();
  });

  it("deletes the object of a manifest removed from the work and stops recording it", async () => {
    const name = `work-${suffix()}`;
    const [keep, drop] = [`keep-${suffix()}`, `drop-${suffix()}`];
    await createWork(name, [configMap("default", keep, { a: "1" }), configMap("default", drop, { b: "1" })]);
    await run(name);
    expect((await readApplied(name))!.status?.appliedResources?.map((r) => r.name).sort()).toEqual([drop, keep].sort());

    await editWork(name, (s) => ({ ...s, workload: { manifests: [configMap("default", keep, { a: "1" })] } }));
    await run(name);
    expect(await spoke.get(ConfigMapResource, drop, "default")).toBeUndefined();
    expect(await spoke.get(ConfigMapResource, keep, "default")).toBeDefined();
    expect((await readApplied(name))!.status?.appliedResources?.map((r) => r.name)).toEqual([keep]);
    const w = (await readWork(name))!;
    expect(w.status?.resourceStatus?.manifests?.map((m) => m.resourceMeta.name)).toEqual([keep]);
    expect(conditionOf(w, "Available")).toMatchObject({ status: "True", message: "All resources are available" });
  });

  it("reports a manifest whose object disappears as not available", async () => {
    const name = `work-${suffix()}`;
    const cm = `cm-${suffix()}`;
    await createWork(name, [configMap("default", cm, { a: "1" })], { manifestConfigs: [{ resourceIdentifier: { resource: "configmaps", name: cm, namespace: "default" }, updateStrategy: { type: "ReadOnly" } }] });
    const outcome = await run(name);
    const w = (await readWork(name))!;
    expect(manifestCondition(w, 0, "Applied")).toMatchObject({ status: "True" });
    expect(manifestCondition(w, 0, "Available")).toMatchObject({ status: "False", reason: "ResourceNotAvailable", message: "Resource is not available" });
    expect(conditionOf(w, "Available")).toMatchObject({ status: "False", reason: "ResourcesNotAvailable", message: "1 of 1 resources are not available" });
    expect(outcome).toEqual({ recheckInMs: 10_000 }); // OCM's status interval: availability can change without an event
  });
});

describe("deleting a work", { timeout: FLEET_TEST_MS }, () => {
  type Row = { name: string; deleteOption?: ManifestWorkSpec["deleteOption"]; owned: { a: boolean; b: boolean } };
  const rows: Row[] = [
    { name: "Foreground (the default) deletes everything the work applied", owned: { a: true, b: true } },
    { name: "Orphan keeps everything and strips the owner references", deleteOption: { propagationPolicy: "Orphan" }, owned: { a: false, b: false } },
    {
      name: "SelectivelyOrphan keeps only what its rules match",
      deleteOption: { propagationPolicy: "SelectivelyOrphan", selectivelyOrphans: { orphaningRules: [{ group: "", resource: "configmaps", namespace: "default", name: "<b>" }] } },
      owned: { a: true, b: false },
    },
  ];
  it.each(rows)("$name", async ({ deleteOption, owned }) => {
    const name = `work-${suffix()}`;
    const [a, b] = [`a-${suffix()}`, `b-${suffix()}`];
    const option = deleteOption && (JSON.parse(JSON.stringify(deleteOption).replace("<b>", b)) as ManifestWorkSpec["deleteOption"]);
    await createWork(name, [configMap("default", a, { x: "1" }), configMap("default", b, { x: "2" })], option ? { deleteOption: option } : {});
    await run(name);
    const applied = (await readApplied(name))!;
    for (const [cm, own] of [[a, owned.a], [b, owned.b]] as const) {
      const refs = (await spoke.get<KubeObject & { metadata: { ownerReferences?: { uid: string }[] } }>(ConfigMapResource, cm, "default"))!.metadata.ownerReferences ?? [];
      expect(refs.map((r) => r.uid)).toEqual(own ? [applied.metadata.uid] : []);
    }

    await hub.delete(ManifestWorkResource, name, SPOKE);
    await run(name);
    // the work finalizer holds until the AppliedManifestWork's finalizer has dealt with every resource
    await runUntilGone(name);
    expect(await readApplied(name)).toBeUndefined();
    expect(!!(await spoke.get(ConfigMapResource, a, "default"))).toBe(!owned.a);
    expect(!!(await spoke.get(ConfigMapResource, b, "default"))).toBe(!owned.b);
  });

  it("marks the work Deleting while a namespace it applied terminates", async () => {
    const name = `work-${suffix()}`;
    const ns = `ns-${suffix()}`;
    await createWork(name, [namespace(ns), configMap(ns, "cm", { a: "1" })]);
    await run(name);
    await hub.delete(ManifestWorkResource, name, SPOKE);
    const outcome = await run(name);
    // The namespace controller needs a while to empty a namespace; the ConfigMap in it went at once.
    expect(conditionOf(await readWork(name), "Deleting")).toMatchObject({ status: "True", reason: "WorkDeleting", message: "ManifestWork is being deleted" });
    expect(outcome).toEqual({ recheckInMs: 1_000 });
    expect((await readApplied(name))?.status?.appliedResources?.map((r) => r.resource)).toEqual(["namespaces"]);
    await runUntilGone(name);
    expect(await spoke.get(NamespaceResource, ns)).toBeUndefined();
  });

  it("keeps a resource two works share until the last of them is deleted", async () => {
    const shared = `shared-${suffix()}`;
    const [one, two] = [`one-${suffix()}`, `two-${suffix()}`];
    await createWork(one, [configMap("default", shared, { a: "1" })]);
    await createWork(two, [configMap("default", shared, { a: "1" })]);
    await run(one);
    await run(two);
    const owners = async () => ((await spoke.get<KubeObject & { metadata: { ownerReferences?: { name: string }[] } }>(ConfigMapResource, shared, "default"))?.metadata.ownerReferences ?? []).map((r) => r.name).sort();
    expect(await owners()).toEqual([appliedWorkName(hubHash, one), appliedWorkName(hubHash, two)].sort());

    await hub.delete(ManifestWorkResource, one, SPOKE);
    await runUntilGone(one);
    expect(await owners()).toEqual([appliedWorkName(hubHash, two)]);

    await hub.delete(ManifestWorkResource, two, SPOKE);
    await runUntilGone(two);
    expect(await spoke.get(ConfigMapResource, shared, "default")).toBeUndefined();
  });
});

describe("refusing what OCM's webhook rejects", { timeout: FLEET_TEST_MS }, () => {
  const big = (cm: string) => configMap("default", cm, { blob: "x".repeat(520 * 1024) });
  const rows: { name: string; manifests: (cm: string) => Manifest[]; message: (cm: string) => string }[] = [
    {
      name: "refuses a work whose manifests exceed 500 KiB, applying nothing",
      manifests: (cm) => [configMap("default", `${cm}-small`, { a: "1" }), big(cm)],
      message: (cm) => `the size of manifests is ${[configMap("default", `${cm}-small`, { a: "1" }), big(cm)].reduce((n, m) => n + Buffer.byteLength(JSON.stringify(m)), 0)} bytes which exceeds the 512000 limit`,
    },
    {
      name: "refuses a work that lists one object twice",
      manifests: (cm) => [configMap("default", cm, { a: "1" }), configMap("default", cm, { a: "2" })],
      message: (cm) => `duplicate manifest for resource default/${cm} with resource type v1.ConfigMap`,
    },
  ];
  it.each(rows)("$name", async ({ manifests, message }) => {
    const name = `work-${suffix()}`;
    const cm = `cm-${suffix()}`;
    await createWork(name, manifests(cm));
    await run(name);
    const w = (await readWork(name))!;
    expect(w.status?.conditions).toEqual([expect.objectContaining({ type: "Applied", status: "False", reason: "AppliedManifestWorkFailed", message: message(cm), observedGeneration: 1 })]);
    expect(await readApplied(name)).toBeUndefined();
    expect(await spoke.get(ConfigMapResource, cm, "default")).toBeUndefined();
    expect(await spoke.get(ConfigMapResource, `${cm}-small`, "default")).toBeUndefined();
  });
});

describe("events", { timeout: FLEET_TEST_MS }, () => {
  it("applies the work a ManifestWork event names, through our CloudEvents HTTP server (shared/cloudevents-server.ts)", async () => {
    const name = `work-${suffix()}`;
    const cm = `cm-${suffix()}`;
    const work = await createWork(name, [configMap("default", cm, { a: "1" })]);
    const server = await startFunctionServer(serve(fn.spec, () => io));
    try {
      const reply = await postEvent(server.url, objectEvent({ cluster: "hub", object: { apiVersion: "work.open-cluster-management.io/v1", kind: "ManifestWork", ...work }, verb: "add" }));
      expect(reply.status, reply.body).toBe(204);
      expect(conditionOf(await readWork(name), "Applied")).toMatchObject({ status: "True" });
      expect(await spoke.get(ConfigMapResource, cm, "default")).toBeDefined();
    } finally {
      await server.close();
    }
  });

  it("maps AppliedManifestWork events and resync ticks to works, and skips what is not this cluster's", async () => {
    const name = `work-${suffix()}`;
    await createWork(name, [configMap("default", `cm-${suffix()}`, { a: "1" })]);
    const keyOf = async (ce: Record<string, unknown>) => {
      const parsed = parseEvent(ce);
      if (!parsed.ok) throw new Error(parsed.reason);
      return fn.spec.keys(parsed.event, io);
    };
    const mw = (ns: string, cluster = "hub") => objectEvent({ cluster, object: { apiVersion: "work.open-cluster-management.io/v1", kind: "ManifestWork", metadata: { name, namespace: ns } } });
    const amw = (n: string, cluster = SPOKE) => objectEvent({ cluster, object: { apiVersion: "work.open-cluster-management.io/v1", kind: "AppliedManifestWork", metadata: { name: n } } });
    const key = { cluster: "hub", namespace: SPOKE, name };
    expect(await keyOf(mw(SPOKE))).toEqual([key]);
    expect(await keyOf(mw("other-cluster"))).toEqual({ skip: `ManifestWork other-cluster/${name} on hub is not watched` });
    expect(await keyOf(mw(SPOKE, SPOKE))).toEqual({ skip: `ManifestWork ${SPOKE}/${name} on ${SPOKE} is not watched` });
    expect(await keyOf(amw(appliedWorkName(hubHash, name)))).toEqual([key]);
    expect(await keyOf(amw("not-a-hash-name"))).toEqual({ skip: "AppliedManifestWork not-a-hash-name is not named <hubHash>-<work>" });
    expect(await keyOf(tickEvent())).toEqual(expect.arrayContaining([key]));
    const reply = await handleEvent(fn.spec, io, objectEvent({ cluster: SPOKE, object: { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "x", namespace: "default" } } }));
    expect(reply.statusCode).toBe(204);
  });
});

type ConfigMapObject = KubeObject & { data?: Record<string, string>; metadata: { ownerReferences?: { uid: string }[]; managedFields?: { manager: string; operation: string }[] } };
const readConfigMap = (name: string) => spoke.get<ConfigMapObject>(ConfigMapResource, name, "default");
const strategyFor = (cm: string, updateStrategy: NonNullable<NonNullable<ManifestWorkSpec["manifestConfigs"]>[number]["updateStrategy"]>) => ({
  manifestConfigs: [{ resourceIdentifier: { group: "", resource: "configmaps", namespace: "default", name: cm }, updateStrategy }],
});

describe("update strategies", { timeout: FLEET_TEST_MS }, () => {
  it("CreateOnly creates the object and never updates it", async () => {
    const name = `work-${suffix()}`;
    const cm = `cm-${suffix()}`;
    await createWork(name, [configMap("default", cm, { a: "1" })], strategyFor(cm, { type: "CreateOnly" }));
    await run(name);
    await editWork(name, (s) => ({ ...s, workload: { manifests: [configMap("default", cm, { a: "2" })] } }));
    await run(name);
    const live = (await readConfigMap(cm))!;
    expect(live.data).toEqual({ a: "1" });
    expect(live.metadata.ownerReferences?.map((r) => r.uid)).toEqual([(await readApplied(name))!.metadata.uid]);
    expect(conditionOf(await readWork(name), "Applied")).toMatchObject({ status: "True", observedGeneration: 2 });
  });

  it("ReadOnly never writes the object, and still reads its status feedback", async () => {
    const name = `work-${suffix()}`;
    const cm = `cm-${suffix()}`;
    const before = await spoke.create<ConfigMapObject>(ConfigMapResource, { metadata: { name: cm, namespace: "default" }, data: { a: "on the spoke" } });
    await createWork(name, [configMap("default", cm, { a: "from the hub" })], {
      manifestConfigs: [
        { resourceIdentifier: { resource: "configmaps", namespace: "default", name: cm }, updateStrategy: { type: "ReadOnly" }, feedbackRules: [{ type: "JSONPaths", jsonPaths: [{ name: "a", path: ".data.a" }] }] },
      ],
    });
    await run(name);
    const after = (await readConfigMap(cm))!;
    expect(after.metadata.resourceVersion).toBe(before.metadata.resourceVersion);
    expect(after.metadata.ownerReferences).toBeUndefined();
    const w = (await readWork(name))!;
    expect(manifestCondition(w, 0, "Available")).toMatchObject({ status: "True" });
    expect(w.status?.resourceStatus?.manifests?.[0]?.statusFeedback).toEqual({ values: [{ name: "a", fieldValue: { type: "String", string: "on the spoke" } }] });
    // recorded as applied, but not owned: deleting the work leaves it
    expect((await readApplied(name))!.status?.appliedResources?.map((r) => r.name)).toEqual([cm]);
    await hub.delete(ManifestWorkResource, name, SPOKE);
    await runUntilGone(name);
    expect((await readConfigMap(cm))!.metadata.resourceVersion).toBe(before.metadata.resourceVersion);
  });

  it("ServerSideApply applies as work-agent, reports a conflict with another field manager, and forces when told", async () => {
    const name = `work-${suffix()}`;
    const cm = `cm-${suffix()}`;
    await createWork(name, [configMap("default", cm, { a: "1" })], strategyFor(cm, { type: "ServerSideApply" }));
    await run(name);
    const created = (await readConfigMap(cm))!;
    expect(created.data).toEqual({ a: "1" });
    expect(created.metadata.managedFields?.map((f) => [f.manager, f.operation])).toEqual(expect.arrayContaining([["work-agent", "Apply"]]));
    expect(created.metadata.ownerReferences?.map((r) => r.uid)).toEqual([(await readApplied(name))!.metadata.uid]);

    // Someone else takes data.a over with their own apply; the hub then asks for another value.
    // (KubeClient.patch has no force flag, and the takeover needs it)
    await spoke.request("PATCH", `/api/v1/namespaces/default/configmaps/${cm}?fieldManager=someone-else&force=true`, JSON.stringify({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: cm, namespace: "default" }, data: { a: "theirs" } }), "application/apply-patch+yaml");
    await editWork(name, (s) => ({ ...s, workload: { manifests: [configMap("default", cm, { a: "2" })] } }));
    const outcome = await run(name);
    const conflicted = (await readWork(name))!;
    expect(manifestCondition(conflicted, 0, "Applied")).toMatchObject({ status: "False", reason: "AppliedManifestFailed" });
    expect(manifestCondition(conflicted, 0, "Applied")!.message).toMatch(/^Failed to apply manifest: Apply failed with 1 conflict: conflict with "someone-else"/);
    expect(conditionOf(conflicted, "Applied")).toMatchObject({ status: "False", reason: "AppliedManifestWorkFailed", message: "Failed to apply manifest work" });
    expect(outcome).toEqual({ done: true }); // as OCM: a conflict is reported, not retried as an error
    expect((await readConfigMap(cm))!.data).toEqual({ a: "theirs" });

    await editWork(name, (s) => ({ ...s, ...strategyFor(cm, { type: "ServerSideApply", serverSideApply: { force: true } }) }));
    await run(name);
    expect((await readConfigMap(cm))!.data).toEqual({ a: "2" });
    expect(conditionOf(await readWork(name), "Applied")).toMatchObject({ status: "True" });
  });

  it("ServerSideApply leaves fields ignored OnSpokePresent to the spoke once the object exists", async () => {
    const name = `work-${suffix()}`;
    const cm = `cm-${suffix()}`;
    const ignore = { type: "ServerSideApply" as const, serverSideApply: { ignoreFields: [{ condition: "OnSpokePresent" as const, jsonPaths: [".data.b"] }] } };
    await createWork(name, [configMap("default", cm, { a: "1", b: "1" })], strategyFor(cm, ignore));
    await run(name);
    expect((await readConfigMap(cm))!.data).toEqual({ a: "1", b: "1" }); // created with the ignored field

    const live = (await readConfigMap(cm))!;
    await spoke.update(ConfigMapResource, { ...live, data: { ...live.data, b: "spoke" } });
    await editWork(name, (s) => ({ ...s, workload: { manifests: [configMap("default", cm, { a: "2", b: "hub" })] } }));
    await run(name);
    expect((await readConfigMap(cm))!.data).toEqual({ a: "2", b: "spoke" });
    expect(conditionOf(await readWork(name), "Applied")).toMatchObject({ status: "True" });
  });
});

describe("status feedback", { timeout: FLEET_TEST_MS }, () => {
  const rawIo = () => testIo({ [SPOKE]: identityKubeconfig }, fn.definition.config.parse({ managementCluster: SPOKE, clusterName: SPOKE, rawFeedbackJsonString: true }), clock);
  type Row = { name: string; manifest: (n: string) => Manifest; rules: NonNullable<NonNullable<ManifestWorkSpec["manifestConfigs"]>[number]["feedbackRules"]>; raw?: boolean; values: unknown[]; condition: { status: string; reason: string; message?: string } };
  const rows: Row[] = [
    {
      name: "JSONPaths read integers, strings and booleans; a missing field gives no value",
      manifest: (n) => ({ ...deployment("default", n, "nginx:1.27"), spec: { ...(deployment("default", n).spec as object), paused: true } }),
      rules: [{ type: "JSONPaths", jsonPaths: [{ name: "replicas", path: ".spec.replicas" }, { name: "image", path: ".spec.template.spec.containers[0].image" }, { name: "paused", path: ".spec.paused" }, { name: "missing", path: ".spec.minReadySeconds" }] }],
      values: [
        { name: "replicas", fieldValue: { type: "Integer", integer: 1 } },
        { name: "image", fieldValue: { type: "String", string: "nginx:1.27" } },
        { name: "paused", fieldValue: { type: "Boolean", boolean: true } },
      ],
      condition: { status: "True", reason: "StatusFeedbackSynced" },
    },
    {
      name: "JSONPaths reaching an object fail while RawFeedbackJsonString is off",
      manifest: (n) => deployment("default", n),
      rules: [{ type: "JSONPaths", jsonPaths: [{ name: "labels", path: ".spec.selector.matchLabels" }] }],
      values: [],
      condition: { status: "False", reason: "StatusFeedbackSyncFailed", message: "Sync status feedback failed with error the type map[string]interface {} of the value for labels is not found" },
    },
    {
      name: "JSONPaths reaching an object give JsonRaw with RawFeedbackJsonString on",
      manifest: (n) => deployment("default", n),
      rules: [{ type: "JSONPaths", jsonPaths: [{ name: "labels", path: ".spec.selector.matchLabels" }] }],
      raw: true,
      values: [{ name: "labels", fieldValue: { type: "JsonRaw", jsonRaw: '{"app":"<n>"}' } }],
      condition: { status: "True", reason: "StatusFeedbackSynced" },
    },
    {
      name: "WellKnownStatus has nothing for a ConfigMap",
      manifest: (n) => configMap("default", n, { a: "1" }),
      rules: [{ type: "WellKnownStatus" }],
      values: [],
      condition: { status: "False", reason: "StatusFeedbackSyncFailed", message: "Sync status feedback failed with error cannot find the wellknown statuses for resource with gvk /v1, Kind=ConfigMap" },
    },
  ];
  it.each(rows)("$name", async ({ manifest, rules, raw, values, condition }) => {
    const name = `work-${suffix()}`;
    const n = `obj-${suffix()}`;
    const m = manifest(n);
    const resource = m.kind === "Deployment" ? "deployments" : "configmaps";
    await createWork(name, [m], { manifestConfigs: [{ resourceIdentifier: { group: m.kind === "Deployment" ? "apps" : "", resource, namespace: "default", name: n }, feedbackRules: rules }] });
    await reconcileKey(fn.spec, raw ? rawIo() : io, { cluster: "hub", namespace: SPOKE, name });
    const w = (await readWork(name))!;
    expect(w.status?.resourceStatus?.manifests?.[0]?.statusFeedback?.values ?? []).toEqual(JSON.parse(JSON.stringify(values).replaceAll("<n>", n)));
    expect(manifestCondition(w, 0, "StatusFeedbackSynced")).toMatchObject({ type: "StatusFeedbackSynced", message: "", ...condition });
  });

  it("WellKnownStatus follows a Deployment's status, and a change of values moves the condition's transition time", async () => {
    const name = `work-${suffix()}`;
    const n = `web-${suffix()}`;
    await createWork(name, [deployment("default", n)], { manifestConfigs: [{ resourceIdentifier: { group: "apps", resource: "deployments", namespace: "default", name: "web-*" }, feedbackRules: [{ type: "WellKnownStatus" }] }] });
    const outcome = await run(name);
    expect(outcome).toEqual({ recheckInMs: 10_000 }); // feedback can change without an event: OCM's status interval
    const before = (await readWork(name))!;
    expect(before.status?.resourceStatus?.manifests?.[0]?.statusFeedback).toEqual({});
    expect(manifestCondition(before, 0, "StatusFeedbackSynced")).toMatchObject({ status: "True", reason: "StatusFeedbackSynced" });

    // No kubelet or deployment controller here: the test plays them and reports one ready replica.
    await spoke.patch(DeploymentResource, n, { status: { replicas: 1, readyReplicas: 1, availableReplicas: 1, updatedReplicas: 1 } }, { namespace: "default", subresource: "status" });
    clock.advance(30_000);
    await run(name);
    const after = (await readWork(name))!;
    expect(after.status?.resourceStatus?.manifests?.[0]?.statusFeedback?.values).toEqual([
      { name: "ReadyReplicas", fieldValue: { type: "Integer", integer: 1 } },
      { name: "Replicas", fieldValue: { type: "Integer", integer: 1 } },
      { name: "AvailableReplicas", fieldValue: { type: "Integer", integer: 1 } },
    ]);
    expect(manifestCondition(after, 0, "StatusFeedbackSynced")!.lastTransitionTime).not.toBe(manifestCondition(before, 0, "StatusFeedbackSynced")!.lastTransitionTime);

    // unchanged values: nothing is written
    clock.advance(30_000);
    await run(name);
    expect((await readWork(name))!.metadata.resourceVersion).toBe(after.metadata.resourceVersion);
  });
});

// The pure decisions, at the level of values (no cluster involved).
describe("decisions", { timeout: FLEET_TEST_MS }, () => {
  it.each([
    { name: "namespaces and CRDs first, workloads after config, unknown kinds last", kinds: ["Widget", "Deployment", "ConfigMap", "CustomResourceDefinition", "Namespace", "Service", "Role"], then: [3, 4, 6, 2, 5, 1, 0] },
    { name: "same rank keeps fn.spec order; unparsable manifests go last", kinds: [undefined, "Secret", "ConfigMap", "Foo", "Bar"], then: [1, 2, 3, 4, 0] },
  ])("orders kinds: $name", ({ kinds, then }) => {
    expect(applyOrder(kinds)).toEqual(then);
  });

  const obj = { spec: { containers: [{ name: "a", image: "x" }, { name: "b", image: "y" }] }, status: { conditions: [{ type: "Ready", status: "True" }, { type: "Complete", status: "False" }] }, metadata: { labels: { "app.kubernetes.io/name": "n" } } };
  it.each([
    { path: ".spec.containers[0].image", then: ["x"] },
    { path: ".spec.containers[-1].name", then: ["b"] },
    { path: ".spec.containers[*].name", then: ["a", "b"] },
    { path: '.status.conditions[?(@.type=="Complete")].status', then: ["False"] },
    { path: "{.metadata.labels['app.kubernetes.io/name']}", then: ["n"] },
    { path: ".spec.missing.deeper", then: [] },
    { path: ".spec.containers[5].name", then: [] },
  ])("evaluates the JSONPath $path", ({ path, then }) => {
    expect(evaluate(parseJsonPath(path), obj)).toEqual(then);
  });
  it("rejects JSONPath outside the subset", () => {
    expect(() => parseJsonPath(".spec..name")).toThrow(/recursive descent/);
    expect(() => parseJsonPath(".spec.containers[0:1]")).toThrow(/not supported/);
  });

  const id = { group: "", resource: "configmaps", namespace: "ns", name: "a" };
  it.each([
    { name: "no deleteOption owns", option: undefined, then: true },
    { name: "Orphan owns nothing", option: { propagationPolicy: "Orphan" as const }, then: false },
    { name: "SelectivelyOrphan without rules owns", option: { propagationPolicy: "SelectivelyOrphan" as const }, then: true },
    { name: "SelectivelyOrphan orphans an exact match", option: { propagationPolicy: "SelectivelyOrphan" as const, selectivelyOrphans: { orphaningRules: [{ group: "", resource: "configmaps", namespace: "ns", name: "a" }] } }, then: false },
    { name: "SelectivelyOrphan rules take no wildcards", option: { propagationPolicy: "SelectivelyOrphan" as const, selectivelyOrphans: { orphaningRules: [{ group: "", resource: "configmaps", namespace: "ns", name: "*" }] } }, then: true },
  ])("ownership: $name", ({ option, then }) => {
    expect(isOwnedByTheWork(id, option)).toBe(then);
  });

  it("merges owner references as library-go does: add, refresh, remove by a trailing-dash UID", () => {
    const mine = { apiVersion: "work.open-cluster-management.io/v1", kind: "AppliedManifestWork", name: "h-w", uid: "u1" };
    const other = { apiVersion: "work.open-cluster-management.io/v1", kind: "AppliedManifestWork", name: "h-v", uid: "u2" };
    expect(mergeOwnerRefs([other], [mine])).toEqual({ refs: [other, mine], modified: true });
    expect(mergeOwnerRefs([other, mine], [mine])).toEqual({ refs: [other, mine], modified: false });
    expect(mergeOwnerRefs([other, mine], [{ ...mine, uid: "u1-" }])).toEqual({ refs: [other], modified: true });
    expect(mergeOwnerRefs([other], [{ ...mine, uid: "u1-" }])).toEqual({ refs: [other], modified: false });
  });

  const manifestWith = (status?: "True" | "False" | "Unknown") => ({ resourceMeta: { ordinal: 0 }, conditions: status ? [{ type: "Available", status, reason: "R", message: "", lastTransitionTime: "2026-01-01T00:00:00Z" }] : [] });
  it.each([
    { name: "all True", given: ["True", "True"], then: { status: "True", reason: "ResourcesAvailable", message: "All resources are available" } },
    { name: "a False wins", given: ["True", "False", "Unknown"], then: { status: "False", reason: "ResourcesNotAvailable", message: "1 of 3 resources are not available" } },
    { name: "then Unknown", given: ["True", "Unknown", "Unknown"], then: { status: "Unknown", reason: "ResourcesStatusUnknown", message: "2 of 3 resources have unknown status" } },
    { name: "none known", given: [undefined], then: { status: "Unknown", reason: "ResourcesStatusUnknown", message: "cannot get any available resource " } },
  ] as const)("work Available: $name", ({ given, then }) => {
    expect(aggregateAvailable(given.map((s) => manifestWith(s)), 3)).toEqual({ type: "Available", observedGeneration: 3, ...then });
  });
});
