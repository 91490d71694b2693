// addon-health against a real hub and spoke (a fleet with one auto-approved cluster), under its own spoke
// identity and the cluster's hub identity (OCM's addon_lease_test): an add-on's Available condition from
// its lease on the spoke, with OCM's strings, the exact expiry as the recheck, and the install namespace
// read as OCM reads it.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { startFleet, type Fleet } from "../../dev/local/fleet.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { LeaseResource, NamespaceResource } from "../../shared/api/kube.ts";
import { AddOnAnnotation, AddOnConditionType, AddOnGroup, ManagedClusterAddOnV1alpha1Resource, type ManagedClusterAddOnV1alpha1 } from "../../shared/api/addon.ts";
import { findCondition } from "../../shared/conditions.ts";
import { manualClock, microTime } from "../../shared/clock.ts";
import { handleEvent, reconcileKey, serve, type Outcome } from "../../shared/harness.ts";
import fn, { ConfigSchema, type Config } from "../../functions/addon-health/reconcile.ts";
import { identityFor, objectEvent, postEvent, startFunctionServer, testIo, tickEvent } from "../support/functions.ts";
import { createOrUpdate } from "../../shared/apply.ts";
import { eventually } from "../support/eventually.ts";
import { joinedThenQuiet } from "../support/fixtures.ts";

// Own timeouts, not the runner's defaults: starting the fleet (control planes, functions, relays) and
// joining take up to a minute or two on a loaded 2-core machine; a test waits up to 30 s for leases and
// status on a live fleet.
const FLEET_START_MS = 240_000;
const FLEET_TEST_MS = 90_000;

const C = "cluster1";
const HUB = "hub";
const DEFAULT_NS = "open-cluster-management-agent-addon";
const GRACE_MS = 300_000; // 5 × 60 s
const suffix = () => Math.random().toString(36).slice(2, 7);

let fleet: Fleet;
let hub: KubeClient; // hub admin: enables add-ons, fills status as the hub's add-on manager does
let spoke: KubeClient; // spoke admin: plays the add-on agents renewing their leases
let fnKubeconfig: string;

beforeAll(async () => {
  fleet = await startFleet({ spokes: [{ name: C, autoApprove: true }], resyncMs: 60_000 });
  hub = fleet.hub;
  spoke = KubeClient.fromKubeconfig(fleet.clusters.get(C).adminKubeconfig);
  fnKubeconfig = await identityFor(fleet.clusters.get(C), fn.spec.name);
  // Joined, and the cluster's identity may already read its add-ons (granted at acceptance). From here
  // the test drives the function itself: the fleet's own functions (the hub's add-on manager among
  // them, which would take Available over while the cluster is Unknown) get no more events.
  await joinedThenQuiet(fleet, C, agent().io, (asCluster) => asCluster.list(ManagedClusterAddOnV1alpha1Resource, { namespace: C }));
  await createOrUpdate(spoke, NamespaceResource, { metadata: { name: DEFAULT_NS } }, []); // the join makes it, as OCM's klusterlet does
  await eventually(() => agent().io.cluster(C).list(LeaseResource, { namespace: DEFAULT_NS }));
}, FLEET_START_MS);
afterAll(async () => {
  spoke?.close();
  await fleet?.stop();
});

function agent(o: Partial<Config> = {}) {
  const clock = manualClock();
  const io = testIo({ [C]: fnKubeconfig }, ConfigSchema.parse({ managementCluster: C, clusterName: C, ...o }), clock);
  return { io, clock, reconcile: (addon: string): Promise<Outcome> => reconcileKey(fn.spec, io, { cluster: HUB, namespace: C, name: addon }) };
}

type Where = "status.namespace" | "annotation" | "spec.installNamespace" | "default";

// An enabled add-on whose install namespace is given the way `where` says.
async function newAddon(o: { where?: Where; mode?: "Lease" | "Customized" } = {}): Promise<{ addon: string; namespace: string }> {
  const addon = `addon-${suffix()}`;
  const where = o.where ?? "status.namespace";
  const namespace = where === "default" ? DEFAULT_NS : `ns-${addon}`;
  if (namespace !== DEFAULT_NS) await spoke.create(NamespaceResource, { metadata: { name: namespace } });
  await hub.create<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, {
    metadata: { name: addon, namespace: C, ...(where === "annotation" ? { annotations: { [AddOnAnnotation.V1alpha1InstallNamespace]: namespace } } : {}) },
    spec: where === "spec.installNamespace" ? { installNamespace: namespace } : {},
  });
  const status = { ...(where === "status.namespace" ? { namespace } : {}), ...(o.mode ? { healthCheck: { mode: o.mode } } : {}) };
  if (Object.keys(status).length) await hub.patch(ManagedClusterAddOnV1alpha1Resource, addon, { status }, { namespace: C, subresource: "status" });
  return { addon, namespace };
}

// What an addon-framework agent does every 60 s: the lease named after the add-on, renewTime now.
async function renew(addon: string, namespace: string, at: Date): Promise<void> {
  const lease = await spoke.get<KubeObject & { spec?: object }>(LeaseResource, addon, namespace);
  const spec = { holderIdentity: addon, leaseDurationSeconds: 60, renewTime: microTime(at) };
  if (lease) await spoke.update(LeaseResource, { ...lease, spec: { ...lease.spec, ...spec } });
  else await spoke.create(LeaseResource, { metadata: { name: addon, namespace }, spec });
}

const available = async (addon: string) => findCondition((await hub.get<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, addon, C))?.status?.conditions, AddOnConditionType.Available);

describe("availability from the add-on lease", { timeout: FLEET_TEST_MS }, () => {
  type Row = { name: string; where?: Where; lease: "fresh" | "none"; advanceMs?: number; then: (addon: string) => object; recheckInMs?: number };
  const rows: Row[] = [
    { name: "is Available while the lease is renewed, and looks again exactly when it would expire", lease: "fresh", then: (a) => ({ status: "True", reason: "ManagedClusterAddOnLeaseUpdated", message: `${a} add-on is available.` }), recheckInMs: GRACE_MS },
    { name: "is still Available a moment before five lease durations have passed", lease: "fresh", advanceMs: GRACE_MS - 1_000, then: (a) => ({ status: "True", reason: "ManagedClusterAddOnLeaseUpdated", message: `${a} add-on is available.` }), recheckInMs: 1_000 },
    { name: "is not available once the lease has not been renewed for five lease durations", lease: "fresh", advanceMs: GRACE_MS + 1, then: (a) => ({ status: "False", reason: "ManagedClusterAddOnLeaseUpdateStopped", message: `${a} add-on is not available.` }) },
    { name: "is Unknown without a lease", lease: "none", then: (a) => ({ status: "Unknown", reason: "ManagedClusterAddOnLeaseNotFound", message: `The status of ${a} add-on is unknown.` }) },
    { name: "reads the lease in the v1alpha1 install namespace annotation", where: "annotation", lease: "fresh", then: () => ({ status: "True" }) },
    { name: "reads the lease in the add-on's spec.installNamespace", where: "spec.installNamespace", lease: "fresh", then: () => ({ status: "True" }) },
    { name: "reads the lease in open-cluster-management-agent-addon when nothing names a namespace", where: "default", lease: "fresh", then: () => ({ status: "True" }) },
  ];
  it.each(rows)("$name", async (row) => {
    const a = agent();
    const { addon, namespace } = await newAddon({ where: row.where });
    if (row.lease === "fresh") await renew(addon, namespace, a.clock.now());
    if (row.advanceMs) a.clock.advance(row.advanceMs);
    const outcome = await a.reconcile(addon);
    expect(await available(addon)).toMatchObject(row.then(addon));
    if (row.recheckInMs !== undefined) expect(outcome).toEqual({ recheckInMs: row.recheckInMs });
    else if (row.lease === "none" || row.advanceMs) expect(outcome).toEqual({ done: true });
  });

  it("follows the lease from True to False and back to True, and writes nothing when nothing changed", async () => {
    const a = agent();
    const { addon, namespace } = await newAddon();
    await renew(addon, namespace, a.clock.now());
    await a.reconcile(addon);
    const first = (await available(addon))!;
    expect(first.status).toBe("True");
    const rv = (await hub.get<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, addon, C))!.metadata.resourceVersion;
    a.clock.advance(60_000);
    await a.reconcile(addon);
    expect((await hub.get<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, addon, C))!.metadata.resourceVersion).toBe(rv);

    a.clock.advance(GRACE_MS);
    await a.reconcile(addon);
    expect(await available(addon)).toMatchObject({ status: "False", reason: "ManagedClusterAddOnLeaseUpdateStopped" });
    await renew(addon, namespace, a.clock.now());
    await a.reconcile(addon);
    expect(await available(addon)).toMatchObject({ status: "True", reason: "ManagedClusterAddOnLeaseUpdated" });
  });

  it("leaves an add-on whose health check mode is Customized to its manager", async () => {
    const a = agent();
    const { addon, namespace } = await newAddon({ mode: "Customized" });
    await renew(addon, namespace, a.clock.now());
    expect(await a.reconcile(addon)).toEqual({ done: true });
    expect(await available(addon)).toBeUndefined();
  });
});

describe("events", { timeout: FLEET_TEST_MS }, () => {
  it("wakes the add-on named like a renewed lease, through our CloudEvents HTTP server (shared/cloudevents-server.ts); a malformed event is a 400", async () => {
    const a = agent();
    const { addon, namespace } = await newAddon();
    await renew(addon, namespace, a.clock.now());
    const lease = { apiVersion: "coordination.k8s.io/v1", kind: "Lease", ...(await spoke.get<KubeObject>(LeaseResource, addon, namespace))! };
    const server = await startFunctionServer(serve(fn.spec, () => a.io));
    try {
      const { cluster: _dropped, ...noCluster } = objectEvent({ cluster: C, object: lease });
      expect((await postEvent(server.url, noCluster)).status).toBe(400);
      expect(await available(addon)).toBeUndefined();
      const reply = await postEvent(server.url, objectEvent({ cluster: C, object: lease, mode: "ref" }));
      expect(reply.status).toBe(204);
      expect(await available(addon)).toMatchObject({ status: "True", reason: "ManagedClusterAddOnLeaseUpdated" });
    } finally {
      await server.close();
    }
  });

  it("looks at every add-on of the cluster on a resync tick, and skips other clusters' add-ons", async () => {
    const a = agent();
    const fresh = await newAddon();
    const missing = await newAddon();
    await renew(fresh.addon, fresh.namespace, a.clock.now());
    expect((await handleEvent(fn.spec, a.io, tickEvent(C))).statusCode).toBe(204);
    expect(await available(fresh.addon)).toMatchObject({ status: "True" });
    expect(await available(missing.addon)).toMatchObject({ status: "Unknown" });
    // another cluster's add-on of the same name is not this agent's: the add-on's new lease is not looked at
    const before = (await available(missing.addon))!.lastTransitionTime;
    await renew(missing.addon, missing.namespace, a.clock.now());
    const addonIn = (namespace: string) => ({ apiVersion: `${AddOnGroup}/v1alpha1`, kind: "ManagedClusterAddOn", metadata: { name: missing.addon, namespace } });
    expect((await handleEvent(fn.spec, a.io, objectEvent({ cluster: HUB, object: addonIn("another-cluster") }))).statusCode).toBe(204);
    expect(await available(missing.addon)).toMatchObject({ status: "Unknown", lastTransitionTime: before });
    // control: the same add-on in this cluster's namespace is judged from its renewed lease
    expect((await handleEvent(fn.spec, a.io, objectEvent({ cluster: HUB, object: addonIn(C) }))).statusCode).toBe(204);
    expect(await available(missing.addon)).toMatchObject({ status: "True" });
  });
});
