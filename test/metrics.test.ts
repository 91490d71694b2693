// /metrics (issue 25 item 3): the registry's text exposition, then the numbers a scrape shows after real
// work against a real API server: CloudEvents delivered over HTTP to a function's server (two
// reconciles that succeed, skipped events with their reason class, one RBAC defect, one malformed
// event, the function's API requests by method and code), and a real relay delivering a watched change
// to that server, scraped on its own metrics port.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { LocalCluster } from "../dev/control-plane/clusters.ts";
import { startHub, type Hub } from "./support/fixtures.ts";
import { ConfigMapResource, NamespaceResource, RoleBindingResource, RoleResource, SecretResource } from "../shared/api/kube.ts";
import { startCloudEventServer, type CloudEventServer } from "../shared/cloudevents-server.ts";
import { serve, type Io } from "../shared/harness.ts";
import { defineFunction, done, z } from "../shared/sdk.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { clientsFromKubeconfigs } from "../shared/kube/clients.ts";
import { systemClock } from "../shared/clock.ts";
import { EXPOSITION_CONTENT_TYPE, Registry } from "../shared/metrics.ts";
import { startRelay } from "../components/relay/relay.ts";
import { configFromEnvironment } from "../components/relay/config.ts";
import { jsonLog } from "../shared/harness.ts";
import { objectEvent, postEvent } from "./support/functions.ts";
import { eventually } from "./support/eventually.ts";

const HUB = "hub";
const suffix = () => Math.random().toString(36).slice(2, 7);

// ---- a parser for the text format, strict enough to catch a malformed line --------------------------

type Sample = { name: string; labels: Record<string, string>; value: number };
type Scrape = { samples: Sample[]; types: Map<string, string>; helps: Map<string, string> };

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$/;
const LABEL = /\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,|$)/y;

function parseExposition(text: string): Scrape {
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  const helps = new Map<string, string>();
  expect(text.endsWith("\n"), "the exposition ends with a line feed").toBe(true);
  for (const line of text.slice(0, -1).split("\n")) {
    const meta = /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$/.exec(line);
    if (meta) {
      (meta[1] === "HELP" ? helps : types).set(meta[2]!, meta[3]!);
      continue;
    }
    const m = SAMPLE.exec(line);
    if (!m) throw new Error(`not a sample line: ${JSON.stringify(line)}`);
    const labels: Record<string, string> = {};
    if (m[3]) {
      LABEL.lastIndex = 0;
      while (LABEL.lastIndex < m[3].length) {
        const l = LABEL.exec(m[3]);
        if (!l) throw new Error(`bad labels in ${JSON.stringify(line)}`);
        labels[l[1]!] = l[2]!.replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));
      }
    }
    const family = m[1]!.replace(/_(bucket|sum|count)$/, "");
    if (!types.has(m[1]!) && !types.has(family)) throw new Error(`sample ${m[1]} comes before its TYPE line`);
    const value = m[4] === "+Inf" ? Infinity : m[4] === "-Inf" ? -Infinity : Number(m[4]);
    if (Number.isNaN(value) && m[4] !== "NaN") throw new Error(`bad value in ${JSON.stringify(line)}`);
    samples.push({ name: m[1]!, labels, value });
  }
  return { samples, types, helps };
}

// The value of the one sample with this name and exactly these labels; 0 when there is none yet.
function valueOf(s: Scrape, name: string, labels: Record<string, string>): number {
  const found = s.samples.filter((x) => x.name === name && Object.keys(x.labels).length === Object.keys(labels).length && Object.entries(labels).every(([k, v]) => x.labels[k] === v));
  expect(found.length, `${name}${JSON.stringify(labels)} appears at most once`).toBeLessThanOrEqual(1);
  return found[0]?.value ?? 0;
}

async function scrape(url: string): Promise<Scrape> {
  const res = await fetch(url);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toBe(EXPOSITION_CONTENT_TYPE);
  return parseExposition(await res.text());
}

describe("the registry's exposition", () => {
  it("writes HELP and TYPE for every metric, escapes label values, and gives histograms cumulative buckets with +Inf, _sum and _count", () => {
    const r = new Registry();
    const c = r.counter("test_things_total", "Things,\nby kind \\ colour", ["kind", "colour"]);
    const g = r.gauge("test_depth", "Depth", ["queue"]);
    const h = r.histogram("test_seconds", "Time", ["op"], [0.1, 1]);
    r.counter("test_unused_total", "Never counted", ["x"]);
    c.inc(["a\"b", "back\\slash\nnewline"]);
    c.inc(["a\"b", "back\\slash\nnewline"], 2);
    c.inc(["plain", "red"]);
    g.set(["q"], 5);
    g.add(["q"], -2);
    for (const v of [0.05, 0.1, 0.5, 3]) h.observe(["get"], v);
    const text = r.expose();
    expect(text).toContain('test_things_total{kind="a\\"b",colour="back\\\\slash\\nnewline"} 3\n');
    expect(text).toContain("# HELP test_things_total Things,\\nby kind \\\\ colour\n# TYPE test_things_total counter\n");
    expect(text).toContain("# HELP test_unused_total Never counted\n# TYPE test_unused_total counter\n");
    const s = parseExposition(text);
    expect(valueOf(s, "test_things_total", { kind: 'a"b', colour: "back\\slash\nnewline" })).toBe(3);
    expect(valueOf(s, "test_things_total", { kind: "plain", colour: "red" })).toBe(1);
    expect(valueOf(s, "test_depth", { queue: "q" })).toBe(3);
    expect(s.types.get("test_depth")).toBe("gauge");
    expect(s.types.get("test_seconds")).toBe("histogram");
    expect([valueOf(s, "test_seconds_bucket", { op: "get", le: "0.1" }), valueOf(s, "test_seconds_bucket", { op: "get", le: "1" }), valueOf(s, "test_seconds_bucket", { op: "get", le: "+Inf" })]).toEqual([2, 3, 4]);
    expect(valueOf(s, "test_seconds_count", { op: "get" })).toBe(4);
    expect(valueOf(s, "test_seconds_sum", { op: "get" })).toBeCloseTo(3.65);
  });

  it("refuses bad metric and label names, a wrong number of label values, a counter going down and a name registered twice differently", () => {
    const r = new Registry();
    expect(() => r.counter("1bad", "x")).toThrow(/not a valid metric name/);
    expect(() => r.counter("ok_total", "x", ["bad-label"])).toThrow(/not a valid label name/);
    expect(() => r.histogram("h", "x", ["le"], [1])).toThrow(/"le" is the bucket label/);
    expect(() => r.histogram("h2", "x", [], [1, 1])).toThrow(/strictly increasing/);
    const c = r.counter("ok_total", "x", ["a"]);
    expect(() => c.inc(["x", "y"])).toThrow(/takes 1 label values/);
    expect(() => c.inc(["x"], -1)).toThrow(/can only go up/);
    expect(() => r.gauge("ok_total", "x", ["a"])).toThrow(/already registered as a counter/);
    expect(r.counter("ok_total", "x", ["a"])).toBe(c);
    expect(r.expose()).toBe("# HELP ok_total x\n# TYPE ok_total counter\n"); // the refused calls left nothing behind
  });
});

let plane: Hub;
let hub: LocalCluster;
let admin: KubeClient;
let allowed: string; // a namespace the function's identity may read ConfigMaps in
let forbidden: string; // one it may not

beforeAll(async () => {
  plane = await startHub(HUB, { crds: false });
  ({ cluster: hub, admin } = plane);
  allowed = `metrics-${suffix()}`;
  forbidden = `metrics-${suffix()}`;
  for (const name of [allowed, forbidden]) await admin.create(NamespaceResource, { metadata: { name } });
});
afterAll(() => plane?.stop());

// A user that may get, list and watch ConfigMaps in `allowed`, and nothing else.
async function readerKubeconfig(user: string): Promise<string> {
  const name = `read-configmaps-${user}`;
  await admin.create(RoleResource, { metadata: { name, namespace: allowed }, rules: [{ apiGroups: [""], resources: ["configmaps"], verbs: ["get", "list", "watch"] }] });
  await admin.create(RoleBindingResource, {
    metadata: { name, namespace: allowed },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name },
    subjects: [{ kind: "User", apiGroup: "rbac.authorization.k8s.io", name: user }],
  });
  return hub.kubeconfigFor({ user });
}

// A function that reads the ConfigMap it is woken for; adds and updates wake it, deletions do not.
function readerFunction(name: string) {
  return defineFunction({
    name,
    config: z.object({}),
    watches: () => [{ cluster: HUB, resource: ConfigMapResource, root: true, verbs: ["add", "update"] as const }],
    async reconcile(io, key) {
      await io.cluster(HUB).get(ConfigMapResource, key.name, key.namespace);
      return done;
    },
  });
}

async function functionServer(fnName: string, kubeconfig: string): Promise<CloudEventServer> {
  const fn = readerFunction(fnName);
  const io: Io<object> = { clock: systemClock, config: {}, log: jsonLog(fnName, "quiet"), cluster: clientsFromKubeconfigs({ [HUB]: kubeconfig }) };
  const server = await startCloudEventServer(serve(fn.spec, () => io), { onError: () => {} });
  return server;
}

const configMap = (namespace: string, labels: Record<string, string> = {}): KubeObject => ({ metadata: { name: `cm-${suffix()}`, namespace, labels }, data: { a: "1" } });

describe("a function server's /metrics after real deliveries", () => {
  it("counts reconciles by result, the RBAC defect by class, the reconcile times, events received and skipped by reason class, and the function's API requests by method and code", async () => {
    const fn = `metrics-fn-${suffix()}`;
    const server = await functionServer(fn, await readerKubeconfig(fn));
    try {
      const a = await admin.create(ConfigMapResource, configMap(allowed));
      const b = await admin.create(ConfigMapResource, configMap(allowed));
      const denied = await admin.create(ConfigMapResource, configMap(forbidden));
      const secret = await admin.create(SecretResource, { metadata: { name: `s-${suffix()}`, namespace: allowed } });
      const metricsUrl = `${server.url}metrics`;
      const host = new URL(admin.server).host;
      const before = await scrape(metricsUrl);

      expect((await postEvent(server.url, objectEvent({ cluster: HUB, object: a, verb: "add" }))).status).toBe(204);
      expect((await postEvent(server.url, objectEvent({ cluster: HUB, object: b, verb: "update" }))).status).toBe(204);
      expect((await postEvent(server.url, objectEvent({ cluster: HUB, object: a, verb: "delete" }))).status).toBe(204); // not watched for deletions
      expect((await postEvent(server.url, objectEvent({ cluster: HUB, object: secret, verb: "add" }))).status).toBe(204); // not a watched kind
      expect((await postEvent(server.url, objectEvent({ cluster: HUB, object: denied, verb: "add" }))).status).toBe(500); // RBAC defect
      expect((await postEvent(server.url, { specversion: "1.0", id: "x", source: "y", type: "not.an.event.we.read" })).status).toBe(400);

      const after = await scrape(metricsUrl);
      const delta = (name: string, labels: Record<string, string>) => valueOf(after, name, labels) - valueOf(before, name, labels);
      const c = { controller: fn };
      expect(after.types.get("controller_runtime_reconcile_total")).toBe("counter");
      expect(after.types.get("controller_runtime_reconcile_time_seconds")).toBe("histogram");
      expect(valueOf(after, "controller_runtime_reconcile_total", { ...c, result: "success" })).toBe(2);
      expect(valueOf(after, "controller_runtime_reconcile_total", { ...c, result: "error" })).toBe(1);
      expect(valueOf(after, "controller_runtime_reconcile_errors_total", c)).toBe(1);
      expect(valueOf(after, "ocmf_errors_total", { ...c, stage: "reconcile", class: "rbac-defect" })).toBe(1);
      expect(valueOf(after, "controller_runtime_reconcile_time_seconds_count", c)).toBe(3);
      expect(valueOf(after, "controller_runtime_reconcile_time_seconds_bucket", { ...c, le: "+Inf" })).toBe(3);
      expect(valueOf(after, "controller_runtime_active_workers", c)).toBe(0);
      expect(valueOf(after, "workqueue_depth", { name: fn })).toBe(0);
      expect(valueOf(after, "ocmf_events_received_total", { ...c, type: "object" })).toBe(5);
      expect(valueOf(after, "ocmf_events_received_total", { ...c, type: "malformed" })).toBe(1);
      expect(valueOf(after, "ocmf_events_skipped_total", { ...c, reason: "verb" })).toBe(1);
      expect(valueOf(after, "ocmf_events_skipped_total", { ...c, reason: "not-watched" })).toBe(1);
      expect(valueOf(after, "ocmf_events_skipped_total", { ...c, reason: "malformed" })).toBe(1);
      // two reads allowed; the denied one refused once: a permission missing is not waited out and tried again
      expect(delta("rest_client_requests_total", { code: "200", method: "GET", host })).toBe(2);
      expect(delta("rest_client_requests_total", { code: "403", method: "GET", host })).toBe(1);
    } finally {
      await server.close();
    }
  });
});

describe("the relay's /metrics after a real delivery", () => {
  it("answers on its configured port with the change it watched, the delivery by outcome and code, and its list and watch requests", async () => {
    const fn = `metrics-relayed-${suffix()}`;
    const kubeconfig = await readerKubeconfig(fn);
    const server = await functionServer(fn, kubeconfig);
    const label = { relayed: suffix() };
    const sink = `sink-${suffix()}`;
    const source = `cms-${suffix()}`;
    // The registry is the process's, so the function server's scrape is the relay's "before".
    const before = await scrape(`${server.url}metrics`);
    const relay = startRelay({
      clusters: { [HUB]: { kubeconfig } },
      sources: [{ name: source, cluster: HUB, resource: ConfigMapResource, namespace: allowed, labelSelector: `relayed=${label.relayed}`, mode: "Resource" }],
      sinks: [{ name: sink, url: server.url }],
      resync: { intervalMs: 0 },
      metrics: { port: 0 },
      log: jsonLog("relay", "quiet"),
    });
    try {
      const endpoint = await relay.metrics!;
      const host = new URL(admin.server).host;
      await relay.ready;
      const cm = await admin.create(ConfigMapResource, configMap(allowed, label));
      await eventually(async () => expect(relay.status().sinks[0]!.delivered).toBe(1));

      const after = await scrape(endpoint.url);
      const delta = (name: string, labels: Record<string, string>) => valueOf(after, name, labels) - valueOf(before, name, labels);
      expect(valueOf(after, "ocmf_relay_changes_total", { source, verb: "add" })).toBe(1);
      expect(valueOf(after, "ocmf_relay_events_received_total", { sink })).toBe(1);
      expect(valueOf(after, "ocmf_relay_deliveries_total", { sink, outcome: "delivered", code: "204" })).toBe(1);
      expect(valueOf(after, "ocmf_relay_queue_depth", { sink })).toBe(0);
      // the function it delivered to reconciled the ConfigMap once, in the same process
      expect(valueOf(after, "controller_runtime_reconcile_total", { controller: fn, result: "success" })).toBe(1);
      // the relay's list and watch, and the function's read of the ConfigMap
      expect(delta("rest_client_requests_total", { code: "200", method: "GET", host })).toBe(3);
      expect(cm.metadata.name).toBeTruthy();
    } finally {
      await relay.stop();
      await server.close();
    }
    await expect(fetch(`http://127.0.0.1:${(await relay.metrics!).port}/metrics`)).rejects.toThrow(); // stop() closed it
  });

  it("refuses a metrics port out of range, in the file and in OCM_RELAY_METRICS_PORT, naming the setting", () => {
    expect(() => configFromEnvironment(JSON.stringify({ clusters: {}, metrics: { port: 70_000 } }), {})).toThrow(/metrics\.port/);
    expect(() => configFromEnvironment(undefined, { OCM_RELAY_METRICS_PORT: "80a" })).toThrow(/OCM_RELAY_METRICS_PORT "80a" is not a port number/);
    expect(configFromEnvironment(JSON.stringify({ clusters: {} }), { OCM_RELAY_METRICS_PORT: "9090" }).metrics).toEqual({ port: 9090, host: "127.0.0.1" });
  });
});
