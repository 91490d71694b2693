// Footprint of the heartbeat: the relay (components/relay/main.ts, and its bundle as production runs it) with
// only a heartbeat setting and no sources, as a child process against a joined fleet cluster with a 1 s
// lease, its resident memory from /proc while it runs, and its CPU per renewal as the child measures it
// after warming up (logged on SIGTERM). A spoke's relay keeps its watches beside this.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startFleet } from "../dev/local/fleet.ts";
import { freePort } from "../dev/control-plane/clusters.ts";
import { identityFor } from "../dev/control-plane/identities.ts";
import { KubeClient } from "../shared/kube/client.ts";
import { SecretResource } from "../shared/api/kube.ts";
import { ManagedClusterConditionType, ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { AgentNamespaceDefault, HubKubeconfigSecretName } from "../shared/api/registration.ts";
import { isTrue } from "../shared/conditions.ts";
import { memoryOf, percentile, mib } from "./stats.ts";
import { setUp } from "./until.ts";

const CLUSTER = "bench";
// HEARTBEAT_BENCH_SECONDS: a longer run, to see the figures settle.
const RUN_MS = Number(process.env.HEARTBEAT_BENCH_SECONDS || 20) * 1_000;
const SOURCE = join(import.meta.dirname, "..", "components", "relay", "main.ts");
// What `npm run build` writes; HEARTBEAT_BUNDLE names another build (npm run build -- --outdir DIR).
const BUNDLE = process.env.HEARTBEAT_BUNDLE || join(import.meta.dirname, "..", "dist", "components", "relay.js");
// The TypeScript source, and the bundle production runs (when built) with the defaults and with a young
// generation of 1 MiB, which suits a process that allocates little and often.
const VARIANTS: { name: string; entry: string; flags: string[] }[] = [
  { name: "ts", entry: SOURCE, flags: [] },
  ...(existsSync(BUNDLE)
    ? [
        { name: "bundle", entry: BUNDLE, flags: [] },
        { name: "bundle --max-semi-space-size=1", entry: BUNDLE, flags: ["--max-semi-space-size=1"] },
      ]
    : []),
];

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Proc = { rss: number; anon: number };

type Stopped = { beats: number; renewals: number; cpuUs: number; rssBytes: number; steady?: { renewals: number; cpuUs: number } };

async function runSidecar(kubeconfigFile: string, entry: string, flags: string[]) {
  const port = await freePort();
  const child = spawn(process.execPath, [...flags, entry], {
    env: { ...process.env, OCM_RELAY_CONFIG: JSON.stringify({ clusters: { spoke: { kubeconfigFile } }, heartbeat: { cluster: "spoke", clusterName: CLUSTER, health: { port } } }) },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let logs = "";
  child.stderr!.on("data", (c: Buffer) => (logs += c.toString()));
  const exited = new Promise<number | null>((r) => child.on("exit", r));
  try {
    await setUp("the sidecar's first renewal", () => logs.includes("renewing the cluster lease"), 30_000);
    const started = Date.now();
    const samples: Proc[] = [];
    while (Date.now() - started < RUN_MS) {
      await pause(1_000);
      samples.push(memoryOf(child.pid!));
    }
    const health = await fetch(`http://127.0.0.1:${port}/healthz`).then(async (r) => `${r.status} ${await r.text()}`);
    const stat = readFileSync(`/proc/${child.pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    const procCpuMs = (Number(stat[11]) + Number(stat[12])) * 10; // utime + stime, in 100 Hz ticks
    child.kill("SIGTERM");
    await exited;
    const line = logs.split("\n").find((l) => l.includes('"msg":"heartbeat stopped"'));
    if (!line) throw new Error(`the sidecar logged no counters:\n${logs.slice(-2_000)}`);
    const stopped = JSON.parse(line) as Stopped;
    const lateHalf = samples.slice(Math.floor(samples.length / 2));
    return {
      stopped,
      health,
      procCpuMs,
      rss: { median: percentile(lateHalf.map((s) => s.rss), 50), max: Math.max(...samples.map((s) => s.rss)), anon: percentile(lateHalf.map((s) => s.anon), 50) },
      warnings: logs.split("\n").filter((l) => l.includes('"level":"warn"') || l.includes('"level":"error"')),
    };
  } finally {
    if (child.exitCode === null) child.kill("SIGKILL");
  }
}

export const heartbeat = {
  name: "heartbeat",
  async run(): Promise<Record<string, string | number>> {
    // Without the fleet's own in-process sidecar: two renewing one lease would make every renewal a
    // conflict and a re-read, which is not what a spoke runs.
    const fleet = await startFleet({ spokes: [{ name: CLUSTER, autoApprove: true }], resyncMs: 2_000, heartbeats: false });
    const dir = mkdtempSync(join(tmpdir(), "heartbeat-bench-"));
    try {
      const spoke = fleet.clusters.get(CLUSTER);
      const spokeAdmin = KubeClient.fromKubeconfig(spoke.adminKubeconfig);
      await setUp(
        "the cluster joined",
        async () => {
          const c = await fleet.hub.get<ManagedCluster>(ManagedClusterResource, CLUSTER);
          const secret = await spokeAdmin.get(SecretResource, HubKubeconfigSecretName, AgentNamespaceDefault);
          return !!c && isTrue(c.status?.conditions, ManagedClusterConditionType.HubAccepted) && !!secret;
        },
        60_000,
      );
      spokeAdmin.close();
      await fleet.hub.patch(ManagedClusterResource, CLUSTER, { spec: { leaseDurationSeconds: 1 } });
      const kubeconfigFile = join(dir, "spoke.kubeconfig");
      writeFileSync(kubeconfigFile, await identityFor(spoke, "heartbeat"), { mode: 0o600 });

      const figures: Record<string, string | number> = {
        "lease duration": "1 s (renewal every 1–1.25 s)",
        "run per variant": `${RUN_MS / 1_000} s`,
        bundle: existsSync(BUNDLE) ? BUNDLE : `${BUNDLE} not built: npm run build`,
      };
      for (const v of VARIANTS) {
        const r = await runSidecar(kubeconfigFile, v.entry, v.flags);
        const steady = r.stopped.steady;
        figures[`[${v.name}] renewals`] = r.stopped.renewals;
        figures[`[${v.name}] RSS, median of the last ${RUN_MS / 2_000} s`] = mib(r.rss.median);
        figures[`[${v.name}] RSS, max`] = mib(r.rss.max);
        figures[`[${v.name}] RssAnon (private), median`] = mib(r.rss.anon);
        figures[`[${v.name}] CPU per renewal, warm (child's cpuUsage)`] = steady ? `${(steady.cpuUs / steady.renewals / 1_000).toFixed(2)} ms over ${steady.renewals}` : "n/a";
        figures[`[${v.name}] CPU in all incl. start-up (/proc)`] = `${r.procCpuMs} ms`;
        figures[`[${v.name}] /healthz`] = r.health;
        figures[`[${v.name}] warnings logged`] = r.warnings.length ? `${r.warnings.length}, the first: ${r.warnings[0]}` : 0;
      }
      return figures;
    } finally {
      rmSync(dir, { recursive: true, force: true });
      await fleet.stop();
    }
  },
};
