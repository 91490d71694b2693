// Observed state handed with the event (shared/observed.ts, components/relay/state.ts), proved on
// cluster-lease-monitor against a real hub under the function's own identity: a renewal delivered by a
// real relay costs the function no request; a handed view older than one already judged, changed
// before a write, or forged by whoever can post to the function, is never what a write goes by.
import { afterAll, beforeAll, describe, it, expect } from "vitest";
import { KubeClient, resourcePath } from "../shared/kube/client.ts";
import { LeaseResource, NamespaceResource } from "../shared/api/kube.ts";
import { ClusterLabel, ManagedClusterConditionType, ManagedClusterLeaseName, ManagedClusterReason, ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { findCondition, setCondition } from "../shared/conditions.ts";
import { manualClock, microTime, systemClock } from "../shared/clock.ts";
import { handleEvent } from "../shared/harness.ts";
import { parseEvent } from "../shared/events.ts";
import { observedClients, type Observed } from "../shared/observed.ts";
import fn, { type Lease } from "../functions/cluster-lease-monitor/reconcile.ts";
import { startRelay, type Relay } from "../components/relay/relay.ts";
import { apiVersionOf, objectEvent as relayObjectEvent } from "../components/relay/cloudevents.ts";
import { withObserved } from "../components/relay/state.ts";
import { relayConfigFor } from "../dev/local/run-function.ts";
import { jsonLog } from "../shared/harness.ts";
import { startFunction } from "../dev/local/functions.ts";
import { postEvent, testIo } from "./support/functions.ts";
import { readyIdentity, startHub, type Hub } from "./support/fixtures.ts";
import scheduler from "../functions/placement-scheduler/reconcile.ts";
import acceptor from "../functions/cluster-acceptor/reconcile.ts";
import clusterSets from "../functions/cluster-sets/reconcile.ts";
import { DefaultClusterSetName, ManagedClusterSetBindingResource, ManagedClusterSetConditionType, ManagedClusterSetResource, type ManagedClusterSet } from "../shared/api/cluster.ts";
import { CertificateSigningRequestResource, ClusterRoleBindingResource, ClusterRoleResource, RoleBindingResource } from "../shared/api/kube.ts";
import { HubRbacName } from "../shared/api/register.ts";
import type { KubeObject } from "../shared/kube/client.ts";
import { PlacementResource } from "../shared/api/cluster.ts";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { recordingRequests } from "./support/requests.ts";
import { eventually } from "./support/eventually.ts";

const HUB = "hub";
const config = { hubCluster: HUB, leaseGraceMultiplier: 5 };
const suffix = () => Math.random().toString(36).slice(2, 7);

let admin: KubeClient;
let kubeconfig: string;
let hub: Hub;
beforeAll(async () => {
  hub = await startHub(HUB);
  admin = hub.admin;
  kubeconfig = await readyIdentity(hub.cluster, fn.spec.name, [ManagedClusterResource, LeaseResource]);
});
afterAll(() => hub?.stop());

const accepted = { type: ManagedClusterConditionType.HubAccepted, status: "True", reason: ManagedClusterReason.HubClusterAdminAccepted, message: "Accepted by hub cluster admin" } as const;

// An accepted cluster whose agent renewed its lease `agoS` seconds ago.
async function seed(agoS = 0): Promise<string> {
  const c = `cluster-${suffix()}`;
  await admin.create(NamespaceResource, { metadata: { name: c } });
  await admin.create(ManagedClusterResource, { metadata: { name: c }, spec: { hubAcceptsClient: true } });
  await admin.patch(ManagedClusterResource, c, { status: { conditions: setCondition([], accepted, new Date()) } }, { subresource: "status" });
  await admin.create(LeaseResource, {
    metadata: { name: ManagedClusterLeaseName, namespace: c, labels: { [ClusterLabel.ClusterName]: c } },
    spec: { holderIdentity: ManagedClusterLeaseName, renewTime: microTime(new Date(Date.now() - agoS * 1000)) },
  });
  return c;
}

async function renew(c: string): Promise<Lease> {
  const lease = (await admin.get<Lease>(LeaseResource, ManagedClusterLeaseName, c))!;
  return admin.update(LeaseResource, { ...lease, spec: { ...lease.spec, renewTime: microTime(new Date()) } });
}

const available = async (c: string) => findCondition((await admin.get<ManagedCluster>(ManagedClusterResource, c))?.status?.conditions, ManagedClusterConditionType.Available)?.status;

// The CloudEvent a relay would send for `object`, handing `observed` with it.
function handing(object: Lease | ManagedCluster, resource: typeof LeaseResource | typeof ManagedClusterResource, observed: Observed): Record<string, unknown> {
  const event = withObserved(relayObjectEvent({ verb: "update", mode: "Resource", cluster: HUB, server: "https://hub.invalid", resource, object, clock: systemClock, overrides: {} }), observed);
  return { ...event };
}
const handed = (resource: typeof LeaseResource | typeof ManagedClusterResource, object: Lease | ManagedCluster) => ({
  cluster: HUB,
  apiVersion: apiVersionOf(resource),
  kind: resource.kind,
  ...(object.metadata.namespace ? { namespace: object.metadata.namespace } : {}),
  name: object.metadata.name!,
  object: { apiVersion: apiVersionOf(resource), kind: resource.kind, ...object },
});

describe("observed state handed by a real relay", () => {
  it("a lease renewal wakes no cluster-lease-monitor and costs it no request; the recheck at expiry, sent with the cache's lease, marks a stopped agent Unknown", async () => {
    const c = await seed();
    const clock = manualClock();
    const rec = recordingRequests(testIo({ [HUB]: kubeconfig }, { ...config, leaseGraceMultiplier: 2 }, clock));
    const server = await startFunction(fn.spec, rec.io);
    let relay: Relay | undefined;
    try {
      // 1 s leases, 2 s grace: the function's clock is the test's, the relay's timers are real
      await admin.patch(ManagedClusterResource, c, { spec: { leaseDurationSeconds: 1 } });
      relay = startRelay({ ...relayConfigFor(fn, { ...config, leaseGraceMultiplier: 2 }, { [HUB]: kubeconfig }, server.url), resync: { intervalMs: 0 }, log: jsonLog("relay", "quiet") });
      await relay.ready;
      const sink = () => relay!.status().sinks[0]!;
      await eventually(async () => expect(findCondition((await admin.get<ManagedCluster>(ManagedClusterResource, c))?.status?.conditions, ManagedClusterConditionType.ClockSynced)?.status).toBe("True"));
      await eventually(() => expect(sink().pending + sink().inFlight).toBe(0));
      rec.requests.length = 0;
      const before = sink().received;
      for (let i = 0; i < 3; i++) await renew(c);
      await new Promise((r) => setTimeout(r, 300));
      expect(sink().received).toBe(before);
      expect(rec.requests).toEqual([]);
      // the agent stops: 3 s later as the function sees time, the recheck finds the lease expired
      clock.advance(3_000);
      await eventually(async () => expect(await available(c)).toBe("Unknown"), { timeoutMs: 20_000 });
      expect(sink().rechecks).toBeGreaterThan(0);
    } finally {
      await relay?.stop();
      await server.close();
    }
  });

  it("hands each resync tick both lists, so a sweep lists nothing and still marks a cluster whose lease expired", async () => {
    const c = await seed();
    const clock = manualClock();
    const rec = recordingRequests(testIo({ [HUB]: kubeconfig }, config, clock));
    const server = await startFunction(fn.spec, rec.io);
    let relay: Relay | undefined;
    try {
      relay = startRelay({ ...relayConfigFor(fn, config, { [HUB]: kubeconfig }, server.url), resync: { intervalMs: 500 }, log: jsonLog("relay", "quiet") });
      await relay.ready;
      await eventually(async () => expect(findCondition((await admin.get<ManagedCluster>(ManagedClusterResource, c))?.status?.conditions, ManagedClusterConditionType.ClockSynced)?.status).toBe("True"));
      // the lease is now 400 s old as the function sees time; no event comes for it, only ticks
      clock.advance(400_000);
      await eventually(async () => expect(await available(c)).toBe("Unknown"), { timeoutMs: 20_000 });
      const lists = rec.requests.filter((r) => r.method === "GET" && /\/(managedclusters|leases)$/.test(r.path.split("?")[0]!));
      expect(lists).toEqual([]);
    } finally {
      await relay?.stop();
      await server.close();
    }
  });
});

describe("cluster-sets judged from the fleet handed with its event", () => {
  it("a cluster's status change wakes no cluster-sets; a label change that moves no set's count is judged with no ManagedCluster read from the API; a label that moves a cluster into a set is counted from the handed fleet", async () => {
    const setsConfig = { hubCluster: HUB };
    const identity = await readyIdentity(hub.cluster, clusterSets.spec.name, [ManagedClusterResource, ManagedClusterSetResource, ManagedClusterSetBindingResource]);
    const team = `team-${suffix()}`;
    await admin.create(ManagedClusterSetResource, { metadata: { name: team } });
    const clusters = await Promise.all([0, 1, 2].map(async (i) => (await admin.create<ManagedCluster>(ManagedClusterResource, { metadata: { name: `${team}-c${i}`, labels: { [ClusterLabel.ClusterSet]: DefaultClusterSetName } }, spec: { hubAcceptsClient: false } })).metadata.name));
    const rec = recordingRequests(testIo({ [HUB]: identity }, setsConfig));
    const server = await startFunction(clusterSets.spec, rec.io);
    let relay: Relay | undefined;
    const emptyOf = async (set: string) => findCondition((await admin.get<ManagedClusterSet>(ManagedClusterSetResource, set))?.status?.conditions, ManagedClusterSetConditionType.ClusterSetEmpty)?.message;
    try {
      relay = startRelay({ ...relayConfigFor(clusterSets, setsConfig, { [HUB]: identity }, server.url), resync: { intervalMs: 0 }, log: jsonLog("relay", "quiet") });
      await relay.ready;
      const sink = () => relay!.status().sinks[0]!;
      await eventually(async () => expect(await emptyOf(team)).toBe("No ManagedCluster selected"));
      await eventually(() => expect(sink().pending + sink().inFlight).toBe(0));
      const fleetReads = () => rec.requests.filter((r) => r.method === "GET" && r.path.split("?")[0] === resourcePath(ManagedClusterResource));
      rec.requests.length = 0;
      // a change of a cluster's status alone (what a lease or an agent writes) is not sent at all
      const quiet = sink().received;
      await admin.patch(ManagedClusterResource, clusters[2]!, { status: { version: { kubernetes: "v1.35.4" } } }, { subresource: "status" });
      await new Promise((r) => setTimeout(r, 500));
      expect(sink().received).toBe(quiet);
      const received = sink().received;
      // a label no set selects on: every set is recounted, from what the event hands
      await admin.patch(ManagedClusterResource, clusters[0]!, { metadata: { labels: { unrelated: "x" } } });
      await eventually(() => expect(sink().received).toBeGreaterThan(received));
      await eventually(() => expect(sink().pending + sink().inFlight).toBe(0));
      expect(fleetReads()).toEqual([]);
      expect(rec.writes()).toEqual([]);
      // into the team's set: counted from the handed fleet, then confirmed before the status is written
      await admin.patch(ManagedClusterResource, clusters[1]!, { metadata: { labels: { [ClusterLabel.ClusterSet]: team } } });
      await eventually(async () => expect(await emptyOf(team)).toBe("1 ManagedClusters selected"));
    } finally {
      await relay?.stop();
      await server.close();
    }
  });
});

describe("an event a function's watch requires a related object for", () => {
  it("wakes no placement-scheduler for a cluster's change while the hub has no Placement, and does once one exists", async () => {
    const received: string[] = [];
    const sink = createServer((req, res) => {
      received.push(String(req.headers["ce-name"]));
      req.resume();
      req.on("end", () => res.writeHead(204).end());
    });
    await new Promise<void>((r) => sink.listen(0, "127.0.0.1", r));
    const url = `http://127.0.0.1:${(sink.address() as AddressInfo).port}/`;
    const identity = await readyIdentity(hub.cluster, scheduler.spec.name, [ManagedClusterResource, PlacementResource]);
    const relay = startRelay({ ...relayConfigFor(scheduler, { hubCluster: HUB }, { [HUB]: identity }, url), resync: { intervalMs: 0 }, log: jsonLog("relay", "quiet") });
    try {
      await relay.ready;
      const c = await seed();
      await admin.patch(ManagedClusterResource, c, { metadata: { labels: { first: "change" } } });
      // the changes were seen by the relay's watch and routed nowhere
      await eventually(() => expect(relay.status().sources.find((s) => s.name.includes("managedclusters"))!.objects).toBeGreaterThan(0));
      await new Promise((r) => setTimeout(r, 500));
      expect(received.filter((n) => n === c)).toEqual([]);
      await admin.create(PlacementResource, { metadata: { name: "any", namespace: "default" }, spec: {} });
      await admin.patch(ManagedClusterResource, c, { metadata: { labels: { second: "change" } } });
      await eventually(() => expect(received).toContain(c));
    } finally {
      await relay.stop();
      await new Promise((r) => sink.close(r));
    }
  });
});

describe("a settled root object, judged by a real relay", () => {
  it("wakes no cluster-lease-monitor for a cluster never accepted, its add or its updates, and does once HubAccepted is set", async () => {
    const received: string[] = [];
    const sink = createServer((req, res) => {
      received.push(`${String(req.headers["ce-type"])} ${String(req.headers["ce-name"])}`);
      req.resume();
      req.on("end", () => res.writeHead(204).end());
    });
    await new Promise<void>((r) => sink.listen(0, "127.0.0.1", r));
    const url = `http://127.0.0.1:${(sink.address() as AddressInfo).port}/`;
    const relay = startRelay({ ...relayConfigFor(fn, config, { [HUB]: kubeconfig }, url), resync: { intervalMs: 0 }, log: jsonLog("relay", "quiet") });
    try {
      await relay.ready;
      const c = `cluster-${suffix()}`;
      await admin.create(ManagedClusterResource, { metadata: { name: c }, spec: { hubAcceptsClient: true } });
      await admin.patch(ManagedClusterResource, c, { metadata: { labels: { still: "unaccepted" } } });
      await eventually(() => expect(relay.status().sources.find((s) => s.name.includes("managedclusters"))!.objects).toBeGreaterThan(0));
      await new Promise((r) => setTimeout(r, 500));
      expect(received.filter((e) => e.endsWith(` ${c}`))).toEqual([]);
      await admin.patch(ManagedClusterResource, c, { status: { conditions: setCondition([], accepted, new Date()) } }, { subresource: "status" });
      await eventually(() => expect(received).toContain(`dev.knative.apiserver.resource.update ${c}`));
    } finally {
      await relay.stop();
      await new Promise((r) => sink.close(r));
    }
  });
});

describe("a stale view never writes", () => {
  it("a handed lease that was renewed since makes the reconcile re-read instead of marking the cluster Unknown", async () => {
    const c = await seed(400);
    const stale = (await admin.get<Lease>(LeaseResource, ManagedClusterLeaseName, c))!;
    await renew(c);
    const cluster = (await admin.get<ManagedCluster>(ManagedClusterResource, c))!;
    const rec = recordingRequests(testIo({ [HUB]: kubeconfig }, config));
    // the relay's view: the lease as it was 400 s after its last renewal, the cluster as it is
    const reply = await handleEvent(fn.spec, rec.io, handing(cluster, ManagedClusterResource, { objects: [handed(ManagedClusterResource, cluster), handed(LeaseResource, stale)], lists: [] }));
    expect(reply.statusCode, reply.body).toBe(204);
    expect(await available(c)).not.toBe("Unknown");
    // it did judge the stale lease expired, and went to the API before writing: a confirming read
    expect(rec.requests.some((r) => r.method === "GET" && r.path.endsWith(`/namespaces/${c}/leases/${ManagedClusterLeaseName}`))).toBe(true);
  });

  // The attacker is anyone who can reach the function's endpoint (a pod beside it, or the Broker's
  // ingress): no Kubernetes identity at all. What it hands is a real object's name and resourceVersion
  // with content of its own.
  it("does not mark a cluster whose agent renews Unknown when anyone who can reach the function posts an event handing a forged lease at the lease's real resourceVersion", async () => {
    const c = await seed();
    // as its agent reports it
    const joined = (await admin.get<ManagedCluster>(ManagedClusterResource, c))!;
    const availableTrue = { type: ManagedClusterConditionType.Available, status: "True", reason: ManagedClusterReason.ManagedClusterAvailable, message: "Managed cluster is available" } as const;
    await admin.patch(ManagedClusterResource, c, { status: { conditions: setCondition(joined.status?.conditions ?? [], availableTrue, new Date()) } }, { subresource: "status" });
    const lease = (await admin.get<Lease>(LeaseResource, ManagedClusterLeaseName, c))!;
    const cluster = (await admin.get<ManagedCluster>(ManagedClusterResource, c))!;
    const forged: Lease = { ...lease, spec: { ...lease.spec, renewTime: microTime(new Date(Date.now() - 3_600_000)) } };
    const server = await startFunction(fn.spec, testIo({ [HUB]: kubeconfig }, config));
    try {
      const res = await postEvent(server.url, handing(cluster, ManagedClusterResource, { objects: [handed(ManagedClusterResource, cluster), handed(LeaseResource, forged)], lists: [] }));
      expect(res.status).toBeLessThan(300);
    } finally {
      await server.close();
    }
    // judged again from the API: the lease is fresh, so the cluster is Available
    expect(await available(c)).toBe("True");
  });

  it("a cluster handed at an older resourceVersion than one already judged is read from the API instead", async () => {
    const c = await seed();
    const older = (await admin.get<ManagedCluster>(ManagedClusterResource, c))!;
    const newer = await admin.patch<ManagedCluster>(ManagedClusterResource, c, { metadata: { labels: { touched: "yes" } } });
    const lease = (await admin.get<Lease>(LeaseResource, ManagedClusterLeaseName, c))!;
    const rec = recordingRequests(testIo({ [HUB]: kubeconfig }, config));
    const mcPath = `/managedclusters/${c}`;
    const first = await handleEvent(fn.spec, rec.io, handing(newer, ManagedClusterResource, { objects: [handed(ManagedClusterResource, newer), handed(LeaseResource, lease)], lists: [] }));
    expect(first.statusCode, first.body).toBe(204);
    const afterFirst = rec.requests.filter((r) => r.method === "GET" && r.path.endsWith(mcPath)).length;
    const second = await handleEvent(fn.spec, rec.io, handing(older, ManagedClusterResource, { objects: [handed(ManagedClusterResource, older), handed(LeaseResource, lease)], lists: [] }));
    expect(second.statusCode, second.body).toBe(204);
    expect(rec.requests.filter((r) => r.method === "GET" && r.path.endsWith(mcPath)).length).toBe(afterFirst + 1);
  });

  it("a shared role handed as absent (conditional) but present with other rules is put right by the acceptor's create-then-read path, not left as found", async () => {
    const acceptorIdentity = await readyIdentity(hub.cluster, acceptor.spec.name, [ManagedClusterResource]);
    const c = `cluster-${suffix()}`;
    await admin.create(ManagedClusterResource, { metadata: { name: c }, spec: { hubAcceptsClient: true } });
    // an unlabelled copy of the shared registration role, missing its rules: the relay's labelled cache
    // cannot hold it, so the event hands it as absent
    await admin.delete(ClusterRoleResource, HubRbacName.RegistrationClusterRole);
    await admin.create(ClusterRoleResource, { metadata: { name: HubRbacName.RegistrationClusterRole }, rules: [] });
    const cluster = (await admin.get<ManagedCluster>(ManagedClusterResource, c))!;
    const absent = (name: string) => ({ cluster: HUB, apiVersion: "rbac.authorization.k8s.io/v1", kind: "ClusterRole", name, conditional: true });
    const rec = recordingRequests(testIo({ [HUB]: acceptorIdentity }, { hubCluster: HUB, autoApprovalUsers: [] }));
    const event = withObserved(relayObjectEvent({ verb: "update", mode: "Resource", cluster: HUB, server: "https://hub.invalid", resource: ManagedClusterResource, object: cluster, clock: systemClock, overrides: {} }), { objects: [handed(ManagedClusterResource, cluster), absent(HubRbacName.RegistrationClusterRole)], lists: [] });
    const reply = await handleEvent(acceptor.spec, rec.io, { ...event });
    expect(reply.statusCode, reply.body).toBe(204);
    const role = await admin.get<KubeObject & { rules?: unknown[] }>(ClusterRoleResource, HubRbacName.RegistrationClusterRole);
    expect(role?.rules?.length).toBeGreaterThan(0);
  });

  it("a cluster another writer labelled after the event handed it is judged again with the rest of what was handed and the cluster as the API server answered the confirming read: that one read of it and no other, the bindings handed absent and the lease created without a read", async () => {
    const acceptorIdentity = await readyIdentity(hub.cluster, acceptor.spec.name, [ManagedClusterResource]);
    const c = `cluster-${suffix()}`;
    const cluster = await admin.create<ManagedCluster>(ManagedClusterResource, { metadata: { name: c }, spec: { hubAcceptsClient: true } });
    await admin.patch(ManagedClusterResource, c, { metadata: { labels: { "cluster.open-cluster-management.io/clusterset": "default" } } });
    const rbac = "rbac.authorization.k8s.io/v1";
    const absent = (kind: string, name: string, namespace?: string) => ({ cluster: HUB, apiVersion: rbac, kind, name, ...(namespace ? { namespace } : {}), conditional: true });
    const observed: Observed = {
      objects: [
        handed(ManagedClusterResource, cluster),
        { cluster: HUB, apiVersion: "v1", kind: "Namespace", name: c },
        absent("ClusterRole", HubRbacName.cluster(c)),
        absent("ClusterRoleBinding", HubRbacName.cluster(c)),
        absent("RoleBinding", HubRbacName.registrationRoleBinding(c), c),
        absent("RoleBinding", HubRbacName.workRoleBinding(c), c),
      ],
      lists: [],
    };
    const rec = recordingRequests(testIo({ [HUB]: acceptorIdentity }, { hubCluster: HUB, autoApprovalUsers: [] }));
    const reply = await handleEvent(acceptor.spec, rec.io, handing(cluster, ManagedClusterResource, observed));
    expect(reply.statusCode, reply.body).toBe(204);
    const gets = rec.requests.filter((r) => r.method === "GET").map((r) => r.path.split("?")[0]!);
    // the first judgement's confirming read finds the label; the second judges from that read's answer,
    // the API server's own, without reading it again
    expect(gets.filter((p) => p === resourcePath(ManagedClusterResource, { name: c }))).toHaveLength(1);
    expect((await admin.get<ManagedCluster>(ManagedClusterResource, c))?.metadata.labels).toEqual(expect.objectContaining({ "cluster.open-cluster-management.io/clusterset": "default" }));
    // what was handed absent of the other kinds still counts: the bindings are created, never read
    expect(gets.filter((p) => p.startsWith(resourcePath(RoleBindingResource, { namespace: c })) || p.startsWith(resourcePath(ClusterRoleBindingResource)))).toEqual([]);
    expect(rec.writes()).toEqual(expect.arrayContaining([`POST ${resourcePath(RoleBindingResource, { namespace: c })}`, `POST ${resourcePath(ClusterRoleBindingResource)}`]));
    expect(await admin.get(RoleBindingResource, HubRbacName.workRoleBinding(c), c)).toBeDefined();
    // the stale judgement went no further than its first writes: it never looked for a lease in a
    // namespace it did not create (the second judgement created both, the lease without a read)
    expect(gets.filter((p) => p.startsWith(resourcePath(LeaseResource, { namespace: c })))).toEqual([]);
  });

  // With auto-approval on, a cluster not yet auto-accepted is judged by its bootstrap CSRs, a list the
  // handed state does not answer: the API server's answer to it is the next judgement's too.
  it("a judgement again after a stale one lists nothing the first one listed: with auto-approval on, the cluster's CSRs are listed once for the delivery", async () => {
    const acceptorIdentity = await readyIdentity(hub.cluster, acceptor.spec.name, [ManagedClusterResource]);
    const c = `cluster-${suffix()}`;
    const cluster = await admin.create<ManagedCluster>(ManagedClusterResource, { metadata: { name: c }, spec: { hubAcceptsClient: true } });
    await admin.patch(ManagedClusterResource, c, { metadata: { labels: { "cluster.open-cluster-management.io/clusterset": "default" } } });
    const rec = recordingRequests(testIo({ [HUB]: acceptorIdentity }, { hubCluster: HUB, autoApprovalUsers: ["system:bootstrap:nobody"] }));
    const reply = await handleEvent(acceptor.spec, rec.io, handing(cluster, ManagedClusterResource, { objects: [handed(ManagedClusterResource, cluster)], lists: [] }));
    expect(reply.statusCode, reply.body).toBe(204);
    const paths = rec.requests.filter((r) => r.method === "GET").map((r) => r.path.split("?")[0]!);
    // the first judgement's confirming read found the label, so the cluster was judged twice
    expect(paths.filter((p) => p === resourcePath(ManagedClusterResource, { name: c }))).toHaveLength(1);
    expect(paths.filter((p) => p === resourcePath(CertificateSigningRequestResource))).toHaveLength(1);
    expect(findCondition((await admin.get<ManagedCluster>(ManagedClusterResource, c))?.status?.conditions, ManagedClusterConditionType.HubAccepted)?.status).toBe("True");
  });

  // A ClusterRole labelled aggregate-to-admin lends its rules to every namespace's admins.
  it("never writes back a shared role that anyone who can reach the acceptor hands present with forged labels at its real resourceVersion", async () => {
    const acceptorIdentity = await readyIdentity(hub.cluster, acceptor.spec.name, [ManagedClusterResource]);
    const c = `cluster-${suffix()}`;
    await admin.create(ManagedClusterResource, { metadata: { name: c }, spec: { hubAcceptsClient: true } });
    // the shared registration role, missing its rules: the acceptor writes it
    await admin.delete(ClusterRoleResource, HubRbacName.RegistrationClusterRole);
    const real = await admin.create<KubeObject & { rules?: unknown[] }>(ClusterRoleResource, { metadata: { name: HubRbacName.RegistrationClusterRole }, rules: [] });
    const forged = { ...real, metadata: { ...real.metadata, labels: { "rbac.authorization.k8s.io/aggregate-to-admin": "true" } } };
    const cluster = (await admin.get<ManagedCluster>(ManagedClusterResource, c))!;
    const present = { cluster: HUB, apiVersion: "rbac.authorization.k8s.io/v1", kind: "ClusterRole", name: HubRbacName.RegistrationClusterRole, object: forged, conditional: true };
    const event = withObserved(relayObjectEvent({ verb: "update", mode: "Resource", cluster: HUB, server: "https://hub.invalid", resource: ManagedClusterResource, object: cluster, clock: systemClock, overrides: {} }), { objects: [handed(ManagedClusterResource, cluster), present], lists: [] });
    const reply = await handleEvent(acceptor.spec, testIo({ [HUB]: acceptorIdentity }, { hubCluster: HUB, autoApprovalUsers: [] }), { ...event });
    expect(reply.statusCode, reply.body).toBeLessThan(300);
    const role = await admin.get<KubeObject & { rules?: unknown[] }>(ClusterRoleResource, HubRbacName.RegistrationClusterRole);
    expect(role?.rules?.length).toBeGreaterThan(0);
    expect((role?.metadata.labels as Record<string, string> | undefined)?.["rbac.authorization.k8s.io/aggregate-to-admin"]).toBeUndefined();
  });

  it("confirms a handed object whole before a write carrying its resourceVersion: unchanged, the GET and then the PUT; changed since, or forged at its real resourceVersion, a 409 with no PUT sent", async () => {
    const c = await seed();
    const cluster = (await admin.get<ManagedCluster>(ManagedClusterResource, c))!;
    // the lease monitor's own write: a status update, as the handed cluster was read
    const judge = (clients: ReturnType<typeof observedClients>, message: string) =>
      clients.cluster(HUB).get<ManagedCluster>(ManagedClusterResource, c).then((mc) => {
        const conditions = setCondition(mc!.status?.conditions ?? [], { type: "Judged", status: "True", reason: "Test", message }, new Date());
        return clients.cluster(HUB).update(ManagedClusterResource, { ...mc!, status: { ...mc!.status, conditions } }, "status");
      });
    const handedAs = (object: ManagedCluster): Observed => ({ objects: [handed(ManagedClusterResource, object)], lists: [] });
    const fresh = recordingRequests(testIo({ [HUB]: kubeconfig }, config));
    await judge(observedClients("test", fresh.io.cluster, handedAs(cluster), new Map()), "fresh");
    expect(fresh.requests.map((r) => r.method)).toEqual(["GET", "PUT"]);
    // the same handed view, now stale: the confirming read finds it, and no write goes
    const stale = recordingRequests(testIo({ [HUB]: kubeconfig }, config));
    await expect(judge(observedClients("test", stale.io.cluster, handedAs(cluster), new Map()), "stale")).rejects.toMatchObject({ code: 409 });
    expect(stale.requests.map((r) => r.method)).toEqual(["GET"]);
    // content of someone's own at the object's current resourceVersion: found the same way
    const now = (await admin.get<ManagedCluster>(ManagedClusterResource, c))!;
    const forged = { ...now, spec: { ...now.spec, hubAcceptsClient: false } };
    const forgery = recordingRequests(testIo({ [HUB]: kubeconfig }, config));
    await expect(judge(observedClients("test", forgery.io.cluster, handedAs(forged), new Map()), "forged")).rejects.toMatchObject({ code: 409 });
    expect(forgery.requests.map((r) => r.method)).toEqual(["GET"]);
    expect(findCondition((await admin.get<ManagedCluster>(ManagedClusterResource, c))!.status?.conditions, "Judged")?.message).toBe("fresh");
  });

  it("answers a list narrowed by metadata.namespace from a handed list without a request, and sends any other field selector (one with !=) to the API", async () => {
    const [a, b] = [await seed(), await seed()];
    const { items } = await admin.list<Lease>(LeaseResource, { labelSelector: ClusterLabel.ClusterName });
    const observed: Observed = { objects: [], lists: [{ cluster: HUB, apiVersion: "coordination.k8s.io/v1", kind: "Lease", labelSelector: ClusterLabel.ClusterName, items }] };
    const rec = recordingRequests(testIo({ [HUB]: kubeconfig }, config));
    const clients = observedClients("test", rec.io.cluster, observed, new Map());
    const narrowed = await clients.cluster(HUB).list<Lease>(LeaseResource, { labelSelector: ClusterLabel.ClusterName, fieldSelector: `metadata.namespace=${a}` });
    expect(narrowed.items.map((l) => l.metadata.namespace)).toEqual([a]);
    expect(rec.requests).toEqual([]);
    const other = await clients.cluster(HUB).list<Lease>(LeaseResource, { labelSelector: ClusterLabel.ClusterName, fieldSelector: `metadata.name=${ManagedClusterLeaseName},metadata.namespace=${b}` });
    expect(other.items.map((l) => l.metadata.namespace)).toEqual([b]);
    expect(rec.requests).toEqual([]);
    await clients.cluster(HUB).list<Lease>(LeaseResource, { labelSelector: ClusterLabel.ClusterName, fieldSelector: "metadata.name!=nobody" });
    expect(rec.requests.map((r) => r.method)).toEqual(["GET"]);
  });

  it("refuses a handed object that names another object than its entry (400, nothing judged)", () => {
    const parsed = parseEvent({
      specversion: "1.0",
      id: "x",
      source: "s",
      type: "dev.knative.sources.ping",
      cluster: HUB,
      ocmfstate: "v1",
      data: { observed: { objects: [{ cluster: HUB, apiVersion: "v1", kind: "ConfigMap", namespace: "a", name: "one", object: { metadata: { name: "two", namespace: "a" } } }], lists: [] } },
    });
    expect(parsed).toMatchObject({ ok: false, reason: expect.stringContaining("names another object") });
  });
});
