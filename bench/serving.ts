// The hub as Knative Services on a real node (dev/local/eventing-hub.ts with Serving and Traefik; needs
// root), with no cluster joined (N = 0): what an idle hub holds, and what an event costs from zero.
//   1. idle as deployed (the hub's relays tick every 30 minutes, as OCM's hub informers resync): how
//      long after the install until every function with nothing to do has gone, then pods per hub
//      function, sampled every 2 s over SERVING_IDLE_SECONDS (120)
//   2. the memory on the node: every pod's working set from its cgroup (usage less inactive file
//      cache, as kubelet counts it), Knative's own pods and the hub functions' apart
//   3. event-to-reconcile: an accepted ManagedCluster created until cluster-acceptor has set
//      HubAccepted=True, from zero (cluster-acceptor with no pod left; SERVING_COLD_SAMPLES, 5) and
//      warm (its pod up; SERVING_WARM_SAMPLES, 20), with where the time went (Stages)
//   4. with N joined clusters (SERVING_SIZES, 20,200; simulated spokes as in the hub-cost bench, real
//      identities auto-approved, 60 s leases): the time until all are joined and Available, then
//      pods per function and memory while the fleet only renews its leases. The clusters of phase 3
//      stay (accepted, never joined), so each N has 25 more that are Unknown.
// The autoscaler's windows are Knative's least (stable-window and scale-to-zero grace 6 s), so
// phases 1 and 3 take minutes, not hours; with Knative's defaults (60 s and 30 s) a function stays up
// about a minute and a half after its last event. SERVING_AUTOSCALER=key=value,... adds
// config-autoscaler settings (e.g. target-burst-capacity=0, which takes the activator out of a warm
// revision's path). SERVING_KEEP_LOGS=<dir> copies the hub namespace's pod logs there before the hub stops.
import { readFileSync, existsSync, mkdtempSync, cpSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { startEventingHub, type EventingHub } from "../dev/local/eventing-hub.ts";
import type { KubeObject } from "../shared/kube/client.ts";
import { PodResource } from "../shared/api/kube.ts";
import { percentile, ms, mib } from "./stats.ts";
import { untilTrue } from "./until.ts";
import { Simulator } from "./scale.ts";
import { createdToAccepted } from "./accepted.ts";

const IDLE_S = Number(process.env.SERVING_IDLE_SECONDS || 120);
const COLD = Number(process.env.SERVING_COLD_SAMPLES || 5);
const WARM = Number(process.env.SERVING_WARM_SAMPLES || 20);
const AUTOSCALER = Object.fromEntries(
  (process.env.SERVING_AUTOSCALER ?? "")
    .split(",")
    .filter(Boolean)
    .map((kv) => kv.split("=") as [string, string]),
);
const SIZES = (process.env.SERVING_SIZES ?? "20,200").split(",").filter(Boolean).map(Number);
const KNATIVE_NAMESPACES = ["knative-eventing", "knative-serving", "traefik", "kube-system"];

type Pod = KubeObject & { metadata: { uid: string; namespace: string; labels?: Record<string, string>; deletionTimestamp?: string } };
const pause = (msec: number) => new Promise((r) => setTimeout(r, msec));

// A pod's working set from the node's memory cgroup (cgroup v1 here): kubepods/<qos>/pod<uid>.
function workingSetOf(nodeCgroup: string, uid: string): number | undefined {
  const base = join("/sys/fs/cgroup/memory", nodeCgroup, "kubepods");
  for (const qos of ["", "burstable", "besteffort"]) {
    const dir = join(base, qos, `pod${uid}`);
    if (!existsSync(dir)) continue;
    const usage = Number(readFileSync(join(dir, "memory.usage_in_bytes"), "utf8"));
    const inactive = Number(/^total_inactive_file (\d+)$/m.exec(readFileSync(join(dir, "memory.stat"), "utf8"))?.[1] ?? 0);
    return Math.max(0, usage - inactive);
  }
  return undefined;
}

const fnOf = (p: Pod) => p.metadata.labels?.["serving.knative.dev/service"];

async function livePods(env: EventingHub): Promise<Pod[]> {
  const { items } = await env.hubAdmin.list<Pod>(PodResource, {});
  return items.filter((p) => !p.metadata.deletionTimestamp);
}

// Samples pods per function every 2 s over the window: the mean and the most at once.
async function sampleIdle(env: EventingHub, seconds: number): Promise<Record<string, string>> {
  const counts = new Map(env.functions.map((fn) => [fn, [] as number[]]));
  for (const end = Date.now() + seconds * 1000; Date.now() < end; await pause(2_000)) {
    const pods = await livePods(env);
    for (const fn of env.functions) counts.get(fn)!.push(pods.filter((p) => fnOf(p) === fn).length);
  }
  return Object.fromEntries(
    env.functions.map((fn) => {
      const c = counts.get(fn)!;
      return [fn, `mean ${(c.reduce((a, b) => a + b, 0) / c.length).toFixed(2)}, most ${Math.max(...c)}`];
    }),
  );
}

function memory(env: EventingHub, pods: Pod[]): { knative: number; functions: Map<string, number>; other: number } {
  const functions = new Map<string, number>();
  let knative = 0;
  let other = 0;
  for (const p of pods) {
    const ws = workingSetOf(env.node.cgroup, p.metadata.uid) ?? 0;
    const fn = fnOf(p);
    if (fn) functions.set(fn, (functions.get(fn) ?? 0) + ws);
    else if (KNATIVE_NAMESPACES.includes(p.metadata.namespace)) knative += ws;
    else other += ws; // the hub namespace's relays: the Broker's source and the lease monitor's
  }
  return { knative, functions, other };
}

// Where one sample's time went, in ms after the ManagedCluster's create was sent: the Broker delivered
// the acceptor's event (to the harness's recorder, whose Trigger takes every event; the acceptor's own
// Trigger fires beside it), and, from zero, the first acceptor pod was seen, got its address, had every
// container running, was Ready. Seen through a watch, so each is when the API server told us.
const STAGES = ["broker", "pod", "address", "running", "ready"] as const;
type Stages = Partial<Record<(typeof STAGES)[number], number>>;
type PodStatus = { podIP?: string; containerStatuses?: { state?: { running?: unknown } }[]; conditions?: { type: string; status: string }[] };

async function watchAcceptorPods(env: EventingHub, t0: number, stages: Stages): Promise<() => void> {
  const selector = "serving.knative.dev/service=cluster-acceptor";
  const { resourceVersion } = await env.hubAdmin.list(PodResource, { namespace: env.namespace, labelSelector: selector });
  const w = env.hubAdmin.watch(PodResource, { namespace: env.namespace, labelSelector: selector, resourceVersion }, (e) => {
    if (e.type !== "ADDED" && e.type !== "MODIFIED") return;
    const at = Date.now() - t0;
    const status = (e.object as { status?: PodStatus }).status;
    stages.pod ??= at;
    if (status?.podIP) stages.address ??= at;
    if (status?.containerStatuses?.length && status.containerStatuses.every((c) => c.state?.running)) stages.running ??= at;
    if (status?.conditions?.some((c) => c.type === "Ready" && c.status === "True")) stages.ready ??= at;
  });
  return () => w.stop();
}

// undefined when the cluster was not HubAccepted within 120 s (counted apart, not as a latency)
async function acceptLatency(env: EventingHub, name: string, stages?: Stages[], fromZero = false): Promise<number | undefined> {
  const seen: Stages = {};
  const t0 = Date.now();
  const stopWatch = fromZero ? await watchAcceptorPods(env, t0, seen) : () => {};
  const took = await createdToAccepted(env.hubAdmin, name, 120_000).finally(stopWatch);
  if (took !== undefined && stages) {
    const delivered = env.deliveries.find((d) => d.event.name === name && d.event.ocmftarget === "cluster-acceptor");
    if (delivered) seen.broker = Date.parse(delivered.time) - t0;
    stages.push(seen);
  }
  return took;
}

// p50 of each stage over the samples that saw it
const stagesSummary = (samples: Stages[]) =>
  STAGES.filter((k) => samples.some((s) => s[k] !== undefined))
    .map((k) => `${k} ${ms(percentile(samples.flatMap((s) => (s[k] === undefined ? [] : [s[k]!])), 50))}`)
    .join(", ");

const summary = (samples: (number | undefined)[]) => {
  const got = samples.filter((x): x is number => x !== undefined);
  const late = samples.length - got.length;
  return `${got.length ? `p50 ${ms(percentile(got, 50))}, p95 ${ms(percentile(got, 95))} ` : ""}(n=${got.length}${late ? `; ${late} not HubAccepted within 120 s` : ""})`;
};

export const serving = {
  name: "serving",
  async run() {
    const figures: Record<string, string | number> = {};
    const sims: Simulator[] = [];
    const env = await startEventingHub({ autoApprove: true, workloads: "knative", serving: { autoscaler: { "stable-window": "6s", "scale-to-zero-grace-period": "6s", ...AUTOSCALER } } });
    try {
      figures["node Ready"] = ms(env.node.readyMs);
      figures["Eventing Available (beside Serving)"] = ms(env.eventing.readyMs);
      figures["Serving and Traefik Available"] = ms(env.serving!.readyMs);
      figures[`install hub --wait all (${env.functions.length} Knative Services)`] = ms(env.installMs);

      if (Object.keys(AUTOSCALER).length) figures["config-autoscaler besides the windows"] = JSON.stringify(AUTOSCALER);
      const t0 = performance.now();
      await untilTrue(async () => !(await livePods(env)).some(fnOf), "every function at zero", 300_000, { intervalMs: 1_000 });
      figures["idle: last function pod gone, after install and the request to each"] = ms(performance.now() - t0);
      for (const [fn, v] of Object.entries(await sampleIdle(env, IDLE_S))) figures[`idle, quiet: pods of ${fn}`] = v;
      const idle = memory(env, await livePods(env));
      figures["idle, quiet: Knative's pods (Eventing, Serving, Traefik, CoreDNS)"] = mib(idle.knative);
      figures["idle, quiet: hub functions' pods"] = mib([...idle.functions.values()].reduce((a, b) => a + b, 0));
      figures["idle, quiet: the hub's relays (Broker source, lease monitor's)"] = mib(idle.other);

      const cold: (number | undefined)[] = [];
      const coldStages: Stages[] = [];
      for (let i = 0; i < COLD; i++) {
        await untilTrue(async () => !(await livePods(env)).some((p) => fnOf(p) === "cluster-acceptor"), "cluster-acceptor at zero", 300_000, { intervalMs: 500 });
        cold.push(await acceptLatency(env, `cold-${i}`, coldStages, true));
      }
      figures["event-to-reconcile from zero (HubAccepted)"] = summary(cold);
      figures["from zero, p50 ms after the create: Broker delivered, acceptor pod seen, addressed, running, Ready"] = stagesSummary(coldStages);
      const warm: (number | undefined)[] = [];
      let acceptorPods = 0;
      const awake = memory(env, await livePods(env));
      for (const [fn, ws] of awake.functions) figures[`awake: memory of ${fn}'s pod`] = mib(ws);
      const warmStages: Stages[] = [];
      for (let i = 0; i < WARM; i++) {
        warm.push(await acceptLatency(env, `warm-${i}`, warmStages));
        acceptorPods = Math.max(acceptorPods, (await livePods(env)).filter((p) => fnOf(p) === "cluster-acceptor").length);
      }
      figures["event-to-reconcile warm (HubAccepted)"] = summary(warm);
      figures["warm, p50 ms after the create: Broker delivered"] = stagesSummary(warmStages);
      figures["most cluster-acceptor pods during the warm samples"] = acceptorPods;

      let joined = 0;
      for (const n of SIZES) {
        const names = Array.from({ length: n - joined }, (_, i) => `sim-${String(joined + i).padStart(4, "0")}`);
        const t1 = performance.now();
        const sim = new Simulator(
          {
            hubUrl: env.hub.url,
            caPem: env.hub.caPem,
            bootstrapKubeconfig: readFileSync(env.bootstrapKubeconfig, "utf8"),
            observerKubeconfig: env.hub.adminKubeconfig,
            names,
            leaseDurationSeconds: 60,
            renewSeconds: 60,
          },
          mkdtempSync(join(env.work, "sim-")),
        );
        sims.push(sim);
        await sim.waitAll(Math.max(300_000, names.length * 3_000));
        joined = n;
        figures[`N = ${n}: ${names.length} more joined and Available`] = ms(performance.now() - t1);
        await pause(IDLE_S * 1000);
        for (const [fn, v] of Object.entries(await sampleIdle(env, IDLE_S))) figures[`N = ${n}, quiet: pods of ${fn}`] = v;
        const m = memory(env, await livePods(env));
        figures[`N = ${n}, quiet: Knative's pods`] = mib(m.knative);
        figures[`N = ${n}, quiet: hub functions' pods`] = mib([...m.functions.values()].reduce((a, b) => a + b, 0));
        figures[`N = ${n}, quiet: the hub's relays`] = mib(m.other);
      }
    } finally {
      for (const sim of sims) await sim.stop();
      const keep = process.env.SERVING_KEEP_LOGS;
      if (keep) for (const d of readdirSync(env.node.podLogsDir)) if (d.startsWith(`${env.namespace}_`)) cpSync(join(env.node.podLogsDir, d), join(keep, d), { recursive: true });
      await env.stop();
    }
    return figures;
  },
};
