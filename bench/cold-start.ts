// `npm run bench -- cold-start`: each function's bundle as a scale from zero starts it, from process
// start to its first answered event (issue 15's target: 300 ms).
//
// The bundles are built afresh (dev/build/bundle.ts) into a temporary directory. Each one runs as its
// image runs it, `node <bundle>`, with func.yaml's env, on a free port, under its own identity
// (manifests/rbac/<fn>.yaml) on a real hub or spoke control plane. The clock starts just before the
// spawn; the bench then posts a resync tick for the function's own cluster, and again every 2 ms while
// the connection is refused, and stops the clock at the first answer. That answer is a real reconcile
// of every key the tick gives: the hub functions list their kinds, and the spoke functions look for
// the agent's secrets. Besides the figures: the answer's status, the RSS right after it, the bundle's
// size, and a bare Node HTTP server started and asked the same way, as the floor.
//
// Settings: BENCH_COLD_START_RUNS (per function, default 5), BENCH_COLD_START_FUNCTIONS (comma-separated
// names; default all).
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomUUID } from "node:crypto";
import { bundle } from "../dev/build/bundle.ts";
import { freePort, startClusters, type LocalCluster } from "../dev/control-plane/clusters.ts";
import { identityFor } from "../dev/control-plane/identities.ts";
import { readFunctions } from "../cli/render/func-yaml.ts";
import { envValue, functionEnv } from "../cli/render/objects.ts";
import { mib, ms, percentile, rssOf } from "./stats.ts";

const RUNS = Number(process.env.BENCH_COLD_START_RUNS ?? 5);
const TARGET_MS = 300;
const POLL_MS = 2;
const ANSWER_TIMEOUT_MS = 30_000;

type Sample = { ms: number; status: number; rss: number };

const pause = (t: number) => new Promise((r) => setTimeout(r, t));

// A PingSource tick in binary mode, naming the cluster the function runs for.
async function tick(port: number, cluster: string): Promise<number | undefined> {
  const headers = { "ce-specversion": "1.0", "ce-id": randomUUID(), "ce-source": "/apis/v1/namespaces/bench/pingsources/resync", "ce-type": "dev.knative.sources.ping", "ce-cluster": cluster };
  try {
    return (await fetch(`http://127.0.0.1:${port}/`, { method: "POST", headers })).status;
  } catch {
    return undefined; // not listening yet
  }
}

async function startAndAsk(args: string[], env: NodeJS.ProcessEnv, cluster: string): Promise<Sample> {
  const port = await freePort();
  const t0 = performance.now();
  const child: ChildProcess = spawn(process.execPath, args, { env: { ...env, PORT: String(port) }, stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr!.on("data", (c: Buffer) => (stderr = (stderr + c.toString()).slice(-4000)));
  try {
    for (;;) {
      const status = await tick(port, cluster);
      if (status !== undefined) return { ms: performance.now() - t0, status, rss: await rssOf(child.pid!) };
      if (child.exitCode !== null) throw new Error(`exited with ${child.exitCode}: ${stderr}`);
      if (performance.now() - t0 > ANSWER_TIMEOUT_MS) throw new Error(`no answer after ${ANSWER_TIMEOUT_MS} ms: ${stderr}`);
      await pause(POLL_MS);
    }
  } finally {
    child.kill("SIGKILL");
    await new Promise((r) => (child.exitCode !== null ? r(undefined) : child.once("exit", r)));
  }
}

// The floor: Node itself, loading nothing but node:http, answering the same request.
const BARE_SERVER = `require("node:http").createServer((q, s) => { q.resume(); q.on("end", () => { s.statusCode = 204; s.end(); }); }).listen(Number(process.env.PORT), "127.0.0.1");`;

export const coldStart = {
  name: "cold-start",
  async run(): Promise<Record<string, string | number>> {
    const figures: Record<string, string | number> = {};
    const work = mkdtempSync(join(tmpdir(), "ocm-functions-cold-start-"));
    const wanted = process.env.BENCH_COLD_START_FUNCTIONS?.split(",").filter(Boolean);
    const fns = readFunctions().filter((f) => !wanted || wanted.includes(f.name));
    const built = await bundle({ outdir: join(work, "dist") });
    figures["bundles built"] = ms(built.ms);
    const planes = await startClusters({ names: ["hub", "spoke"], controllers: false, log: () => {} });
    try {
      const clusterOf: Record<string, LocalCluster> = { hub: planes.get("hub"), spoke: planes.get("spoke") };
      const bare: Sample[] = [];
      for (let i = 0; i < RUNS; i++) bare.push(await startAndAsk(["-e", BARE_SERVER], {}, "hub"));
      figures["bare node:http server: start → answer p50/max"] = `${ms(percentile(bare.map((s) => s.ms), 50))} / ${ms(Math.max(...bare.map((s) => s.ms)))}`;
      let over = 0;
      for (const f of fns) {
        const b = built.bundles.find((x) => x.name === f.name);
        if (!b) throw new Error(`no bundle for ${f.name}`);
        const vars = functionEnv(f, { SPOKE_CLUSTER_NAME: "bench", SPOKE_EXTERNAL_SERVER_URLS: clusterOf.spoke!.url });
        const env = Object.fromEntries(vars.map((e) => [e.name, e.value]));
        const own = envValue(vars, "OCM_CLUSTER_NAME") || "hub";
        const cluster = clusterOf[f.side]!;
        const dir = join(work, "kubeconfigs", f.name);
        mkdirSync(dir, { recursive: true });
        writeFileSync(join(dir, `${own}.kubeconfig`), await identityFor(cluster, f.name));
        const samples: Sample[] = [];
        for (let i = 0; i < RUNS; i++) samples.push(await startAndAsk([b.file], { PATH: process.env.PATH, ...env, OCM_KUBECONFIG_DIR: dir }, own));
        const p50 = percentile(samples.map((s) => s.ms), 50);
        if (p50 > TARGET_MS) over++;
        const statuses = [...new Set(samples.map((s) => s.status))].join(",");
        figures[`${f.name}: start → first answer p50/max`] = `${ms(p50)} / ${ms(Math.max(...samples.map((s) => s.ms)))} (answer ${statuses}; RSS ${mib(percentile(samples.map((s) => s.rss), 50))}; bundle ${(b.bytes / 1024).toFixed(0)} KiB)`;
      }
      figures[`functions over ${TARGET_MS} ms (p50)`] = `${over} of ${fns.length}`;
    } finally {
      await planes.stop();
      rmSync(work, { recursive: true, force: true });
    }
    return figures;
  },
};
