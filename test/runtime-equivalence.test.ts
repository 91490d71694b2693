// One real function, cluster-lease-monitor, served twice against one real hub: once by faas-js-runtime's
// own server (its `start`, as `func run` starts a Node function: the function's directory and func.yaml),
// once by ours (shared/cloudevents-server.ts, as its bundle runs it). The same events go to both, step by
// step, and both must answer with the same status, body and headers, x-recheck-after-ms included, and
// leave their cluster in the same state. faas-js-runtime is what Knative Functions' design names; ours
// replaced it in the bundles for size and cold start (issue 15), and this test keeps the two in step.
//
// Where the two servers differ on the way to the function, the second test pins it: a request that is
// not a CloudEvent (shared/cloudevents-server.ts's header says why ours answers 400), and the CORS
// headers faas-js-runtime adds. test/bundles.test.ts holds every function's built entry loadable by
// faas-js-runtime's own CLI.
import { describe, it, expect } from "vitest";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import type { Server } from "node:http";
import { KubeClient } from "../shared/kube/client.ts";
import { LeaseResource, NamespaceResource } from "../shared/api/kube.ts";
import { ClusterLabel, ManagedClusterConditionType, ManagedClusterLeaseName, ManagedClusterReason, ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { findCondition, setCondition } from "../shared/conditions.ts";
import { manualClock, microTime } from "../shared/clock.ts";
import { serve, type Io } from "../shared/harness.ts";
import fn, { type Config, type Lease } from "../functions/cluster-lease-monitor/reconcile.ts";
import { freePort } from "../dev/control-plane/clusters.ts";
import { objectEvent, startFunctionServer, testIo, tickEvent } from "./support/functions.ts";
import type { FunctionServer } from "../dev/local/functions.ts";
import { functionHub } from "./support/fixtures.ts";

const HUB = "hub";
const S = 1000;
const suffix = () => Math.random().toString(36).slice(2, 7);

// faas-js-runtime is CommonJS whose exports Node cannot name from ESM; its index.d.ts leaves out the
// `config` option (a directory holding func.yaml) and types the log level as a numeric enum.
type FaasStart = (fn: { handle: (context: unknown, event?: unknown) => unknown }, options: { port: number; logLevel: string; config: string }) => Promise<Server>;
const { start: faasStart } = createRequire(import.meta.url)("faas-js-runtime") as { start: FaasStart };

let admin: KubeClient;
let kubeconfig: string;
functionHub(fn.spec.name, [ManagedClusterResource, LeaseResource], (h) => ({ admin, kubeconfig } = h));

// The function behind faas-js-runtime's real server, on a free port (it listens on every interface).
async function startFaas(io: Io<Config>): Promise<FunctionServer> {
  const port = await freePort();
  const server = await faasStart({ handle: serve(fn.spec, () => io) }, { port, logLevel: "silent", config: fileURLToPath(new URL("../functions/cluster-lease-monitor", import.meta.url)) });
  const close = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  return { url: `http://127.0.0.1:${port}/`, close };
}

type Answer = { status: number; body: string; headers: Record<string, string> };

// Headers that describe the connection or the body's length, not the answer: each server sets its own.
const TRANSPORT = new Set(["date", "connection", "keep-alive", "content-length", "transfer-encoding"]);
// faas-js-runtime answers every function invocation as to a browser: CORS headers no CloudEvents
// source reads (a difference pinned below).
const CORS = new Set(["access-control-allow-origin", "access-control-allow-methods"]);

// Raw POST: binary-mode attributes as ce-* headers, the body as given.
async function post(url: string, headers: Record<string, string>, body?: string): Promise<Answer> {
  const res = await fetch(url, { method: "POST", headers, body });
  const text = await res.text();
  const kept: Record<string, string> = {};
  for (const [k, v] of res.headers) {
    if (TRANSPORT.has(k) || CORS.has(k)) continue;
    // an answer without a body has no media type to agree on
    if (k === "content-type" && text === "") continue;
    kept[k] = v;
  }
  return { status: res.status, body: text, headers: kept };
}

// A CloudEvent (the shape test/support/functions.ts builds) in binary mode, as the ApiServerSource
// adapter and the relay send it.
function binary(ce: Record<string, unknown>): [Record<string, string>, string | undefined] {
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(ce)) if (k !== "data" && k !== "datacontenttype" && v !== undefined) headers[`ce-${k}`] = String(v);
  if (ce.data === undefined) return [headers, undefined];
  headers["content-type"] = String(ce.datacontenttype ?? "application/json");
  return [headers, JSON.stringify(ce.data)];
}
const deliver = (url: string, ce: Record<string, unknown>) => post(url, ...binary(ce));

const accepted = { type: ManagedClusterConditionType.HubAccepted, status: "True", reason: ManagedClusterReason.HubClusterAdminAccepted, message: "Accepted by hub cluster admin" } as const;

// An accepted cluster whose agent renewed its lease renewedAgoS before the clock's now.
async function seed(name: string, clock: ReturnType<typeof manualClock>, renewedAgoS: number): Promise<void> {
  await admin.create(NamespaceResource, { metadata: { name } });
  await admin.create<ManagedCluster>(ManagedClusterResource, { metadata: { name }, spec: { hubAcceptsClient: true } });
  await admin.patch(ManagedClusterResource, name, { status: { conditions: setCondition([], accepted, clock.now()) } }, { subresource: "status" });
  const renewTime = microTime(new Date(clock.now().getTime() - renewedAgoS * S));
  await admin.create(LeaseResource, { metadata: { name: ManagedClusterLeaseName, namespace: name, labels: { [ClusterLabel.ClusterName]: name } }, spec: { holderIdentity: ManagedClusterLeaseName, renewTime } });
}

const clusterEvent = async (name: string) => objectEvent({ cluster: HUB, object: { apiVersion: "cluster.open-cluster-management.io/v1", kind: "ManagedCluster", ...(await admin.get<ManagedCluster>(ManagedClusterResource, name))! } });
const leaseEvent = async (name: string) => objectEvent({ cluster: HUB, verb: "add", object: { apiVersion: "coordination.k8s.io/v1", kind: "Lease", ...(await admin.get<Lease>(LeaseResource, ManagedClusterLeaseName, name))! } });

// What the function decided about a cluster, without the names and times that differ between the two.
async function judged(name: string) {
  const conditions = (await admin.get<ManagedCluster>(ManagedClusterResource, name))?.status?.conditions;
  return [ManagedClusterConditionType.Available, ManagedClusterConditionType.ClockSynced].map((type) => {
    const c = findCondition(conditions, type);
    return c ? { type, status: c.status, reason: c.reason, message: c.message } : { type, status: "none" };
  });
}

describe("faas-js-runtime's server and ours answer one function alike", () => {
  it("cluster-lease-monitor answers the same events with the same statuses, bodies and headers (x-recheck-after-ms too) behind faas-js-runtime's real server and ours, and leaves the same state", async () => {
    // One frozen clock for both, so a recheck is the same number of milliseconds behind either server.
    const clock = manualClock();
    const [a, b] = [`faas-${suffix()}`, `ours-${suffix()}`];
    await Promise.all([seed(a, clock, 60), seed(b, clock, 60)]);
    const faas = await startFaas(testIo({ [HUB]: kubeconfig }, { hubCluster: HUB, leaseGraceMultiplier: 5 }, clock));
    const ours = await startFunctionServer(serve(fn.spec, () => testIo({ [HUB]: kubeconfig }, { hubCluster: HUB, leaseGraceMultiplier: 5 }, clock)));
    try {
      // Each step: the same event (for that server's own cluster) to both, then the expected answer.
      const steps: { name: string; event: (c: string) => Promise<Record<string, unknown>>; then: Answer }[] = [
        // the lease is 60 s old and expires at 300 s: look again in 240 s
        { name: "a ManagedCluster event", event: clusterEvent, then: { status: 204, body: "", headers: { "x-recheck-after-ms": String(240 * S) } } },
        { name: "a Lease event", event: leaseEvent, then: { status: 204, body: "", headers: { "x-recheck-after-ms": String(240 * S) } } },
        {
          name: "an event without the cluster extension",
          event: async (c) => ({ ...(await leaseEvent(c)), cluster: undefined }),
          then: { status: 400, body: expect.stringContaining("cluster") as unknown as string, headers: { "content-type": "text/plain; charset=utf-8" } },
        },
        // a tick passes over clusters whose lease is fresh: nothing to look at, nothing to recheck
        { name: "a resync tick", event: async () => tickEvent(HUB), then: { status: 204, body: "", headers: {} } },
      ];
      for (const step of steps) {
        const viaFaas = await deliver(faas.url, await step.event(a));
        const viaOurs = await deliver(ours.url, await step.event(b));
        expect(viaOurs, `${step.name}: our server`).toEqual(step.then);
        expect(viaFaas, `${step.name}: faas-js-runtime against ours`).toEqual(viaOurs);
      }
      expect(await judged(a)).toEqual(await judged(b));

      // The lease runs out: the function marks the cluster Unknown and looks again a grace period later.
      clock.advance(240 * S);
      const viaFaas = await deliver(faas.url, await clusterEvent(a));
      const viaOurs = await deliver(ours.url, await clusterEvent(b));
      expect(viaOurs).toEqual({ status: 204, body: "", headers: { "x-recheck-after-ms": String(300 * S) } });
      expect(viaFaas).toEqual(viaOurs);
      const after = await judged(a);
      expect(after).toEqual(await judged(b));
      expect(after[0]).toMatchObject({ status: "Unknown", reason: ManagedClusterReason.ManagedClusterLeaseUpdateStopped });
    } finally {
      await Promise.all([faas.close(), ours.close()]);
    }
  });

  it("differs where shared/cloudevents-server.ts says: a request that is not a CloudEvent is our 400 but faas-js-runtime's 500 or a call with the bare body, and faas-js-runtime adds CORS headers", async () => {
    const clock = manualClock();
    const faas = await startFaas(testIo({ [HUB]: kubeconfig }, { hubCluster: HUB, leaseGraceMultiplier: 5 }, clock));
    const ours = await startFunctionServer(serve(fn.spec, () => testIo({ [HUB]: kubeconfig }, { hubCluster: HUB, leaseGraceMultiplier: 5 }, clock)));
    try {
      // ce-* headers without the required source: ours refuses it with the reason; faas-js-runtime's
      // cloudevents validation throws, which fastify answers 500 (a Broker would retry it forever).
      const noSource = { "ce-specversion": "1.0", "ce-id": "1", "ce-type": "dev.knative.sources.ping", "ce-cluster": HUB };
      expect(await post(ours.url, noSource)).toMatchObject({ status: 400, body: "the CloudEvent has no source" });
      expect(await post(faas.url, noSource)).toMatchObject({ status: 500, body: expect.stringContaining("must have required property 'source'") });

      // Plain JSON, no ce-* headers: ours refuses it before the function; faas-js-runtime hands the
      // body to the function as an HTTP call, and our harness refuses it as a malformed event.
      const plain = JSON.stringify({ hello: "world" });
      expect(await post(ours.url, { "content-type": "application/json" }, plain)).toMatchObject({ status: 400, body: expect.stringContaining("not a CloudEvent") });
      expect(await post(faas.url, { "content-type": "application/json" }, plain)).toMatchObject({ status: 400, body: expect.not.stringContaining("not a CloudEvent") });

      // CORS: faas-js-runtime answers every invocation with them, ours with none.
      const tick = binary(tickEvent(HUB));
      const raw = async (url: string) => Object.fromEntries((await fetch(url, { method: "POST", headers: tick[0] })).headers);
      expect(await raw(faas.url)).toMatchObject({ "access-control-allow-origin": "*", "access-control-allow-methods": expect.stringContaining("POST") });
      expect(Object.keys(await raw(ours.url)).filter((h) => h.startsWith("access-control-"))).toEqual([]);
    } finally {
      await Promise.all([faas.close(), ours.close()]);
    }
  });
});
