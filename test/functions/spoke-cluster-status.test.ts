// spoke-cluster-status: Available from the spoke API server's own health endpoints (False only once
// failures have lasted 20 s), version, capacity and allocatable from nodes, the exposed ClusterClaims,
// and no write while the hub says the clocks are out of sync; the recheck interval and claim limit of
// the active agent settings, and the statusSync health record. One fleet: a hub and a spoke joined by
// the real registration functions; then the spoke's relay and heartbeat stop and the tests call the
// function themselves, under its own identity, with a clock they move.
import { describe, it, expect, beforeAll, afterAll, beforeEach } from "vitest";
import { createServer as createTcpServer } from "node:net";
import { parse, stringify } from "yaml";
import { startFleet, type Fleet } from "../../dev/local/fleet.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { ClusterRoleBindingResource, ConfigMapResource, EventResource, LeaseResource, NodeResource, SecretResource } from "../../shared/api/kube.ts";
import { ClusterClaimResource, ClusterLabel, ManagedClusterConditionType, ManagedClusterLeaseName, ManagedClusterReason, ManagedClusterResource, type ManagedCluster } from "../../shared/api/cluster.ts";
import type { Lease } from "../../shared/cluster-lease.ts";
import { AgentNamespaceDefault, BootstrapSecretName, HubKubeconfigSecretName, HubSecretKey } from "../../shared/api/registration.ts";
import { HealthKey } from "../../shared/agent-config.ts";
import { bootstrappedHubClient } from "../../shared/hub-credentials.ts";
import { classifyError } from "../../shared/kube/errors.ts";
import { HubRbacName } from "../../shared/api/register.ts";
import { ClusterEventReason, ManagedClusterMessage } from "../../shared/api/health.ts";
import { availableEventMessage, ClockOutOfSyncMessage, SpokeStatusEventReason, unavailableEventMessage } from "../../shared/api/spoke-status.ts";
import { findCondition, setCondition } from "../../shared/conditions.ts";
import { manualClock, microTime, rfc3339, type Clock } from "../../shared/clock.ts";
import { done, handleEvent, reconcileKey, serve, type Io } from "../../shared/harness.ts";
import type { FunctionEvent } from "../../shared/events.ts";
import { sumResourceLists } from "../../shared/quantity.ts";
import fn, { type Config, type Status } from "../../functions/spoke-cluster-status/reconcile.ts";
import { failureDetail, probeKubeAPIServer, probeStateName, staleLease } from "../../functions/spoke-cluster-status/steps/available.ts";
import { identityFor, objectEvent, postEvent, startFunctionServer, testIo, tickEvent } from "../support/functions.ts";
import { activate, healthRecord, withoutAgentConfig } from "../support/agent-checkpoint.ts";
import { eventually } from "../support/eventually.ts";

// Own timeouts, not the runner's defaults: starting the fleet (control planes, functions, relays) and
// joining take up to a minute or two on a loaded 2-core machine; a test waits up to 30 s for the spoke's
// status on a live fleet.
const FLEET_START_MS = 240_000;
const FLEET_TEST_MS = 90_000;

const CLUSTER = "c1";
const { Available, ClockSynced, Joined } = ManagedClusterConditionType;
const PROBE_ROLE = "open-cluster-management:functions:spoke-cluster-status:kube-apiserver-probe";
const suffix = () => Math.random().toString(36).slice(2, 7);

type Cluster = ManagedCluster & KubeObject;
type ResourceList = Record<string, string>;

let fleet: Fleet;
let spokeAdmin: KubeClient;
let fnKubeconfig: string;

beforeAll(async () => {
  // nodes: false: the tests create the nodes whose sums they check.
  fleet = await startFleet({ spokes: [{ name: CLUSTER, autoApprove: true }], resyncMs: 2_000, nodes: false });
  await eventually(async () => expect(findCondition((await hubCluster())?.status?.conditions, Joined)?.status).toBe("True"), { timeoutMs: 45_000 });
  // From here on the tests' calls are the function's only invocations for this cluster (a relay's stop
  // lets a delivery already sent finish, so none is still running).
  await fleet.stopRelay(CLUSTER);
  await fleet.stopRelay("hub"); // the hub's lease monitor would set back the ClockSynced the tests write
  await fleet.stopHeartbeat(CLUSTER); // its own health record would move agent-health's resourceVersion
  spokeAdmin = KubeClient.fromKubeconfig(fleet.clusters.get(CLUSTER).adminKubeconfig);
  fnKubeconfig = await identityFor(fleet.clusters.get(CLUSTER), fn.spec.name);
}, FLEET_START_MS);

afterAll(async () => {
  spokeAdmin?.close();
  await fleet?.stop();
});

// The heartbeat is stopped: the tests renew the cluster lease as it would, so that the function may
// claim availability (it claims none while the lease is stale, issue 24).
beforeEach(async () => {
  await renewLease(new Date());
});

async function renewLease(at: Date): Promise<void> {
  const lease = (await fleet.hub.get<Lease>(LeaseResource, ManagedClusterLeaseName, CLUSTER))!;
  await fleet.hub.update(LeaseResource, { ...lease, spec: { ...lease.spec, renewTime: microTime(at) } });
}

const key = { cluster: CLUSTER, name: CLUSTER };
const ioWith = (o: { clock?: Clock; kubeconfig?: string; config?: Partial<Config> } = {}): Io<Config> =>
  testIo({ [CLUSTER]: o.kubeconfig ?? fnKubeconfig }, fn.definition.config.parse({ managementCluster: CLUSTER, clusterName: CLUSTER, ...o.config }), o.clock ?? manualClock());
const run = (io: Io<Config>) => reconcileKey(fn.spec, io, key);

const hubCluster = () => fleet.hub.get<Cluster>(ManagedClusterResource, CLUSTER);
const statusOf = async (): Promise<Status> => (await hubCluster())?.status ?? {};
const conditionOf = async (type: string) => findCondition((await statusOf()).conditions, type);
const hubEvents = async (reason: string) =>
  (await fleet.hub.list<KubeObject & { message?: string; type?: string }>(EventResource, { namespace: CLUSTER, fieldSelector: `reason=${reason}` })).items;

// What a hub admin would do by hand: set the status to exactly this (PUT, so removed keys go).
async function replaceHubStatus(change: (s: Status) => void): Promise<void> {
  const c = (await hubCluster())!;
  const status: Status = structuredClone(c.status ?? {});
  change(status);
  await fleet.hub.update(ManagedClusterResource, { ...c, status }, "status");
}

type NodeSpec = { capacity: ResourceList; allocatable: ResourceList; unschedulable?: boolean };

// No kubelet runs on the test spoke: nodes are created bare and given a status through the subresource.
async function createNodes(nodes: Record<string, NodeSpec>): Promise<string[]> {
  const id = suffix();
  const names: string[] = [];
  for (const [name, n] of Object.entries(nodes)) {
    const full = `${id}-${name}`;
    await spokeAdmin.create(NodeResource, { metadata: { name: full }, spec: n.unschedulable ? { unschedulable: true } : {} });
    await spokeAdmin.patch(NodeResource, full, { status: { capacity: n.capacity, allocatable: n.allocatable } }, { subresource: "status" });
    names.push(full);
  }
  return names;
}
const deleteNodes = (names: readonly string[]) => Promise.all(names.map((n) => spokeAdmin.delete(NodeResource, n)));

describe("while the hub refuses the cluster's identity", { timeout: FLEET_TEST_MS }, () => {
  it("answers done at the first refusal, with no wait or retry and the refusal logged, writes nothing to the hub, and writes again once the grant is back", async () => {
    const binding = (await fleet.hub.get<KubeObject>(ClusterRoleBindingResource, HubRbacName.cluster(CLUSTER)))!;
    const lines: { msg: string; reason?: string }[] = [];
    const log = { info: (f: object, msg: string) => lines.push({ msg, ...f }), warn: (f: object, msg: string) => lines.push({ msg, ...f }), error: (f: object, msg: string) => lines.push({ msg, ...f }) };
    const io = { ...ioWith(), log };
    await fleet.hub.delete(ClusterRoleBindingResource, HubRbacName.cluster(CLUSTER));
    try {
      const got = await bootstrappedHubClient(io.cluster(CLUSTER), io.config, new Date());
      if (!("hub" in got)) throw new Error(`the agent has no hub client: ${got.reason}`);
      // the authorizer has seen the binding go
      await eventually(async () => expect(classifyError(await got.hub.get(ManagedClusterResource, CLUSTER).then(() => "allowed", (e: unknown) => e))).toBe("forbidden"));
      const before = (await hubCluster())!.metadata.resourceVersion;
      let runs = 0;
      const counted = { ...fn.spec, reconcile: (i: Io<Config>, k: typeof key) => (runs++, fn.spec.reconcile(i, k)) };
      expect(await reconcileKey(counted, io, key)).toEqual(done);
      expect(runs).toBe(1);
      expect(lines.find((l) => l.reason?.includes("does not grant"))?.reason).toContain(`system:open-cluster-management:${CLUSTER}:`);
      expect((await hubCluster())!.metadata.resourceVersion).toBe(before);
    } finally {
      await fleet.hub.create(ClusterRoleBindingResource, { metadata: { name: binding.metadata.name, labels: binding.metadata.labels }, roleRef: (binding as KubeObject & { roleRef: unknown }).roleRef, subjects: (binding as KubeObject & { subjects: unknown }).subjects });
    }
    // with the grant back, the same reconcile reads the cluster again and sees no refusal
    await eventually(async () => {
      lines.length = 0;
      expect(await reconcileKey(fn.spec, io, key)).toEqual(done);
      expect(lines.filter((l) => l.reason?.includes("does not grant"))).toEqual([]);
    });
  });
});

describe("quantities", { timeout: FLEET_TEST_MS }, () => {
  // Node resources sum as apimachinery's Quantity.Add and String() would: the first operand's format.
  it.each([
    { values: ["2", "500m"], sum: "2500m" },
    { values: ["100m", "900m"], sum: "1" },
    { values: ["3.5"], sum: "3500m" },
    { values: ["4Gi", "2Gi"], sum: "6Gi" },
    { values: ["512Mi", "512Mi"], sum: "1Gi" },
    { values: ["1Gi", "1024Ki"], sum: "1025Mi" },
    { values: ["1.5Gi"], sum: "1536Mi" },
    { values: ["1Ki", "1"], sum: "1025" },
    { values: ["1", "1Gi"], sum: "1073741825" },
    { values: ["0", "1Gi"], sum: "1Gi" },
    { values: ["0.5Ki"], sum: "512" },
    { values: ["1.5M"], sum: "1500k" },
    { values: ["1e3", "1e3"], sum: "2e3" },
    { values: ["0.1n"], sum: "1n" },
    { values: ["110", "110", "10"], sum: "230" },
  ])("sums $values to $sum", ({ values, sum }) => {
    expect(sumResourceLists(values.map((v) => ({ memory: v })))).toEqual({ memory: sum });
  });
});

describe("which events wake the function", { timeout: FLEET_TEST_MS }, () => {
  // a ClusterClaim's apiVersion is its group's, as a real event carries it (the SDK matches kinds by group)
  const apiVersionOf = (kind: string) => (kind === ClusterClaimResource.kind ? `${ClusterClaimResource.group}/${ClusterClaimResource.version}` : "v1");
  const event = (cluster: string, kind: string, name: string, namespace?: string): FunctionEvent => ({ type: "object", verb: "update", cluster, ref: { apiVersion: apiVersionOf(kind), kind, name, namespace } });
  it.each([
    { name: "a node on the spoke", event: event(CLUSTER, "Node", "n1"), wakes: true },
    { name: "a ClusterClaim on the spoke", event: event(CLUSTER, "ClusterClaim", "id.k8s.io"), wakes: true },
    { name: "a node on another cluster", event: event("hub", "Node", "n1"), wakes: false },
    { name: "a ConfigMap on the spoke", event: event(CLUSTER, "ConfigMap", "x", AgentNamespaceDefault), wakes: false },
  ])("$name wakes the cluster: $wakes", async ({ event, wakes }) => {
    const keys = await fn.spec.keys(event, ioWith());
    expect(keys).toEqual(wakes ? [key] : { skip: expect.any(String) });
  });
});

describe("availability", { timeout: FLEET_TEST_MS }, () => {
  it("marks the cluster Available and writes the spoke API server's version", async () => {
    const clock = manualClock();
    expect(await run(ioWith({ clock }))).toEqual(done);
    const status = await statusOf();
    expect(findCondition(status.conditions, Available)).toMatchObject({ status: "True", reason: ManagedClusterReason.ManagedClusterAvailable, message: "Managed cluster is available" });
    const version = await spokeAdmin.request<{ gitVersion: string }>("GET", "/version");
    expect(status.version).toEqual({ kubernetes: version.gitVersion });
  });

  // The real API server answers 403 on /livez and on /healthz to an identity that holds the function's
  // RBAC minus the health-endpoint grant, once the stock grants to every authenticated user are gone.
  it("keeps Available through probe failures shorter than 20 s and writes False once they have lasted 20 s", async () => {
    const clock = manualClock();
    await run(ioWith({ clock }));
    const availableBefore = await conditionOf(Available);
    expect(availableBefore?.status).toBe("True");
    const denied = ioWith({ clock, kubeconfig: await probeDeniedIdentity() });

    await withoutStockHealthGrants(denied, async () => {
      const rv = (await hubCluster())!.metadata.resourceVersion;
      const first = await handleEvent(fn.spec, denied, tickEvent());
      expect(first).toMatchObject({ statusCode: 204, headers: { "x-recheck-after-ms": "5000" } });
      expect((await hubCluster())!.metadata.resourceVersion).toBe(rv);
      const streak = await spokeAdmin.get<KubeObject & { data?: Record<string, string> }>(ConfigMapResource, probeStateName(CLUSTER), AgentNamespaceDefault);
      expect(streak?.data?.firstFailureTime).toBe(clock.now().toISOString());

      clock.advance(19_000);
      expect(await run(denied)).toEqual({ recheckInMs: 1_000 });
      expect(await conditionOf(Available)).toEqual(availableBefore);

      clock.advance(1_000);
      expect(await run(denied)).toEqual(done);
      expect(await conditionOf(Available)).toEqual({
        type: Available,
        status: "False",
        reason: ManagedClusterReason.ManagedClusterKubeAPIServerUnavailable,
        // client-go's text for a 403 whose body is JSON, which OCM prints
        message: "The kube-apiserver is not ok, status code: 403, unknown",
        lastTransitionTime: rfc3339(clock.now()),
      });
    });
    expect((await hubEvents(ClusterEventReason.Unavailable)).map((e) => [e.type, e.message])).toContainEqual(["Warning", unavailableEventMessage(CLUSTER)]);

    clock.advance(1_000);
    expect(await run(ioWith({ clock }))).toEqual(done);
    expect(await conditionOf(Available)).toMatchObject({ status: "True", reason: ManagedClusterReason.ManagedClusterAvailable, lastTransitionTime: rfc3339(clock.now()) });
    expect(await spokeAdmin.get(ConfigMapResource, probeStateName(CLUSTER), AgentNamespaceDefault)).toBeUndefined();
    expect((await hubEvents(ClusterEventReason.Available)).map((e) => [e.type, e.message])).toContainEqual(["Normal", availableEventMessage(CLUSTER)]);
  });
});

describe("the kube-apiserver's answer in the condition", { timeout: FLEET_TEST_MS }, () => {
  // OCM prints client-go's error for the answer, which quotes the body only when it is text.
  it.each([
    {
      name: "a failing /livez quotes the checks it lists",
      answer: { status: 500, contentType: "text/plain; charset=utf-8", body: "[+]ping ok\n[-]etcd failed: reason withheld\nlivez check failed\n" },
      detail: 'an error on the server ("[+]ping ok\\n[-]etcd failed: reason withheld\\nlivez check failed") has prevented the request from succeeding',
    },
    { name: "a refusal with a JSON Status reads unknown", answer: { status: 403, contentType: "application/json", body: '{"kind":"Status","code":403}' }, detail: "unknown" },
    { name: "an unauthenticated client is asked for credentials", answer: { status: 401, contentType: "application/json", body: "{}" }, detail: "the server has asked for the client to provide credentials" },
    { name: "an overloaded server is unable to handle the request", answer: { status: 503, contentType: "text/plain", body: "busy" }, detail: "the server is currently unable to handle the request" },
    { name: "an unreachable server gives the connection error", answer: { status: 0 as const, url: "https://127.0.0.1:1/livez", error: "connect ECONNREFUSED 127.0.0.1:1" }, detail: 'Get "https://127.0.0.1:1/livez": connect ECONNREFUSED 127.0.0.1:1' },
  ])("$name", ({ answer, detail }) => {
    expect(failureDetail(answer)).toBe(detail);
  });
});

// The function's own RBAC from its manifest, but without the binding that grants /livez and /healthz.
async function probeDeniedIdentity(): Promise<string> {
  const kubeconfig = await identityFor(fleet.clusters.get(CLUSTER), fn.spec.name, "-probe-denied");
  await spokeAdmin.delete(ClusterRoleBindingResource, `${PROBE_ROLE}-probe-denied`);
  return kubeconfig;
}

// Stock clusters let every authenticated user read the health endpoints; these bindings are emptied
// for the duration and put back after.
async function withoutStockHealthGrants(denied: Io<Config>, body: () => Promise<void>): Promise<void> {
  const names = ["system:discovery", "system:public-info-viewer"];
  const saved = await Promise.all(names.map((n) => spokeAdmin.get<KubeObject & { subjects?: unknown[] }>(ClusterRoleBindingResource, n)));
  try {
    for (const b of saved) await spokeAdmin.update(ClusterRoleBindingResource, { ...b!, subjects: [] });
    // RBAC reaches the authorizer through an informer: wait until the API server refuses.
    await eventually(async () => expect(await probeKubeAPIServer(denied.cluster(CLUSTER))).toMatchObject({ ok: false, statusCode: 403 }));
    await body();
  } finally {
    for (const b of saved) {
      const now = (await spokeAdmin.get<KubeObject>(ClusterRoleBindingResource, b!.metadata.name!))!;
      await spokeAdmin.update(ClusterRoleBindingResource, { ...now, subjects: b!.subjects });
    }
  }
}

describe("resources", { timeout: FLEET_TEST_MS }, () => {
  const a: NodeSpec = { capacity: { cpu: "2", memory: "4Gi", pods: "110", "ephemeral-storage": "100Gi" }, allocatable: { cpu: "1500m", memory: "3584Mi", pods: "110" } };
  const b: NodeSpec = { capacity: { cpu: "500m", memory: "2Gi", pods: "110" }, allocatable: { cpu: "500m", memory: "1536Mi", pods: "110" } };
  const cordoned: NodeSpec = { capacity: { cpu: "1", memory: "1024Ki", pods: "10" }, allocatable: { cpu: "1", memory: "1024Ki", pods: "10" }, unschedulable: true };

  type Row = { name: string; given: { nodes: Record<string, NodeSpec>; capacity?: ResourceList; allocatable?: ResourceList }; then: { capacity: ResourceList; allocatable: ResourceList } };
  it.each<Row>([
    {
      name: "sums capacity over every node and allocatable over the schedulable ones",
      given: { nodes: { a, b, c: cordoned } },
      then: { capacity: { cpu: "3500m", memory: "6145Mi", pods: "230", "ephemeral-storage": "100Gi" }, allocatable: { cpu: "2", memory: "5Gi", pods: "220" } },
    },
    {
      name: "keeps capacity entries no node reports, which other writers may add",
      given: { nodes: { a }, capacity: { "example.com/gpu": "4" } },
      then: { capacity: { ...a.capacity, "example.com/gpu": "4" }, allocatable: a.allocatable },
    },
    {
      name: "drops allocatable entries no schedulable node reports any more",
      given: { nodes: { a }, allocatable: { "hugepages-2Mi": "4Mi", cpu: "64" } },
      then: { capacity: a.capacity, allocatable: a.allocatable },
    },
  ])("$name", async ({ given, then }) => {
    await replaceHubStatus((s) => {
      s.capacity = given.capacity;
      s.allocatable = given.allocatable;
    });
    const nodes = await createNodes(given.nodes);
    try {
      expect(await run(ioWith())).toEqual(done);
      const status = await statusOf();
      expect(status.capacity).toEqual(then.capacity);
      expect(status.allocatable).toEqual(then.allocatable);
    } finally {
      await deleteNodes(nodes);
    }
  });
});

describe("claims", { timeout: FLEET_TEST_MS }, () => {
  const claim = (name: string, value: string, spokeOnly = false) => ({ name, value, spokeOnly });
  it.each([
    {
      name: "exposes every claim but the spoke-only ones, reserved names and suffixes first",
      given: {
        config: { reservedClaimSuffixes: ["reserved.example.com"] },
        claims: [claim("b-team", "blue"), claim("id.k8s.io", "c1-id"), claim("a-zone", "east"), claim("site.reserved.example.com", "lab"), claim("platform.open-cluster-management.io", "Other"), claim("local.example.com", "hidden", true)],
      },
      then: {
        claims: [
          { name: "id.k8s.io", value: "c1-id" },
          { name: "platform.open-cluster-management.io", value: "Other" },
          { name: "site.reserved.example.com", value: "lab" },
          { name: "a-zone", value: "east" },
          { name: "b-team", value: "blue" },
        ],
        truncated: undefined,
      },
    },
    {
      name: "exposes at most the configured number of custom claims and says how many were left out",
      given: {
        config: { maxCustomClusterClaims: 3 },
        claims: [claim("c-5", "5"), claim("c-4", "4"), claim("c-3", "3"), claim("c-2", "2"), claim("c-1", "1"), claim("id.k8s.io", "c1-id")],
      },
      then: {
        claims: [
          { name: "id.k8s.io", value: "c1-id" },
          { name: "c-1", value: "1" },
          { name: "c-2", value: "2" },
          { name: "c-3", value: "3" },
        ],
        truncated: "5 cluster claims are found. It exceeds the max number of custom cluster claims (3). 2 custom cluster claims are not exposed.",
      },
    },
  ])("$name", async ({ given, then }) => {
    for (const c of given.claims)
      await spokeAdmin.create(ClusterClaimResource, { metadata: { name: c.name, labels: c.spokeOnly ? { [ClusterLabel.SpokeOnly]: "" } : undefined }, spec: { value: c.value } });
    try {
      expect(await run(ioWith({ config: given.config }))).toEqual(done);
      expect((await statusOf()).clusterClaims).toEqual(then.claims);
      const notes = (await hubEvents(SpokeStatusEventReason.CustomClusterClaimsTruncated)).map((e) => e.message);
      if (then.truncated) expect(notes).toContain(then.truncated);
    } finally {
      await Promise.all(given.claims.map((c) => spokeAdmin.delete(ClusterClaimResource, c.name)));
    }
  });
});

describe("clock", { timeout: FLEET_TEST_MS }, () => {
  it("writes nothing while the hub says the clocks are out of sync, and records that it held back", async () => {
    const clock = manualClock();
    await run(ioWith({ clock }));
    const outOfSync = { type: ClockSynced, status: "False", reason: ManagedClusterReason.ManagedClusterClockOutOfSync, message: ManagedClusterMessage.ClockOutOfSync } as const;
    await replaceHubStatus((s) => (s.conditions = setCondition(s.conditions, outOfSync, clock.now())));
    const nodes = await createNodes({ big: { capacity: { cpu: "64" }, allocatable: { cpu: "63" } } }); // something to write
    try {
      const rv = (await hubCluster())!.metadata.resourceVersion;
      expect(await run(ioWith({ clock }))).toEqual(done);
      const after = (await hubCluster())!;
      expect(after.metadata.resourceVersion).toBe(rv);
      expect(after.status?.capacity?.cpu).not.toBe("64");
      expect((await hubEvents(SpokeStatusEventReason.ClockOutOfSync)).map((e) => e.message)).toContain(ClockOutOfSyncMessage);
    } finally {
      await replaceHubStatus((s) => (s.conditions = s.conditions?.filter((c) => c.type !== ClockSynced)));
      await deleteNodes(nodes);
    }
  });
});

describe("through the function runtime", { timeout: FLEET_TEST_MS }, () => {
  it("sums a new node's resources when the node's event arrives over HTTP", async () => {
    const io = ioWith();
    const server = await startFunctionServer(serve(fn.spec, () => io));
    const [node] = await createNodes({ solo: { capacity: { cpu: "8", memory: "32Gi" }, allocatable: { cpu: "7500m", memory: "30Gi" } } });
    try {
      const reply = await postEvent(server.url, objectEvent({ cluster: CLUSTER, object: { apiVersion: "v1", kind: "Node", metadata: { name: node! } }, verb: "add", mode: "ref" }));
      expect(reply.status).toBe(204);
      const status = await statusOf();
      expect(status.capacity).toMatchObject({ cpu: "8", memory: "32Gi" });
      expect(status.allocatable).toEqual({ cpu: "7500m", memory: "30Gi" });
    } finally {
      await server.close();
      await deleteNodes([node!]);
    }
  });
});

// Copies of the agent's secrets whose hub is an address nothing listens on: the function reads and
// judges them as it does the real ones, then cannot reach the hub.
async function unreachableHubConfig(): Promise<Partial<Config>> {
  const port = await new Promise<number>((resolve) => {
    const server = createTcpServer().listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
  const id = suffix();
  const names = { bootstrapSecret: `bootstrap-${id}`, hubSecret: `hub-kubeconfig-${id}` };
  const copies = [
    [BootstrapSecretName, names.bootstrapSecret],
    [HubKubeconfigSecretName, names.hubSecret],
  ] as const;
  for (const [from, to] of copies) {
    const secret = (await spokeAdmin.get<KubeObject & { data?: Record<string, string> }>(SecretResource, from, AgentNamespaceDefault))!;
    const kubeconfig = parse(Buffer.from(secret.data![HubSecretKey.Kubeconfig]!, "base64").toString()) as { clusters: { cluster: { server: string } }[] };
    for (const c of kubeconfig.clusters) c.cluster.server = `https://127.0.0.1:${port}`;
    const data = { ...secret.data, [HubSecretKey.Kubeconfig]: Buffer.from(stringify(kubeconfig)).toString("base64") };
    await spokeAdmin.create(SecretResource, { metadata: { name: to, namespace: AgentNamespaceDefault }, data });
  }
  return names;
}

describe("agent settings", { timeout: FLEET_TEST_MS }, () => {
  it("takes its recheck interval and claim limit from the active settings, changed without a restart", async () => {
    await withoutAgentConfig(spokeAdmin);
    const names = ["c-1", "c-2", "c-3"];
    for (const name of names) await spokeAdmin.create(ClusterClaimResource, { metadata: { name }, spec: { value: name } });
    const io = ioWith();
    const exposed = async () => (await statusOf()).clusterClaims?.map((c) => c.name);
    try {
      // install-time: no recheck of its own (the resync ticks bring it back), OCM's limit of 20
      expect(await run(io)).toEqual(done);
      expect(await exposed()).toEqual(names);

      await activate(spokeAdmin, { statusSyncIntervalSeconds: 7, clusterClaimLimit: 1 });
      expect(await run(io)).toEqual({ recheckInMs: 7_000 });
      expect(await exposed()).toEqual(["c-1"]);

      await activate(spokeAdmin, { statusSyncIntervalSeconds: 30, clusterClaimLimit: 2 });
      expect(await handleEvent(fn.spec, io, tickEvent())).toEqual({ statusCode: 204, headers: { "x-recheck-after-ms": "30000" } });
      expect(await exposed()).toEqual(["c-1", "c-2"]);

      await withoutAgentConfig(spokeAdmin);
      expect(await run(io)).toEqual(done);
      expect(await exposed()).toEqual(names);
    } finally {
      await withoutAgentConfig(spokeAdmin);
      await Promise.all(names.map((n) => spokeAdmin.delete(ClusterClaimResource, n)));
    }
  });

  it("records whether its status writes succeed under each config, rewriting the record only when the hash or the outcome changes", async () => {
    await withoutAgentConfig(spokeAdmin);
    const clock = manualClock();
    const io = ioWith({ clock });
    const cut = ioWith({ clock, config: await unreachableHubConfig() });
    const runs = async (target: Io<Config>, n: number) => {
      for (let i = 0; i < n; i++) {
        clock.advance(1_000);
        await run(target);
      }
    };
    try {
      const first = await activate(spokeAdmin, { statusSyncIntervalSeconds: 11 });
      await runs(io, 1);
      const ok = await healthRecord(spokeAdmin, HealthKey.StatusSync);
      expect(ok.record).toEqual({ hash: first, ok: true, since: clock.now().toISOString() });
      await runs(io, 3);
      expect(await healthRecord(spokeAdmin, HealthKey.StatusSync)).toEqual(ok); // same resourceVersion: nothing written

      clock.advance(1_000);
      await expect(run(cut)).rejects.toThrow(/ECONNREFUSED/);
      const failing = await healthRecord(spokeAdmin, HealthKey.StatusSync);
      expect(failing.record).toEqual({ hash: first, ok: false, since: clock.now().toISOString(), error: expect.stringContaining("ECONNREFUSED") });
      expect(failing.resourceVersion).not.toBe(ok.resourceVersion);
      for (let i = 0; i < 2; i++) {
        clock.advance(1_000);
        await expect(run(cut)).rejects.toThrow(/ECONNREFUSED/);
      }
      expect(await healthRecord(spokeAdmin, HealthKey.StatusSync)).toEqual(failing); // failing on: since stays the first failure

      await runs(io, 1);
      const recovered = await healthRecord(spokeAdmin, HealthKey.StatusSync);
      expect(recovered.record).toEqual({ hash: first, ok: true, since: clock.now().toISOString() });

      const second = await activate(spokeAdmin, { statusSyncIntervalSeconds: 12 });
      await runs(io, 1);
      const next = await healthRecord(spokeAdmin, HealthKey.StatusSync);
      expect(next.record).toEqual({ hash: second, ok: true, since: clock.now().toISOString() });
      expect(next.resourceVersion).not.toBe(recovered.resourceVersion);
      await runs(io, 2);
      expect(await healthRecord(spokeAdmin, HealthKey.StatusSync)).toEqual(next);
    } finally {
      await withoutAgentConfig(spokeAdmin);
    }
  });
});

// Issue 24, item 1: OCM's agent renews its lease in the process that writes Available; ours are apart,
// and with the heartbeat down the function's Available=True and the lease monitor's Unknown took turns
// on every ManagedCluster event.
describe("a stale lease", { timeout: FLEET_TEST_MS }, () => {
  const MINUTE = 60_000;
  const t0 = new Date("2026-01-01T00:00:00Z");
  const at = (ms: number) => new Date(t0.getTime() + ms);
  const lease = (renewedMs: number): Lease => ({ metadata: { name: ManagedClusterLeaseName, namespace: CLUSTER }, spec: { renewTime: microTime(at(renewedMs)) } });
  const verdict = (ms: number, reason: string = ManagedClusterReason.ManagedClusterLeaseUpdateStopped) => ({
    type: Available,
    status: "Unknown" as const,
    reason,
    message: ManagedClusterMessage.LeaseUpdateStopped,
    lastTransitionTime: rfc3339(at(ms)),
  });
  const cluster = (o: { conditions?: ReturnType<typeof verdict>[]; leaseDurationSeconds?: number } = {}): ManagedCluster => ({
    metadata: { name: CLUSTER },
    spec: { leaseDurationSeconds: o.leaseDurationSeconds ?? 60 },
    status: { conditions: o.conditions ?? [] },
  });
  it.each([
    { name: "a lease renewed a minute ago is not stale", lease: lease(0), cluster: cluster(), nowMs: MINUTE, stale: false },
    { name: "a lease is stale once five lease durations have passed since its renewal", lease: lease(0), cluster: cluster(), nowMs: 5 * MINUTE, stale: true },
    { name: "a lease is not stale a second before that", lease: lease(0), cluster: cluster(), nowMs: 5 * MINUTE - 1_000, stale: false },
    { name: "a lease duration of 0 counts as OCM's 60 s", lease: lease(0), cluster: cluster({ leaseDurationSeconds: 0 }), nowMs: 5 * MINUTE, stale: true },
    { name: "the hub's Unknown verdict with no renewal since is stale, whatever grace the hub runs with", lease: lease(0), cluster: cluster({ conditions: [verdict(2 * MINUTE)] }), nowMs: 2 * MINUTE, stale: true },
    { name: "a renewal after the hub's verdict answers it", lease: lease(2 * MINUTE + 1_000), cluster: cluster({ conditions: [verdict(2 * MINUTE)] }), nowMs: 2 * MINUTE + 1_000, stale: false },
    { name: "an Unknown for another reason is no verdict on the lease", lease: lease(0), cluster: cluster({ conditions: [verdict(2 * MINUTE, "SomethingElse")] }), nowMs: 2 * MINUTE, stale: false },
    { name: "no lease and the hub's verdict is stale", lease: undefined, cluster: cluster({ conditions: [verdict(0)] }), nowMs: 0, stale: true },
    { name: "no lease and no verdict says nothing", lease: undefined, cluster: cluster(), nowMs: 0, stale: false },
  ])("$name", ({ lease, cluster, nowMs, stale }) => {
    expect(staleLease({ lease, cluster, now: at(nowMs) }) !== undefined).toBe(stale);
  });

  it("claims no Available while the hub says Unknown and the lease has not been renewed since, asks to look again one lease duration later, and claims it once the lease is renewed", async () => {
    const clock = manualClock();
    await renewLease(clock.now());
    const io = ioWith({ clock });
    await run(io);
    expect((await conditionOf(Available))?.status).toBe("True");

    // five lease durations later the monitor has said Unknown, as the hub's lease monitor writes it
    clock.advance(300_000);
    const unknown = { type: Available, status: "Unknown", reason: ManagedClusterReason.ManagedClusterLeaseUpdateStopped, message: ManagedClusterMessage.LeaseUpdateStopped } as const;
    await replaceHubStatus((s) => (s.conditions = setCondition(s.conditions, unknown, clock.now())));
    const rv = (await hubCluster())!.metadata.resourceVersion;
    for (let i = 0; i < 3; i++) {
      clock.advance(1_000);
      expect(await handleEvent(fn.spec, io, objectEvent({ cluster: "hub", object: { apiVersion: "cluster.open-cluster-management.io/v1", kind: "ManagedCluster", ...(await hubCluster())! } }))).toMatchObject({ statusCode: 204 });
    }
    expect((await hubCluster())!.metadata.resourceVersion).toBe(rv);
    expect(await conditionOf(Available)).toMatchObject(unknown);
    // no renewal wakes the function: it looks again when a live heartbeat will have renewed, one lease
    // duration on (this fleet's clusters have OCM's 60 s)
    expect((await hubCluster())!.spec?.leaseDurationSeconds ?? 60).toBe(60);
    expect(await run(io)).toEqual({ recheckInMs: 60_000 });

    clock.advance(1_000);
    await renewLease(clock.now());
    expect(await run(io)).toEqual(done);
    expect(await conditionOf(Available)).toMatchObject({ status: "True", reason: ManagedClusterReason.ManagedClusterAvailable, lastTransitionTime: rfc3339(clock.now()) });
  });

  // The issue's own test, with every part real: the fleet's functions and relays run, the heartbeat
  // stops, and every write to the ManagedCluster is watched for a window of many lease periods and
  // relay resyncs. 2 s leases (OCM's minimum is 1): the hub says Unknown after 10 s, and the window
  // is the minute, 30 lease periods and as many resync ticks.
  it("with the heartbeat stopped and the functions and relays running, the hub's Unknown is written once in a minute of ManagedCluster writes and no Available=True follows it; a restarted heartbeat brings True back", async () => {
    const leaseDurationSeconds = 2;
    await fleet.hub.patch(ManagedClusterResource, CLUSTER, { spec: { leaseDurationSeconds } });
    const writes: { resourceVersion?: string; available?: string }[] = [];
    let watch: { stop(): void; done: Promise<void> } | undefined;
    try {
      await fleet.startHeartbeat(CLUSTER);
      await fleet.startRelay("hub");
      await fleet.startRelay(CLUSTER);
      await eventually(async () => expect((await conditionOf(Available))?.status).toBe("True"), { timeoutMs: 30_000 });

      await fleet.stopHeartbeat(CLUSTER);
      const from = (await hubCluster())!.metadata.resourceVersion!;
      watch = fleet.hub.watch(ManagedClusterResource, { fieldSelector: `metadata.name=${CLUSTER}`, resourceVersion: from, timeoutSeconds: 120 }, (e) => {
        if (e.type !== "MODIFIED") return;
        const c = e.object as Cluster;
        writes.push({ resourceVersion: c.metadata.resourceVersion, available: findCondition(c.status?.conditions, Available)?.status });
      });
      await new Promise((resolve) => setTimeout(resolve, 60_000)); // the window counted: a minute
      watch.stop();

      const statuses = writes.map((w) => w.available);
      const transitions = statuses.filter((s, i) => s !== (i === 0 ? "True" : statuses[i - 1]));
      expect(transitions, `Available through ${writes.length} writes: ${statuses.join(" ")}`).toEqual(["Unknown"]);
      expect(writes.length, `writes: ${statuses.join(" ")}`).toBeLessThanOrEqual(3); // the Unknown, and at most the taint and condition that follow it

      await fleet.startHeartbeat(CLUSTER);
      await eventually(async () => expect((await conditionOf(Available))?.status).toBe("True"), { timeoutMs: 30_000 });
    } finally {
      watch?.stop();
      await fleet.stopRelay(CLUSTER);
      await fleet.stopRelay("hub");
      await fleet.stopHeartbeat(CLUSTER);
      await fleet.hub.patch(ManagedClusterResource, CLUSTER, { spec: { leaseDurationSeconds: 60 } });
    }
  }, 180_000);
});
