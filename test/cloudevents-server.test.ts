// The CloudEvents HTTP server every function bundle runs (shared/cloudevents-server.ts), over real HTTP:
// binary and structured events reach the handler, malformed ones are a 400 with the reason and never
// reach it, the handler's status, headers and body go back as given (the relay reads
// x-recheck-after-ms), a throw is a 500, the health paths answer, bodies past the limit are a 413,
// a function's process (shared/serve-main.ts) answers the event in flight before it exits on SIGTERM,
// and slow or surplus clients are cut off (this server and the heartbeat's health endpoint).
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { spawn } from "node:child_process";
import { request } from "node:http";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "node:net";
import { CONNECTION_LIMITS, DEFAULT_BODY_LIMIT, startCloudEventServer, type CloudEvent, type CloudEventServer } from "../shared/cloudevents-server.ts";
import { HEALTH_LIMITS, serveHealth } from "../components/relay/heartbeat/health.ts";
import { METRICS_LIMITS } from "../shared/metrics-endpoint.ts";
import { serve, type FunctionSpec } from "../shared/harness.ts";
import { freePort } from "../dev/control-plane/clusters.ts";
import { testIo, tickEvent } from "./support/functions.ts";
import { eventually } from "./support/eventually.ts";

const root = join(import.meta.dirname, "..");

let server: CloudEventServer;
let received: CloudEvent[];
let answer: (event: CloudEvent) => unknown;

beforeAll(async () => {
  server = await startCloudEventServer(
    (_context, event) => {
      received.push(event);
      return answer(event);
    },
    { bodyLimit: 4096, onError: () => {} },
  );
});
afterAll(() => server?.close());
beforeEach(() => {
  received = [];
  answer = () => undefined;
});

type Answer = { status: number; body: string; headers: Headers };
async function post(headers: Record<string, string>, body?: string): Promise<Answer> {
  const res = await fetch(server.url, { method: "POST", headers, body });
  return { status: res.status, body: await res.text(), headers: res.headers };
}

const binaryHeaders = { "ce-specversion": "1.0", "ce-id": "e1", "ce-source": "https://hub.invalid", "ce-type": "dev.knative.apiserver.resource.add" };

describe("an event in binary mode", () => {
  it("reaches the handler with its attributes, extensions and JSON data", async () => {
    const reply = await post({ ...binaryHeaders, "ce-cluster": "hub", "ce-namespace": "", "content-type": "application/json" }, JSON.stringify({ metadata: { name: "c1" } }));
    expect(reply.status).toBe(204);
    expect(received).toEqual([{ specversion: "1.0", id: "e1", source: "https://hub.invalid", type: "dev.knative.apiserver.resource.add", cluster: "hub", namespace: "", datacontenttype: "application/json", data: { metadata: { name: "c1" } } }]);
  });

  it("without a body is an event without data (a PingSource tick)", async () => {
    const tick = tickEvent("hub");
    const headers = Object.fromEntries(Object.entries(tick).map(([k, v]) => [`ce-${k}`, String(v)]));
    expect((await post(headers)).status).toBe(204);
    expect(received).toEqual([tick]);
  });
});

describe("an event in structured mode", () => {
  it("reaches the handler with its attributes and data", async () => {
    const event = { specversion: "1.0", id: "e2", source: "/s", type: "t", cluster: "hub", data: { a: 1 } };
    expect((await post({ "content-type": "application/cloudevents+json; charset=utf-8" }, JSON.stringify(event))).status).toBe(204);
    expect(received).toEqual([event]);
  });

  it("carries data_base64 as bytes", async () => {
    const event = { specversion: "1.0", id: "e3", source: "/s", type: "t", data_base64: Buffer.from("hello").toString("base64") };
    await post({ "content-type": "application/cloudevents+json" }, JSON.stringify(event));
    expect(Buffer.from(received[0]!.data as Uint8Array).toString()).toBe("hello");
  });
});

describe("a malformed request is answered with the reason, and the handler is not called", () => {
  const { "ce-type": _type, ...noType } = binaryHeaders;
  const rows: { name: string; headers: Record<string, string>; body?: string; status: number; reason: RegExp }[] = [
    { name: "a binary event without a type", headers: noType, status: 400, reason: /no type/ },
    { name: "a binary event with an empty source", headers: { ...binaryHeaders, "ce-source": "" }, status: 400, reason: /no source/ },
    { name: "another spec version", headers: { ...binaryHeaders, "ce-specversion": "0.3" }, status: 400, reason: /specversion "0\.3"/ },
    { name: "an attribute name CloudEvents does not allow", headers: { ...binaryHeaders, "ce-my_ext": "x" }, status: 400, reason: /ce-my_ext/ },
    { name: "a time that is not RFC 3339", headers: { ...binaryHeaders, "ce-time": "yesterday" }, status: 400, reason: /time/ },
    { name: "JSON data that does not parse", headers: { ...binaryHeaders, "content-type": "application/json" }, body: "{", status: 400, reason: /not the JSON/ },
    { name: "a structured event that is not JSON", headers: { "content-type": "application/cloudevents+json" }, body: "nope", status: 400, reason: /not JSON/ },
    { name: "a structured event without an id", headers: { "content-type": "application/cloudevents+json" }, body: JSON.stringify({ specversion: "1.0", source: "/s", type: "t" }), status: 400, reason: /no id/ },
    { name: "a request that is no CloudEvent", headers: { "content-type": "application/json" }, body: "{}", status: 400, reason: /not a CloudEvent/ },
    { name: "a batch", headers: { "content-type": "application/cloudevents-batch+json" }, body: "[]", status: 415, reason: /batched/ },
  ];
  it.each(rows)("$name → $status", async ({ headers, body, status, reason }) => {
    const reply = await post(headers, body);
    expect(reply.status).toBe(status);
    expect(reply.body).toMatch(reason);
    expect(received).toEqual([]);
  });

  it("a body over the limit is a 413, whether its length is declared or it is streamed", async () => {
    const big = JSON.stringify({ pad: "x".repeat(8192) });
    expect((await post({ ...binaryHeaders, "content-type": "application/json" }, big)).status).toBe(413);
    const streamed = await new Promise<number>((resolve, reject) => {
      const req = request(server.url, { method: "POST", headers: { ...binaryHeaders, "content-type": "application/json" } }, (res) => {
        res.resume();
        resolve(res.statusCode!);
      });
      req.on("error", reject);
      req.write(big.slice(0, 3000));
      setTimeout(() => req.end(big.slice(3000)), 20);
    });
    expect(streamed).toBe(413);
    expect(received).toEqual([]);
  });
});

describe("the handler's answer", () => {
  it("goes back with its status, headers and body", async () => {
    answer = () => ({ statusCode: 503, headers: { "X-Recheck-After-Ms": "250" }, body: "retry: busy" });
    const reply = await post(binaryHeaders);
    expect([reply.status, reply.headers.get("x-recheck-after-ms"), reply.body]).toEqual([503, "250", "retry: busy"]);
  });

  it("from the harness: 204 with the soonest recheck in x-recheck-after-ms", async () => {
    const spec: FunctionSpec<null> = { name: "probe", keys: () => [{ cluster: "hub", name: "a" }], reconcile: async () => ({ recheckInMs: 1234.2 }) };
    const harnessed = serve(spec, () => testIo({}, null));
    answer = (event) => harnessed({}, event);
    const tick = tickEvent("hub");
    const reply = await post(Object.fromEntries(Object.entries(tick).map(([k, v]) => [`ce-${k}`, String(v)])));
    expect([reply.status, reply.headers.get("x-recheck-after-ms"), reply.body]).toEqual([204, "1235", ""]);
  });

  it("from the harness: 400 with the reason for an event the function cannot read", async () => {
    const spec: FunctionSpec<null> = { name: "probe", keys: () => [], reconcile: async () => ({ done: true }) };
    const harnessed = serve(spec, () => testIo({}, null));
    answer = (event) => harnessed({}, event);
    const reply = await post({ ...binaryHeaders, "content-type": "application/json" }, JSON.stringify({ metadata: { name: "c1" } }));
    expect(reply.status).toBe(400);
    expect(reply.body).toContain("cluster");
  });

  it("is a 500 with the message when the handler throws", async () => {
    answer = () => {
      throw new Error("boom");
    };
    const reply = await post(binaryHeaders);
    expect([reply.status, reply.body]).toEqual([500, "boom"]);
  });

  it("is text for a string and JSON for another value", async () => {
    answer = () => "hi";
    expect(await post(binaryHeaders).then((r) => [r.status, r.headers.get("content-type"), r.body])).toEqual([200, "text/plain; charset=utf-8", "hi"]);
    answer = () => ({ ok: true });
    expect(await post(binaryHeaders).then((r) => [r.status, r.headers.get("content-type"), r.body])).toEqual([200, "application/json; charset=utf-8", '{"ok":true}']);
  });
});

describe("other paths", () => {
  it("answers the health probes with OK, /metrics with the Prometheus text format, an unknown path with 404 and GET / with 405", async () => {
    for (const path of ["health/readiness", "health/liveness"]) {
      const res = await fetch(`${server.url}${path}`);
      expect([res.status, await res.text()]).toEqual([200, "OK"]);
    }
    expect((await fetch(`${server.url}nothing-here`)).status).toBe(404);
    const metrics = await fetch(`${server.url}metrics`);
    expect([metrics.status, metrics.headers.get("content-type")]).toEqual([200, "text/plain; version=0.0.4; charset=utf-8"]);
    expect(await metrics.text()).toContain("# TYPE rest_client_requests_total counter\n");
    expect((await fetch(server.url)).status).toBe(405);
    expect(received).toEqual([]);
  });
});

describe("a function's process on SIGTERM", () => {
  let work: string;
  beforeAll(() => (work = mkdtempSync(join(tmpdir(), "cloudevents-server-"))));
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  it("stops taking connections, answers the event in flight, then exits 0", async () => {
    // serve-main as a bundle's generated entry calls it, around a handler that answers only once the test
    // lets it (a file appears): the listener is seen closed while the event is still in flight however
    // loaded the machine is.
    const main = join(work, "main.ts");
    const release = join(work, "release-the-event");
    writeFileSync(
      main,
      [
        `import { functionMain } from ${JSON.stringify(join(root, "shared/serve-main.ts"))};`,
        'import { existsSync } from "node:fs";',
        "const handle = async () => {",
        '  process.stdout.write("handling\\n");',
        `  while (!existsSync(${JSON.stringify(release)})) await new Promise((r) => setTimeout(r, 20));`,
        '  return { statusCode: 204, headers: { "x-recheck-after-ms": "42" } };',
        "};",
        // a module whose definition's handler is this one, run as the program (main: true)
        'await functionMain("slow", async () => ({ default: { handler: () => handle } }), true);',
      ].join("\n"),
    );
    const port = await freePort();
    const url = `http://127.0.0.1:${port}/`;
    const child = spawn(process.execPath, [main], { env: { PATH: process.env.PATH ?? "", PORT: String(port) }, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout!.on("data", (d: Buffer) => (output += d.toString()));
    child.stderr!.on("data", (d: Buffer) => (output += d.toString()));
    const exit = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    try {
      await eventually(async () => expect((await fetch(`${url}health/readiness`)).status).toBe(200));
      const inFlight = fetch(url, { method: "POST", headers: binaryHeaders }).then((r) => ({ status: r.status, recheck: r.headers.get("x-recheck-after-ms") }));
      await eventually(() => expect(output).toContain("handling"));
      child.kill("SIGTERM");
      // The listener is gone at once: a new connection is refused while the old request still runs. A probe
      // that got in before the close waits on the handler like the first: it is given up after a second
      // and tried again, and only a refusal counts.
      const probe = () => fetch(url, { method: "POST", headers: binaryHeaders, signal: AbortSignal.timeout(1_000) }).then(() => undefined, (e: unknown) => e as { cause?: { code?: string } });
      await eventually(async () => expect((await probe())?.cause?.code).toBe("ECONNREFUSED"));
      expect(child.exitCode).toBeNull();
      writeFileSync(release, "");
      expect(await inFlight).toEqual({ status: 204, recheck: "42" });
      expect(await exit).toBe(0);
      expect(output).toContain('"msg":"stopping: answering the events in flight"');
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL");
    }
  });
});

// issue 23: a slow client holds a connection only so long, and only so many connections are held.
// Raw sockets on loopback, a handful at a time, each for a bounded time.
type SlowClient = { endedAfterMs: Promise<number>; answer: () => string; stop(): void };
// Opens a connection and sends `first`, then one byte of `drip` every stepMs until the server ends the
// connection or the bytes run out; endedAfterMs is when the server ended it, counted from the connect.
function slowClient(port: number, first: string, drip: string, stepMs: number): SlowClient {
  const socket = connect(port, "127.0.0.1");
  const started = Date.now();
  let answer = "";
  let i = 0;
  const timer = setInterval(() => (i < drip.length && socket.writable ? socket.write(drip[i++]!) : undefined), stepMs);
  socket.on("connect", () => socket.write(first));
  socket.on("data", (d) => (answer += d.toString()));
  socket.on("error", () => {});
  const endedAfterMs = new Promise<number>((resolve) =>
    socket.on("close", () => {
      clearInterval(timer);
      resolve(Date.now() - started);
    }),
  );
  return { endedAfterMs, answer: () => answer, stop: () => (clearInterval(timer), socket.destroy()) };
}
const header = (n: number) => `x-pad: ${"a".repeat(n)}\r\n`;
const withinMs = (ms: number, what: Promise<number>) => Promise.race([what, new Promise<number>((r) => setTimeout(() => r(Infinity), ms))]);

describe("slow and surplus clients (issue 23)", () => {
  it("every server we ship bounds headers, whole requests, idle keep-alives and connections to small values", () => {
    for (const l of [CONNECTION_LIMITS, HEALTH_LIMITS, METRICS_LIMITS]) {
      expect(l.headersMs).toBeLessThanOrEqual(5_000);
      expect(l.requestMs).toBeLessThanOrEqual(30_000);
      expect(l.keepAliveMs).toBeLessThanOrEqual(15_000);
      expect(l.maxConnections).toBeLessThanOrEqual(256);
      expect(l.checkMs).toBeLessThanOrEqual(1_000);
    }
    expect(server.server.headersTimeout).toBe(CONNECTION_LIMITS.headersMs);
    expect(server.server.requestTimeout).toBe(CONNECTION_LIMITS.requestMs);
    expect(server.server.keepAliveTimeout).toBe(CONNECTION_LIMITS.keepAliveMs);
    expect(server.server.maxConnections).toBe(CONNECTION_LIMITS.maxConnections);
    expect(DEFAULT_BODY_LIMIT).toBe(3 * 1024 * 1024);
  });

  it("cuts off clients sending their headers a byte at a time once headersMs has passed, while a normal delivery is answered", async () => {
    const slow = Array.from({ length: 4 }, () => slowClient(server.port, "POST / HTTP/1.1\r\nhost: x\r\n", header(400), 100));
    try {
      await new Promise((r) => setTimeout(r, 1_000));
      expect((await post({ ...binaryHeaders, "content-type": "application/json" }, "{}")).status).toBe(204);
      const ended = await Promise.all(slow.map((c) => withinMs(CONNECTION_LIMITS.headersMs + 3 * CONNECTION_LIMITS.checkMs, c.endedAfterMs)));
      for (const ms of ended) expect(ms).toBeGreaterThanOrEqual(CONNECTION_LIMITS.headersMs - 100);
      for (const ms of ended) expect(ms).toBeLessThan(CONNECTION_LIMITS.headersMs + 3 * CONNECTION_LIMITS.checkMs);
      for (const c of slow) expect(c.answer()).toMatch(/^HTTP\/1\.1 408/);
      expect(received).toHaveLength(1);
    } finally {
      for (const c of slow) c.stop();
    }
  }, 20_000);

  it("cuts off a client sending its body a byte at a time once requestMs has passed, and never calls the handler", async () => {
    const limits = { headersMs: 1_000, requestMs: 2_000 };
    const own = await startCloudEventServer(() => received.push({} as CloudEvent), { limits });
    const head = ["POST / HTTP/1.1", "host: x", "content-type: application/json", "content-length: 1000", ...Object.entries(binaryHeaders).map(([k, v]) => `${k}: ${v}`)].join("\r\n");
    const c = slowClient(own.port, `${head}\r\n\r\n`, `{"pad":"${"a".repeat(990)}"}`, 100);
    try {
      const ms = await withinMs(limits.requestMs + 3 * CONNECTION_LIMITS.checkMs, c.endedAfterMs);
      expect(ms).toBeGreaterThanOrEqual(limits.requestMs - 100);
      expect(ms).toBeLessThan(limits.requestMs + 3 * CONNECTION_LIMITS.checkMs);
      expect(c.answer()).toMatch(/^HTTP\/1\.1 408/);
      expect(received).toEqual([]);
    } finally {
      c.stop();
      await own.close(0);
    }
  }, 15_000);

  it("closes connections past maxConnections unanswered, and serves again once they are gone", async () => {
    const own = await startCloudEventServer(() => undefined, { limits: { maxConnections: 3 } });
    const held = Array.from({ length: 3 }, () => slowClient(own.port, "POST / HTTP/1.1\r\n", header(200), 200));
    try {
      await new Promise((r) => setTimeout(r, 300));
      const surplus = slowClient(own.port, "GET /health/liveness HTTP/1.1\r\nhost: x\r\n\r\n", "", 100);
      expect(await withinMs(2_000, surplus.endedAfterMs)).toBeLessThan(2_000);
      expect(surplus.answer()).toBe("");
      for (const c of held) c.stop();
      await eventually(async () => expect((await fetch(`${own.url}health/liveness`)).status).toBe(200));
    } finally {
      for (const c of held) c.stop();
      await own.close(0);
    }
  }, 15_000);

  it("refuses a body over the CloudEvent limit with 413 before reading it, at the default limit", async () => {
    const own = await startCloudEventServer(() => received.push({} as CloudEvent));
    try {
      const res = await new Promise<number>((resolve, reject) => {
        const req = request(own.url, { method: "POST", headers: { ...binaryHeaders, "content-type": "application/json", "content-length": String(DEFAULT_BODY_LIMIT + 1) } }, (r) => {
          r.resume();
          resolve(r.statusCode!);
        });
        req.on("error", reject);
        req.write("{");
      });
      expect(res).toBe(413);
      expect(received).toEqual([]);
    } finally {
      await own.close(0);
    }
  });

  it("the heartbeat's health endpoint cuts off a slow client too and keeps answering probes", async () => {
    const health = await serveHealth({ port: 0, limits: { headersMs: 1_000, requestMs: 2_000 } }, () => ({ ok: true }));
    const port = Number(new URL(health.url).port);
    const slow = Array.from({ length: 3 }, () => slowClient(port, "GET /healthz HTTP/1.1\r\n", header(200), 100));
    try {
      expect((await fetch(`${health.url}/healthz`)).status).toBe(200);
      for (const ms of await Promise.all(slow.map((c) => withinMs(1_000 + 3 * HEALTH_LIMITS.checkMs, c.endedAfterMs)))) expect(ms).toBeLessThan(1_000 + 3 * HEALTH_LIMITS.checkMs);
      expect(HEALTH_LIMITS.maxConnections).toBeLessThanOrEqual(16);
    } finally {
      for (const c of slow) c.stop();
      await health.close();
    }
  }, 15_000);
});
