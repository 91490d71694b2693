// The CloudEvents HTTP server every function bundle runs (shared/cloudevents-server.ts), over real HTTP:
// binary and structured events reach the handler, malformed ones are a 400 with the reason and never
// reach it, the handler's status, headers and body go back as given (the relay reads
// x-recheck-after-ms), a throw is a 500, the health paths answer, bodies past the limit are a 413,
// and a function's process (shared/serve-main.ts) answers the event in flight before it exits on SIGTERM.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { spawn } from "node:child_process";
import { request } from "node:http";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startCloudEventServer, type CloudEvent, type CloudEventServer } from "../shared/cloudevents-server.ts";
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
  it("answers the health probes with OK, an unknown path with 404 and GET / with 405", async () => {
    for (const path of ["health/readiness", "health/liveness"]) {
      const res = await fetch(`${server.url}${path}`);
      expect([res.status, await res.text()]).toEqual([200, "OK"]);
    }
    expect((await fetch(`${server.url}metrics`)).status).toBe(404);
    expect((await fetch(server.url)).status).toBe(405);
    expect(received).toEqual([]);
  });
});

describe("a function's process on SIGTERM", () => {
  let work: string;
  beforeAll(() => (work = mkdtempSync(join(tmpdir(), "cloudevents-server-"))));
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  it("stops taking connections, answers the event in flight, then exits 0", async () => {
    // serve-main as a bundle's entry calls it, around a handler that takes 700 ms.
    const main = join(work, "main.ts");
    writeFileSync(
      main,
      [
        `import { serveFunction } from ${JSON.stringify(join(root, "shared/serve-main.ts"))};`,
        "const handle = async () => {",
        '  process.stdout.write("handling\\n");',
        "  await new Promise((r) => setTimeout(r, 700));",
        '  return { statusCode: 204, headers: { "x-recheck-after-ms": "42" } };',
        "};",
        'await serveFunction("slow", async () => ({ handle }));',
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
      // The listener is gone at once: a new connection is refused while the old request still runs.
      await eventually(() => expect(fetch(url, { method: "POST", headers: binaryHeaders })).rejects.toThrow());
      expect(child.exitCode).toBeNull();
      expect(await inFlight).toEqual({ status: 204, recheck: "42" });
      expect(await exit).toBe(0);
      expect(output).toContain('"msg":"stopping: answering the events in flight"');
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL");
    }
  });
});
