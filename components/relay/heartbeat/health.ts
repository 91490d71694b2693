// The heartbeat's health endpoint: GET /healthz answers 200 "ok", or 500 with OCM's message once the
// hub client certificate has expired, so the platform restarts the agent into re-bootstrap (§3.5).
// GET /metrics answers the process's metrics in Prometheus text format (docs/metrics.md).
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { boundedServer, type ConnectionLimits } from "../../../shared/cloudevents-server.ts";
import { metricsAnswer } from "../../../shared/metrics.ts";

// OCM's hub-kube-config health check message, verbatim (trailing full stop included).
export const RebootstrapRequiredMessage = "the client certificate expires and rebootstrap is required.";

export type Health = { ok: true } | { ok: false; message: string };
export type HealthEndpoint = { url: string; close(): Promise<void> };
// A probe is one small GET: the kubelet sends it whole and closes or idles. A few connections at a time
// are plenty; a client holding one open gets at most headersMs, and requestMs once it has sent headers.
export const HEALTH_LIMITS: ConnectionLimits = { headersMs: 5_000, requestMs: 10_000, keepAliveMs: 5_000, maxConnections: 16, checkMs: 1_000 };

// host defaults to loopback; a kubelet httpGet probe reaches the pod IP, so such a deployment sets 0.0.0.0.
export function serveHealth(o: { port: number; host?: string; limits?: Partial<ConnectionLimits> }, health: () => Health): Promise<HealthEndpoint> {
  const server: Server = boundedServer({ ...HEALTH_LIMITS, ...o.limits }, (req, res) => {
    const path = (req.url ?? "").split("?")[0]!;
    const scrape = metricsAnswer(req.method, path);
    if (scrape) return void res.writeHead(scrape.status, scrape.headers).end(scrape.body);
    if (req.method !== "GET" || path !== "/healthz") {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found");
      return;
    }
    const h = health();
    res.writeHead(h.ok ? 200 : 500, { "content-type": "text/plain" }).end(h.ok ? "ok" : h.message);
  });
  const host = o.host ?? "127.0.0.1";
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(o.port, host, () => {
      const { port } = server.address() as AddressInfo;
      resolve({
        url: `http://${host.includes(":") ? `[${host}]` : host}:${port}`,
        close: () =>
          new Promise<void>((done) => {
            server.close(() => done());
            server.closeAllConnections();
          }),
      });
    });
  });
}
