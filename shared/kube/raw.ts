// One GET against a cluster's API server that keeps what KubeClient.request turns into an error: the
// status code, content type and body as they came, or the network failure. Health probes need them.
import { request } from "node:https";
import { countRequest, type KubeClient } from "./client.ts";
import { clampTimerMs } from "../timers.ts";

export type RawAnswer = { status: number; contentType: string; body: string };
export type RawFailure = { status: 0; url: string; error: string };

export async function rawGet(client: KubeClient, path: string, o: { timeoutMs?: number } = {}): Promise<RawAnswer | RawFailure> {
  const url = new URL(client.server + path);
  const opts = await client.requestOptions("GET", path);
  opts.headers = { ...opts.headers, Accept: "application/json, */*" };
  // A probe gets a connection of its own, not one the client kept alive (a proxy tunnel is new anyway).
  if (opts.agent) opts.agent = false;
  return new Promise((resolve) => {
    let answered = false;
    const req = request(opts, (res) => {
      answered = true;
      countRequest(res.statusCode, "GET", client.host);
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, contentType: String(res.headers["content-type"] ?? ""), body: Buffer.concat(chunks).toString() }));
      res.on("error", (err) => resolve({ status: 0, url: url.href, error: err.message }));
    });
    req.on("error", (err) => {
      if (!answered) countRequest(undefined, "GET", client.host);
      resolve({ status: 0, url: url.href, error: err.message });
    });
    const timeoutMs = clampTimerMs(o.timeoutMs ?? 10_000);
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.end();
  });
}
