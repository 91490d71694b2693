// Hub cost and fleet scale, side by side with OCM v1.2.0's registration controller, in one run.
//
// For each fleet size N and each hub (ours: the hub functions and hub relay as local mode runs them, in
// this process; OCM: its `registration controller` process), on a fresh hub control plane: N simulated
// spokes (dev/sim/spokes.ts, one child process, each spoke a real identity with its own CSR and
// certificate) register at once with an auto-approved bootstrap token; then the fleet renews its leases
// every 60 s and then every 10 s, and over a window at each period we take the CPU of the hub's
// controllers, of kube-apiserver and of etcd (from /proc), the memory of every process, and the API
// requests by verb (apiserver_request_total). Last, the hub's event latency: a cluster's Available
// condition set to False, and the time until the hub's taint controller taints it (and untaints it on
// True again), which both hubs implement.
//
//   npm run bench -- hub-cost   N = 20 and 200 (SCALE_SIZES=20,200,1000 for more)
//   npm run bench -- fleet      N = 1000
// Settings: SCALE_WINDOW_SECONDS (60), each steady-state window, which starts one lease period and
// SCALE_SETTLE_SECONDS (30) after the fleet joined or its period changed; SCALE_RESYNC_SECONDS (1800),
// ours' resync; SCALE_SYSTEMS=ours or ocm, one hub only; SCALE_LOG=FILE keeps ours' logs;
// SCALE_PROFILE=PREFIX writes a CPU profile of ours' last window. Ours' memory is that of this process:
// run one size per process (SCALE_SIZES=200) for a figure without an earlier size's leftovers.
import { spawn, type ChildProcess } from "node:child_process";
import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { startClusters, freePort, type LocalClusters } from "../dev/control-plane/clusters.ts";
import { findOcm } from "../dev/control-plane/binaries.ts";
import { logTail, startProcess, stopProcess, type Managed } from "../dev/control-plane/processes.ts";
import { startFleet, type Fleet } from "../dev/local/fleet.ts";
import type { Milestones, SimOptions } from "../dev/sim/spokes.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { rawGet } from "../shared/kube/raw.ts";
import { applyManifests } from "../shared/apply.ts";
import { NamespaceResource } from "../shared/api/kube.ts";
import { TaintKey, ManagedClusterConditionType, ManagedClusterReason, ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { setCondition } from "../shared/conditions.ts";
import { metrics } from "../shared/metrics.ts";
import { cpuMsOf, memoryOf, percentile, ms, mib } from "./stats.ts";
import { HubResyncSecondsDefault } from "../cli/render/hub.ts";

type System = "ours" | "ocm";
const WINDOW_S = Number(process.env.SCALE_WINDOW_SECONDS || 60);
const SYSTEMS = (process.env.SCALE_SYSTEMS || "ours,ocm").split(",") as System[];
const PERIODS = [60, 10] as const; // lease renewal periods, seconds
const PROBES = 10;
const SETTLE_S = Number(process.env.SCALE_SETTLE_SECONDS || 30); // after one full period, before a window
// Ours resyncs as deployed: the hub's relays tick every 30 minutes, as OCM's hub informers resync.
const RESYNC_S = Number(process.env.SCALE_RESYNC_SECONDS || HubResyncSecondsDefault);
const PROFILE = process.env.SCALE_PROFILE; // a CPU profile of ours' last window, to PROFILE-N.cpuprofile
const LOG = process.env.SCALE_LOG; // ours' function and relay logs, appended to this file
const repoRoot = join(import.meta.dirname, "..");
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

// Profiles this process (ours' hub) until the returned function writes the profile.
async function startProfile(): Promise<(file: string) => Promise<void>> {
  const { Session } = await import("node:inspector/promises");
  const session = new Session();
  session.connect();
  await session.post("Profiler.enable");
  await session.post("Profiler.start");
  return async (file) => {
    const { profile } = await session.post("Profiler.stop");
    writeFileSync(file, JSON.stringify(profile));
    session.disconnect();
  };
}

// apiserver_request_total summed by verb.
async function requestCounts(admin: KubeClient): Promise<Map<string, number>> {
  const answer = await rawGet(admin, "/metrics", { timeoutMs: 30_000 });
  if (answer.status !== 200) throw new Error(`GET /metrics: ${answer.status} ${"error" in answer ? answer.error : answer.body.slice(0, 200)}`);
  const counts = new Map<string, number>();
  for (const line of answer.body.split("\n")) {
    if (!line.startsWith("apiserver_request_total{")) continue;
    const verb = /verb="([^"]+)"/.exec(line)?.[1] ?? "?";
    counts.set(verb, (counts.get(verb) ?? 0) + Number(line.slice(line.lastIndexOf(" ") + 1)));
  }
  return counts;
}
const WriteVerbs = new Set(["POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY", "CREATE", "UPDATE"]);
function requestsBetween(before: Map<string, number>, after: Map<string, number>): { writes: number; reads: number } {
  let writes = 0;
  let reads = 0;
  for (const [verb, n] of after) {
    const d = n - (before.get(verb) ?? 0);
    if (WriteVerbs.has(verb)) writes += d;
    else if (verb !== "WATCH") reads += d;
  }
  return { writes, reads };
}

// The simulator child: joined spokes as they come, and its renewal counts on request.
export class Simulator {
  readonly joined = new Map<string, Milestones>();
  private readonly child: ChildProcess;
  private readonly exited: Promise<number | null>;
  private reports: ((r: { renewals: number; conflicts: number; failures: number }) => void)[] = [];
  private stderr = "";
  allJoined: Promise<void>;

  constructor(options: SimOptions, dir: string) {
    const file = join(dir, "sim.json");
    writeFileSync(file, JSON.stringify(options), { mode: 0o600 });
    this.child = spawn(process.execPath, [join(repoRoot, "dev", "sim", "spokes.ts"), file], { stdio: ["pipe", "pipe", "pipe"] });
    this.exited = new Promise((r) => this.child.on("exit", r));
    this.child.stderr!.on("data", (c: Buffer) => (this.stderr = (this.stderr + c.toString()).slice(-4_000)));
    let all = () => {};
    this.allJoined = new Promise((r) => (all = r));
    createInterface({ input: this.child.stdout! }).on("line", (line) => {
      const m = JSON.parse(line) as { joined?: string; allJoined?: boolean; report?: { renewals: number; conflicts: number; failures: number } } & Milestones;
      if (m.joined) this.joined.set(m.joined, m);
      if (m.allJoined) all();
      if (m.report) this.reports.shift()?.(m.report);
    });
  }
  get pid(): number {
    return this.child.pid!;
  }
  send(cmd: object): void {
    this.child.stdin!.write(`${JSON.stringify(cmd)}\n`);
  }
  report(): Promise<{ renewals: number; conflicts: number; failures: number }> {
    return new Promise((r) => {
      this.reports.push(r);
      this.send({ report: true });
    });
  }
  async waitAll(timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<string>((r) => (timer = setTimeout(() => r("timeout"), timeoutMs)));
    const why = await Promise.race([this.allJoined.then(() => "ok"), this.exited.then((c) => `exited ${c}`), timeout]);
    clearTimeout(timer);
    if (why !== "ok") throw new Error(`simulated spokes: ${this.joined.size} joined, then ${why}\n${this.stderr}`);
  }
  async stop(): Promise<void> {
    if (this.child.exitCode !== null) return;
    this.child.stdin!.end();
    const killer = setTimeout(() => this.child.kill("SIGKILL"), 5_000);
    await this.exited;
    clearTimeout(killer);
  }
}

// One hub: its controllers' CPU (ours runs in this process), kept apart from the control plane's.
// invocations: ours' function calls so far, per function (deliveries, retries included).
// apiReads: ours' reads from the API server so far, per function (shared/observed.ts counts them: a miss,
// a stale handed object, a confirmation before a write).
type Hub = { cpuMs(): number; memory(): { rss: number; anon: number; heap?: number; external?: number; cache?: number }; stop(): Promise<void>; check?(): void; invocations?(): Map<string, number>; apiReads?(): Map<string, number> };

// ocmf_observed_reads_total from this process' registry, summed per function over the sources that
// went to the API server.
function functionApiReads(): Map<string, number> {
  const reads = new Map<string, number>();
  for (const line of metrics.expose().split("\n")) {
    const m = /^ocmf_observed_reads_total\{controller="([^"]+)",source="(api|stale|confirm)"\} (\S+)$/.exec(line);
    if (m) reads.set(m[1]!, (reads.get(m[1]!) ?? 0) + Number(m[3]));
  }
  return reads;
}

async function startHub(system: System, clusters: LocalClusters, bootstrapUser: string): Promise<Hub> {
  const hub = clusters.get("hub");
  if (system === "ours") {
    // Local mode's hub: the hub functions and the hub relay, in this process.
    const fleet: Fleet = await startFleet({ clusters, spokes: [], resyncMs: RESYNC_S * 1_000, heartbeats: false, nodes: false, autoApprovalUsers: [bootstrapUser], log: LOG ? (line) => appendFileSync(LOG, line) : undefined });
    return {
      cpuMs: () => {
        const u = process.cpuUsage();
        return (u.user + u.system) / 1_000;
      },
      memory: () => {
        const { heapUsed, external } = process.memoryUsage();
        return { ...memoryOf(process.pid), heap: heapUsed, external, cache: fleet.relays.get("hub")!.cacheSize().jsonBytes };
      },
      stop: () => fleet.stop(),
      invocations: () => new Map(fleet.relays.get("hub")!.status().sinks.map((k) => [k.name.replace(/^hub\//, ""), k.delivered + k.rejected + k.gaveUp + k.retries])),
      apiReads: functionApiReads,
    };
  }
  const admin = KubeClient.fromKubeconfig(hub.adminKubeconfig);
  await applyManifests(admin, readFileSync(join(repoRoot, "manifests", "hub", "bootstrap-rbac.yaml"), "utf8"));
  await admin.create(NamespaceResource, { metadata: { name: "open-cluster-management-hub" } }).catch(() => undefined);
  admin.close();
  const controller: Managed = startProcess(dirname(hub.dir), "ocm-registration-controller", findOcm().registration, [
    "controller",
    `--kubeconfig=${join(hub.dir, "admin.kubeconfig")}`,
    "--namespace=open-cluster-management-hub",
    "--disable-leader-election",
    `--listen=127.0.0.1:${await freePort()}`,
    "--feature-gates=DefaultClusterSet=true,ManagedClusterAutoApproval=true",
    `--cluster-auto-approval-users=${bootstrapUser}`,
  ]);
  await pause(3_000); // OCM's own start-up race: its informers before the first registrations
  const check = () => {
    if (controller.child.exitCode !== null) throw new Error(`OCM's registration controller exited with ${controller.child.exitCode}:\n${logTail(controller)}`);
  };
  check();
  return { cpuMs: () => cpuMsOf(controller.child.pid!), memory: () => memoryOf(controller.child.pid!), stop: () => stopProcess(controller), check };
}

type Window = { period: number; invocations: Map<string, number>; renewals: number; conflicts: number; failures: number; hubCpuMs: number; apiserverCpuMs: number; etcdCpuMs: number; writes: number; reads: number; seconds: number };
export type ScaleResult = {
  system: System;
  n: number;
  allAvailableMs: number;
  join: { p50: number; p99: number; certified: number; accepted: number };
  joinWrites: number;
  joinReads: number;
  joinInvocations: Map<string, number>;
  joinApiReads: Map<string, number>;
  windows: Window[];
  latency: { taint: number[]; untaint: number[] };
  memory: Record<string, { rss: number; anon: number; heap?: number; external?: number; cache?: number }>;
};

async function measure(system: System, n: number): Promise<ScaleResult> {
  const dir = mkdtempSync(join(tmpdir(), `scale-${system}-${n}-`));
  const clusters = await startClusters({ names: ["hub"], log: () => {} });
  const hubPlane = clusters.get("hub");
  const admin = KubeClient.fromKubeconfig(hubPlane.adminKubeconfig);
  let hub: Hub | undefined;
  let sim: Simulator | undefined;
  try {
    const token = await hubPlane.createBootstrapToken(["system:bootstrappers:managedcluster"]);
    const harness = memoryOf(process.pid); // this process before ours' hub starts in it
    hub = await startHub(system, clusters, token.user);
    const apiserver = hubPlane.apiserver!.child.pid!;
    const etcd = clusters.etcd.child.pid!;
    const names = Array.from({ length: n }, (_, i) => `sim-${String(i).padStart(4, "0")}`);
    const joinStart = await requestCounts(admin);
    const readsAtStart = hub.apiReads?.() ?? new Map<string, number>();
    const t0 = performance.now();
    sim = new Simulator(
      {
        hubUrl: hubPlane.url,
        caPem: hubPlane.caPem,
        bootstrapKubeconfig: token.kubeconfig,
        observerKubeconfig: hubPlane.adminKubeconfig,
        names,
        leaseDurationSeconds: PERIODS[0],
        renewSeconds: PERIODS[0],
      },
      dir,
    );
    await sim.waitAll(Math.max(120_000, n * 1_000));
    const allAvailableMs = performance.now() - t0;
    hub.check?.();
    const joinCounts = requestsBetween(joinStart, await requestCounts(admin));
    const joinInvocations = hub.invocations?.() ?? new Map<string, number>();
    const joinApiReads = new Map([...(hub.apiReads?.() ?? [])].map(([k, v]): [string, number] => [k, v - (readsAtStart.get(k) ?? 0)]).filter(([, v]) => v > 0));
    const joined = [...sim.joined.values()];
    const samples = joined.map((m) => m.available);

    const windows: Window[] = [];
    for (const period of PERIODS) {
      if (period !== PERIODS[0]) {
        // The hub's grace follows the lease duration: shorten it with the period.
        for (const name of names) await admin.patch(ManagedClusterResource, name, { spec: { leaseDurationSeconds: period } });
        sim.send({ renewSeconds: period });
      }
      // Settle: every spoke renews once at the new period (a first renewal after acceptance makes the hub
      // write ClockSynced, which wakes the cluster's watchers), and what the bench's own patches woke dies
      // down, so the window holds the steady state only.
      await pause((period + SETTLE_S) * 1_000);
      await sim.report();
      const before = { invocations: hub.invocations?.() ?? new Map<string, number>(), hub: hub.cpuMs(), apiserver: cpuMsOf(apiserver), etcd: cpuMsOf(etcd), requests: await requestCounts(admin), at: performance.now() };
      const profile = system === "ours" && PROFILE && period === PERIODS[PERIODS.length - 1] ? await startProfile() : undefined;
      await pause(WINDOW_S * 1_000);
      await profile?.(`${PROFILE}-${n}.cpuprofile`);
      const r = await sim.report();
      const after = { invocations: hub.invocations?.() ?? new Map<string, number>(), hub: hub.cpuMs(), apiserver: cpuMsOf(apiserver), etcd: cpuMsOf(etcd), requests: await requestCounts(admin), at: performance.now() };
      hub.check?.();
      windows.push({
        period,
        invocations: new Map([...after.invocations].map(([k, v]): [string, number] => [k, v - (before.invocations.get(k) ?? 0)]).filter(([, v]) => v > 0)),
        ...r,
        hubCpuMs: after.hub - before.hub,
        apiserverCpuMs: after.apiserver - before.apiserver,
        etcdCpuMs: after.etcd - before.etcd,
        ...requestsBetween(before.requests, after.requests),
        seconds: (after.at - before.at) / 1_000,
      });
    }
    const kcm = hubPlane.controllerManager?.child.pid;
    const memory = { harness, hub: hub.memory(), "kube-apiserver": memoryOf(apiserver), etcd: memoryOf(etcd), ...(kcm ? { "kube-controller-manager": memoryOf(kcm) } : {}), simulator: memoryOf(sim.pid) };

    // Event latency: Available=False → the unavailable taint, and back.
    const latency = { taint: [] as number[], untaint: [] as number[] };
    for (let i = 0; i < PROBES; i++) {
      const name = names[Math.floor((i * n) / PROBES)]!;
      for (const [status, tainted, samplesOf] of [["False", true, latency.taint], ["True", false, latency.untaint]] as const) {
        const c = (await admin.get<ManagedCluster & KubeObject>(ManagedClusterResource, name))!;
        const conditions = setCondition(c.status?.conditions, { type: ManagedClusterConditionType.Available, status, reason: ManagedClusterReason.ManagedClusterAvailable, message: "bench probe" }, new Date());
        const t = performance.now();
        await admin.patch(ManagedClusterResource, name, { metadata: { resourceVersion: c.metadata.resourceVersion }, status: { conditions } }, { subresource: "status" });
        for (;;) {
          const now = await admin.get<ManagedCluster & KubeObject>(ManagedClusterResource, name);
          if ((now?.spec?.taints ?? []).some((x) => x.key === TaintKey.Unavailable) === tainted) break;
          if (performance.now() - t > 60_000) throw new Error(`${system}: ${name} not ${tainted ? "tainted" : "untainted"} within 60 s`);
          await pause(10);
        }
        samplesOf.push(performance.now() - t);
      }
    }
    return {
      system,
      n,
      allAvailableMs,
      join: { p50: percentile(samples, 50), p99: percentile(samples, 99), certified: percentile(joined.map((m) => m.certified), 50), accepted: percentile(joined.map((m) => m.accepted), 50) },
      joinWrites: joinCounts.writes,
      joinReads: joinCounts.reads,
      joinInvocations,
      joinApiReads,
      windows,
      latency,
      memory,
    };
  } finally {
    await sim?.stop();
    await hub?.stop();
    admin.close();
    await clusters.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

const ratio = (ours: number | undefined, ocm: number | undefined) => (ours !== undefined && ocm !== undefined && ocm > 0 ? `${(ours / ocm).toFixed(2)}x` : "n/a");

const sum = (m: Map<string, number>) => [...m.values()].reduce((a, b) => a + b, 0);
const top = (m: Map<string, number>, per = 1) =>
  [...m].sort((a, b) => b[1] - a[1]).slice(0, 6).map(([k, v]) => `${k} ${(v / per).toFixed(1)}`).join(", ") || "none";

// One row per figure: ours, OCM's, and ours/OCM.
function table(results: ScaleResult[]): Record<string, string> {
  const rows: Record<string, string> = {};
  const row = (label: string, value: (r: ScaleResult) => number | undefined, show: (v: number) => string) => {
    for (const n of [...new Set(results.map((r) => r.n))]) {
      const ours = results.find((r) => r.n === n && r.system === "ours");
      const ocm = results.find((r) => r.n === n && r.system === "ocm");
      const [a, b] = [ours && value(ours), ocm && value(ocm)];
      rows[`N=${n} ${label}`] = `ours ${a === undefined ? "n/a" : show(a)} | OCM ${b === undefined ? "n/a" : show(b)} | ${ratio(a, b)}`;
    }
  };
  const fixed = (d: number) => (v: number) => v.toFixed(d);
  row("all accepted and Available", (r) => r.allAvailableMs, ms);
  row("join p50 (spoke start → Available)", (r) => r.join.p50, ms);
  row("join p99", (r) => r.join.p99, ms);
  row("join p50 to the certificate", (r) => r.join.certified, ms);
  row("join p50 to acceptance", (r) => r.join.accepted, ms);
  row("API writes per join (all clients)", (r) => r.joinWrites / r.n, fixed(1));
  row("API reads per join (all clients)", (r) => r.joinReads / r.n, fixed(1));
  row("function invocations per join", (r) => (r.system === "ours" ? sum(r.joinInvocations) / r.n : undefined), fixed(1));
  for (const r of results.filter((x) => x.system === "ours")) rows[`N=${r.n} invocations per join by function (ours)`] = top(r.joinInvocations, r.n);
  for (const r of results.filter((x) => x.system === "ours")) rows[`N=${r.n} function API reads per join by function (ours)`] = top(r.joinApiReads, r.n);
  for (const [i, period] of PERIODS.entries()) {
    const w = (r: ScaleResult) => r.windows[i]!;
    row(`${period}s leases: hub controllers CPU`, (r) => (w(r).hubCpuMs / w(r).seconds / 10), (v) => `${v.toFixed(2)} %`);
    row(`${period}s leases: hub controllers CPU per cluster-hour`, (r) => (w(r).hubCpuMs / r.n) * (3_600 / w(r).seconds), (v) => `${(v / 1_000).toFixed(2)} s`);
    row(`${period}s leases: kube-apiserver CPU`, (r) => w(r).apiserverCpuMs / w(r).seconds / 10, (v) => `${v.toFixed(2)} %`);
    row(`${period}s leases: etcd CPU`, (r) => w(r).etcdCpuMs / w(r).seconds / 10, (v) => `${v.toFixed(2)} %`);
    row(`${period}s leases: renewals in window`, (r) => w(r).renewals, fixed(0));
    row(`${period}s leases: API writes per renewal (all clients)`, (r) => w(r).writes / Math.max(1, w(r).renewals), fixed(2));
    row(`${period}s leases: API reads per renewal (all clients)`, (r) => w(r).reads / Math.max(1, w(r).renewals), fixed(2));
    row(`${period}s leases: function invocations per renewal`, (r) => (r.system === "ours" ? sum(w(r).invocations) / Math.max(1, w(r).renewals) : undefined), fixed(2));
    for (const r of results.filter((x) => x.system === "ours")) rows[`N=${r.n} ${period}s leases: invocations by function (ours)`] = top(w(r).invocations);
    row(`${period}s leases: renewal conflicts / failures`, (r) => w(r).conflicts * 1_000_000 + w(r).failures, (v) => `${Math.floor(v / 1_000_000)} / ${v % 1_000_000}`);
  }
  row("event latency p50 (Available=False → taint)", (r) => percentile(r.latency.taint, 50), ms);
  row("event latency p99 (Available=False → taint)", (r) => percentile(r.latency.taint, 99), ms);
  row("event latency p50 (True → untaint)", (r) => percentile(r.latency.untaint, 50), ms);
  for (const proc of ["hub", "kube-apiserver", "etcd", "kube-controller-manager", "simulator"]) {
    row(`RSS ${proc === "hub" ? "hub controllers (ours: this bench process)" : proc}`, (r) => r.memory[proc]?.rss, mib);
  }
  row("RssAnon hub controllers", (r) => r.memory.hub!.anon, mib);
  row("RSS of the bench process before ours' hub started in it", (r) => (r.system === "ours" ? r.memory.harness!.rss : undefined), mib);
  row("JS heap used (ours)", (r) => (r.memory.hub!.heap === undefined ? undefined : r.memory.hub!.heap), mib);
  row("external and array buffers (ours)", (r) => r.memory.hub!.external, mib);
  // the hub relay's watch caches (what observed state is handed from), as the JSON they hold; their
  // share of the heap is of that order
  row("watch cache, as JSON (ours)", (r) => r.memory.hub!.cache, mib);
  return rows;
}

async function runSizes(sizes: number[]): Promise<Record<string, string>> {
  const results: ScaleResult[] = [];
  for (const n of sizes) for (const system of SYSTEMS) results.push(await measure(system, n));
  return {
    "window per lease period": `${WINDOW_S} s`,
    ours: `hub functions + hub relay, local mode in one process, resync every ${RESYNC_S} s`,
    "OCM": "open-cluster-management.io/ocm v1.2.0 `registration controller`",
    ...table(results),
  };
}

const sizes = (fallback: string) => (process.env.SCALE_SIZES || fallback).split(",").map(Number);
export const hubCost = { name: "hub-cost", run: () => runSizes(sizes("20,200")) };
export const fleetScale = { name: "fleet", run: () => runSizes(sizes("1000")) };
