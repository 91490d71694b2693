// The multi-cluster event relay against real API servers and real HTTP sinks: what it emits and how
// it is shaped, where it goes, how delivery fails and recovers, how watches resume, credentials
// that come from (and rotate in) a Secret on another cluster, and resync ticks that follow the agent
// settings.
import { describe, it, expect, beforeAll, afterAll, afterEach } from "vitest";
import { createServer as createHttpServer } from "node:http";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync, existsSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { CloudEvent as CloudEventClass, HTTP, type CloudEvent } from "cloudevents";
import { stringify } from "yaml";
import { startClusters, type LocalCluster, type LocalClusters } from "../dev/control-plane/clusters.ts";
import { startProcess, stopProcess, type Managed } from "../dev/control-plane/processes.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import type { ApiResource } from "../shared/api/meta.ts";
import { ClusterRoleBindingResource, ClusterRoleResource, ConfigMapResource, CustomResourceDefinitionResource, LeaseResource, NamespaceResource, NodeResource, RoleBindingResource, RoleResource, SecretResource } from "../shared/api/kube.ts";
import { AgentConfigGroup, AgentConfigName, AgentConfigResource } from "../shared/api/agent-config.ts";
import { crds } from "../shared/api/crds.ts";
import { AgentNamespaceDefault, BootstrapSecretName, HubKubeconfigSecretName, HubSecretKey } from "../shared/api/registration.ts";
import type { AgentSettings } from "../shared/api/agent-config.ts";
import { checkpointData, CheckpointConfigMapName, installTimeConfig, settingsHash } from "../shared/agent-config.ts";
import { createOrUpdate } from "../shared/apply.ts";
import { identityFor } from "../dev/control-plane/identities.ts";
import { parseEvent, PingSourceType, RecheckDueType, RecheckType, TargetExtension, type ParseResult } from "../shared/events.ts";
import { done, serve, type FunctionSpec, type Log } from "../shared/harness.ts";
import { hubEndpoint, hubKubeconfig } from "../shared/hub-credentials.ts";
import { issueCertificate } from "../shared/pki.ts";
import { agentSettingsCheckpoint, configFromEnvironment, hubCredentialsFromAgentSecrets, type SecretRef } from "../components/relay/config.ts";
import type { Every } from "../components/relay/resync.ts";
import { resolveSecretKubeconfig } from "../components/relay/credentials.ts";
import { startRelay, type Relay, type RelayOptions } from "../components/relay/relay.ts";
import { startFunctionServer, testIo } from "./support/functions.ts";
import { eventually } from "./support/eventually.ts";
import { startCuttableProxy } from "./support/tcp-proxy.ts";

const suffix = () => Math.random().toString(36).slice(2, 8);
const b64 = (text: string) => Buffer.from(text).toString("base64");
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

let local: LocalClusters;
let hub: LocalCluster;
let spoke: LocalCluster;
const admins = new Map<string, KubeClient>();
const admin = (c: LocalCluster) => admins.get(c.name)!;

beforeAll(async () => {
  // No CRDs or controllers: the relay watches built-in kinds, and nothing here needs a controller.
  local = await startClusters({ names: ["hub", "spoke"], crds: false, controllers: false });
  hub = local.get("hub");
  spoke = local.get("spoke");
  for (const c of local.clusters) admins.set(c.name, KubeClient.fromKubeconfig(c.adminKubeconfig));
});
afterAll(async () => {
  for (const a of admins.values()) a.close();
  for (const m of restarted) await stopProcess(m); // local.stop() knows only the processes it started
  await local?.stop();
});

// Stops a cluster's kube-apiserver and starts it again with the same flags, port and etcd prefix.
const restarted: Managed[] = [];
async function restartApiserver(c: LocalCluster): Promise<void> {
  const old = c.apiserver!;
  await stopProcess(old);
  c.apiserver = startProcess(dirname(c.dir), `${c.name}-apiserver-${suffix()}`, old.child.spawnfile, old.child.spawnargs.slice(1));
  restarted.push(c.apiserver);
  await eventually(() => admin(c).list(NamespaceResource), { timeoutMs: 60_000 });
}

// Every relay and sink a test starts is stopped after it, whatever happened.
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((f) => f()));
});

function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

// JSON log lines in memory (and on stderr with DEBUG_FUNCTIONS), so tests can read the decisions.
type LogLine = { level: string; msg: string; [k: string]: unknown };
function memoryLog(): Log & { lines: LogLine[] } {
  const lines: LogLine[] = [];
  const write = (level: string) => (fields: object, msg: string) => {
    const line = { level, msg, ...fields };
    lines.push(line);
    if (process.env.DEBUG_FUNCTIONS) process.stderr.write(`${JSON.stringify(line)}\n`);
  };
  return { lines, info: write("info"), warn: write("warn"), error: write("error") };
}

// Short backoffs and no ticks unless a test asks: nothing here waits out a production interval.
function relay(o: RelayOptions): Relay {
  const r = startRelay({
    resync: { intervalMs: 0 },
    watch: { timeoutSeconds: 60, backoff: { initialMs: 20, maxMs: 300 } },
    delivery: { backoff: { initialMs: 20, maxMs: 200 }, timeoutMs: 5_000 },
    log: memoryLog(),
    ...o,
  });
  cleanups.push(() => r.stop());
  return r;
}

type Received = { headers: Record<string, string>; body: string; event: CloudEvent<unknown>; parsed: ParseResult };
type Answer = { status: number; delayMs?: number; headers?: Record<string, string> };

// A real HTTP sink that keeps every request; `answer` sees the request and how often its id came.
async function startSink(answer: (r: Received, nthForId: number) => Answer = () => ({ status: 204 })) {
  const received: Received[] = [];
  let open = 0;
  let maxOpen = 0;
  const server = createHttpServer(async (req, res) => {
    open++;
    maxOpen = Math.max(maxOpen, open);
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks).toString();
    const headers = Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)]));
    const event = HTTP.toEvent({ headers, body }) as CloudEvent<unknown>;
    const r = { headers, body, event, parsed: parseEvent(event as unknown as Record<string, unknown>) };
    received.push(r);
    const a = answer(r, received.filter((x) => x.headers["ce-id"] === headers["ce-id"]).length);
    const finish = () => {
      open--;
      res.writeHead(a.status, a.headers).end();
    };
    if (a.delayMs) setTimeout(finish, a.delayMs);
    else finish();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  const close = () => new Promise<void>((resolve) => server.close(() => resolve()));
  cleanups.push(async () => {
    server.closeAllConnections();
    await close();
  });
  return { url: `http://127.0.0.1:${port}/`, received, maxOpen: () => maxOpen, open: () => open };
}

type Sink = Awaited<ReturnType<typeof startSink>>;
type Seen = { type: string; cluster: string; kind: string; name: string; verb: string };

function objectEvents(sink: Sink): (Seen & { r: Received })[] {
  return sink.received.flatMap((r) =>
    r.parsed.ok && r.parsed.event.type === "object"
      ? [{ type: r.headers["ce-type"]!, cluster: r.parsed.event.cluster, kind: r.parsed.event.ref.kind, name: r.parsed.event.ref.name, verb: r.parsed.event.verb, r }]
      : [],
  );
}
const about = (sink: Sink, name: string) => objectEvents(sink).filter((e) => e.name === name);
const verbsOf = (sink: Sink, name: string) => about(sink, name).map((e) => e.verb);

async function namespace(c: LocalCluster, prefix: string): Promise<string> {
  const name = `${prefix}-${suffix()}`;
  await admin(c).create(NamespaceResource, { metadata: { name } });
  return name;
}

type Rule = { apiGroups: string[]; resources: string[]; verbs: string[]; resourceNames?: string[] };

// A minted user holding only these rules (in a namespace, or cluster-wide without one), as envtest's AddUser.
async function grant(c: LocalCluster, o: { user: string; rules: Rule[]; namespace?: string }): Promise<{ revoke(): Promise<void> }> {
  const name = `relay-test-${suffix()}`;
  const roleRef = { apiGroup: "rbac.authorization.k8s.io", kind: o.namespace ? "Role" : "ClusterRole", name };
  const subjects = [{ kind: "User", apiGroup: "rbac.authorization.k8s.io", name: o.user }];
  const metadata = { name, ...(o.namespace ? { namespace: o.namespace } : {}) };
  await admin(c).create(o.namespace ? RoleResource : ClusterRoleResource, { metadata, rules: o.rules });
  await admin(c).create(o.namespace ? RoleBindingResource : ClusterRoleBindingResource, { metadata, roleRef, subjects });
  return { revoke: async () => void (await admin(c).delete(o.namespace ? RoleBindingResource : ClusterRoleBindingResource, name, o.namespace)) };
}

const watchRule = (r: ApiResource): Rule => ({ apiGroups: [r.group], resources: [r.plural], verbs: ["list", "watch"] });

async function watcherKubeconfig(c: LocalCluster, resources: ApiResource[], ns?: string): Promise<string> {
  const user = `relay-${suffix()}`;
  await grant(c, { user, namespace: ns, rules: resources.map(watchRule) });
  return c.kubeconfigFor({ user });
}

const configMap = (ns: string, name: string, data: Record<string, string> = {}) => ({ metadata: { name, namespace: ns }, data });
const sourceStatus = (r: Relay) => r.status().sources[0]!;

describe("events and their shape", () => {
  const scenarios = [
    { name: "Resource mode, a namespaced ConfigMap", mode: "Resource", resource: ConfigMapResource },
    { name: "Reference mode, a namespaced ConfigMap", mode: "Reference", resource: ConfigMapResource },
    { name: "Resource mode, a cluster-scoped ClusterRole chosen by label", mode: "Resource", resource: ClusterRoleResource },
  ] as const;

  it.each(scenarios)("emits add for what exists, then add, update and delete as ApiServerSource shapes them: $name", async ({ mode, resource }) => {
    const id = suffix();
    const ns = resource.namespaced ? await namespace(hub, "shape") : undefined;
    const labels = { "relay-test": id };
    const object = (name: string): KubeObject => ({ metadata: { name, labels, ...(ns ? { namespace: ns } : {}) }, ...(resource.namespaced ? { data: { v: "1" } } : { rules: [] }) });
    const [existing, fresh] = [`existing-${id}`, `fresh-${id}`];
    await admin(hub).create(resource, object(existing));
    const unlabelled = object(`unlabelled-${id}`);
    await admin(hub).create(resource, { ...unlabelled, metadata: { ...unlabelled.metadata, labels: {} } });
    const sink = await startSink();
    relay({
      clusters: { hub: { kubeconfig: await watcherKubeconfig(hub, [resource], ns) } },
      sources: [{ cluster: "hub", resource, namespace: ns, labelSelector: `relay-test=${id}`, mode }],
      sinks: [{ name: "all", url: sink.url }],
    });

    await eventually(() => expect(verbsOf(sink, existing)).toEqual(["add"]));
    await admin(hub).create(resource, object(fresh));
    await eventually(() => expect(verbsOf(sink, fresh)).toEqual(["add"]));
    await admin(hub).patch(resource, fresh, { metadata: { annotations: { v: "2" } } }, { namespace: ns });
    await eventually(() => expect(verbsOf(sink, fresh)).toEqual(["add", "update"]));
    await admin(hub).delete(resource, fresh, ns);
    await eventually(() => expect(verbsOf(sink, fresh)).toEqual(["add", "update", "delete"]));

    const apiVersion = resource.group ? `${resource.group}/${resource.version}` : resource.version;
    const seen = [...about(sink, existing), ...about(sink, fresh)];
    expect(objectEvents(sink).map((e) => e.name)).not.toContain(`unlabelled-${id}`);
    for (const { r, name, verb } of seen) {
      expect(r.headers).toMatchObject({
        "content-type": expect.stringMatching(/^application\/json/),
        "ce-specversion": "1.0",
        "ce-type": `dev.knative.apiserver.${mode === "Resource" ? "resource" : "ref"}.${verb}`,
        "ce-source": hub.url,
        "ce-subject": `/apis/${apiVersion}/namespaces/${ns ?? ""}/${resource.plural}/${name}`,
        "ce-kind": resource.kind,
        "ce-apiversion": apiVersion,
        "ce-name": name,
        "ce-namespace": ns ?? "",
        "ce-cluster": "hub",
        "ce-id": expect.stringMatching(UUID),
      });
      expect(Number.isNaN(Date.parse(r.headers["ce-time"]!))).toBe(false);
      expect(r.parsed).toMatchObject({ ok: true, event: { type: "object", verb, cluster: "hub", ref: { kind: resource.kind, apiVersion, name, namespace: ns } } });
      const data = JSON.parse(r.body);
      if (mode === "Resource") expect(data).toMatchObject({ apiVersion, kind: resource.kind, metadata: { name, labels } });
      else expect(data).toEqual({ kind: resource.kind, ...(ns ? { namespace: ns } : {}), name, apiVersion });
    }
  });
});

describe("routing", () => {
  it("routes by type, kind and cluster across two clusters, and sends resync ticks where filters let them", async () => {
    const ns = `route-${suffix()}`;
    for (const c of [hub, spoke]) await admin(c).create(NamespaceResource, { metadata: { name: ns } });
    const filters = {
      everything: undefined,
      hubOnly: { cluster: "hub" },
      spokeDeletes: { type: "dev.knative.apiserver.ref.delete" },
      leases: { kind: "Lease" },
      spokeConfigMaps: { kind: "ConfigMap", cluster: "spoke" },
      hubUpdates: { type: "dev.knative.apiserver.resource.update", cluster: "hub" },
      spokeTicks: { type: PingSourceType, cluster: "spoke" },
    } as const;
    const sinks = Object.fromEntries(await Promise.all(Object.keys(filters).map(async (name) => [name, await startSink()] as const))) as Record<keyof typeof filters, Sink>;
    // one subscriber behind two Triggers (a function's func.yaml subscriptions): each event once
    const anyOf: Record<string, string>[] = [{ kind: "Lease" }, { type: "dev.knative.apiserver.ref.delete" }];
    const anyOfSink = await startSink();
    relay({
      clusters: {
        hub: { kubeconfig: await watcherKubeconfig(hub, [ConfigMapResource, LeaseResource], ns) },
        spoke: { kubeconfig: await watcherKubeconfig(spoke, [ConfigMapResource], ns) },
      },
      sources: [
        { cluster: "hub", resource: ConfigMapResource, namespace: ns, mode: "Resource" },
        { cluster: "hub", resource: LeaseResource, namespace: ns, mode: "Resource" },
        { cluster: "spoke", resource: ConfigMapResource, namespace: ns, mode: "Reference" },
      ],
      sinks: [
        ...Object.entries(filters).map(([name, filter]) => ({ name, url: sinks[name as keyof typeof filters].url, ...(filter ? { filter } : {}) })),
        { name: "anyOf", url: anyOfSink.url, filters: anyOf },
      ],
      resync: { intervalMs: 200 },
    });

    const everything = sinks.everything;
    const step = async (act: () => Promise<unknown>, name: string, verbs: string[]) => {
      await act();
      await eventually(() => expect(verbsOf(everything, name)).toEqual(verbs));
    };
    await step(() => admin(hub).create(ConfigMapResource, configMap(ns, "h1")), "h1", ["add"]);
    await step(() => admin(hub).patch(ConfigMapResource, "h1", { data: { v: "2" } }, { namespace: ns }), "h1", ["add", "update"]);
    await step(() => admin(spoke).create(ConfigMapResource, configMap(ns, "s1")), "s1", ["add"]);
    await step(() => admin(spoke).delete(ConfigMapResource, "s1", ns), "s1", ["add", "delete"]);
    await step(() => admin(hub).create(LeaseResource, { metadata: { name: "l1", namespace: ns }, spec: { holderIdentity: "x" } }), "l1", ["add"]);

    const key = ({ type, cluster, kind, name }: Seen) => `${type} ${cluster} ${kind} ${name}`;
    const all = objectEvents(everything).map(key).sort();
    expect(all).toEqual(
      [
        "dev.knative.apiserver.resource.add hub ConfigMap h1",
        "dev.knative.apiserver.resource.update hub ConfigMap h1",
        "dev.knative.apiserver.ref.add spoke ConfigMap s1",
        "dev.knative.apiserver.ref.delete spoke ConfigMap s1",
        "dev.knative.apiserver.resource.add hub Lease l1",
      ].sort(),
    );
    const passes = (filter: Readonly<Record<string, string>> | undefined, e: Seen) =>
      Object.entries(filter ?? {}).every(([attr, want]) => e[attr as keyof Seen] === want);
    for (const [name, filter] of Object.entries(filters)) {
      const expected = objectEvents(everything).filter((e) => passes(filter, e)).map(key).sort();
      await eventually(() => expect(objectEvents(sinks[name as keyof typeof filters]).map(key).sort(), name).toEqual(expected));
    }
    await eventually(() => expect(objectEvents(anyOfSink).map(key).sort()).toEqual(["dev.knative.apiserver.ref.delete spoke ConfigMap s1", "dev.knative.apiserver.resource.add hub Lease l1"]));
    const ticks = await eventually(() => {
      const t = sinks.spokeTicks.received.filter((r) => r.parsed.ok && r.parsed.event.type === "tick");
      expect(t.length).toBeGreaterThan(0);
      return t;
    });
    expect(ticks.every((r) => r.headers["ce-cluster"] === "spoke" && r.headers["ce-type"] === PingSourceType)).toBe(true);
    expect(sinks.everything.received.some((r) => r.headers["ce-type"] === PingSourceType && r.headers["ce-cluster"] === "hub")).toBe(true);
    expect(sinks.hubOnly.received.every((r) => r.headers["ce-cluster"] === "hub")).toBe(true);
  });
});

describe("delivery", () => {
  const scenarios = [
    { name: "retries a 503 and stops at the 204 that follows", answers: [503, 204], outcome: "delivered", status: 204 },
    { name: "retries a 429 and a 500 alike", answers: [429, 500, 204], outcome: "delivered", status: 204 },
    { name: "drops a 400 without retrying it", answers: [400], outcome: "rejected", status: 400 },
    { name: "gives up after maxAttempts", answers: [503, 503, 503], outcome: "gave-up", status: 503, maxAttempts: 3 },
  ] as const;

  it.each(scenarios)("$name, and records the outcome as a JSON line", async ({ answers, outcome, status, ...row }) => {
    const ns = await namespace(hub, "deliver");
    await admin(hub).create(ConfigMapResource, configMap(ns, "only"));
    const sink = await startSink((_, nth) => ({ status: answers[nth - 1] ?? 204 }));
    const record = join(tempDir("relay-record-"), "events.jsonl");
    const r = relay({
      clusters: { hub: { kubeconfig: await watcherKubeconfig(hub, [ConfigMapResource], ns) } },
      sources: [{ cluster: "hub", resource: ConfigMapResource, namespace: ns, mode: "Resource" }],
      sinks: [{ name: "scripted", url: sink.url }],
      delivery: { backoff: { initialMs: 20, maxMs: 100 }, ...("maxAttempts" in row ? { maxAttempts: row.maxAttempts } : {}) },
      record,
    });
    const line = await eventually(() => {
      const lines = existsSync(record) ? readFileSync(record, "utf8").split("\n").filter(Boolean) : [];
      expect(lines).toHaveLength(1);
      return JSON.parse(lines[0]!);
    });
    expect(sink.received).toHaveLength(answers.length);
    expect(new Set(sink.received.map((x) => x.headers["ce-id"])).size).toBe(1); // a retry is the same event
    expect(line).toMatchObject({ sink: "scripted", status, outcome, attempts: answers.length, event: { id: sink.received[0]!.headers["ce-id"], type: "dev.knative.apiserver.resource.add", cluster: "hub", name: "only", namespace: ns } });
    expect(Number.isNaN(Date.parse(line.time))).toBe(false);
    expect(parseEvent(line.event)).toMatchObject({ ok: true, event: { verb: "add", object: { metadata: { name: "only" } } } });
    expect(r.status().sinks[0]).toMatchObject({ retries: answers.length - 1 });
  });

  it("coalesces a burst of updates to one object while the sink is slow, and delivers other objects in parallel", async () => {
    const ns = await namespace(hub, "burst");
    await admin(hub).create(ConfigMapResource, configMap(ns, "burst", { n: "0" }));
    const sink = await startSink(() => ({ status: 204, delayMs: 400 }));
    const r = relay({
      clusters: { hub: { kubeconfig: await watcherKubeconfig(hub, [ConfigMapResource], ns) } },
      sources: [{ cluster: "hub", resource: ConfigMapResource, namespace: ns, mode: "Resource" }],
      sinks: [{ name: "slow", url: sink.url }],
    });
    await eventually(() => expect(verbsOf(sink, "burst")).toEqual(["add"]));
    for (let n = 1; n <= 20; n++) await admin(hub).patch(ConfigMapResource, "burst", { data: { n: String(n) } }, { namespace: ns });
    const last = await eventually(() => {
      const seen = about(sink, "burst");
      const data = JSON.parse(seen.at(-1)!.r.body) as { data: { n: string } };
      expect(data.data.n).toBe("20");
      return seen;
    });
    expect(last.length).toBeLessThan(10); // 21 changes in all
    expect(r.status().sinks[0]!.coalesced).toBeGreaterThan(0);
    expect(sink.maxOpen()).toBe(1); // one key: never two of its events at once

    await Promise.all([1, 2, 3, 4, 5].map((i) => admin(hub).create(ConfigMapResource, configMap(ns, `parallel-${i}`))));
    await eventually(() => expect(objectEvents(sink).filter((e) => e.name.startsWith("parallel-"))).toHaveLength(5));
    expect(sink.maxOpen()).toBeGreaterThan(1);
  });

  it("honours x-recheck-after-ms from a function behind our CloudEvents HTTP server by sending the latest state again, under the verb it asked about", async () => {
    const ns = await namespace(hub, "recheck");
    const calls: { verb: string; name: string; v?: string }[] = [];
    const asked = new Set<string>();
    const spec: FunctionSpec<unknown> = {
      name: "relay-probe",
      keys(event) {
        if (event.type !== "object") return { skip: "not an object event" };
        calls.push({ verb: event.verb, name: event.ref.name, v: (event.object as { data?: { v?: string } } | undefined)?.data?.v });
        return [{ cluster: event.cluster, namespace: event.ref.namespace, name: event.ref.name }];
      },
      async reconcile(_io, key) {
        if (asked.has(key.name)) return done;
        asked.add(key.name);
        return { recheckInMs: 1_000 };
      },
    };
    const fn = await startFunctionServer(serve(spec, () => testIo({}, {})));
    cleanups.push(() => fn.close());
    const r = relay({
      clusters: { hub: { kubeconfig: await watcherKubeconfig(hub, [ConfigMapResource], ns) } },
      sources: [{ cluster: "hub", resource: ConfigMapResource, namespace: ns, mode: "Resource" }],
      sinks: [{ name: "function", url: fn.url }],
    });
    await admin(hub).create(ConfigMapResource, configMap(ns, "r1", { v: "1" }));
    await eventually(() => expect(calls.filter((c) => c.name === "r1").map((c) => c.verb)).toEqual(["add"]));
    // the add asked for a recheck in 1 s; the update from the watch comes first, and the recheck then
    // carries the latest state (v=2) although nothing changed since, as the add it was asked about
    await admin(hub).patch(ConfigMapResource, "r1", { data: { v: "2" } }, { namespace: ns });
    await eventually(() => expect(r.status().sinks[0]!.rechecks).toBe(1));
    await eventually(() => expect(calls.filter((c) => c.name === "r1").map((c) => `${c.verb}:${c.v}`)).toEqual(["add:1", "update:2", "add:2"]));
    expect(r.status().sinks[0]).toMatchObject({ delivered: 3, rejected: 0 });
  });

  it("in recheck mode holds a Broker-fed function's recheck reply until it is due, then sends it to its sink naming the function, which judges the event that asked again", async () => {
    const judged: string[] = [];
    let looks = 0;
    const spec: FunctionSpec<unknown> = {
      name: "recheck-probe",
      keys(event) {
        if (event.type !== "object") return { skip: "not an object event" };
        judged.push(`${event.verb} ${event.ref.name}`);
        return [{ cluster: event.cluster, namespace: event.ref.namespace, name: event.ref.name }];
      },
      async reconcile() {
        return ++looks === 1 ? { recheckInMs: 300 } : done;
      },
    };
    // the function as the render deploys it behind a Broker: it answers a recheck with a CloudEvent
    const fn = await startFunctionServer(serve(spec, () => testIo({}, {}), "event"));
    cleanups.push(() => fn.close());
    // the relay as the render deploys it for the Broker's rechecks; its sink stands where the Broker
    // would be, behind the function's Trigger filter
    const r = relay({ clusters: {}, rechecks: { port: 0, host: "127.0.0.1" }, sinks: [{ name: "broker", url: fn.url, filter: { type: RecheckDueType, [TargetExtension]: spec.name } }] });
    const rechecks = await r.rechecks!;
    const post = (url: string, m: { headers: Record<string, string>; body: unknown }) => fetch(url, { method: "POST", headers: m.headers, body: typeof m.body === "string" ? m.body : JSON.stringify(m.body) });
    const asked = new CloudEventClass({
      type: "dev.knative.apiserver.resource.add",
      source: "https://hub.example:6443",
      id: "asked-1",
      cluster: "hub",
      kind: "ConfigMap",
      apiversion: "v1",
      name: "c1",
      namespace: "ns1",
      datacontenttype: "application/json",
      data: { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "c1", namespace: "ns1", resourceVersion: "7" } },
    });
    // The Broker's delivery, and the function's answer, which the Broker takes as an event.
    const answer = await post(fn.url, HTTP.binary(asked) as { headers: Record<string, string>; body: unknown });
    const reply = { headers: Object.fromEntries(answer.headers), body: await answer.text() };
    expect([answer.status, reply.headers["ce-type"], reply.headers[`ce-${TargetExtension}`], reply.headers["ce-cluster"], reply.headers["x-recheck-after-ms"]]).toEqual([200, RecheckType, spec.name, "hub", "300"]);
    expect(JSON.parse(reply.body)).toMatchObject({ afterMs: 300, event: { id: "asked-1", name: "c1" } });
    // The Trigger for recheck requests delivers the reply to the relay, which takes it (202) and holds it.
    const held = await post(rechecks.url, { headers: Object.fromEntries(Object.entries(reply.headers).filter(([k]) => k.startsWith("ce-") || k === "content-type")), body: reply.body });
    expect(held.status).toBe(202);
    await eventually(() => expect(judged).toEqual(["add c1", "add c1"]));
    expect(looks).toBe(2);
    expect(r.status().sinks[0]).toMatchObject({ delivered: 1, rejected: 0 });
    // A due recheck for another function is not this one's to judge; a request that is not a recheck,
    // or whose data is not one, changes nothing and says why.
    const other = await post(fn.url, HTTP.binary(new CloudEventClass({ type: RecheckDueType, source: "/ocm-functions/rechecks", [TargetExtension]: "someone-else", datacontenttype: "application/json", data: asked.toJSON() })) as { headers: Record<string, string>; body: unknown });
    expect(other.status).toBe(204);
    const notARecheck = await post(rechecks.url, HTTP.binary(asked) as { headers: Record<string, string>; body: unknown });
    expect([notARecheck.status, await notARecheck.text()]).toEqual([400, `a relay in recheck mode takes ${RecheckType} events, not dev.knative.apiserver.resource.add`]);
    const noEvent = await post(rechecks.url, HTTP.binary(new CloudEventClass({ type: RecheckType, source: "/x", [TargetExtension]: spec.name, datacontenttype: "application/json", data: { afterMs: 10 } })) as { headers: Record<string, string>; body: unknown });
    expect([noEvent.status, await noEvent.text()]).toEqual([400, "the data is not a recheck request: ✖ Invalid input: expected object, received undefined;   → at event"]);
    expect(judged).toEqual(["add c1", "add c1"]);
  });

  it("in recheck mode refuses a new recheck with a 503 once it holds its most, and still replaces one it holds", async () => {
    const r = relay({ clusters: {}, rechecks: { port: 0, host: "127.0.0.1", maxHeld: 1 }, sinks: [] });
    const rechecks = await r.rechecks!;
    const ask = (subject: string, afterMs: number) => {
      const asked = { specversion: "1.0", id: `asked-${subject}`, source: "s", type: "dev.knative.apiserver.resource.update", subject, cluster: "hub" };
      const m = HTTP.binary(new CloudEventClass({ type: RecheckType, source: "/ocm-functions/f", [TargetExtension]: "f", datacontenttype: "application/json", data: { afterMs, event: asked } })) as { headers: Record<string, string>; body: unknown };
      return fetch(rechecks.url, { method: "POST", headers: m.headers, body: typeof m.body === "string" ? m.body : JSON.stringify(m.body) }).then(async (res) => [res.status, await res.text()]);
    };
    expect(await ask("/one", 3_600_000)).toEqual([202, ""]);
    expect(await ask("/two", 3_600_000)).toEqual([503, "the relay holds 1 rechecks, its most"]);
    expect(await ask("/one", 1_800_000)).toEqual([202, ""]);
  });

  it("lets a delivery already sent finish when it stops, and counts its answer", async () => {
    const ns = await namespace(hub, "drain");
    await admin(hub).create(ConfigMapResource, configMap(ns, "slow"));
    // The function is still working when the stop comes: cutting it off would leave it writing with
    // nobody waiting for its answer.
    const sink = await startSink(() => ({ status: 204, delayMs: 500 }));
    const r = relay({
      clusters: { hub: { kubeconfig: await watcherKubeconfig(hub, [ConfigMapResource], ns) } },
      sources: [{ cluster: "hub", resource: ConfigMapResource, namespace: ns, mode: "Resource" }],
      sinks: [{ name: "slow", url: sink.url }],
    });
    await eventually(() => expect(sink.received).toHaveLength(1));
    expect(sink.open()).toBe(1);
    await r.stop();
    expect(sink.open()).toBe(0);
    expect(r.status().sinks[0]).toMatchObject({ delivered: 1, inFlight: 0, pending: 0 });
    expect(r.status().sources[0]!.state).toBe("stopped");
  });

  it("stops at once while a retry waits, with nothing left in flight", async () => {
    const ns = await namespace(hub, "stop");
    await admin(hub).create(ConfigMapResource, configMap(ns, "stuck"));
    const sink = await startSink(() => ({ status: 503 }));
    const r = relay({
      clusters: { hub: { kubeconfig: await watcherKubeconfig(hub, [ConfigMapResource], ns) } },
      sources: [{ cluster: "hub", resource: ConfigMapResource, namespace: ns, mode: "Resource" }],
      sinks: [{ name: "down", url: sink.url }],
      // a retry an hour away: a stop() that waited it out would outlive the test's own time limit
      delivery: { backoff: { initialMs: 3_600_000, maxMs: 3_600_000 } },
    });
    await eventually(() => expect(r.status().sinks[0]!.retries).toBe(1));
    await r.stop();
    expect(r.status().sinks[0]).toMatchObject({ pending: 0, inFlight: 0 });
    expect(r.status().sources[0]!.state).toBe("stopped");
    expect(sink.received).toHaveLength(1);
  });
});

// A relay watching ConfigMaps in `ns` through a proxy the test can cut; `reconnect` opens the proxy's
// port again after a cut.
async function relayThroughProxy(ns: string) {
  const apiserverPort = Number(new URL(hub.url).port);
  const proxy = await startCuttableProxy(apiserverPort);
  const kubeconfig = (await watcherKubeconfig(hub, [ConfigMapResource], ns)).replace(hub.url, `https://127.0.0.1:${proxy.port}`);
  const sink = await startSink();
  const log = memoryLog();
  const r = relay({
    clusters: { hub: { kubeconfig } },
    sources: [{ cluster: "hub", resource: ConfigMapResource, namespace: ns, mode: "Resource" }],
    sinks: [{ name: "all", url: sink.url }],
    log,
  });
  const reconnect = async () => {
    const restored = await startCuttableProxy(apiserverPort, proxy.port);
    cleanups.push(() => restored.cut());
  };
  return { proxy, sink, log, r, reconnect };
}

describe("watch continuity", () => {
  it("re-lists after 410 Gone and emits update, delete and add for what changed while it was cut off", async () => {
    const ns = await namespace(hub, "expire");
    for (const name of ["stays", "changes", "goes"]) await admin(hub).create(ConfigMapResource, configMap(ns, name));
    const { proxy, sink, log, r, reconnect } = await relayThroughProxy(ns);
    await eventually(() => expect(objectEvents(sink)).toHaveLength(3));

    // A restarted apiserver fills its watch cache from a fresh list, so a resourceVersion from before
    // the restart (and before the write just after the cut) is too old for it: the resuming watch
    // gets 410 Gone, as it would after etcd compaction on a long-lived server.
    await proxy.cut();
    await admin(hub).patch(ConfigMapResource, "changes", { data: { v: "2" } }, { namespace: ns });
    await restartApiserver(hub);
    await admin(hub).delete(ConfigMapResource, "goes", ns);
    await admin(hub).create(ConfigMapResource, configMap(ns, "comes"));
    await reconnect();

    await eventually(() => {
      expect(verbsOf(sink, "changes")).toEqual(["add", "update"]);
      expect(verbsOf(sink, "goes")).toEqual(["add", "delete"]);
      expect(verbsOf(sink, "comes")).toEqual(["add"]);
    });
    expect(verbsOf(sink, "stays")).toEqual(["add"]);
    expect(JSON.parse(about(sink, "goes").at(-1)!.r.body).metadata.name).toBe("goes"); // its last state known
    expect(sourceStatus(r)).toMatchObject({ lists: 2, state: "watching" });
    expect(log.lines.some((l) => l.msg.startsWith("resourceVersion expired (410)"))).toBe(true);
  });

  it("resumes from the last resourceVersion when the server ends each watch, repeating and losing nothing", async () => {
    const ns = await namespace(hub, "resume");
    const sink = await startSink();
    const r = relay({
      clusters: { hub: { kubeconfig: await watcherKubeconfig(hub, [ConfigMapResource], ns) } },
      sources: [{ cluster: "hub", resource: ConfigMapResource, namespace: ns, mode: "Reference" }],
      sinks: [{ name: "all", url: sink.url }],
      watch: { timeoutSeconds: 1, backoff: { initialMs: 20, maxMs: 200 } },
    });
    await r.ready;
    for (let i = 0; i < 3; i++) {
      await admin(hub).create(ConfigMapResource, configMap(ns, `cm-${i}`));
      const watches = sourceStatus(r).watches;
      await eventually(() => expect(sourceStatus(r).watches).toBeGreaterThan(watches), { timeoutMs: 5_000 });
    }
    await eventually(() => expect(objectEvents(sink).map((e) => `${e.verb} ${e.name}`).sort()).toEqual(["add cm-0", "add cm-1", "add cm-2"]));
    expect(sourceStatus(r).lists).toBe(1);
  });

  it("reconnects with backoff after the connection drops and delivers what changed during the outage", async () => {
    const ns = await namespace(hub, "outage");
    const { proxy, sink, log, r, reconnect } = await relayThroughProxy(ns);
    await admin(hub).create(ConfigMapResource, configMap(ns, "before"));
    await eventually(() => expect(verbsOf(sink, "before")).toEqual(["add"]));

    await proxy.cut();
    await eventually(() => expect(sourceStatus(r).state).toBe("backing-off"));
    await admin(hub).create(ConfigMapResource, configMap(ns, "during"));
    await admin(hub).delete(ConfigMapResource, "before", ns);
    await reconnect();

    await eventually(() => {
      expect(verbsOf(sink, "during")).toEqual(["add"]);
      expect(verbsOf(sink, "before")).toEqual(["add", "delete"]);
    });
    expect(sourceStatus(r).lists).toBe(1); // resumed from its resourceVersion, no re-list
    expect(log.lines.some((l) => l.level === "warn" && l.msg.startsWith("watch failed: resuming from the last resourceVersion") && typeof l.retryInMs === "number")).toBe(true);
  });

  it("a new relay after a stop emits add for everything that exists, so a consumer converges", async () => {
    const ns = await namespace(hub, "restart");
    for (const name of ["a", "b"]) await admin(hub).create(ConfigMapResource, configMap(ns, name, { v: "1" }));
    const kubeconfig = await watcherKubeconfig(hub, [ConfigMapResource], ns);
    const options = (url: string): RelayOptions => ({
      clusters: { hub: { kubeconfig } },
      sources: [{ cluster: "hub", resource: ConfigMapResource, namespace: ns, mode: "Resource" }],
      sinks: [{ name: "all", url }],
    });
    const first = await startSink();
    const r1 = relay(options(first.url));
    await eventually(() => expect(objectEvents(first).map((e) => `${e.verb} ${e.name}`).sort()).toEqual(["add a", "add b"]));
    await r1.stop();

    await admin(hub).patch(ConfigMapResource, "a", { data: { v: "2" } }, { namespace: ns });
    await admin(hub).delete(ConfigMapResource, "b", ns);
    await admin(hub).create(ConfigMapResource, configMap(ns, "c", { v: "1" }));
    const second = await startSink();
    relay(options(second.url));
    const events = await eventually(() => {
      const e = objectEvents(second);
      expect(e.map((x) => `${x.verb} ${x.name}`).sort()).toEqual(["add a", "add c"]);
      return e;
    });
    expect(JSON.parse(events.find((e) => e.name === "a")!.r.body).data).toEqual({ v: "2" });
  });
});

describe("credentials from secrets", () => {
  it("waits for credentials, runs on the bootstrap secret, then switches to the hub secret and follows its rotation", async () => {
    const agentNs = await namespace(spoke, "agent");
    const watched = await namespace(hub, "creds");
    const hubAdmin = admin(hub);
    // The relay reads the two secrets on the spoke by name only.
    const reader = `relay-reader-${suffix()}`;
    await grant(spoke, { user: reader, namespace: agentNs, rules: [{ apiGroups: [""], resources: ["secrets"], resourceNames: [HubKubeconfigSecretName, BootstrapSecretName], verbs: ["get", "list", "watch"] }] });
    const bootstrap = await hub.createBootstrapToken();
    const bootstrapGrant = await grant(hub, { user: bootstrap.user, namespace: watched, rules: [watchRule(ConfigMapResource)] });
    const sink = await startSink();
    const log = memoryLog();
    const r = relay({
      clusters: { spoke: { kubeconfig: await spoke.kubeconfigFor({ user: reader }) }, hub: hubCredentialsFromAgentSecrets("spoke", agentNs) },
      sources: [{ name: "hub-cms", cluster: "hub", resource: ConfigMapResource, namespace: watched, mode: "Resource" }],
      sinks: [{ name: "all", url: sink.url }],
      log,
    });
    await hubAdmin.create(ConfigMapResource, configMap(watched, "c0"));
    await eventually(() => expect(r.status().clusters.hub!.problems).toHaveLength(2));
    expect(sourceStatus(r).state).toBe("waiting-for-credentials");

    // 1. the bootstrap secret appears: events flow under the bootstrap identity
    await admin(spoke).create(SecretResource, { metadata: { name: BootstrapSecretName, namespace: agentNs }, data: { [HubSecretKey.Kubeconfig]: b64(bootstrap.kubeconfig) } });
    await eventually(() => expect(verbsOf(sink, "c0")).toEqual(["add"]));
    expect(r.status().clusters.hub!.origin).toContain(BootstrapSecretName);

    // 2. the hub kubeconfig secret appears, in OCM's layout (tls.crt/tls.key named as relative files)
    const agent = (n: number) => `system:open-cluster-management:cluster1:agent${n}`;
    const hubSecret = async (n: number) => {
      const cert = await issueCertificate(hub.clientCa, { subject: { commonName: agent(n), organizations: ["system:open-cluster-management:managed-clusters"] }, usage: "client" });
      return {
        metadata: { name: HubKubeconfigSecretName, namespace: agentNs },
        data: { [HubSecretKey.Kubeconfig]: b64(hubKubeconfig(hubEndpoint(bootstrap.kubeconfig))), [HubSecretKey.TlsCert]: b64(cert.certPem), [HubSecretKey.TlsKey]: b64(cert.keyPem) },
      };
    };
    const agent1Grant = await grant(hub, { user: agent(1), namespace: watched, rules: [watchRule(ConfigMapResource)] });
    await grant(hub, { user: agent(2), namespace: watched, rules: [watchRule(ConfigMapResource)] });
    await admin(spoke).create(SecretResource, await hubSecret(1));
    await eventually(() => expect(sourceStatus(r)).toMatchObject({ user: agent(1), state: "watching" }));
    await bootstrapGrant.revoke();
    await hubAdmin.create(ConfigMapResource, configMap(watched, "c1"));
    await eventually(() => expect(verbsOf(sink, "c1")).toEqual(["add"]));

    // 3. rotation: a new certificate for another identity; the old one loses its access
    await agent1Grant.revoke();
    const rotated = await hubSecret(2);
    const current = await admin(spoke).get<KubeObject>(SecretResource, HubKubeconfigSecretName, agentNs);
    await admin(spoke).update(SecretResource, { ...rotated, metadata: { ...rotated.metadata, resourceVersion: current!.metadata.resourceVersion } });
    await eventually(() => expect(sourceStatus(r)).toMatchObject({ user: agent(2), state: "watching" }));
    await hubAdmin.create(ConfigMapResource, configMap(watched, "c2"));
    await eventually(() => expect(verbsOf(sink, "c2")).toEqual(["add"]));

    // every switch re-listed and diffed: c0 was announced once
    expect(verbsOf(sink, "c0")).toEqual(["add"]);
    expect(sourceStatus(r).lists).toBe(3);
    expect(log.lines.filter((l) => l.msg.startsWith("credentials loaded")).map((l) => l.user)).toEqual([bootstrap.kubeconfig.match(/name: (bootstrap-\w+)/)![1], agent(1), agent(2)]);
  });

  it("judges a secret's kubeconfig before using it", async () => {
    const ref: SecretRef = { cluster: "spoke", namespace: "agent", name: HubKubeconfigSecretName, key: "kubeconfig" };
    const now = new Date();
    const kubeconfig = b64(hubKubeconfig({ clusterName: "hub", server: hub.url, caData: b64(hub.caPem) }));
    const good = await issueCertificate(hub.clientCa, { subject: { commonName: "agent" }, usage: "client" });
    const other = await issueCertificate(hub.clientCa, { subject: { commonName: "agent" }, usage: "client" });
    const expired = await issueCertificate(hub.clientCa, { subject: { commonName: "agent" }, usage: "client", notBefore: new Date(now.getTime() - 7_200_000), notAfter: new Date(now.getTime() - 3_600_000) });
    const secret = (data: Record<string, string>) => ({ metadata: { name: ref.name, namespace: ref.namespace }, data });
    const rows = [
      { name: "no secret", secret: undefined, then: /does not exist/ },
      { name: "no kubeconfig key", secret: secret({}), then: /has no key kubeconfig/ },
      { name: "a file the secret does not hold", secret: secret({ kubeconfig, "tls.key": b64(good.keyPem) }), then: /tls\.crt, which the secret does not hold/ },
      { name: "an expired certificate", secret: secret({ kubeconfig, "tls.crt": b64(expired.certPem), "tls.key": b64(expired.keyPem) }), then: /expired/ },
      { name: "a certificate and key that do not match", secret: secret({ kubeconfig, "tls.crt": b64(good.certPem), "tls.key": b64(other.keyPem) }), then: /do not match/ },
      { name: "a good one", secret: secret({ kubeconfig, "tls.crt": b64(good.certPem), "tls.key": b64(good.keyPem) }), then: "agent" },
    ];
    for (const row of rows) {
      const result = resolveSecretKubeconfig(row.secret, ref, now);
      if (typeof row.then === "string") {
        expect(result, row.name).toMatchObject({ ok: true, user: row.then });
        if (result.ok) result.client.close();
      } else {
        expect(result.ok, row.name).toBe(false);
        if (!result.ok) expect(result.reason, row.name).toMatch(row.then);
      }
    }
  });
});

describe("configuration", () => {
  const kubeconfig = "apiVersion: v1\nkind: Config\n";
  const cm = { version: "v1", kind: "ConfigMap", plural: "configmaps", namespaced: true };
  const scenarios = [
    { name: "a source on a cluster without credentials", text: { clusters: {}, sources: [{ cluster: "hub", resource: cm }] }, env: {}, then: /no credentials configured for cluster hub/ },
    { name: "a secret read through credentials that come from a secret", text: { clusters: { a: { kubeconfig }, b: { secret: { cluster: "a", namespace: "n", name: "s" } }, c: { secret: { cluster: "b", namespace: "n", name: "s" } } } }, env: {}, then: /must live on a cluster with static credentials, not b/ },
    { name: "an override that is no CloudEvent attribute name", text: { clusters: {} }, env: { K_CE_OVERRIDES: JSON.stringify({ extensions: { "Bad-Name": "x" } }) }, then: /Invalid key in record[\s\S]*Bad-Name/ },
    { name: "K_CE_OVERRIDES that is not JSON", text: { clusters: {} }, env: { K_CE_OVERRIDES: "{" }, then: /K_CE_OVERRIDES is not JSON/ },
    { name: "agent settings on a cluster without credentials", text: { clusters: { hub: { kubeconfig } }, agentSettings: { cluster: "spoke", namespace: "agent" } }, env: {}, then: /no credentials configured for cluster spoke/ },
    { name: "agent settings named by namespace only", text: { clusters: { spoke: { kubeconfig } }, agentSettings: { cluster: "spoke", namespace: "agent" } }, env: {}, then: { agentSettings: { cluster: "spoke", namespace: "agent", name: CheckpointConfigMapName } } },
    { name: "two sources under one name", text: { clusters: { hub: { kubeconfig } }, sources: [{ cluster: "hub", resource: cm }, { cluster: "hub", resource: cm, fieldSelector: "a=b" }] }, env: {}, then: /two sources are named hub\/configmaps/ },
    { name: "K_SINK and K_CE_OVERRIDES as a ContainerSource injects them", text: { clusters: {} }, env: { K_SINK: "http://sink.invalid/", K_CE_OVERRIDES: JSON.stringify({ extensions: { tenant: "t1" } }) }, then: { sinks: [{ name: "k-sink", url: "http://sink.invalid/" }], ceOverrides: { extensions: { tenant: "t1" } } } },
  ];
  it.each(scenarios)("judges $name", ({ text, env, then }) => {
    const read = () => configFromEnvironment(stringify(text), env);
    if (then instanceof RegExp) expect(read).toThrow(then);
    else expect(read()).toMatchObject(then);
  });
});

describe("agent settings", () => {
  it("restarts its resync ticks at the active relayResyncSeconds of the agent's checkpoint, without a restart", async () => {
    const spokeAdmin = admin(spoke);
    // The relay reads the checkpoint with a spoke relay's own rights (manifests/rbac/relay-spoke.yaml).
    const kubeconfig = await identityFor(spoke, "relay-spoke");
    await spokeAdmin.delete(ConfigMapResource, CheckpointConfigMapName, AgentNamespaceDefault);
    cleanups.push(async () => void (await spokeAdmin.delete(ConfigMapResource, CheckpointConfigMapName, AgentNamespaceDefault)));
    const activate = async (settings: AgentSettings) => {
      const hash = settingsHash(settings);
      const data = checkpointData({ active: { hash, settings }, lastKnownGood: installTimeConfig() });
      await createOrUpdate<KubeObject & { data?: Record<string, string> }>(spokeAdmin, ConfigMapResource, { metadata: { name: CheckpointConfigMapName, namespace: AgentNamespaceDefault }, data }, ["data"]);
      return hash;
    };
    // Timers the test holds: the ones running, each with its interval and the tick it would call.
    const running = new Set<{ ms: number; run: () => void }>();
    const every: Every = (ms, run) => {
      const timer = { ms, run };
      running.add(timer);
      return () => running.delete(timer);
    };
    const intervals = () => [...running].map((t) => t.ms);
    const sink = await startSink();
    const r = relay({
      clusters: { spoke: { kubeconfig } },
      sources: [{ cluster: "spoke", resource: NodeResource, mode: "Reference" }],
      sinks: [{ name: "ticks", url: sink.url, filter: { type: PingSourceType } }],
      resync: { intervalMs: 60_000 },
      agentSettings: agentSettingsCheckpoint("spoke", AgentNamespaceDefault),
      every,
    });
    await r.ready;
    expect(intervals()).toEqual([60_000]); // no checkpoint: the configured interval
    expect(r.status().resync).toMatchObject({ intervalMs: 60_000, settings: { state: "watching" } });

    const fast = await activate({ relayResyncSeconds: 2 });
    await eventually(() => expect(r.status().resync).toMatchObject({ intervalMs: 2_000, hash: fast }));
    expect(intervals()).toEqual([2_000]); // one timer, restarted
    for (const t of running) t.run();
    await eventually(() => expect(sink.received.map((x) => [x.headers["ce-type"], x.headers["ce-cluster"]])).toEqual([[PingSourceType, "spoke"]]));

    const slower = await activate({ relayResyncSeconds: 5, logLevel: "debug" });
    await eventually(() => expect(r.status().resync).toMatchObject({ intervalMs: 5_000, hash: slower }));
    expect(intervals()).toEqual([5_000]);

    // a config that leaves the interval unset means the configured one, as does no checkpoint at all
    const unset = await activate({ logLevel: "info" });
    await eventually(() => expect(r.status().resync).toMatchObject({ intervalMs: 60_000, hash: unset }));
    await activate({ relayResyncSeconds: 3 });
    await eventually(() => expect(intervals()).toEqual([3_000]));
    await spokeAdmin.delete(ConfigMapResource, CheckpointConfigMapName, AgentNamespaceDefault);
    await eventually(() => expect(r.status().resync).toEqual(expect.objectContaining({ intervalMs: 60_000 })));
    expect(r.status().resync.hash).toBeUndefined();
    expect(intervals()).toEqual([60_000]);

    await r.stop();
    expect(intervals()).toEqual([]);
  });
});

describe("resync ticks past what a Node timer holds (issue 23)", () => {
  // Node turns a delay above 2^31-1 ms into 1 ms: relayResyncSeconds 2147484 (a valid int32, times 1000)
  // once made the relay tick every millisecond. Real timers here, not the test's own.
  const ticksIn = async (sink: { received: Received[] }, ms: number) => {
    const before = sink.received.length;
    await new Promise((r) => setTimeout(r, ms));
    return sink.received.length - before;
  };

  it("a checkpoint's relayResyncSeconds of 2147484 is refused as the schema refuses it and the relay keeps its configured interval: no tick storm", async () => {
    const spokeAdmin = admin(spoke);
    const kubeconfig = await identityFor(spoke, "relay-spoke");
    // As an agent-config function older than the bounds would have written it.
    const settings = { relayResyncSeconds: 2_147_484 };
    const data = checkpointData({ active: { hash: settingsHash(settings), settings }, lastKnownGood: installTimeConfig() });
    await createOrUpdate<KubeObject & { data?: Record<string, string> }>(spokeAdmin, ConfigMapResource, { metadata: { name: CheckpointConfigMapName, namespace: AgentNamespaceDefault }, data }, ["data"]);
    cleanups.push(async () => void (await spokeAdmin.delete(ConfigMapResource, CheckpointConfigMapName, AgentNamespaceDefault)));
    const sink = await startSink();
    const r = relay({
      clusters: { spoke: { kubeconfig } },
      sources: [{ cluster: "spoke", resource: NodeResource, mode: "Reference" }],
      sinks: [{ name: "ticks", url: sink.url, filter: { type: PingSourceType } }],
      resync: { intervalMs: 60_000 },
      agentSettings: agentSettingsCheckpoint("spoke", AgentNamespaceDefault),
    });
    await r.ready;
    expect(await ticksIn(sink, 2_000)).toBe(0);
    expect(r.status().resync).toMatchObject({ intervalMs: 60_000, settings: { state: "watching" } });
  });

  it("an install-time resync interval past 2^31-1 ms is clamped to it, not turned into a tick every millisecond", async () => {
    const kubeconfig = await identityFor(spoke, "relay-spoke");
    const sink = await startSink();
    const r = relay({
      clusters: { spoke: { kubeconfig } },
      sources: [{ cluster: "spoke", resource: NodeResource, mode: "Reference" }],
      sinks: [{ name: "ticks", url: sink.url, filter: { type: PingSourceType } }],
      resync: { intervalMs: 2_147_484_000 },
    });
    await r.ready;
    expect(await ticksIn(sink, 2_000)).toBe(0);
  });
});

describe("the relay process", () => {
  it("runs as a ContainerSource: config file, K_SINK, K_CE_OVERRIDES, JSON logs, clean exit on SIGTERM", async () => {
    const ns = await namespace(hub, "cli");
    await admin(hub).create(ConfigMapResource, configMap(ns, "seen"));
    const dir = tempDir("relay-cli-");
    writeFileSync(join(dir, "hub.kubeconfig"), await watcherKubeconfig(hub, [ConfigMapResource], ns), { mode: 0o600 });
    const config = {
      clusters: { hub: { kubeconfigFile: join(dir, "hub.kubeconfig") } },
      sources: [{ cluster: "hub", resource: { version: "v1", kind: "ConfigMap", plural: "configmaps", namespaced: true }, namespace: ns, mode: "Resource" }],
      resync: { intervalMs: 0 },
    };
    writeFileSync(join(dir, "relay.yaml"), stringify(config));
    const sink = await startSink();
    const child = spawn(process.execPath, [join(import.meta.dirname, "..", "components", "relay", "main.ts"), "--config", join(dir, "relay.yaml")], {
      env: { ...process.env, K_SINK: sink.url, K_CE_OVERRIDES: JSON.stringify({ extensions: { tenant: "t1" } }) },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    cleanups.push(async () => {
      if (child.exitCode === null) child.kill("SIGKILL");
    });

    const [event] = await eventually(() => {
      const e = about(sink, "seen");
      expect(e).toHaveLength(1);
      return e;
    });
    expect(event!.r.headers).toMatchObject({ "ce-tenant": "t1", "ce-cluster": "hub", "ce-type": "dev.knative.apiserver.resource.add" });
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
    const lines = stderr.trim().split("\n").map((l) => JSON.parse(l) as LogLine);
    expect(lines.map((l) => l.msg)).toEqual(expect.arrayContaining(["relay started", "relay stopped"]));
    expect(lines.every((l) => typeof l.level === "string" && typeof l.time === "string")).toBe(true);
  });
});


// Issue 24, item 6: OCM's own hub serves no config.ocm-functions.io and grants a cluster nothing in
// it, so the spoke relay's AgentConfig source is refused there. That is a state of the hub: said once,
// looked at again at the slowest retry, and picked up once the hub serves the kind and grants it.
describe("a resource the server does not serve", () => {
  it("is said once at info while the server serves no such kind, and its objects are relayed once it does", async () => {
    const hubAdmin = admin(hub);
    const user = `relay-${suffix()}`;
    const kubeconfig = await hub.kubeconfigFor({ user }); // no grants: refused, as a cluster is on OCM's hub
    const log = memoryLog();
    const sink = await startSink();
    const r = relay({
      clusters: { hub: { kubeconfig } },
      sources: [{ cluster: "hub", resource: AgentConfigResource, mode: "Resource" }],
      sinks: [{ name: "all", url: sink.url }],
      log,
    });
    await eventually(() => expect(sourceStatus(r).state).toBe("not-served"));
    // a dozen retries at the test's 300 ms slowest retry
    await new Promise((resolve) => setTimeout(resolve, 4_000));
    const ours = log.lines.filter((l) => l.source === sourceStatus(r).name);
    expect(ours.filter((l) => l.level !== "info"), JSON.stringify(ours)).toEqual([]);
    expect(ours.filter((l) => l.msg.startsWith("the server does not serve"))).toHaveLength(1);

    const crd = crds.find((c) => (c as unknown as { spec: { group: string } }).spec.group === AgentConfigGroup)! as unknown as KubeObject;
    await hubAdmin.create(CustomResourceDefinitionResource, crd);
    cleanups.push(async () => void (await hubAdmin.delete(CustomResourceDefinitionResource, crd.metadata.name!)));
    await grant(hub, { user, rules: [watchRule(AgentConfigResource)] });
    const ns = await namespace(hub, "agentconfigs");
    await eventually(() => hubAdmin.create(AgentConfigResource, { metadata: { name: AgentConfigName, namespace: ns }, spec: {} }), { timeoutMs: 30_000 });
    await eventually(() => expect(verbsOf(sink, AgentConfigName)).toContain("add"), { timeoutMs: 30_000 });
    expect(sourceStatus(r).state).toBe("watching");
    expect(log.lines.filter((l) => l.msg === "the server serves it now: listed")).toHaveLength(1);
  });
});
