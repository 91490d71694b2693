// The HTTP server every function runs behind: CloudEvents in over HTTP, the handler's answer out, and
// the two health paths Knative probes. It takes the place of faas-js-runtime, whose fastify, ajv and
// iconv-lite were most of a function bundle and most of its start-up; only node:http is loaded here.
//
// The contract, as the relay, the ApiServerSource adapter and a Broker use it:
//   POST /   one CloudEvent, in binary mode (ce-* headers, the data as the body, its media type as
//            Content-Type) or structured mode (application/cloudevents+json). The handler's answer:
//            its statusCode, headers (x-recheck-after-ms for the relay) and body; nothing → 204.
//            A request that is not a well-formed CloudEvent → 400 with the reason, the handler not
//            called; a batch (application/cloudevents-batch+json) → 415; a body over the limit → 413;
//            a handler that throws → 500 with its message.
//   GET /health/readiness, GET /health/liveness   200 "OK" (readiness 503 once the server is closing)
//   GET /metrics   the process's metrics in Prometheus text format (./metrics.ts, docs/metrics.md)
// A connection is bounded in time and number (CONNECTION_LIMITS): slow headers or a slow body end it
// (408 or closed), and past maxConnections a new one is closed unanswered.
// Everything else is 404 (405 for / with another method than POST).
//
// Where this differs from faas-js-runtime 4.0.1, on purpose: a malformed event is a 400, not a 500
// (a Broker would retry a 500 forever; nothing can make a malformed event well-formed); /metrics comes
// from our own small registry, not prom-client (which alone would undo the saving), and names what a
// controller-runtime controller names, not Node's process metrics; close() lets requests in
// flight finish instead of exiting under them; the handler never sees a request that is not an event;
// a CloudEvent returned by a handler is sent back as JSON, not as a reply event (none of ours does).
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { metricsAnswer, type Registry } from "./metrics.ts";
import { after } from "./timers.ts";

export type CloudEvent = { specversion: string; id: string; source: string; type: string; data?: unknown; [attribute: string]: unknown };
// What a handler gets besides the event; our functions only need the event.
export type RequestContext = { method: string; url: string; headers: IncomingHttpHeaders };
// A handler answers with a Reply ({ statusCode, headers, body }), a string (200 text), another value
// (200 JSON) or nothing (204): faas-js-runtime's reading of a function's return value.
export type EventHandler = (context: RequestContext, event: CloudEvent) => unknown;

export type ServerOptions = {
  port?: number; // 0 (the default): any free port
  host?: string; // default: every interface, IPv6 and IPv4
  bodyLimit?: number; // bytes
  limits?: Partial<ConnectionLimits>; // default CONNECTION_LIMITS
  onError?: (err: unknown) => void; // a handler that threw; default one line on stderr
  metrics?: Registry; // what GET /metrics answers; default the process's registry
};

export type CloudEventServer = {
  server: Server;
  port: number;
  url: string; // http://127.0.0.1:<port>/
  // Stops accepting connections, lets the requests in flight finish (each connection closes after its
  // answer), and resolves when none is left. After graceMs, whatever is still open is cut.
  close(graceMs?: number): Promise<void>;
};

export const READINESS_PATH = "/health/readiness";
export const LIVENESS_PATH = "/health/liveness";
// The API server's own limit on a request body (apiserver MaxRequestBodyBytes): any object it can
// store fits in a Resource-mode event; faas-js-runtime's 1 MiB would refuse the largest ManifestWorks.
export const DEFAULT_BODY_LIMIT = 3 * 1024 * 1024;
// How long and how many connections a client may hold (issue 23). Node's own defaults let a client
// that sends its headers a byte at a time hold a connection for up to 300 s (requestTimeout), and
// there is no cap on connections. A CloudEvents delivery comes from the queue-proxy in the pod
// (Knative; the activator sits in front of it) or from the relay (local mode, nothing in front):
// headers arrive in one write, and the largest body (DEFAULT_BODY_LIMIT) in well under a second. So:
// - headersMs: the headers, from the connection's start or the previous answer;
// - requestMs: the whole request, body included (not the handler's answer: a reconcile may be slow);
// - keepAliveMs: an idle kept-alive connection. Node announces it (Keep-Alive: timeout=15), which the
//   relay's fetch honours by dropping the connection before the server does; the queue-proxy's Go
//   transport retries a request on a connection the server closed while it was idle;
// - maxConnections: past it, a new connection is closed at once (the source retries the delivery);
// - checkMs: how often Node looks for connections past headersMs or requestMs (its default is 30 s,
//   which would let a slow client stay that much longer).
export type ConnectionLimits = { headersMs: number; requestMs: number; keepAliveMs: number; maxConnections: number; checkMs: number };
export const CONNECTION_LIMITS: ConnectionLimits = { headersMs: 5_000, requestMs: 30_000, keepAliveMs: 15_000, maxConnections: 256, checkMs: 1_000 };

// Node's http.Server with the limits set.
export function boundedServer(limits: ConnectionLimits, listener: Parameters<typeof createServer>[1]): Server {
  if (!(limits.headersMs <= limits.requestMs)) throw new Error(`headersMs (${limits.headersMs}) must not exceed requestMs (${limits.requestMs})`);
  const server = createServer({ headersTimeout: limits.headersMs, requestTimeout: limits.requestMs, keepAliveTimeout: limits.keepAliveMs, connectionsCheckingInterval: limits.checkMs }, listener);
  server.keepAliveTimeout = limits.keepAliveMs;
  server.maxConnections = limits.maxConnections;
  return server;
}
// The CloudEvents attribute naming rule (core spec: lower-case ASCII letters and digits).
const ATTRIBUTE_NAME = /^[a-z0-9]+$/;
// RFC 3339, as the spec's Timestamp type requires.
const TIMESTAMP = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/i;

export type ParsedEvent = { ok: true; event: CloudEvent } | { ok: false; status: number; reason: string };

const refuse = (status: number, reason: string): ParsedEvent => ({ ok: false, status, reason });

const mediaTypeOf = (contentType: string | undefined): string => (contentType ?? "").split(";")[0]!.trim().toLowerCase();
const isJsonMedia = (media: string): boolean => media === "application/json" || media === "text/json" || media.endsWith("+json");

// One request's headers and body as a CloudEvent, or why it is not one.
export function parseCloudEvent(headers: IncomingHttpHeaders, body: Buffer): ParsedEvent {
  const contentType = headers["content-type"];
  const media = mediaTypeOf(contentType);
  if (media.startsWith("application/cloudevents-batch")) return refuse(415, "batched CloudEvents are not accepted: send one event per request");
  if (media.startsWith("application/cloudevents")) {
    if (media !== "application/cloudevents+json") return refuse(415, `structured CloudEvents are accepted as application/cloudevents+json, not ${media}`);
    return structured(body);
  }
  if (Object.keys(headers).some((h) => h.startsWith("ce-"))) return binary(headers, contentType, media, body);
  return refuse(400, "not a CloudEvent: no ce-* headers (binary mode) and not application/cloudevents+json (structured mode)");
}

// Binary mode: each ce-<name> header is an attribute, Content-Type is datacontenttype, the body is
// the data. Header values are taken as sent, not percent-decoded, as faas-js-runtime's cloudevents
// took them: the relay sends them raw, and no name our events carry may hold a "%".
function binary(headers: IncomingHttpHeaders, contentType: string | undefined, media: string, body: Buffer): ParsedEvent {
  const event: Record<string, unknown> = {};
  for (const [header, value] of Object.entries(headers)) {
    if (!header.startsWith("ce-")) continue;
    const name = header.slice(3);
    if (!ATTRIBUTE_NAME.test(name)) return refuse(400, `header ${header}: CloudEvents attribute names are lower-case letters and digits only`);
    event[name] = Array.isArray(value) ? value.join(", ") : value;
  }
  if (contentType !== undefined) event.datacontenttype = contentType;
  // An empty body is an event without data, whatever the Content-Type says.
  if (body.length > 0) {
    if (isJsonMedia(media)) {
      try {
        event.data = JSON.parse(body.toString("utf8"));
      } catch (err) {
        return refuse(400, `the data is not the JSON its Content-Type (${media}) says: ${(err as Error).message}`);
      }
    } else event.data = media.startsWith("text/") ? body.toString("utf8") : body;
  }
  return checked(event);
}

// Structured mode: the body is one JSON object holding the attributes and data (or data_base64).
function structured(body: Buffer): ParsedEvent {
  let value: unknown;
  try {
    value = JSON.parse(body.toString("utf8"));
  } catch (err) {
    return refuse(400, `the structured CloudEvent is not JSON: ${(err as Error).message}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) return refuse(400, "the structured CloudEvent must be a JSON object");
  const { data_base64: base64, ...event } = value as Record<string, unknown>;
  for (const name of Object.keys(event)) {
    if (name !== "data" && !ATTRIBUTE_NAME.test(name)) return refuse(400, `attribute ${JSON.stringify(name)}: CloudEvents attribute names are lower-case letters and digits only`);
  }
  if (base64 !== undefined) {
    if ("data" in event) return refuse(400, "the structured CloudEvent has both data and data_base64");
    if (typeof base64 !== "string") return refuse(400, "data_base64 must be a string");
    event.data = Buffer.from(base64, "base64");
  }
  return checked(event);
}

// What both modes require: the four required attributes as non-empty strings, version 1.0, a valid time.
function checked(event: Record<string, unknown>): ParsedEvent {
  for (const name of ["specversion", "id", "source", "type"]) {
    const v = event[name];
    if (typeof v !== "string" || v === "") return refuse(400, `the CloudEvent has no ${name}${v === undefined ? "" : " (it must be a non-empty string)"}`);
  }
  if (event.specversion !== "1.0") return refuse(400, `CloudEvents specversion ${JSON.stringify(event.specversion)} is not supported: only 1.0`);
  if (event.time !== undefined && (typeof event.time !== "string" || !TIMESTAMP.test(event.time) || Number.isNaN(Date.parse(event.time)))) {
    return refuse(400, `the CloudEvent's time ${JSON.stringify(event.time)} is not an RFC 3339 timestamp`);
  }
  return { ok: true, event: event as CloudEvent };
}

type Answer = { status: number; headers: Record<string, string>; body?: string | Uint8Array };

const text = (status: number, body: string): Answer => ({ status, headers: { "content-type": "text/plain; charset=utf-8" }, body });

// A handler's return value as an HTTP answer.
function answerOf(value: unknown): Answer {
  if (value === undefined || value === null || value === "" || value === false) return { status: 204, headers: {} };
  if (typeof value === "string") return text(200, value);
  if (typeof value === "object" && ("statusCode" in value || "headers" in value || "body" in value)) {
    const reply = value as { statusCode?: unknown; headers?: Record<string, unknown>; body?: unknown };
    const status = reply.statusCode ?? 200;
    if (!Number.isInteger(status) || (status as number) < 200 || (status as number) > 599) throw new Error(`the handler answered with status ${String(status)}`);
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(reply.headers ?? {})) if (v !== undefined && v !== null) headers[k.toLowerCase()] = String(v);
    const body = reply.body;
    if (body === undefined || body === null) return { status: status as number, headers };
    if (typeof body === "string") return { status: status as number, headers: { "content-type": "text/plain; charset=utf-8", ...headers }, body };
    if (body instanceof Uint8Array) return { status: status as number, headers: { "content-type": "application/octet-stream", ...headers }, body };
    return { status: status as number, headers: { "content-type": "application/json; charset=utf-8", ...headers }, body: JSON.stringify(body) };
  }
  return { status: 200, headers: { "content-type": "application/json; charset=utf-8" }, body: JSON.stringify(value) };
}

// The request body, "too large" past the limit (the rest is read and dropped, so the answer can be
// written), or undefined if the client went away first.
function readBody(req: IncomingMessage, limit: number): Promise<Buffer | "too large" | undefined> {
  const declared = Number(req.headers["content-length"]);
  if (declared > limit) return Promise.resolve("too large");
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    req.on("data", (chunk: Buffer) => {
      if (over) return;
      size += chunk.length;
      if (size <= limit) return void chunks.push(chunk);
      over = true;
      chunks.length = 0;
      resolve("too large");
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("close", () => resolve(undefined)); // no effect after "end"
  });
}

export async function startCloudEventServer(handler: EventHandler, o: ServerOptions = {}): Promise<CloudEventServer> {
  const limit = o.bodyLimit ?? DEFAULT_BODY_LIMIT;
  const onError = o.onError ?? ((err: unknown) => process.stderr.write(`handler failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`));
  let closing: Promise<void> | undefined;

  const send = (res: ServerResponse, a: Answer) => {
    if (res.headersSent || res.destroyed) return;
    const headers = { ...a.headers };
    // While closing, each connection ends with the answer it is giving, so close() is not held up by
    // a client that would send more on a kept-alive connection.
    if (closing) headers.connection = "close";
    const empty = a.status === 204 || a.status === 304;
    res.writeHead(a.status, headers);
    res.end(empty ? undefined : a.body);
  };

  const onEvent = async (req: IncomingMessage, res: ServerResponse) => {
    const body = await readBody(req, limit);
    if (body === undefined) return;
    if (body === "too large") {
      // The client may still be sending: the connection ends after this answer.
      res.setHeader("connection", "close");
      return send(res, text(413, `the request body is larger than ${limit} bytes`));
    }
    const parsed = parseCloudEvent(req.headers, body);
    if (!parsed.ok) return send(res, text(parsed.status, parsed.reason));
    let answer: Answer;
    try {
      answer = answerOf(await handler({ method: req.method!, url: req.url!, headers: req.headers }, parsed.event));
    } catch (err) {
      onError(err);
      answer = text(500, err instanceof Error ? err.message : String(err));
    }
    try {
      send(res, answer);
    } catch (err) {
      // a header value Node refuses to send
      onError(err);
      send(res, text(500, err instanceof Error ? err.message : String(err)));
    }
  };

  const server = boundedServer({ ...CONNECTION_LIMITS, ...o.limits }, (req, res) => {
    const path = req.url!.split("?")[0];
    if (path === "/") {
      if (req.method === "POST") return void onEvent(req, res);
      res.setHeader("allow", "POST");
      return send(res, text(405, "send CloudEvents with POST"));
    }
    if ((path === READINESS_PATH || path === LIVENESS_PATH) && (req.method === "GET" || req.method === "HEAD")) {
      return send(res, path === READINESS_PATH && closing ? text(503, "closing") : text(200, "OK"));
    }
    const scrape = metricsAnswer(req.method, path!, o.metrics);
    if (scrape) return send(res, scrape);
    send(res, text(404, "not found"));
  });

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(o.port ?? 0, o.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;

  const close = (graceMs = Infinity): Promise<void> => {
    // server.close() stops listening and (Node ≥ 19) ends the idle connections; its callback runs when
    // the connections with a request in flight have had their answers and closed too.
    closing ??= new Promise<void>((resolve) => server.close(() => resolve()));
    if (Number.isFinite(graceMs)) {
      const cut = after(graceMs, () => server.closeAllConnections());
      void closing.then(() => clearTimeout(cut));
    }
    return closing;
  };
  return { server, port, url: `http://127.0.0.1:${port}/`, close };
}
