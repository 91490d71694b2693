// The running `npm start`'s control endpoint (loopback only): what the CLI asks of the parts that live
// inside that process, such as a spoke's heartbeat sidecar. Its URL is kept in .local/control.json.
import type { Server } from "node:http";
import { readFileSync } from "node:fs";
import type { Fleet } from "../dev/local/fleet.ts";
import { boundedServer, CONNECTION_LIMITS } from "../shared/cloudevents-server.ts";

export async function serveControl(fleet: Fleet): Promise<{ url: string; server: Server }> {
  // one CLI call at a time; bounded like every server of ours (issue 23)
  const server = boundedServer({ ...CONNECTION_LIMITS, maxConnections: 16 }, (req, res) => {
    const m = /^\/heartbeats\/([a-z0-9-]+)\/(start|stop)$/.exec(req.url ?? "");
    if (req.method !== "POST" || !m) {
      res.writeHead(404).end("POST /heartbeats/<cluster>/start|stop\n");
      return;
    }
    const [, cluster, verb] = m as unknown as [string, string, "start" | "stop"];
    const act = verb === "stop" ? fleet.stopHeartbeat(cluster) : fleet.startHeartbeat(cluster);
    act.then(
      () => res.writeHead(200).end(`heartbeat sidecar of ${cluster}: ${verb === "stop" ? "stopped" : "started"}\n`),
      (err: Error) => res.writeHead(400).end(`${err.message}\n`),
    );
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}`, server };
}

export async function callControl(controlFile: string, path: string): Promise<string> {
  let control: string;
  try {
    control = readFileSync(controlFile, "utf8");
  } catch {
    throw new Error(`no local fleet: ${controlFile} is missing (npm start writes it)`);
  }
  const { url } = JSON.parse(control) as { url: string };
  const res = await fetch(`${url}${path}`, { method: "POST" });
  const text = await res.text();
  if (!res.ok) throw new Error(text.trim());
  return text.trim();
}
