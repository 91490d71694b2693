// Issue 13's question for an event-driven multi-cluster function: from one change on the source, how
// long until every copy on 10 clusters has converged, and what it cost. examples/deployment-copy
// copies one Deployment from a hub to 10 target clusters (all 11 real control planes), run as the SDK
// runs any function locally (dev/local/run-function.ts: our CloudEvents server and a relay built
// from its watches), under the example's own identities. Per round, on a fresh namespace:
//
// - create: from the POST of the source until all 10 copies exist with its spec;
// - update: from the PATCH of its spec until all 10 copies carry the new spec;
// - delete: from the DELETE of the source until all 10 copies are gone (the owner finalizer makes the
//   source wait for them, so the source is gone a moment later).
//
// Convergence is seen by a watch on each target (no polling, which would load the API servers it
// measures). After each step the bench waits for the function to go quiet, and counts, from the step's
// start: the changes the relay saw on the watched kinds (and how many it folded into a newer change of
// the same object before delivering), the events it delivered to the function, the reconciles the
// function ran (conflict retries included), and the API requests the function's clients sent (the
// relay's own lists and watches not included).
//
// The 11 clusters share one etcd, each API server under its own --etcd-prefix (as startClusters always
// runs them), with no controller manager, and only the ManagedCluster CRD, on the hub; the figures
// include their resident memory. BENCH_E2C_ROUNDS rounds (default 5) follow one warm-up round that is
// not counted (the first round opens the function's connections to the 11 API servers). The example's
// resync (every 300 s) does not fall inside the default rounds.
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { startClusters, ocmCrds } from "../dev/control-plane/clusters.ts";
import { identityFor } from "../dev/control-plane/identities.ts";
import { runFunction, type RunningFunction } from "../dev/local/run-function.ts";
import { CustomResourceDefinitionResource, DeploymentResource, NamespaceResource } from "../shared/api/kube.ts";
import { ManagedClusterResource } from "../shared/api/cluster.ts";
import { OwnedLabel } from "../shared/cross-cluster-owner.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import type { MultiClusterFunction } from "../shared/sdk.ts";
import deploymentCopy, { CopyToAnnotation, type Config } from "../examples/deployment-copy/function.ts";
import { percentile, ms, mib, rssOf } from "./stats.ts";
import { until } from "./until.ts";

const TARGETS = Array.from({ length: 10 }, (_, i) => `target-${i + 1}`);
const ROUNDS = Number(process.env.BENCH_E2C_ROUNDS ?? 5);
const QUIET_MS = 1_000; // no delivery and no reconcile for this long: the function is done
const STEP_TIMEOUT_MS = 60_000;
const example = join(import.meta.dirname, "..", "examples", "deployment-copy");

type Figures = Record<string, string | number>;
type Deployment = KubeObject & { spec?: { replicas?: number } };
type Counts = { events: number; reconciles: number; requests: number };
type Step = Counts & { convergedMs: number; seen: number; folded: number };
const steps = ["create", "update", "delete"] as const;

export const eventsToConverged = {
  name: "events-to-converged",
  async run(): Promise<Figures> {
    const t0 = performance.now();
    const clusters = await startClusters({ names: ["hub", ...TARGETS], controllers: false, crds: false, admission: false, log: () => {} });
    const admin = Object.fromEntries(clusters.clusters.map((c) => [c.name, KubeClient.fromKubeconfig(c.adminKubeconfig)]));
    const hub = admin.hub!;
    const counts: Counts = { events: 0, reconciles: 0, requests: 0 };
    const copies = new Map<string, Map<string, Deployment>>(); // target → "<ns>/<name>" → copy
    const watches: { stop(): void; done: Promise<void> }[] = [];
    let running: RunningFunction | undefined;
    let memory = "";
    const results: Record<(typeof steps)[number], Step[]> = { create: [], update: [], delete: [] };
    try {
      await installManagedClusterCrd(hub);
      for (const t of TARGETS) await hub.create(ManagedClusterResource, { metadata: { name: t, labels: { bench: "events-to-converged" } }, spec: { hubAcceptsClient: true } });
      const kubeconfigs = {
        hub: await identityFor(clusters.get("hub"), "deployment-copy", "", join(example, "rbac-source.yaml")),
        ...Object.fromEntries(await Promise.all(TARGETS.map(async (t) => [t, await identityFor(clusters.get(t), "deployment-copy", "", join(example, "rbac-target.yaml"))] as const))),
      };
      // The goal of the step under way, checked on every change a target's watch sees.
      let goal: (() => boolean) | undefined;
      let reached = () => {};
      const onChange = () => {
        if (goal?.()) {
          goal = undefined;
          reached();
        }
      };
      for (const t of TARGETS) {
        copies.set(t, new Map());
        watches.push(await watchCopies(admin[t]!, copies.get(t)!, onChange));
      }

      running = await runFunction(counted(deploymentCopy, counts), { config: { source: "hub", targets: TARGETS, copySealKey: randomBytes(32).toString("base64") } satisfies Config, kubeconfigs, log: { info() {}, warn() {}, error() {} } });
      await running.relay.ready;
      for (const t of ["hub", ...TARGETS]) countRequests(running.io.cluster(t), counts);

      // What the relay took in for the function, and how many of those it folded into a newer one.
      const relayCounts = () => {
        const s = running!.relay.status().sinks[0]!;
        return { seen: s.received, folded: s.coalesced + s.superseded };
      };
      const step = async (act: () => Promise<unknown>, converged: () => boolean): Promise<Step> => {
        const before = { ...counts, ...relayCounts() };
        let timer: NodeJS.Timeout | undefined;
        const at = new Promise<number>((resolve, reject) => {
          reached = () => resolve(performance.now());
          timer = setTimeout(() => reject(new Error(`not converged within ${STEP_TIMEOUT_MS} ms`)), STEP_TIMEOUT_MS);
        });
        goal = converged;
        const start = performance.now();
        await act();
        const end = await at.finally(() => clearTimeout(timer));
        await quiet(running!, counts);
        const relay = relayCounts();
        return {
          convergedMs: end - start,
          seen: relay.seen - before.seen,
          folded: relay.folded - before.folded,
          events: counts.events - before.events,
          reconciles: counts.reconciles - before.reconciles,
          requests: counts.requests - before.requests,
        };
      };

      for (let round = 0; round <= ROUNDS; round++) {
        const ns = `bench-${round}`;
        const key = `${ns}/web`;
        const everywhere = (ok: (copy: Deployment | undefined) => boolean) => () => TARGETS.every((t) => ok(copies.get(t)!.get(key)));
        await hub.create(NamespaceResource, { metadata: { name: ns } });
        const create = await step(() => hub.create(DeploymentResource, deployment(ns)), everywhere((c) => c?.spec?.replicas === 1));
        const update = await step(() => hub.patch(DeploymentResource, "web", { spec: { replicas: 2 } }, { namespace: ns }), everywhere((c) => c?.spec?.replicas === 2));
        const del = await step(() => hub.delete(DeploymentResource, "web", ns), everywhere((c) => c === undefined));
        await until(async () => ((await hub.get(DeploymentResource, "web", ns)) ? undefined : true), "the source gone after its copies", STEP_TIMEOUT_MS);
        if (round === 0) continue; // the warm-up
        results.create.push(create);
        results.update.push(update);
        results.delete.push(del);
      }
      const apiservers = await Promise.all(clusters.clusters.map((c) => rssOf(c.apiserver!.child.pid!)));
      memory = `${mib(apiservers.reduce((a, b) => a + b, 0))} for the 11 API servers (${mib(Math.min(...apiservers))}–${mib(Math.max(...apiservers))} each), etcd ${mib(await rssOf(clusters.etcd.child.pid!))}`;
    } finally {
      await running?.stop();
      for (const w of watches) w.stop();
      for (const c of Object.values(admin)) c.close();
      await clusters.stop();
    }

    const figures: Figures = {
      clusters: `hub + ${TARGETS.length} targets, one etcd (a --etcd-prefix each), control planes ready in ${ms(clusters.startupMs)}`,
      "resident memory at the end": memory,
      rounds: `${ROUNDS} (after one warm-up); figures are median (min–max)`,
    };
    const spread = (xs: number[], unit: (n: number) => string) => `${unit(percentile(xs, 50))} (${unit(Math.min(...xs))}–${unit(Math.max(...xs))})`;
    const n = (x: number) => String(x);
    for (const s of steps) {
      const r = results[s];
      const what = s === "delete" ? "10 copies gone" : "10 copies converged";
      figures[`${s} → ${what}`] = spread(r.map((x) => x.convergedMs), ms);
      figures[`  changes seen by the relay (${s})`] = `${spread(r.map((x) => x.seen), n)}, folded before delivery ${spread(r.map((x) => x.folded), n)}`;
      figures[`  events delivered (${s})`] = spread(r.map((x) => x.events), n);
      figures[`  reconciles (${s})`] = spread(r.map((x) => x.reconciles), n);
      figures[`  API requests by the function (${s})`] = spread(r.map((x) => x.requests), n);
    }
    figures["bench wall time"] = ms(performance.now() - t0);
    return figures;
  },
};

function deployment(ns: string): Deployment {
  const labels = { app: "web" };
  return {
    metadata: { name: "web", namespace: ns, labels, annotations: { [CopyToAnnotation]: "bench=events-to-converged" } },
    spec: { replicas: 1, selector: { matchLabels: labels }, template: { metadata: { labels }, spec: { containers: [{ name: "web", image: "registry.invalid/web:1" }] } } } as Deployment["spec"],
  };
}

// The example as it is, with its handler counting what it is handed and what it runs.
function counted<C>(fn: MultiClusterFunction<C>, counts: Counts): MultiClusterFunction<C> {
  const spec = {
    ...fn.spec,
    keys: (...args: Parameters<typeof fn.spec.keys>) => {
      counts.events++;
      return fn.spec.keys(...args);
    },
    reconcile: (...args: Parameters<typeof fn.spec.reconcile>) => {
      counts.reconciles++;
      return fn.spec.reconcile(...args);
    },
  };
  return { ...fn, spec };
}

// Every request the function's client for one cluster sends.
function countRequests(client: KubeClient, counts: Counts): void {
  const send = client.request.bind(client);
  client.request = ((...args: Parameters<typeof send>) => {
    counts.requests++;
    return send(...args);
  }) as typeof client.request;
}

// A target's copies (the owner-marked Deployments), kept current by a watch from a first list.
async function watchCopies(client: KubeClient, into: Map<string, Deployment>, changed: () => void): Promise<{ stop(): void; done: Promise<void> }> {
  const labelSelector = `${OwnedLabel}=true`;
  const { items, resourceVersion } = await client.list<Deployment>(DeploymentResource, { labelSelector });
  for (const d of items) into.set(`${d.metadata.namespace}/${d.metadata.name}`, d);
  const w = client.watch(DeploymentResource, { labelSelector, resourceVersion, timeoutSeconds: 3600 }, (e) => {
    const id = `${e.object.metadata.namespace}/${e.object.metadata.name}`;
    if (e.type === "DELETED") into.delete(id);
    else if (e.type === "ADDED" || e.type === "MODIFIED") into.set(id, e.object as Deployment);
    else return;
    changed();
  });
  w.done.catch((err) => process.stderr.write(`events-to-converged: a target's watch failed: ${err}\n`));
  return w;
}

// Done when the relay holds nothing for the function and nothing was delivered or run for QUIET_MS.
async function quiet(running: RunningFunction, counts: Counts): Promise<void> {
  let last = JSON.stringify(counts);
  let since = performance.now();
  await until(async () => {
    const now = JSON.stringify(counts);
    const busy = running.relay.status().sinks.some((s) => s.pending > 0 || s.inFlight > 0);
    if (now !== last || busy) {
      last = now;
      since = performance.now();
      return undefined;
    }
    return performance.now() - since >= QUIET_MS ? true : undefined;
  }, "the function quiet", STEP_TIMEOUT_MS);
}

// Only the hub serves an OCM kind here, the ManagedClusters whose labels choose the targets.
async function installManagedClusterCrd(hub: KubeClient): Promise<void> {
  const name = `${ManagedClusterResource.plural}.${ManagedClusterResource.group}`;
  const crd = ocmCrds().find((c) => (c as KubeObject).metadata?.name === name) as KubeObject | undefined;
  if (!crd) throw new Error(`no CRD ${name} in manifests/crds`);
  await hub.create(CustomResourceDefinitionResource, crd);
  type Crd = KubeObject & { status?: { conditions?: { type: string; status: string }[] } };
  await until(async () => ((await hub.get<Crd>(CustomResourceDefinitionResource, name))?.status?.conditions?.some((c) => c.type === "Established" && c.status === "True") ? true : undefined), `CRD ${name} established`, 30_000);
  // the new kind's storage answers 429 for a moment after it is established
  await until(() => hub.list(ManagedClusterResource).then(() => true, () => undefined), `${name} served`, 30_000);
}
