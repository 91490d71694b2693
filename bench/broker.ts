// The hub on a real node with Knative Eventing (dev/local/eventing-hub.ts; needs root) against the same
// functions fed by our relay (local mode): how long the node, Eventing and the install take, how long
// each function's pod takes to start again after it is deleted, and event-to-reconcile latency, the
// time from creating an accepted ManagedCluster until cluster-acceptor has set HubAccepted=True on it,
// over BENCH_RECONCILES clusters one after another, through the Broker and through the relay.
import { startEventingHub } from "../dev/local/eventing-hub.ts";
import { startFleet } from "../dev/local/fleet.ts";
import type { KubeClient, KubeObject } from "../shared/kube/client.ts";
import { ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { isTrue } from "../shared/conditions.ts";
import { PodResource } from "../shared/api/kube.ts";
import { percentile, ms } from "./stats.ts";

const RECONCILES = Number(process.env.BENCH_RECONCILES ?? 20);
type Pod = KubeObject & { metadata: { deletionTimestamp?: string }; status?: { conditions?: { type: string; status: string }[] } };

async function until(what: string, timeoutMs: number, check: () => Promise<boolean>): Promise<void> {
  const t0 = performance.now();
  while (!(await check())) {
    if (performance.now() - t0 > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

// Creates accepted clusters one at a time and times each until the acceptor has answered.
async function acceptLatencies(hub: KubeClient, prefix: string): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < RECONCILES; i++) {
    const name = `${prefix}-${i}`;
    const t0 = performance.now();
    await hub.create(ManagedClusterResource, { metadata: { name }, spec: { hubAcceptsClient: true, leaseDurationSeconds: 60 } });
    await until(`${name} HubAccepted`, 60_000, async () => isTrue((await hub.get<ManagedCluster & KubeObject>(ManagedClusterResource, name))?.status?.conditions, "HubAcceptedManagedCluster"));
    samples.push(performance.now() - t0);
  }
  return samples;
}

const summary = (samples: number[]) => `p50 ${ms(percentile(samples, 50))}, p95 ${ms(percentile(samples, 95))} (n=${samples.length})`;

export const broker = {
  name: "broker",
  async run() {
    const figures: Record<string, string> = {};
    const env = await startEventingHub();
    try {
      figures["node Ready (this process building the images meanwhile)"] = ms(env.node.readyMs);
      figures["node Services and DNS ready after that"] = ms(env.node.servicesReadyMs ?? 0);
      figures["Knative Eventing Available (images imported)"] = ms(env.eventing.readyMs);
      figures["install hub --wait all (8 function pods)"] = ms(env.installMs);
      const ready = (p: Pod) => !p.metadata.deletionTimestamp && (p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false);
      for (const fn of env.functions) {
        const selector = { namespace: env.namespace, labelSelector: `app.kubernetes.io/name=${fn}` };
        const [old] = (await env.hubAdmin.list<Pod>(PodResource, selector)).items;
        const t0 = performance.now();
        await env.hubAdmin.request("DELETE", `/api/v1/namespaces/${env.namespace}/pods/${old!.metadata.name}`);
        await until(`${fn} pod`, 120_000, async () => (await env.hubAdmin.list<Pod>(PodResource, selector)).items.some((p) => p.metadata.name !== old!.metadata.name && ready(p)));
        figures[`pod start after delete: ${fn}`] = ms(performance.now() - t0);
      }
      figures["event-to-reconcile via Broker (HubAccepted)"] = summary(await acceptLatencies(env.hubAdmin, "broker"));
    } finally {
      await env.stop();
    }
    const fleet = await startFleet({ spokes: [], resyncMs: 60_000 });
    try {
      figures["event-to-reconcile via relay (HubAccepted)"] = summary(await acceptLatencies(fleet.hub, "relay"));
    } finally {
      await fleet.stop();
    }
    return figures;
  },
};
