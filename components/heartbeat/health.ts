// The heartbeat's health endpoint: GET /healthz answers 200 "ok", or 500 with OCM's message once the
// hub client certificate has expired, so the platform restarts the agent into re-bootstrap (§3.5).
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

// OCM's hub-kube-config health check message, verbatim (trailing full stop included).
export const RebootstrapRequiredMessage = "the client certificate expires and rebootstrap is required.";

export type Health = { ok: true } | { ok: false; message: string };
export type HealthEndpoint = { url: string; close(): Promise<void> };

// host defaults to loopback; a kubelet httpGet probe reaches the pod IP, so such a deployment sets 0.0.0.0.
export function serveHealth(o: { port: number; host?: string }, health: () => Health): Promise<HealthEndpoint> {
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? "").split("?")[0];
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
