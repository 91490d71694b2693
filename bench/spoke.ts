// `npm run bench -- spoke`: our spoke agent beside OCM v1.2.0's, on the same warm hub, in one run.
//
// The hub is ours as production runs it: `ocmf install hub` (the bundled CLI, bundles built afresh into a
// temporary folder) applied to a local control plane that serves Knative's kinds, and what it applied
// run by dev/local/deployed.ts, every function and relay a bundle process under its own identity. One
// bootstrap token is an auto-approval user (OCM_CLUSTER_AUTO_APPROVAL_USERS), for every cluster name.
// Two spoke control planes: `spoke` for our agent (`ocmf join`, then deployed.ts runs the applied
// functions and relay (which keeps the heartbeat) as bundle processes) and `ocmspoke` for OCM's `registration agent` and
// `work agent` (OCM's own ClusterClaim and AppliedManifestWork CRDs when the Go module cache has them).
//
//  1. Cold join: from the spawn to a valid hub-kubeconfig-secret on the spoke (judgeHubSecret, as the
//     agents judge it) and ManagedClusterJoined=True on the hub, polled every 10 ms. Ours: every process
//     the join applied starts as a scale from zero starts it (the functions first, then the relay and
//     its heartbeat, as deployed.ts does); the clock starts before deployed.ts is called, so it includes
//     its TokenRequests; "from the first spawn" subtracts those (spawn times from /proc, 10 ms grain).
//     OCM: `registration agent` spawned fresh. A new cluster name every time; both spokes' secrets are
//     cleared between runs. The last run of each stays up for 3-5.
//  2. Warm join: our processes already running without credentials (the relay waits for them), then
//     the bootstrap-hub-kubeconfig Secret appears; from its creation to the same end. Where the time
//     goes, from the functions' and relay's logs, the spoke relay's recording and both API servers'
//     audit logs (Metadata level, every user but the bench's poller): the median time of each step of
//     the join (which function, which request), deliveries and retries per function, the requests per
//     identity and which were refused (403/409/5xx), and the milliseconds functions waited for a
//     permission. SPOKE_BENCH_TRACE_FILE=FILE writes the median join request by request. OCM's agent
//     has no warm form (one process whose join begins when it starts): its cold figure is its figure.
//  3. Memory at steady state: RSS and RssAnon (/proc/PID/status) of our relay, heartbeat in it (and, apart,
//     the function processes, which scale to zero in production) vs OCM's registration + work agents.
//  4. CPU per lease period: utime+stime (/proc/PID/stat) over the window, both clusters' leases set to
//     SPOKE_BENCH_LEASE_SECONDS on the hub. And CPU per renewal: the same CPU over the renewals of each
//     cluster's lease the hub saw in the window (renewTime polled every 250 ms), watches included.
//  5. Events the spoke relay delivered per function in the window, and how many the function skipped
//     (its "skipped" log lines: keys() found it was not its object), also over the warm joins: what the
//     subscriptions let through that the function did not need.
//  6. Hosted mode: `ocmf join --mode hosted` of a fourth control plane, `managed`, whose agent runs on the
//     `spoke` plane in klusterlet-<cluster>: the processes ours puts on the managed cluster (none) and its
//     relay's memory and CPU on the management cluster, beside OCM's two agents of item 3.
//
// Settings: SPOKE_BENCH_COLD_RUNS (5), SPOKE_BENCH_WARM_RUNS (20), SPOKE_BENCH_STEADY_SECONDS (60),
// SPOKE_BENCH_LEASE_SECONDS (5), SPOKE_BENCH_SETTLE_SECONDS (15, before the window), SPOKE_BENCH_DIST (a
// build to use instead of a fresh one), SPOKE_BENCH_KEEP (keep the run folder, for its logs),
// SPOKE_BENCH_AUDIT=0 (no audit logs, no per-request trace), SPOKE_BENCH_OCM=0 (our side only), SPOKE_BENCH_HOSTED=0 (no Hosted row),
// SPOKE_BENCH_TRACE_FILE. About 3.5 minutes with the defaults on 2 cores.
import { execFile } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { bundle } from "../dev/build/bundle.ts";
import { findOcm, ocmApiModuleDir, type OcmPrograms } from "../dev/control-plane/binaries.ts";
import { freePort, ocmCrds, startClusters, type LocalCluster, type LocalClusters } from "../dev/control-plane/clusters.ts";
import { knativeCrds } from "../dev/control-plane/knative.ts";
import { logTail, startGuard, startProcess, stopProcess, type Managed } from "../dev/control-plane/processes.ts";
import { runDeployed, type Deployed } from "../dev/local/deployed.ts";
import { createNodes } from "../dev/local/nodes.ts";
import { HubNamespaceDefault } from "../cli/render/index.ts";
import { hostedAgentNamespace, RelayName } from "../cli/render/spoke.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { CustomResourceDefinitionResource, LeaseResource, NamespaceResource, SecretResource } from "../shared/api/kube.ts";
import { ManagedClusterConditionType, ManagedClusterLeaseName, ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { AgentNamespaceDefault, BootstrapSecretName, HubKubeconfigSecretName } from "../shared/api/registration.ts";
import { hubEndpoint, judgeHubSecret, type HubEndpoint, type Secret } from "../shared/hub-credentials.ts";
import { isTrue } from "../shared/conditions.ts";
import type { Condition } from "../shared/api/meta.ts";
import { cpuMsOf, memoryOf, mib, ms, percentile, startedAgoMs } from "./stats.ts";
import { setUp } from "./until.ts";

const COLD_RUNS = Math.max(1, Number(process.env.SPOKE_BENCH_COLD_RUNS || 5));
const WARM_RUNS = Math.max(0, Number(process.env.SPOKE_BENCH_WARM_RUNS ?? 20));
const STEADY_MS = Number(process.env.SPOKE_BENCH_STEADY_SECONDS || 60) * 1_000;
const LEASE_SECONDS = Number(process.env.SPOKE_BENCH_LEASE_SECONDS || 5);
const SETTLE_MS = Number(process.env.SPOKE_BENCH_SETTLE_SECONDS ?? 15) * 1_000;
const JOIN_TIMEOUT_MS = 90_000;
const POLL_MS = 10;
const BOOTSTRAP_GROUP = "system:bootstrappers:managedcluster";
const WARM_TARGET = { p50: 250, p95: 500 };
// SPOKE_BENCH_OCM=0: our side only (no Go toolchain, or OCM's programs not built yet); no ratios.
const WITH_OCM = process.env.SPOKE_BENCH_OCM !== "0";
// SPOKE_BENCH_HOSTED=0: no Hosted-mode row (it adds a control plane and a join).
const HOSTED = process.env.SPOKE_BENCH_HOSTED !== "0";

const pause = (t: number) => new Promise((r) => setTimeout(r, t));

type Mem = { rss: number; anon: number };

// ---- logs and recordings

type LogLine = { time?: string; fn?: string; msg?: string; level?: string; status?: number; waitMs?: number; reason?: string; [k: string]: unknown };
function jsonLines<T>(file: string): T[] {
  if (!existsSync(file)) return [];
  const out: T[] = [];
  for (const line of readFileSync(file, "utf8").split("\n")) {
    if (!line.startsWith("{")) continue;
    try {
      out.push(JSON.parse(line) as T);
    } catch {
      // a line cut by a stop
    }
  }
  return out;
}
type Record_ = { time: string; sink: string; status: number | null; outcome: string; attempts: number; event: { time?: string; type?: string; kind?: string; name?: string; namespace?: string; cluster?: string; data?: unknown } };
const inWindow = (iso: string | undefined, from: number, to: number) => {
  const t = iso ? Date.parse(iso) : NaN;
  return t >= from && t <= to;
};
const median = (xs: number[]) => (xs.length ? percentile(xs, 50) : NaN);
const fmt = (n: number, digits = 0) => (Number.isFinite(n) ? n.toFixed(digits) : "n/a");
const ratio = (ours: number, theirs: number) => (theirs > 0 ? (ours / theirs).toFixed(2) : "n/a");

// ---- the bundled CLI

type Result = { code: number; stdout: string; stderr: string };
function runCli(cli: string, cwd: string, args: string[], env: Record<string, string> = {}): Promise<Result> {
  return new Promise((resolve) => {
    execFile(process.execPath, [cli, ...args], { cwd, env: { PATH: process.env.PATH ?? "", ...env }, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}
const described = (r: Result) => `exit ${r.code}\nstdout:\n${r.stdout.slice(-3000)}\nstderr:\n${r.stderr.slice(-3000)}`;

type Crd = KubeObject & { status?: { conditions?: { type: string; status: string }[] } };
async function installCrds(admin: KubeClient, crds: readonly object[]): Promise<void> {
  await Promise.all(crds.map((crd) => admin.create(CustomResourceDefinitionResource, crd as Crd)));
  for (const crd of crds as Crd[]) {
    await setUp(
      `CRD ${crd.metadata.name} Established`,
      async () => !!(await admin.get<Crd>(CustomResourceDefinitionResource, crd.metadata.name!))?.status?.conditions?.some((c) => c.type === "Established" && c.status === "True"),
      60_000,
    );
  }
}

// OCM's own CRDs for what its agents need on a spoke, from the open-cluster-management.io/api module
// tools/ocm builds with; ours (the same API) when the module cannot be found.
function ocmSpokeCrds(): { crds: object[]; from: string } {
  try {
    const dir = ocmApiModuleDir();
    const files = [
      ["cluster", "v1alpha1", "clusterclaims.crd.yaml"],
      ["work", "v1", "appliedmanifestworks.crd.yaml"],
    ].map(([group, version, suffix]) => {
      const d = join(dir, group!, version!);
      const f = readdirSync(d).find((x) => x.endsWith(suffix!));
      if (!f) throw new Error(`no *${suffix} in ${d}`);
      return join(d, f);
    });
    return { crds: files.flatMap((f) => parseAllDocuments(readFileSync(f, "utf8")).map((d) => d.toJS() as object)), from: "OCM's (open-cluster-management.io/api)" };
  } catch (err) {
    const wanted = ["clusterclaims.cluster.open-cluster-management.io", "appliedmanifestworks.work.open-cluster-management.io"];
    return { crds: ocmCrds().filter((c) => wanted.includes((c as KubeObject).metadata.name!)), from: `ours (OCM's not found: ${err instanceof Error ? err.message.split("\n")[0] : err})` };
  }
}

// ---- the joined check, as both sides state it

type Ctx = {
  work: string;
  cli: string;
  dist: string;
  ocm: OcmPrograms;
  clusters: LocalClusters;
  hub: LocalCluster;
  hubAdmin: KubeClient;
  bootstrapFile: string;
  bootstrap: HubEndpoint;
  hubRecords: string;
  audit: boolean;
};

type Joiner = { admin: KubeClient; cluster: LocalCluster; kubeconfigFile: string };

async function isJoined(ctx: Ctx, spoke: Joiner, name: string): Promise<boolean> {
  const [mc, secret] = await Promise.all([
    ctx.hubAdmin.get<ManagedCluster & KubeObject>(ManagedClusterResource, name),
    spoke.admin.get<Secret>(SecretResource, HubKubeconfigSecretName, AgentNamespaceDefault),
  ]);
  if (!isTrue(mc?.status?.conditions, ManagedClusterConditionType.Joined)) return false;
  return judgeHubSecret({ hubSecret: secret, bootstrap: ctx.bootstrap, clusterName: name, now: new Date() }).valid;
}

async function untilJoined(ctx: Ctx, spoke: Joiner, name: string, alive: () => string | undefined): Promise<void> {
  const deadline = performance.now() + JOIN_TIMEOUT_MS;
  for (;;) {
    if (await isJoined(ctx, spoke, name).catch(() => false)) return;
    const dead = alive();
    if (dead) throw new Error(`${name}: ${dead}`);
    if (performance.now() > deadline) throw new Error(`${name} did not join within ${JOIN_TIMEOUT_MS} ms`);
    await pause(POLL_MS);
  }
}

// ---- OCM's agents

type OcmRun = { name: string; registration: Managed; work?: Managed; hubDir: string };

async function startOcmRegistration(ctx: Ctx, spoke: Joiner, name: string): Promise<{ run: OcmRun; ms: number }> {
  await spoke.admin.delete(SecretResource, HubKubeconfigSecretName, AgentNamespaceDefault);
  await setUp("the previous hub-kubeconfig-secret gone", async () => !(await spoke.admin.get(SecretResource, HubKubeconfigSecretName, AgentNamespaceDefault)), 60_000);
  const hubDir = join(ctx.work, "ocm", name, "hub-kubeconfig");
  mkdirSync(hubDir, { recursive: true });
  const port = await freePort();
  const t0 = performance.now();
  const registration = startProcess(join(ctx.work, "ocm"), `${name}-registration`, ctx.ocm.registration, [
    "agent",
    `--kubeconfig=${spoke.kubeconfigFile}`,
    `--namespace=${AgentNamespaceDefault}`,
    `--spoke-cluster-name=${name}`,
    `--bootstrap-kubeconfig=${ctx.bootstrapFile}`,
    `--hub-kubeconfig-secret=${HubKubeconfigSecretName}`,
    `--hub-kubeconfig-dir=${hubDir}`,
    `--spoke-external-server-urls=${spoke.cluster.url}`,
    "--disable-leader-election",
    `--listen=127.0.0.1:${port}`,
  ]);
  const run: OcmRun = { name, registration, hubDir };
  try {
    await untilJoined(ctx, spoke, name, () => (registration.child.exitCode !== null ? `OCM's agent exited with ${registration.child.exitCode}:\n${logTail(registration)}` : undefined));
  } catch (err) {
    await stopProcess(registration);
    throw err;
  }
  return { run, ms: performance.now() - t0 };
}

// OCM's work agent, beside the registration agent, reading the hub kubeconfig the latter dumps.
async function startOcmWork(ctx: Ctx, spoke: Joiner, run: OcmRun): Promise<Managed> {
  const kubeconfig = join(run.hubDir, "kubeconfig");
  await setUp("OCM's hub kubeconfig dumped", () => existsSync(kubeconfig) && existsSync(join(run.hubDir, "agent-name")), 30_000);
  const agentId = readFileSync(join(run.hubDir, "agent-name"), "utf8").trim();
  const port = await freePort();
  const work = startProcess(join(ctx.work, "ocm"), `${run.name}-work`, ctx.ocm.work, [
    "agent",
    `--kubeconfig=${spoke.kubeconfigFile}`,
    `--namespace=${AgentNamespaceDefault}`,
    `--spoke-cluster-name=${run.name}`,
    `--hub-kubeconfig-dir=${run.hubDir}`,
    // the workload source of the kube driver is the hub: the kubeconfig the registration agent dumped
    `--workload-source-config=${kubeconfig}`,
    `--agent-id=${agentId}`,
    "--disable-leader-election",
    `--listen=127.0.0.1:${port}`,
  ]);
  run.work = work;
  return work;
}

// ---- our agent

type OursRun = { name: string; deployed: Deployed; runDir: string; recordDir: string };

// `ocmf join` for a new cluster name, after clearing what an earlier name left in the agent namespace.
async function joinSpoke(ctx: Ctx, spoke: Joiner, name: string): Promise<void> {
  const { items } = await spoke.admin.list<Secret>(SecretResource, { namespace: AgentNamespaceDefault }).catch(() => ({ items: [] as Secret[] }));
  for (const s of items) if (s.metadata.name !== BootstrapSecretName) await spoke.admin.delete(SecretResource, s.metadata.name!, AgentNamespaceDefault);
  const r = await runCli(ctx.cli, ctx.work, ["join", "--hub-kubeconfig", ctx.bootstrapFile, "--cluster-name", name, "--spoke-external-server-urls", spoke.cluster.url, "--wait", "crds"], {
    KUBECONFIG: spoke.kubeconfigFile,
  });
  if (r.code !== 0) throw new Error(`ocmf join ${name}: ${described(r)}`);
}

async function deploySpoke(ctx: Ctx, spoke: Joiner, name: string): Promise<OursRun> {
  const runDir = join(ctx.work, "ours", name);
  const recordDir = join(runDir, "records");
  mkdirSync(recordDir, { recursive: true });
  const deployed = await runDeployed({ cluster: spoke.cluster, namespace: AgentNamespaceDefault, dist: ctx.dist, runDir, recordDir });
  return { name, deployed, runDir, recordDir };
}

const deadProcess = (run: OursRun) => () => {
  const dead = run.deployed.processes.find((p) => p.child.exitCode !== null);
  return dead ? `${dead.name} exited with ${dead.child.exitCode}:\n${logTail(dead)}` : undefined;
};

async function coldJoinOurs(ctx: Ctx, spoke: Joiner, name: string): Promise<{ run: OursRun; ms: number; fromSpawnMs: number; readyMs: number }> {
  await joinSpoke(ctx, spoke, name);
  const t0 = performance.now();
  const run = await deploySpoke(ctx, spoke, name);
  const readyAt = performance.now();
  const firstSpawnAgo = Math.max(...run.deployed.processes.map((p) => startedAgoMs(p.child.pid!)));
  const spawnAt = readyAt - firstSpawnAgo;
  try {
    await untilJoined(ctx, spoke, name, deadProcess(run));
  } catch (err) {
    await run.deployed.stop();
    throw err;
  }
  const end = performance.now();
  return { run, ms: end - t0, fromSpawnMs: end - Math.max(t0, spawnAt), readyMs: readyAt - t0 };
}

type WarmSample = { ms: number; t0: number; end: number; run: OursRun };

async function warmJoinOurs(ctx: Ctx, spoke: Joiner, name: string): Promise<WarmSample> {
  await joinSpoke(ctx, spoke, name);
  const bootstrap = await spoke.admin.get<Secret>(SecretResource, BootstrapSecretName, AgentNamespaceDefault);
  if (!bootstrap) throw new Error("ocmf join wrote no bootstrap-hub-kubeconfig");
  await spoke.admin.delete(SecretResource, BootstrapSecretName, AgentNamespaceDefault);
  await setUp("the bootstrap secret gone", async () => !(await spoke.admin.get(SecretResource, BootstrapSecretName, AgentNamespaceDefault)), 60_000);
  const run = await deploySpoke(ctx, spoke, name);
  try {
    // warm: every function answers (deployed.ts waited), the relay runs (its spoke watches listed a
    // moment after it says it started; the hub's wait for credentials, silently) with its heartbeat
    const relay = run.deployed.processes.find((p) => p.name.endsWith(`-${RelayName}`))!;
    await setUp("the relay started", () => readFileSync(relay.logFile, "utf8").includes('"msg":"relay started'), 30_000).catch((err: Error) => {
      throw new Error(`${err.message}:\n${logTail(relay)}`);
    });
    await setUp("the heartbeat started", () => readFileSync(relay.logFile, "utf8").includes('"msg":"heartbeat started"'), 30_000).catch(() => undefined);
    await pause(1_000);
    const t0 = Date.now();
    const p0 = performance.now();
    await spoke.admin.create(SecretResource, { metadata: { name: BootstrapSecretName, namespace: AgentNamespaceDefault, labels: bootstrap.metadata.labels }, type: bootstrap.type, data: bootstrap.data });
    await untilJoined(ctx, spoke, name, deadProcess(run));
    const took = performance.now() - p0;
    return { ms: took, t0, end: t0 + took, run };
  } catch (err) {
    await run.deployed.stop();
    throw err;
  }
}

// The renewals of each cluster's lease on the hub while `during` runs: each renewTime seen, polled every
// 250 ms (a renewal every lease period or so, so none is missed).
async function countRenewals<T>(hubAdmin: KubeClient, clusters: readonly string[], during: Promise<T>): Promise<{ result: T; renewals: Map<string, number> }> {
  const seen = new Map(clusters.map((c) => [c, new Set<string>()]));
  let done = false;
  const polling = (async () => {
    while (!done) {
      for (const c of clusters) {
        const t = (await hubAdmin.get<KubeObject & { spec?: { renewTime?: string } }>(LeaseResource, ManagedClusterLeaseName, c).catch(() => undefined))?.spec?.renewTime;
        if (t) seen.get(c)!.add(t);
      }
      await pause(250);
    }
  })();
  const result = await during;
  done = true;
  await polling;
  // the renewTime current at the start was written before the window
  return { result, renewals: new Map([...seen].map(([c, s]) => [c, Math.max(0, s.size - 1)])) };
}

// ---- Hosted mode: the agent on the management cluster (`spoke`), the managed cluster running nothing

// `ocmf join --mode hosted` for a cluster whose agent runs on the management cluster in
// klusterlet-<cluster>, then what that applied, run by deployed.ts on each cluster: on the management
// cluster its functions and relay, on the managed cluster whatever ours there would run (nothing: its
// objects are namespaces and CRDs). The management cluster's cost per hosted spoke is its relay at steady
// state, measured as the Default-mode row is, beside OCM's two agents of that row.
async function hostedFigures(ctx: Ctx, management: Joiner, managed: Joiner, ocm: { rss: number; anon: number; cpuMs: number }): Promise<Record<string, string>> {
  const name = "ours-hosted";
  const ns = hostedAgentNamespace(name);
  await createNodes(managed.admin);
  const joined = await runCli(ctx.cli, ctx.work, ["join", "--hub-kubeconfig", ctx.bootstrapFile, "--cluster-name", name, "--mode", "hosted", "--managed-kubeconfig", managed.kubeconfigFile, "--wait", "crds"], {
    KUBECONFIG: management.kubeconfigFile,
  });
  if (joined.code !== 0) throw new Error(`ocmf join --mode hosted: ${described(joined)}`);
  const runDir = join(ctx.work, "hosted");
  const onManagement = await runDeployed({ cluster: management.cluster, namespace: ns, dist: ctx.dist, runDir: join(runDir, "management") });
  const onManaged = await runDeployed({ cluster: managed.cluster, namespace: ns, dist: ctx.dist, runDir: join(runDir, "managed") });
  try {
    await setUp("the hosted cluster Available", async () => isTrue((await ctx.hubAdmin.get<ManagedCluster & KubeObject>(ManagedClusterResource, name))?.status?.conditions, ManagedClusterConditionType.Available), 90_000);
    await ctx.hubAdmin.patch(ManagedClusterResource, name, { spec: { leaseDurationSeconds: LEASE_SECONDS } });
    await pause(SETTLE_MS);
    const relay = onManagement.processes.find((p) => p.name.endsWith(`-${RelayName}`));
    if (!relay) throw new Error("no relay runs for the hosted agent");
    const steady = await measureSteady([{ label: "hosted relay", pid: relay.child.pid!, group: "ours-long" }], STEADY_MS);
    const r = steady.figures[0]!;
    const periods = STEADY_MS / 1000 / LEASE_SECONDS;
    return {
      "hosted: processes of ours on the managed cluster": `${onManaged.processes.length} (0 MiB)`,
      "hosted: on the management cluster, per hosted spoke": `the relay with its heartbeat: RSS ${mib(r.rss)}, RssAnon ${mib(r.anon)}, CPU ${fmt(r.cpuMs / periods, 1)} ms/period${r.alive ? "" : " (EXITED)"}`,
      "hosted: that relay / OCM's 2 agents (Default mode) / ratio": `RSS ${mib(r.rss)} / ${mib(ocm.rss)} / ${ratio(r.rss, ocm.rss)}, RssAnon ${mib(r.anon)} / ${mib(ocm.anon)} / ${ratio(r.anon, ocm.anon)}, CPU ${fmt(r.cpuMs / periods, 1)} / ${fmt(ocm.cpuMs, 1)} ms / ${ratio(r.cpuMs / periods, ocm.cpuMs)}`,
      "hosted: function processes on the management cluster (scale to zero)": `${onManagement.processes.length - 1}`,
    };
  } finally {
    await onManaged.stop();
    await onManagement.stop();
  }
}

// ---- the trace of one warm join: the functions' and the relay's logs, the spoke relay's recording,
// and both API servers' audit logs (every request but the bench's own polling)

// The milestones of a join and where each is read: a log line (the first in the window from that
// process), the relay's recording (when the relay first saw the change), or an API server's audit log
// (when the request arrived; `last`: the last such request before the join was seen).
const MILESTONES = [
  { label: "relay: bootstrap credentials", process: RelayName, msg: "credentials loaded", includes: "bootstrap-hub-kubeconfig" },
  { label: "hub: ManagedCluster created (bootstrap token)", call: (c: Call) => c.api === "hub" && c.who === "bootstrap-token" && c.verb === "create" && c.what.startsWith("managedclusters ") },
  { label: "hub: CSR created (bootstrap token)", call: (c: Call) => c.api === "hub" && c.who === "bootstrap-token" && c.verb === "create" && c.what.startsWith("certificatesigningrequests ") },
  { label: "hub: CSR approved (csr-approver)", call: (c: Call) => c.api === "hub" && c.verb === "update" && c.what.startsWith("certificatesigningrequests/approval ") && c.code < 300 },
  { label: "hub: CSR signed (kube-controller-manager)", call: (c: Call) => c.api === "hub" && c.verb === "update" && c.what.startsWith("certificatesigningrequests/status ") && c.code < 300 },
  { label: "spoke: hub-kubeconfig-secret created", call: (c: Call) => c.api === "spoke" && c.verb === "create" && c.what === `secrets ${HubKubeconfigSecretName}` && c.code < 300 },
  { label: "hub: cluster namespace created (cluster-acceptor)", call: (c: Call) => c.api === "hub" && c.who === "sa:cluster-acceptor" && c.verb === "create" && c.what.startsWith("namespaces ") },
  { label: "hub: first 403 to the cluster's certificate", call: (c: Call) => c.api === "hub" && c.who === "cluster-cert" && c.code === 403 },
  { label: "hub: cluster RBAC complete (last binding, cluster-acceptor)", last: true, call: (c: Call) => c.api === "hub" && c.who === "sa:cluster-acceptor" && c.verb === "create" && /^(cluster)?rolebindings /.test(c.what) },
  { label: "hub: HubAccepted written (cluster-acceptor)", call: (c: Call) => c.api === "hub" && c.who === "sa:cluster-acceptor" && c.verb === "patch" && c.what.startsWith("managedclusters/status ") && c.code < 300 },
  { label: "hub: last status write by the cluster's certificate", last: true, call: (c: Call) => c.api === "hub" && c.who === "cluster-cert" && c.what.startsWith("managedclusters/status ") && c.code < 300 },
  { label: "spoke-registration: bootstrapping", process: "spoke-registration", msg: "bootstrapping" },
  { label: "spoke-registration: ManagedCluster created", process: "spoke-registration", msg: "created the ManagedCluster" },
  { label: "spoke-registration: CSR created", process: "spoke-registration", msg: "requested a client certificate" },
  { label: "relay saw the CSR approved", record: "approved" },
  { label: "relay saw the CSR issued", record: "issued" },
  { label: "spoke-registration: hub secret written", process: "spoke-registration", msg: "wrote the hub kubeconfig secret" },
  { label: "relay: hub-secret credentials", process: RelayName, msg: "credentials loaded", includes: `/${HubKubeconfigSecretName}` },
  { label: "spoke-cluster-status: status written", process: "spoke-cluster-status", msg: "status written" },
] as const;

type Call = { at: number; ms: number; api: string; who: string; verb: string; what: string; code: number };
type Trace = {
  milestones: Record<string, number | undefined>; // ms after t0
  deliveries: Map<string, { n: number; retried: number; latencies: number[]; retries: string[] }>;
  logs: Map<string, Map<string, number>>; // process → msg → count
  hub: Map<string, { n: number; retried: number }>;
  calls: Call[];
};

type AuditEvent = {
  kind?: string;
  stage?: string;
  verb?: string;
  requestURI?: string;
  user?: { username?: string };
  responseStatus?: { code?: number };
  requestReceivedTimestamp?: string;
  stageTimestamp?: string;
  objectRef?: { resource?: string; subresource?: string; namespace?: string; name?: string };
};

const POLLER = "spoke-bench-poller";
const WAITED = "(ms waited for a permission)";
function auditPolicy(): string {
  return [
    "apiVersion: audit.k8s.io/v1",
    "kind: Policy",
    "omitStages: [RequestReceived, ResponseStarted]",
    "rules:",
    `  - level: None`,
    `    users: ["${POLLER}", "system:apiserver"]`,
    "  - level: Metadata",
  ].join("\n");
}

const shortUser = (u = "") =>
  u
    .replace(/^system:serviceaccount:open-cluster-management-agent:/, "sa:")
    .replace(/^system:serviceaccount:open-cluster-management-hub:/, "sa:")
    .replace(/^system:open-cluster-management:[^:]+:[^:]+$/, "cluster-cert")
    .replace(/^system:bootstrap:.*$/, "bootstrap-token")
    .replace(/^admin$/, "admin (kcm, cli)");

function auditCalls(file: string | undefined, api: string, from: number, to: number): Call[] {
  if (!file) return [];
  return jsonLines<AuditEvent>(file)
    .filter((e) => e.kind === "Event" && e.stage === "ResponseComplete" && inWindow(e.requestReceivedTimestamp, from, to))
    .map((e) => {
      const at = Date.parse(e.requestReceivedTimestamp!);
      const o = e.objectRef ?? {};
      const what = o.resource ? `${o.resource}${o.subresource ? `/${o.subresource}` : ""}${o.name ? ` ${o.name}` : ""}` : (e.requestURI ?? "").split("?")[0]!;
      return { at, ms: Date.parse(e.stageTimestamp!) - at, api, who: shortUser(e.user?.username), verb: e.verb ?? "", what, code: e.responseStatus?.code ?? 0 };
    });
}

function traceWarm(ctx: Ctx, spoke: Joiner, s: WarmSample): Trace {
  const from = s.t0 - 5;
  const to = s.end + 50;
  const records = jsonLines<Record_>(join(s.run.recordDir, `${RelayName}.jsonl`));
  const milestones: Trace["milestones"] = {};
  const mark = (label: string, at: number) => {
    const t = at - s.t0;
    if (milestones[label] === undefined || t < milestones[label]!) milestones[label] = t;
  };
  const deliveries: Trace["deliveries"] = new Map();
  for (const r of records) {
    if (!inWindow(r.time, from, to)) continue;
    const seenAt = Date.parse(r.event.time ?? r.time);
    const d = deliveries.get(r.sink) ?? { n: 0, retried: 0, latencies: [], retries: [] };
    d.n++;
    d.latencies.push(Date.parse(r.time) - seenAt);
    if (r.attempts > 1) {
      d.retried++;
      d.retries.push(`${r.event.kind ?? "tick"} ${r.event.name ?? ""}: ${r.attempts} attempts, seen +${seenAt - s.t0}, answered ${r.status} at +${Date.parse(r.time) - s.t0} ms`);
    }
    deliveries.set(r.sink, d);
    const data = r.event.data as { status?: { conditions?: Condition[]; certificate?: string } } | undefined;
    if (r.event.kind === "CertificateSigningRequest" && r.event.name?.startsWith(`${s.run.name}-`)) {
      if (data?.status?.conditions?.some((c) => c.type === "Approved" && c.status === "True")) mark("relay saw the CSR approved", seenAt);
      if (data?.status?.certificate) mark("relay saw the CSR issued", seenAt);
    }
  }
  const logs: Trace["logs"] = new Map();
  for (const p of s.run.deployed.processes) {
    const short = p.name.replace(/^spoke-/, "");
    const counts = new Map<string, number>();
    for (const l of jsonLines<LogLine>(p.logFile)) {
      if (!inWindow(l.time, from, to) || !l.msg) continue;
      const key = l.msg === "reconcile failed" ? `reconcile failed (${l.status})` : l.msg;
      counts.set(key, (counts.get(key) ?? 0) + 1);
      if (typeof l.waitMs === "number" && l.msg.startsWith("forbidden")) counts.set(WAITED, (counts.get(WAITED) ?? 0) + l.waitMs);
      for (const m of MILESTONES) {
        if (!("process" in m) || m.process !== short || !l.msg.startsWith(m.msg)) continue;
        if ("includes" in m && !String(l.origin ?? "").endsWith(m.includes)) continue;
        mark(m.label, Date.parse(l.time!));
      }
    }
    logs.set(short, counts);
  }
  const hub: Trace["hub"] = new Map();
  for (const f of existsSync(ctx.hubRecords) ? readdirSync(ctx.hubRecords) : []) {
    for (const r of jsonLines<Record_>(join(ctx.hubRecords, f))) {
      if (!inWindow(r.time, from, to)) continue;
      const h = hub.get(r.sink) ?? { n: 0, retried: 0 };
      h.n++;
      if (r.attempts > 1) h.retried++;
      hub.set(r.sink, h);
    }
  }
  const calls = [...auditCalls(ctx.audit ? ctx.hub.apiserver?.logFile : undefined, "hub", from, to), ...auditCalls(ctx.audit ? spoke.cluster.apiserver?.logFile : undefined, "spoke", from, to)].sort((a, b) => a.at - b.at);
  for (const m of MILESTONES) {
    if (!("call" in m)) continue;
    const matching = calls.filter((c) => c.at <= s.end && m.call(c) && (!c.what.includes(" ") || c.what.includes(s.run.name) || !/^(managedclusters|certificatesigningrequests|namespaces)/.test(c.what)));
    const chosen = "last" in m ? matching.at(-1) : matching[0];
    if (chosen) milestones[m.label] = chosen.at - s.t0;
  }
  return { milestones, deliveries, logs, hub, calls };
}

// ---- steady state

type Proc = { label: string; pid: number; group: "ours-long" | "ours-fn" | "ocm" };
type ProcFigures = { label: string; group: Proc["group"]; rss: number; anon: number; rssMax: number; cpuMs: number; alive: boolean };

async function measureSteady(procs: Proc[], windowMs: number): Promise<{ figures: ProcFigures[]; from: number; to: number }> {
  const samples = new Map<number, Mem[]>(procs.map((p) => [p.pid, []]));
  const cpu0 = new Map(procs.map((p) => [p.pid, cpuMsOf(p.pid)]));
  const from = Date.now();
  while (Date.now() - from < windowMs) {
    await pause(1_000);
    for (const p of procs) {
      try {
        samples.get(p.pid)!.push(memoryOf(p.pid));
      } catch {
        // exited: reported below
      }
    }
  }
  const to = Date.now();
  const figures = procs.map((p) => {
    let cpuMs = NaN;
    let alive = true;
    try {
      cpuMs = cpuMsOf(p.pid) - cpu0.get(p.pid)!;
    } catch {
      alive = false;
    }
    const s = samples.get(p.pid)!;
    return { label: p.label, group: p.group, rss: median(s.map((x) => x.rss)), anon: median(s.map((x) => x.anon)), rssMax: Math.max(0, ...s.map((x) => x.rss)), cpuMs, alive };
  });
  return { figures, from, to };
}

// The warm joins' figures: latency, then where the time went (milestones, deliveries, logs, API calls).
function warmFigures(warm: WarmSample[], traces: Trace[], ocmColdP50: number): Record<string, string | number> {
  const f: Record<string, string | number> = {};
  const n = warm.length;
  const xs = warm.map((w) => w.ms);
  const [p50, p95] = [percentile(xs, 50), percentile(xs, 95)];
  f["warm joins (ours)"] = n;
  f["warm join p50 / p95 / max (ours)"] = `${ms(p50)} / ${ms(p95)} / ${ms(Math.max(...xs))} (target ≤ ${WARM_TARGET.p50} / ≤ ${WARM_TARGET.p95} ms)`;
  f["warm p50 vs OCM cold p50 / ratio"] = `${ms(p50)} / ${ms(ocmColdP50)} / ${ratio(p50, ocmColdP50)} (OCM's agent has no warm form)`;
  f["warm samples"] = xs.map((x) => x.toFixed(0)).join(", ");
  // milestones in the order of their median time after t0, with the median step from the one before
  const medianAt = (label: string) => median(traces.flatMap((t) => (t.milestones[label] === undefined ? [] : [t.milestones[label]!])));
  let before: number[] = warm.map(() => 0);
  for (const m of [...MILESTONES].sort((a, b) => (medianAt(a.label) || Infinity) - (medianAt(b.label) || Infinity))) {
    const at = traces.map((t) => t.milestones[m.label]);
    const steps = at.flatMap((t, i) => (t === undefined ? [] : [t - before[i]!]));
    const seen = at.filter((t): t is number => t !== undefined);
    f[`  warm +ms (step) ${m.label}`] = seen.length ? `+${fmt(median(seen))} (${fmt(median(steps))})${seen.length < n ? ` in ${seen.length}/${n}` : ""}` : "never";
    before = before.map((b, i) => at[i] ?? b);
  }
  f["  warm +ms (step) joined (the bench saw it)"] = `+${fmt(p50)} (${fmt(median(xs.map((x, i) => x - before[i]!)))})`;
  // deliveries of the spoke relay: how many, how long from seen to answered, which were retried
  const sinks = [...new Set(traces.flatMap((t) => [...t.deliveries.keys()]))].sort();
  for (const sink of sinks) {
    const per = traces.map((t) => t.deliveries.get(sink) ?? { n: 0, retried: 0, latencies: [], retries: [] });
    const lat = per.flatMap((d) => d.latencies);
    const retried = per.reduce((a, d) => a + d.retried, 0);
    const example = per.find((d) => d.retries.length)?.retries[0];
    f[`  warm deliveries ${sink}`] = `${fmt(per.reduce((a, d) => a + d.n, 0) / n, 1)}/join, seen→answered p50 ${fmt(median(lat))} max ${fmt(Math.max(0, ...lat))} ms, retried ${retried}/${n} joins${example ? ` (e.g. ${example})` : ""}`;
  }
  // what the subscriptions let through during a join, and what the functions then skipped: "skipped"
  // is the function's keys() finding the event is not its object; "skipped: ..." a reconcile that ends
  // early (e.g. not bootstrapped yet)
  const total = (fn: string, pick: (msg: string) => boolean) => traces.reduce((a, t) => a + [...(t.logs.get(fn) ?? new Map<string, number>())].filter(([m]) => pick(m)).reduce((b, [, c]) => b + c, 0), 0);
  for (const sink of sinks) {
    const delivered = traces.reduce((a, t) => a + (t.deliveries.get(sink)?.n ?? 0), 0);
    const skipped = total(sink, (m) => m === "skipped");
    const early = total(sink, (m) => m.startsWith("skipped: "));
    const waited = total(sink, (m) => m === WAITED);
    f[`  warm events ${sink}`] = `${fmt(delivered / n, 1)} delivered/join, ${fmt(skipped / n, 1)} skipped as not its object, ${fmt(early / n, 1)} ended early${waited ? `; ${fmt(waited / n)} ms/join waiting for a permission (403)` : ""}`;
  }
  const msgs = new Map<string, number>();
  for (const t of traces) for (const [fn, counts] of t.logs) for (const [msg, c] of counts) if (msg !== WAITED) msgs.set(`${fn}: ${msg}`, (msgs.get(`${fn}: ${msg}`) ?? 0) + c);
  const notable = /forbidden|failed|conflict|retry|skipped|waiting|backoff/;
  for (const [k, c] of [...msgs].filter(([k]) => notable.test(k)).sort((a, b) => b[1] - a[1]).slice(0, 10)) f[`  warm log ${k}`] = `${fmt(c / n, 1)}/join`;
  const hubSinks = [...new Set(traces.flatMap((t) => [...t.hub.keys()]))].sort();
  f["  warm hub deliveries /join (retried in all)"] = hubSinks
    .map((k) => {
      const per = traces.map((t) => t.hub.get(k) ?? { n: 0, retried: 0 });
      return `${k} ${fmt(per.reduce((a, d) => a + d.n, 0) / n, 1)} (${per.reduce((a, d) => a + d.retried, 0)})`;
    })
    .join(", ");
  // API calls from the audit logs: per API server and identity, per join, with the failed ones by code
  if (traces.some((t) => t.calls.length)) {
    const byWho = new Map<string, Call[]>();
    for (const t of traces) for (const c of t.calls) byWho.set(`${c.api} ${c.who}`, [...(byWho.get(`${c.api} ${c.who}`) ?? []), c]);
    for (const [who, calls] of [...byWho].sort((a, b) => b[1].length - a[1].length)) {
      const codes = new Map<number, number>();
      for (const c of calls) if (c.code >= 300) codes.set(c.code, (codes.get(c.code) ?? 0) + 1);
      const failed = [...codes].map(([code, c]) => `${code}×${fmt(c / n, 1)}`).join(" ");
      const slow = calls.filter((c) => c.verb !== "watch").sort((a, b) => b.ms - a.ms)[0];
      f[`  warm API ${who}`] = `${fmt(calls.length / n, 1)} calls/join${failed ? `, failed ${failed}` : ""}${slow ? `, slowest ${slow.verb} ${slow.what} ${slow.ms} ms` : ""}`;
    }
    const failures = traces.flatMap((t, i) => t.calls.filter((c) => c.code === 403 || c.code === 409 || c.code >= 500).map((c) => ({ ...c, at: c.at - warm[i]!.t0 })));
    const kinds = new Map<string, number[]>();
    for (const c of failures) kinds.set(`${c.code} ${c.api} ${c.who} ${c.verb} ${c.what.replace(/ours-warm-\d+(-\w+)?/g, "<cluster>")}`, [...(kinds.get(`${c.code} ${c.api} ${c.who} ${c.verb} ${c.what.replace(/ours-warm-\d+(-\w+)?/g, "<cluster>")}`) ?? []), c.at]);
    for (const [k, ats] of [...kinds].sort((a, b) => b[1].length - a[1].length).slice(0, 8)) f[`  warm refused: ${k}`] = `${ats.length} in ${n} joins, at +${fmt(median(ats))} ms (p50)`;
  }
  // the median join, call by call, for SPOKE_BENCH_TRACE_FILE
  const order = warm.map((w, i) => [w.ms, i] as const).sort((a, b) => a[0] - b[0]);
  const mid = order[Math.floor((order.length - 1) / 2)]![1];
  if (process.env.SPOKE_BENCH_TRACE_FILE) {
    const t = traces[mid]!;
    const w = warm[mid]!;
    const lines = [
      `# warm join ${w.run.name}: ${w.ms.toFixed(0)} ms`,
      ...Object.entries(t.milestones).map(([k, v]) => `milestone +${v} ${k}`),
      ...t.calls.map((c) => `call +${c.at - w.t0} ${c.ms}ms ${c.api} ${c.who} ${c.verb} ${c.what} ${c.code}`),
    ];
    writeFileSync(process.env.SPOKE_BENCH_TRACE_FILE, `${lines.join("\n")}\n`);
    f["  warm trace of the median join"] = process.env.SPOKE_BENCH_TRACE_FILE;
  }
  return f;
}

// ---- the bench

export const spoke = {
  name: "spoke",
  async run(): Promise<Record<string, string | number>> {
    const figures: Record<string, string | number> = {};
    const started = Date.now();
    // Blocks while a build of OCM's programs runs (scripts/build-tools.sh ocm), then answers at once.
    const ocm: OcmPrograms = WITH_OCM ? findOcm() : { registration: "", work: "", addon: "", placement: "" };
    const spokeCrdsForOcm = WITH_OCM ? ocmSpokeCrds() : { crds: ocmCrds(), from: "ours (SPOKE_BENCH_OCM=0)" };
    const knative = knativeCrds();
    const work = mkdtempSync(join(tmpdir(), "spoke-bench-"));
    startGuard(join(work, "ocm"));
    const distGiven = process.env.SPOKE_BENCH_DIST;
    // Every API server writes its audit log (all but the bench's polling) to its log file, for the trace.
    const audit = process.env.SPOKE_BENCH_AUDIT !== "0";
    writeFileSync(join(work, "audit-policy.yaml"), auditPolicy());
    // no OCM CRDs: `ocmf install hub` and `ocmf join` bring ours; OCM's spoke gets OCM's
    const clusters = await startClusters({
      names: ["hub", "spoke", "ocmspoke", ...(HOSTED ? ["managed"] : [])],
      crds: false,
      log: () => {},
      apiserverFlags: audit ? ["--audit-log-path=-", `--audit-policy-file=${join(work, "audit-policy.yaml")}`] : [],
    });
    const clients: KubeClient[] = [];
    const deployedHub: Deployed[] = [];
    const oursRuns: OursRun[] = [];
    const ocmRuns: OcmRun[] = [];
    const stopOurs = async (r: OursRun) => {
      await r.deployed.stop();
      // deployed.ts's guard removes a run's folder when this process ends: keep a copy to read
      if (process.env.SPOKE_BENCH_KEEP) cpSync(r.runDir, join(work, "kept", r.name), { recursive: true });
      oursRuns.splice(oursRuns.indexOf(r), 1);
    };
    const stopOcm = async (r: OcmRun) => {
      if (r.work) await stopProcess(r.work);
      await stopProcess(r.registration);
      if (process.env.SPOKE_BENCH_KEEP) for (const m of [r.registration, r.work]) if (m) cpSync(m.logFile, join(work, "kept", "ocm", `${m.name}.log`));
      ocmRuns.splice(ocmRuns.indexOf(r), 1);
    };
    try {
      const built = distGiven ? undefined : await bundle({ outdir: join(work, "dist") });
      const dist = distGiven ?? join(work, "dist");
      const cli = built ? built.bundles.find((b) => b.name === "ocmf")!.file : join(dist, "cli", "ocmf.js");
      // The bench polls as a user of its own, which the audit policy leaves out.
      const client = async (c: LocalCluster) => {
        const k = KubeClient.fromKubeconfig(await c.kubeconfigFor({ user: POLLER, groups: ["system:masters"] }));
        clients.push(k);
        return k;
      };
      const hub = clusters.get("hub");
      const hubAdmin = await client(hub);
      const joiner = async (c: LocalCluster): Promise<Joiner> => {
        const kubeconfigFile = join(work, `${c.name}.kubeconfig`);
        writeFileSync(kubeconfigFile, c.adminKubeconfig, { mode: 0o600 });
        return { admin: await client(c), cluster: c, kubeconfigFile };
      };
      const ours = await joiner(clusters.get("spoke"));
      const theirs = await joiner(clusters.get("ocmspoke"));
      const hubKubeconfigFile = join(work, "hub.kubeconfig");
      writeFileSync(hubKubeconfigFile, hub.adminKubeconfig, { mode: 0o600 });

      // The hub, warm: installed and running before any spoke starts.
      await Promise.all([installCrds(hubAdmin, knative), installCrds(ours.admin, knative), installCrds(theirs.admin, spokeCrdsForOcm.crds)]);
      const token = await hub.createBootstrapToken([BOOTSTRAP_GROUP]);
      const bootstrapFile = join(work, "bootstrap.kubeconfig");
      writeFileSync(bootstrapFile, token.kubeconfig, { mode: 0o600 });
      const install = await runCli(cli, work, ["install", "hub", "--kubeconfig", hubKubeconfigFile, "--wait", "crds", "--env", `OCM_CLUSTER_AUTO_APPROVAL_USERS=${token.user}`]);
      if (install.code !== 0) throw new Error(`ocmf install hub: ${described(install)}`);
      const hubRecords = join(work, "hub", "records");
      mkdirSync(hubRecords, { recursive: true });
      deployedHub.push(await runDeployed({ cluster: hub, namespace: HubNamespaceDefault, dist, runDir: join(work, "hub"), recordDir: hubRecords }));
      const ctx: Ctx = { work, cli, dist, ocm, clusters, hub, hubAdmin, bootstrapFile, bootstrap: hubEndpoint(token.kubeconfig), hubRecords, audit };
      // No kubelet registers nodes: both spokes get the same two, so both agents sum capacity.
      await theirs.admin.create(NamespaceResource, { metadata: { name: AgentNamespaceDefault } });
      await Promise.all([createNodes(ours.admin), createNodes(theirs.admin)]);
      figures["set-up (clusters, bundles, install hub)"] = ms(Date.now() - started);
      figures["OCM programs"] = `${ocm.registration}, ${ocm.work}`;
      figures["OCM's spoke CRDs"] = spokeCrdsForOcm.from;

      // 1. Cold joins, OCM's first (its spoke is apart from ours), the last of each kept running.
      const ocmCold: number[] = [];
      for (let i = 0; WITH_OCM && i < COLD_RUNS; i++) {
        const { run, ms: took } = await startOcmRegistration(ctx, theirs, `ocm-cold-${i}`);
        ocmRuns.push(run);
        ocmCold.push(took);
        if (i < COLD_RUNS - 1) await stopOcm(run);
      }
      const oursCold: number[] = [];
      const oursColdSpawn: number[] = [];
      const oursReady: number[] = [];
      for (let i = 0; i < COLD_RUNS; i++) {
        const r = await coldJoinOurs(ctx, ours, `ours-cold-${i}`);
        oursRuns.push(r.run);
        oursCold.push(r.ms);
        oursColdSpawn.push(r.fromSpawnMs);
        oursReady.push(r.readyMs);
        if (i < COLD_RUNS - 1) await stopOurs(r.run);
      }
      const c50 = { ours: percentile(oursColdSpawn, 50), ocm: ocmCold.length ? percentile(ocmCold, 50) : NaN };
      const cMax = { ours: Math.max(...oursColdSpawn), ocm: ocmCold.length ? Math.max(...ocmCold) : NaN };
      figures["cold join runs (each)"] = COLD_RUNS;
      figures["cold join p50: ours from first spawn / OCM / ratio"] = `${ms(c50.ours)} / ${ms(c50.ocm)} / ${ratio(c50.ours, c50.ocm)}`;
      figures["cold join max: ours from first spawn / OCM / ratio"] = `${ms(cMax.ours)} / ${ms(cMax.ocm)} / ${ratio(cMax.ours, cMax.ocm)}`;
      figures["cold join p50 ours incl. TokenRequests"] = ms(percentile(oursCold, 50));
      figures["cold: ours, until every function answered (p50)"] = ms(percentile(oursReady, 50));
      figures["cold samples ours (from spawn)"] = oursColdSpawn.map((x) => x.toFixed(0)).join(", ");
      figures["cold samples OCM"] = ocmCold.map((x) => x.toFixed(0)).join(", ");

      // 3-5. Steady state of the last cold join of each, leases shortened on the hub.
      const oursSteady = oursRuns.at(-1)!;
      const ocmSteady = ocmRuns.at(-1);
      const ocmWork = ocmSteady && (await startOcmWork(ctx, theirs, ocmSteady));
      const steadyNames = [oursSteady.name, ...(ocmSteady ? [ocmSteady.name] : [])];
      for (const n of steadyNames) await hubAdmin.patch(ManagedClusterResource, n, { spec: { leaseDurationSeconds: LEASE_SECONDS } });
      await setUp(
        "both clusters Available",
        async () => {
          const both = await Promise.all(steadyNames.map((n) => hubAdmin.get<ManagedCluster & KubeObject>(ManagedClusterResource, n)));
          return both.every((mc) => isTrue(mc?.status?.conditions, ManagedClusterConditionType.Available));
        },
        60_000,
      );
      await pause(SETTLE_MS);
      const procs: Proc[] = [
        ...oursSteady.deployed.processes.map((p) => ({
          label: p.name.replace(/^spoke-/, ""),
          pid: p.child.pid!,
          group: (p.name.endsWith(`-${RelayName}`) ? "ours-long" : "ours-fn") as Proc["group"],
        })),
        ...(ocmSteady && ocmWork
          ? [
              { label: "ocm registration agent", pid: ocmSteady.registration.child.pid!, group: "ocm" as const },
              { label: "ocm work agent", pid: ocmWork.child.pid!, group: "ocm" as const },
            ]
          : []),
      ];
      const { result: steady, renewals } = await countRenewals(hubAdmin, steadyNames, measureSteady(procs, STEADY_MS));
      const periods = STEADY_MS / 1000 / LEASE_SECONDS;
      const sum = (g: Proc["group"], f: (x: ProcFigures) => number) => steady.figures.filter((x) => x.group === g).reduce((a, x) => a + f(x), 0);
      figures["steady window"] = `${STEADY_MS / 1000} s, lease ${LEASE_SECONDS} s (${periods} periods), after ${SETTLE_MS / 1000} s settling`;
      for (const p of steady.figures) {
        figures[`  ${p.label}`] = `RSS ${mib(p.rss)} (max ${mib(p.rssMax)}), RssAnon ${mib(p.anon)}, CPU ${fmt(p.cpuMs)} ms = ${fmt(p.cpuMs / periods, 1)} ms/period${p.alive ? "" : " (EXITED)"}`;
      }
      const mem = { oursRss: sum("ours-long", (x) => x.rss), oursAnon: sum("ours-long", (x) => x.anon), ocmRss: sum("ocm", (x) => x.rss), ocmAnon: sum("ocm", (x) => x.anon) };
      figures["RSS: our relay with its heartbeat / OCM's 2 agents / ratio"] = `${mib(mem.oursRss)} / ${mib(mem.ocmRss)} / ${ratio(mem.oursRss, mem.ocmRss)} (target ≤ 0.50)`;
      figures["RssAnon: our relay with its heartbeat / OCM / ratio"] = `${mib(mem.oursAnon)} / ${mib(mem.ocmAnon)} / ${ratio(mem.oursAnon, mem.ocmAnon)}`;
      figures["RSS of our 6 function processes (scale to zero)"] = mib(sum("ours-fn", (x) => x.rss));
      const cpu = { long: sum("ours-long", (x) => x.cpuMs) / periods, fns: sum("ours-fn", (x) => x.cpuMs) / periods, ocm: sum("ocm", (x) => x.cpuMs) / periods };
      figures["CPU/lease period: our relay with its heartbeat / OCM / ratio"] = `${fmt(cpu.long, 1)} ms / ${fmt(cpu.ocm, 1)} ms / ${ratio(cpu.long, cpu.ocm)}`;
      // Every CPU millisecond of the process over the renewals the hub saw: watches and ticks included.
      const perRenewal = { ours: (sum("ours-long", (x) => x.cpuMs)) / (renewals.get(oursSteady.name) || NaN), ocm: sum("ocm", (x) => x.cpuMs) / (ocmSteady ? renewals.get(ocmSteady.name) || NaN : NaN) };
      figures["renewals in the window: ours / OCM"] = `${renewals.get(oursSteady.name) ?? 0} / ${ocmSteady ? (renewals.get(ocmSteady.name) ?? 0) : "n/a"}`;
      figures["CPU per renewal (all the window's CPU / renewals): our relay with its heartbeat / OCM's 2 agents / ratio"] = `${fmt(perRenewal.ours, 2)} ms / ${fmt(perRenewal.ocm, 2)} ms / ${ratio(perRenewal.ours, perRenewal.ocm)} (target ≤ 1 ms)`;
      figures["CPU/lease period: ours incl. functions / OCM / ratio"] = `${fmt(cpu.long + cpu.fns, 1)} ms / ${fmt(cpu.ocm, 1)} ms / ${ratio(cpu.long + cpu.fns, cpu.ocm)}`;
      // 5. What the spoke relay delivered in the window, and what each function skipped.
      const delivered = new Map<string, number>();
      const kinds = new Map<string, Map<string, number>>();
      for (const r of jsonLines<Record_>(join(oursSteady.recordDir, `${RelayName}.jsonl`))) {
        if (!inWindow(r.time, steady.from, steady.to)) continue;
        delivered.set(r.sink, (delivered.get(r.sink) ?? 0) + 1);
        const what = r.event.type === "dev.knative.sources.ping" ? `tick(${r.event.cluster})` : `${r.event.type?.split(".").at(-1)} ${r.event.kind}`;
        const k = kinds.get(r.sink) ?? new Map<string, number>();
        k.set(what, (k.get(what) ?? 0) + 1);
        kinds.set(r.sink, k);
      }
      // "skipped": keys() found the event is not the function's object; "skipped: ...": a reconcile ended early
      const skipped = new Map<string, { n: number; early: number; reasons: Set<string> }>();
      for (const p of oursSteady.deployed.processes) {
        for (const l of jsonLines<LogLine>(p.logFile)) {
          if (!l.msg?.startsWith("skipped") || !inWindow(l.time, steady.from, steady.to) || !l.fn) continue;
          const s = skipped.get(l.fn) ?? { n: 0, early: 0, reasons: new Set<string>() };
          if (l.msg === "skipped") s.n++;
          else s.early++;
          s.reasons.add(l.reason ? `${l.msg}: ${l.reason}` : l.msg);
          skipped.set(l.fn, s);
        }
      }
      const fnNames = [...new Set([...delivered.keys(), ...skipped.keys()])].sort();
      const totalDelivered = [...delivered.values()].reduce((a, b) => a + b, 0);
      const totalSkipped = [...skipped.values()].reduce((a, b) => a + b.n, 0);
      const totalEarly = [...skipped.values()].reduce((a, b) => a + b.early, 0);
      figures["steady events delivered / skipped (all functions)"] = `${totalDelivered} / ${totalSkipped} as not its object (+${totalEarly} reconciles ended early)`;
      for (const f of fnNames) {
        const s = skipped.get(f);
        const what = [...(kinds.get(f) ?? new Map<string, number>())].map(([k, c]) => `${c} ${k}`).join(", ");
        figures[`  events ${f}`] = `${delivered.get(f) ?? 0} delivered${what ? ` (${what})` : ""}, ${s?.n ?? 0} skipped, ${s?.early ?? 0} ended early${s?.reasons.size ? ` (${[...s.reasons].join("; ")})` : ""}`;
      }
      await stopOurs(oursSteady);
      if (ocmSteady) await stopOcm(ocmSteady);

      // 2. Warm joins of ours, traced.
      const warm: WarmSample[] = [];
      const traces: Trace[] = [];
      for (let i = 0; i < WARM_RUNS; i++) {
        const s = await warmJoinOurs(ctx, ours, `ours-warm-${i}`);
        oursRuns.push(s.run);
        await pause(200); // the last deliveries recorded, the audit lines written
        await stopOurs(s.run);
        warm.push(s);
        traces.push(traceWarm(ctx, ours, s));
      }
      if (warm.length) Object.assign(figures, warmFigures(warm, traces, c50.ocm));
      if (HOSTED) Object.assign(figures, await hostedFigures(ctx, ours, await joiner(clusters.get("managed")), { rss: mem.ocmRss, anon: mem.ocmAnon, cpuMs: cpu.ocm }));
      figures["bench run time"] = ms(Date.now() - started);
      return figures;
    } finally {
      for (const r of [...oursRuns]) await stopOurs(r).catch(() => undefined);
      for (const r of [...ocmRuns]) await stopOcm(r).catch(() => undefined);
      for (const d of deployedHub) await d.stop().catch(() => undefined);
      for (const c of clients) c.close();
      await clusters.stop();
      if (process.env.SPOKE_BENCH_KEEP) process.stderr.write(`spoke bench: run folder kept at ${work}\n`);
      else rmSync(work, { recursive: true, force: true });
    }
  },
};
