// A server that answers GET /metrics and nothing else, for a process that runs no other server (the
// relay). Bounded like every server we ship: a scrape is one small GET every few seconds.
import type { AddressInfo } from "node:net";
import { boundedServer, type ConnectionLimits } from "./cloudevents-server.ts";
import { metricsAnswer, metrics as processMetrics, type Registry } from "./metrics.ts";

export const METRICS_LIMITS: ConnectionLimits = { headersMs: 5_000, requestMs: 10_000, keepAliveMs: 15_000, maxConnections: 16, checkMs: 1_000 };

export type MetricsEndpoint = { url: string; port: number; close(): Promise<void> };

// host defaults to loopback; a Prometheus that scrapes the pod IP needs 0.0.0.0. Port 0: any free one.
export function serveMetrics(o: { port: number; host?: string; limits?: Partial<ConnectionLimits>; registry?: Registry }): Promise<MetricsEndpoint> {
  const server = boundedServer({ ...METRICS_LIMITS, ...o.limits }, (req, res) => {
    const scrape = metricsAnswer(req.method, (req.url ?? "").split("?")[0]!, o.registry ?? processMetrics);
    if (scrape) res.writeHead(scrape.status, scrape.headers).end(req.method === "HEAD" ? undefined : scrape.body);
    else res.writeHead(404, { "content-type": "text/plain; charset=utf-8" }).end("not found: GET /metrics");
  });
  const host = o.host ?? "127.0.0.1";
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(o.port, host, () => {
      server.off("error", reject);
      const { port } = server.address() as AddressInfo;
      resolve({
        port,
        url: `http://${host.includes(":") ? `[${host}]` : host}:${port}/metrics`,
        close: () =>
          new Promise<void>((done) => {
            server.close(() => done());
            server.closeAllConnections();
          }),
      });
    });
  });
}
