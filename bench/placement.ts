// Placement scheduling on a hub of 1,000 ManagedClusters (labelled into one set, with allocatable and
// capacity for cpu and memory), on a real control plane:
//
// 1. The placement-scheduler's reconcile alone, under its own least-privilege identity: a Placement
//    selecting all 1,000 (10 PlacementDecisions), one picking the 10 with the most allocatable CPU
//    (prioritizer ResourceAllocatableCPU, Exact mode), and each run again with nothing changed. Wall
//    time, this process's CPU time, the API server's CPU time, and the requests the reconcile sent.
// 2. What one cluster's label change costs with the hub functions running as in local mode (the
//    fleet's hub functions and relay, and placement-scheduler and cluster-sets): the requests the API
//    server counted for the cluster.open-cluster-management.io group (its own apiserver_request_total,
//    before and after) while the functions converged, and how long until the decisions showed it;
//    and the start-up that precedes it, when the relay announces every cluster. Part 2 runs on the
//    first 200 of the clusters (BENCH_PLACEMENT_FLEET_CLUSTERS): that start-up grows with the square
//    of the clusters (on 1,000 it took about 4 minutes here).
//
// Functions the fleet does not serve yet are served here with a relay of the bench's own; that relay
// watches with admin credentials (a bench shortcut, as in bench/addon.ts: the hub relay's RBAC does not
// cover sets and bindings).
import { readFile } from "node:fs/promises";
import { startClusters, type LocalClusters } from "../dev/control-plane/clusters.ts";
import { identityFor } from "../dev/control-plane/identities.ts";
import { startFleet, type Fleet } from "../dev/local/fleet.ts";
import { startFunction, type FunctionServer } from "../dev/local/functions.ts";
import { startRelay, type Relay } from "../components/relay/relay.ts";
import type { SourceConfig } from "../components/relay/config.ts";
import { readFunctions } from "../cli/render/func-yaml.ts";
import { KubeClient, type KubeObject, type WatchEvent } from "../shared/kube/client.ts";
import { clientsFromKubeconfigs } from "../shared/kube/clients.ts";
import { jsonLog, type FunctionSpec, type Io, type Key } from "../shared/harness.ts";
import { systemClock } from "../shared/clock.ts";
import { NamespaceResource } from "../shared/api/kube.ts";
import {
  ClusterGroup,
  ClusterLabel,
  ManagedClusterConditionType,
  ManagedClusterResource,
  ManagedClusterSetBindingResource,
  ManagedClusterSetResource,
  PlacementDecisionResource,
  PlacementResource,
  type ManagedCluster,
  type Placement,
  type PlacementDecision,
} from "../shared/api/cluster.ts";
import placementScheduler from "../functions/placement-scheduler/reconcile.ts";
import clusterSets from "../functions/cluster-sets/reconcile.ts";
import { percentile, ms } from "./stats.ts";
import { until } from "./until.ts";

const CLUSTERS = Number(process.env.BENCH_PLACEMENT_CLUSTERS ?? 1000);
// Part 2 keeps only this many: the relay announces every existing cluster when it starts, and each of
// those events costs the functions full lists of the clusters (see the start-up figure), so the
// start-up is quadratic in the clusters; 1,000 would not fit the bench's time.
const FLEET_CLUSTERS = Math.min(CLUSTERS, Number(process.env.BENCH_PLACEMENT_FLEET_CLUSTERS ?? 200));
const RUNS = Number(process.env.BENCH_PLACEMENT_RUNS ?? 3); // fresh placements per kind; as many idle re-runs
const BATCH = 100; // clusters created at once
const NS = "bench-placement";
const SET = "bench";
const OTHER_SET = "bench-other";
// The cluster moved out of the set in part 2: the most allocatable cpu and memory, so every placement
// of part 2 has decided it.
const MOVED = clusterName(0);

function clusterName(i: number): string {
  return `cluster-${String(i).padStart(4, "0")}`;
}

type Figures = Record<string, string | number>;

export const placement = {
  name: "placement",
  async run(): Promise<Figures> {
    const figures: Figures = {};
    const t0 = performance.now();
    const clusters = await startClusters({ names: ["hub"], controllers: false, log: () => {} });
    const admin = KubeClient.fromKubeconfig(clusters.get("hub").adminKubeconfig);
    try {
      figures["control plane ready"] = ms(clusters.startupMs);
      const setupStart = performance.now();
      await createFleetOfClusters(admin);
      figures[`${CLUSTERS} ManagedClusters created (create + status)`] = ms(performance.now() - setupStart);
      Object.assign(figures, await listCost(admin));
      Object.assign(figures, await reconcileAlone(clusters, admin));
      await removePlacements(admin);
      await removeClusters(admin, FLEET_CLUSTERS);
      Object.assign(figures, await labelChange(clusters, admin));
    } finally {
      admin.close();
      await clusters.stop();
    }
    figures["bench wall time"] = ms(performance.now() - t0);
    return figures;
  },
};

// ---- set-up

async function createFleetOfClusters(admin: KubeClient): Promise<void> {
  await admin.create(NamespaceResource, { metadata: { name: NS } });
  for (const name of [SET, OTHER_SET]) await admin.create(ManagedClusterSetResource, { metadata: { name }, spec: { clusterSelector: { selectorType: "ExclusiveClusterSetLabel" } } });
  await admin.create(ManagedClusterSetBindingResource, { metadata: { name: SET, namespace: NS }, spec: { clusterSet: SET } });
  const now = new Date().toISOString().replace(/\.\d+Z$/, "Z");
  for (let start = 0; start < CLUSTERS; start += BATCH) {
    await Promise.all(
      Array.from({ length: Math.min(BATCH, CLUSTERS - start) }, async (_, j) => {
        const i = start + j;
        const name = clusterName(i);
        const top = name === MOVED;
        // not accepted (no agent behind them), but Available so no function taints them
        await admin.create<ManagedCluster>(ManagedClusterResource, { metadata: { name, labels: { [ClusterLabel.ClusterSet]: SET, "bench/index": String(i) } }, spec: { hubAcceptsClient: false } });
        const status = {
          conditions: [{ type: ManagedClusterConditionType.Available, status: "True", reason: "ManagedClusterAvailable", message: "bench", lastTransitionTime: now }],
          capacity: { cpu: top ? "128" : "64", memory: top ? "512Gi" : "256Gi" },
          allocatable: { cpu: top ? "120" : String(2 + ((i * 37) % 60)), memory: top ? "500Gi" : `${8 + ((i * 53) % 240)}Gi` },
        };
        await admin.patch(ManagedClusterResource, name, { status }, { subresource: "status" });
      }),
    );
  }
}

// What one full list of the clusters weighs, as every reconcile of both functions reads it.
async function listCost(admin: KubeClient): Promise<Figures> {
  const times: number[] = [];
  let bytes = 0;
  for (let i = 0; i < 5; i++) {
    const t = performance.now();
    const text = await admin.request<string>("GET", `/apis/${ClusterGroup}/v1/managedclusters`, undefined).then((x) => JSON.stringify(x));
    times.push(performance.now() - t);
    bytes = Buffer.byteLength(text);
  }
  return { [`list of ${CLUSTERS} ManagedClusters (admin) p50`]: `${ms(percentile(times, 50))}, ${(bytes / 1024).toFixed(0)} KiB` };
}

// ---- part 1: the reconcile alone

type Run = { wallMs: number; cpuMs: number; apiserverCpuMs: number; requests: Map<string, number> };

async function reconcileAlone(clusters: LocalClusters, admin: KubeClient): Promise<Figures> {
  const hub = clusters.get("hub");
  const config = placementScheduler.definition.config.parse({ hubCluster: "hub" });
  const kubeconfig = await readyIdentity(await identityFor(hub, placementScheduler.spec.name));
  const io: Io<typeof config> = { clock: systemClock, config, log: jsonLog(placementScheduler.spec.name, "quiet"), cluster: clientsFromKubeconfigs({ hub: kubeconfig }) };
  const requests = countRequests(io.cluster("hub"));
  const apiserverPid = hub.apiserver!.child.pid!;
  try {
    const run = async (name: string): Promise<Run> => {
      requests.clear();
      const key: Key = { cluster: "hub", namespace: NS, name };
      const server0 = await cpuTicksMs(apiserverPid);
      const cpu0 = process.cpuUsage();
      const t = performance.now();
      const outcome = await placementScheduler.spec.reconcile(io, key);
      const wallMs = performance.now() - t;
      const cpu = process.cpuUsage(cpu0);
      const apiserverCpuMs = (await cpuTicksMs(apiserverPid)) - server0;
      if (!("done" in outcome)) throw new Error(`${name}: reconcile asked for a recheck: ${JSON.stringify(outcome)}`);
      return { wallMs, cpuMs: (cpu.user + cpu.system) / 1000, apiserverCpuMs, requests: new Map(requests) };
    };

    const kinds: { label: string; spec: Placement["spec"]; decisions: number; selected: number }[] = [
      { label: "all", spec: {}, decisions: Math.ceil(CLUSTERS / 100), selected: CLUSTERS },
      {
        label: "top 10 by CPU",
        spec: { numberOfClusters: 10, prioritizerPolicy: { mode: "Exact", configurations: [{ scoreCoordinate: { type: "BuiltIn", builtIn: "ResourceAllocatableCPU" }, weight: 1 }] } },
        decisions: 1,
        selected: 10,
      },
    ];
    const figures: Figures = {};
    for (const [k, kind] of kinds.entries()) {
      const cold: Run[] = [];
      const idle: Run[] = [];
      for (let r = 0; r < RUNS; r++) {
        const name = `p${k}-${r}`;
        await admin.create<Placement>(PlacementResource, { metadata: { name, namespace: NS }, spec: kind.spec });
        cold.push(await run(name));
        await expectScheduled(admin, name, kind.decisions, kind.selected);
        idle.push(await run(name));
      }
      const label = `reconcile, ${kind.label} (${kind.selected} of ${CLUSTERS})`;
      figures[`${label}, cold`] = summary(cold);
      figures[`  requests (${kind.label}, cold)`] = requestsOf(cold[0]!);
      figures[`${label}, nothing changed`] = summary(idle);
      figures[`  requests (${kind.label}, nothing changed)`] = requestsOf(idle[0]!);
    }
    return figures;
  } finally {
    io.cluster("hub").close();
  }
}

function summary(runs: Run[]): string {
  const p = (f: (r: Run) => number) => `${ms(percentile(runs.map(f), 50))}/${ms(Math.max(...runs.map(f)))}`;
  return `wall ${p((r) => r.wallMs)}, CPU ${p((r) => r.cpuMs)}, apiserver CPU ${p((r) => r.apiserverCpuMs)} (p50/max of ${runs.length})`;
}

function requestsOf(run: Run): string {
  let total = 0;
  for (const n of run.requests.values()) total += n;
  return `${total}: ${[...run.requests].map(([k, n]) => `${k} ×${n}`).join(", ")}`;
}

// Counts what this process's client for the hub sends, by method and resource (part 1 only: part 2
// counts on the server).
function countRequests(client: KubeClient): Map<string, number> {
  const counts = new Map<string, number>();
  const send = client.request.bind(client);
  client.request = ((method: string, path: string, ...rest: [unknown?, string?]) => {
    const url = new URL(path, "https://x");
    const parts = url.pathname.split("/").filter(Boolean); // apis, group, version, [namespaces, ns], plural, [name, [sub]]
    const afterVersion = parts.slice(3);
    const rel = afterVersion[0] === "namespaces" ? afterVersion.slice(2) : afterVersion;
    const verb = method === "GET" && rel.length === 1 ? "LIST" : method;
    const what = `${verb} ${rel[0] ?? path}${rel[2] ? `/${rel[2]}` : ""}`;
    counts.set(what, (counts.get(what) ?? 0) + 1);
    return send(method, path, ...rest);
  }) as typeof client.request;
  return counts;
}

// utime + stime of a process, in ms (USER_HZ is 100 on Linux).
async function cpuTicksMs(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

async function expectScheduled(admin: KubeClient, name: string, decisions: number, selected: number): Promise<void> {
  const { items } = await admin.list<PlacementDecision>(PlacementDecisionResource, { namespace: NS, labelSelector: `${ClusterLabel.Placement}=${name}` });
  const decided = items.reduce((n, d) => n + (d.status?.decisions?.length ?? 0), 0);
  const p = await admin.get<Placement>(PlacementResource, name, NS);
  if (items.length !== decisions || decided !== selected || p?.status?.numberOfSelectedClusters !== selected)
    throw new Error(`${name}: ${items.length} decisions with ${decided} clusters, status ${p?.status?.numberOfSelectedClusters}; wanted ${decisions} with ${selected}`);
}

// The identity's RBAC reaches the authorizer a moment after it is written.
async function readyIdentity(kubeconfig: string): Promise<string> {
  const probe = KubeClient.fromKubeconfig(kubeconfig);
  try {
    // and a new CRD's storage answers 429 for a moment
    const reads = [PlacementResource, PlacementDecisionResource, ManagedClusterResource, ManagedClusterSetResource, ManagedClusterSetBindingResource];
    await until(() => Promise.all(reads.map((r) => probe.list(r))).then(() => true, () => undefined), "the scheduler's identity may list what it reads", 30_000);
  } finally {
    probe.close();
  }
  return kubeconfig;
}

// Part 1's placements and their decisions (no garbage collector runs on this hub).
async function removePlacements(admin: KubeClient): Promise<void> {
  const [placements, decisions] = await Promise.all([admin.list(PlacementResource, { namespace: NS }), admin.list(PlacementDecisionResource, { namespace: NS })]);
  await Promise.all([...placements.items.map((p) => admin.delete(PlacementResource, p.metadata.name!, NS)), ...decisions.items.map((d) => admin.delete(PlacementDecisionResource, d.metadata.name!, NS))]);
}

// Clusters from `keep` on, so part 2 starts on fewer.
async function removeClusters(admin: KubeClient, keep: number): Promise<void> {
  for (let start = keep; start < CLUSTERS; start += BATCH)
    await Promise.all(Array.from({ length: Math.min(BATCH, CLUSTERS - start) }, (_, j) => admin.delete(ManagedClusterResource, clusterName(start + j))));
}

// ---- part 2: one label change with the functions running

// "VERB resource[/subresource][ (code)]" → requests, and "bytes VERB" → response bytes, for the cluster group
type Counter = Map<string, number>;

async function groupRequests(admin: KubeClient): Promise<Counter> {
  const text = await admin.request<string>("GET", "/metrics");
  const counts: Counter = new Map();
  for (const line of text.split("\n")) {
    const sizes = line.startsWith("apiserver_response_sizes_sum{");
    if (!sizes && !line.startsWith("apiserver_request_total{")) continue;
    const labels = Object.fromEntries([...line.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (labels.group !== ClusterGroup) continue;
    if (sizes) {
      counts.set(`bytes ${labels.verb}`, (counts.get(`bytes ${labels.verb}`) ?? 0) + Number(line.slice(line.lastIndexOf(" ") + 1)));
      continue;
    }
    // an answer other than 2xx is named with its code (conflicts, AlreadyExists)
    const code = labels.code?.startsWith("2") ? "" : ` (${labels.code})`;
    const key = `${labels.verb} ${labels.resource}${labels.subresource ? `/${labels.subresource}` : ""}${code}`;
    counts.set(key, (counts.get(key) ?? 0) + Number(line.slice(line.lastIndexOf(" ") + 1)));
  }
  return counts;
}

function delta(after: Counter, before: Counter): Counter {
  const d: Counter = new Map();
  for (const [k, n] of after) if (n - (before.get(k) ?? 0) > 0) d.set(k, n - (before.get(k) ?? 0));
  return new Map([...d].sort(([a], [b]) => (a < b ? -1 : 1)));
}

const WRITE_VERBS = new Set(["POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY", "CREATE", "UPDATE"]);
const READ_VERBS = new Set(["GET", "LIST"]);

function pick(c: Counter, verbs: Set<string>): { total: number; text: string } {
  const rows = [...c].filter(([k]) => verbs.has(k.split(" ")[0]!));
  const total = rows.reduce((n, [, v]) => n + v, 0);
  const bytes = [...verbs].reduce((n, v) => n + (c.get(`bytes ${v}`) ?? 0), 0);
  const size = verbs === READ_VERBS ? `, ${(bytes / 1024 / 1024).toFixed(1)} MiB answered` : "";
  return { total, text: `${total}${size}${rows.length ? `: ${rows.map(([k, v]) => `${k} ×${v}`).join(", ")}` : ""}` };
}

type Wiring = { servers: FunctionServer[]; relays: Relay[]; served: string[] };

async function labelChange(clusters: LocalClusters, admin: KubeClient): Promise<Figures> {
  const figures: Figures = {};
  const wiring: Wiring = { servers: [], relays: [], served: [] };
  const t0 = performance.now();
  const before0 = await groupRequests(admin);
  const apiserverPid = clusters.get("hub").apiserver!.child.pid!;
  const server0 = await cpuTicksMs(apiserverPid);
  const cpu0 = process.cpuUsage();
  let fleet: Fleet | undefined;
  try {
    fleet = await startFleet({ spokes: [], clusters, resyncMs: 600_000, heartbeats: false });
    await serveMissing(fleet, wiring);
    const relays = [...fleet.relays.values(), ...wiring.relays];
    await Promise.all(relays.map((r) => r.ready));
    await quiet(admin, relays, 900_000);
    const startup = delta(await groupRequests(admin), before0);
    figures["functions served by the bench (not the fleet)"] = wiring.served.join(", ") || "none";
    const cpu = process.cpuUsage(cpu0);
    figures[`part 2: hub functions start on ${FLEET_CLUSTERS} clusters → quiet`] =
      `${ms(performance.now() - t0)} (CPU: this process ${ms((cpu.user + cpu.system) / 1000)}, kube-apiserver ${ms((await cpuTicksMs(apiserverPid)) - server0)})`;
    figures["  reads, get/list (start-up)"] = pick(startup, READ_VERBS).text;
    figures["  writes (start-up)"] = pick(startup, WRITE_VERBS).text;

    // Three placements that all decide the cluster that will move: all of the set, the top 10 by
    // CPU, the top 10 by memory.
    const placements: { name: string; spec: Placement["spec"]; selected: number }[] = [
      { name: "all", spec: {}, selected: FLEET_CLUSTERS },
      { name: "cpu", spec: { numberOfClusters: 10, prioritizerPolicy: { mode: "Exact", configurations: [{ scoreCoordinate: { type: "BuiltIn", builtIn: "ResourceAllocatableCPU" } }] } }, selected: 10 },
      { name: "memory", spec: { numberOfClusters: 10, prioritizerPolicy: { mode: "Exact", configurations: [{ scoreCoordinate: { type: "BuiltIn", builtIn: "ResourceAllocatableMemory" } }] } }, selected: 10 },
    ];
    const t1 = performance.now();
    for (const p of placements) await admin.create<Placement>(PlacementResource, { metadata: { name: p.name, namespace: NS }, spec: p.spec });
    await until(async () => {
      const decided = await decidedBy(admin);
      return placements.every((p) => decided.get(p.name)?.size === p.selected && decided.get(p.name)!.has(MOVED)) ? true : undefined;
    }, "the placements scheduled", 60_000);
    figures[`${placements.length} placements created → decided`] = ms(performance.now() - t1);
    await quiet(admin, relays);

    Object.assign(
      figures,
      await measureChange(`${MOVED} moved to another set`, admin, apiserverPid, relays, { [ClusterLabel.ClusterSet]: OTHER_SET }, (decided) =>
        placements.every((p) => !decided.get(p.name)?.has(MOVED) && decided.get(p.name)?.size === (p.name === "all" ? FLEET_CLUSTERS - 1 : 10)),
      ),
    );
    const other = clusterName(1);
    Object.assign(figures, await measureChange(`unrelated label on ${other}`, admin, apiserverPid, relays, { "bench/unrelated": "changed" }, undefined, other));
  } finally {
    await Promise.all(wiring.relays.map((r) => r.stop()));
    await Promise.all(wiring.servers.map((s) => s.close()));
    await fleet?.stop();
  }
  return figures;
}

// Patches `labels` onto a cluster, then counts what the API server received for the cluster group until
// every relay is idle and the counts stop moving; `reflected` says when the decisions show the change.
async function measureChange(what: string, admin: KubeClient, apiserverPid: number, relays: Relay[], labels: Record<string, string>, reflected?: (decided: Map<string, Set<string>>) => boolean, cluster = MOVED): Promise<Figures> {
  let reflectedAt: number | undefined;
  let t0 = 0;
  const invocations0 = sinkCounts(relays);
  // Decisions followed by a watch: the bench's own reads would otherwise be counted.
  const byName = new Map<string, PlacementDecision>();
  const listed = await admin.list<PlacementDecision>(PlacementDecisionResource, { namespace: NS });
  for (const d of listed.items) byName.set(d.metadata.name!, d);
  const resourceVersion = listed.resourceVersion;
  const watch = admin.watch(PlacementDecisionResource, { namespace: NS, resourceVersion }, (e: WatchEvent) => {
    if (e.type === "BOOKMARK" || e.type === "ERROR") return;
    const d = e.object as PlacementDecision & KubeObject;
    if (e.type === "DELETED") byName.delete(d.metadata.name!);
    else byName.set(d.metadata.name!, d);
    if (reflected && reflectedAt === undefined && reflected(decisionsByPlacement([...byName.values()]))) reflectedAt = performance.now() - t0;
  });
  try {
    await new Promise((r) => setTimeout(r, 200)); // the watch is established
    const before = await groupRequests(admin);
    const server0 = await cpuTicksMs(apiserverPid);
    const cpu0 = process.cpuUsage();
    t0 = performance.now();
    await admin.patch(ManagedClusterResource, cluster, { metadata: { labels } });
    if (reflected) await until(async () => (reflectedAt !== undefined ? true : undefined), "the decisions reflect the change", 60_000);
    const quietAt = await quiet(admin, relays);
    const cpu = process.cpuUsage(cpu0);
    const serverCpu = (await cpuTicksMs(apiserverPid)) - server0;
    const after = await groupRequests(admin);
    const d = delta(after, before);
    // the bench's own label patch is not the functions'
    d.set(`PATCH managedclusters`, (d.get(`PATCH managedclusters`) ?? 1) - 1);
    if (d.get(`PATCH managedclusters`) === 0) d.delete(`PATCH managedclusters`);
    const invocations = sinkCounts(relays, invocations0);
    return {
      [`${what}: → decisions reflect it`]: reflected ? ms(reflectedAt!) : "n/a",
      [`${what}: → functions quiet`]: ms(quietAt - t0),
      // to the end of the quiet period (half a second more), the bench's metric scrapes included
      [`  CPU (${what})`]: `this process (functions, relay, bench) ${ms((cpu.user + cpu.system) / 1000)}, kube-apiserver ${ms(serverCpu)}`,
      [`  writes by the functions (${what})`]: pick(d, WRITE_VERBS).text,
      [`  reads, get/list (${what})`]: pick(d, READ_VERBS).text,
      [`  events delivered (${what})`]: invocations,
    };
  } finally {
    watch.stop();
    await watch.done.catch(() => {});
  }
}

function sinkCounts(relays: Relay[], before?: string): string {
  const counts = new Map<string, number>();
  for (const r of relays) for (const s of r.status().sinks) counts.set(s.name, (counts.get(s.name) ?? 0) + s.delivered);
  if (before === undefined) return JSON.stringify([...counts]);
  const was = new Map<string, number>(JSON.parse(before) as [string, number][]);
  const rows = [...counts].map(([k, n]) => [k.replace(/^hub\//, ""), n - (was.get(k) ?? 0)] as const).filter(([, n]) => n > 0);
  return `${rows.reduce((n, [, v]) => n + v, 0)}: ${rows.map(([k, n]) => `${k} ×${n}`).join(", ")}`;
}

function decisionsByPlacement(items: readonly PlacementDecision[]): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>();
  for (const d of items) {
    const p = d.metadata.labels?.[ClusterLabel.Placement] ?? "";
    const set = out.get(p) ?? new Set<string>();
    for (const x of d.status?.decisions ?? []) set.add(x.clusterName);
    out.set(p, set);
  }
  return out;
}

async function decidedBy(admin: KubeClient): Promise<Map<string, Set<string>>> {
  return decisionsByPlacement((await admin.list<PlacementDecision>(PlacementDecisionResource, { namespace: NS })).items);
}

// Every relay idle (nothing pending, nothing in flight) and the API server's counts for the group
// unchanged over half a second; returns when that began.
async function quiet(admin: KubeClient, relays: Relay[], timeoutMs = 120_000): Promise<number> {
  const t0 = performance.now();
  let last = "";
  let since = performance.now();
  for (;;) {
    const busy = relays.some((r) => r.status().sinks.some((s) => s.pending > 0 || s.inFlight > 0));
    const now = JSON.stringify([...(await groupRequests(admin))].filter(([k]) => !k.startsWith("WATCH ")));
    if (busy || now !== last) {
      last = now;
      since = performance.now();
    } else if (performance.now() - since >= 500) return since;
    if (performance.now() - t0 > timeoutMs) throw new Error(`the functions were not quiet within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// placement-scheduler and cluster-sets, each under its own identity, unless the fleet serves them.
async function serveMissing(fleet: Fleet, wiring: Wiring): Promise<void> {
  const hubCluster = fleet.clusters.get("hub");
  const subscriptions = new Map(readFunctions().map((f) => [f.name, f.deploy.subscriptions.map((s) => s.filters)]));
  const sinks: { name: string; url: string; filters: NonNullable<ReturnType<typeof subscriptions.get>> }[] = [];
  const serve = async <C>(spec: FunctionSpec<C>, config: C) => {
    const name = `hub/${spec.name}`;
    if (fleet.functions.has(name)) return;
    const io: Io<C> = { clock: systemClock, config, log: jsonLog(spec.name, "quiet"), cluster: clientsFromKubeconfigs({ hub: await identityFor(hubCluster, spec.name) }) };
    const server = await startFunction(spec, io);
    wiring.servers.push(server);
    wiring.served.push(name);
    sinks.push({ name, url: server.url, filters: subscriptions.get(spec.name)! });
  };
  await serve(placementScheduler.spec, placementScheduler.definition.config.parse({ hubCluster: "hub" }));
  await serve(clusterSets.spec, clusterSets.definition.config.parse({ hubCluster: "hub" }));
  if (!sinks.length) return;
  const source = (resource: SourceConfig["resource"]): SourceConfig => ({ cluster: "hub", resource, mode: "Resource" });
  const relay = startRelay({
    clusters: { hub: { kubeconfig: hubCluster.adminKubeconfig } },
    sources: [source(ManagedClusterResource), source(ManagedClusterSetResource), source(ManagedClusterSetBindingResource), source(PlacementResource), source(PlacementDecisionResource)],
    sinks,
    resync: { intervalMs: 600_000 },
    log: jsonLog("relay-bench", "quiet"),
  });
  wiring.relays.push(relay);
}

