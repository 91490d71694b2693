// One HTTP POST of a message to a sink, with node:http(s) and a kept-alive agent per sink: the relay's
// one HTTP stack (its Kubernetes client is node:https too). fetch would load undici into the long-lived
// relay, about 12 MiB more private memory for the same requests.
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";

// header: an answer's header by its lower-case name, several values joined as fetch joins them.
export type Answer = { status: number; header(name: string): string | null; body: string };

const headerOf = (headers: IncomingMessage["headers"]) => (name: string) => {
  const v = headers[name];
  return v === undefined ? null : Array.isArray(v) ? v.join(", ") : v;
};

export type Poster = { post(message: { headers: Record<string, string>; body?: string }, timeoutMs: number): Promise<Answer>; close(): void };

// At most this much of an answer's body is kept: a sink's error text is logged, never its whole page.
const KEPT_BODY_BYTES = 4_096;

export function poster(url: string): Poster {
  const target = new URL(url);
  const secure = target.protocol === "https:";
  const agent = secure ? new HttpsAgent({ keepAlive: true }) : new HttpAgent({ keepAlive: true });
  const send = secure ? httpsRequest : httpRequest;
  return {
    post(message, timeoutMs) {
      return new Promise((resolve, reject) => {
        const headers = { ...message.headers, "content-length": String(message.body === undefined ? 0 : Buffer.byteLength(message.body)) };
        const req = send(target, { method: "POST", headers, agent }, (res) => {
          const chunks: Buffer[] = [];
          let kept = 0;
          res.on("data", (c: Buffer) => {
            if (kept < KEPT_BODY_BYTES) chunks.push(c);
            kept += c.length;
          });
          res.on("end", () => resolve({ status: res.statusCode ?? 0, header: headerOf(res.headers), body: Buffer.concat(chunks).toString("utf8").slice(0, KEPT_BODY_BYTES) }));
          res.on("error", reject);
        });
        req.setTimeout(timeoutMs, () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
        req.on("error", reject);
        req.end(message.body);
      });
    },
    close: () => agent.destroy(),
  };
}
