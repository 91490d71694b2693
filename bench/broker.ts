// The hub on a real node with Knative Eventing (dev/local/eventing-hub.ts; needs root) against the same
// functions fed by our relay (local mode): how long the node, Eventing and the install take, how long
// each function's pod takes to start again after it is deleted, and event-to-reconcile latency, the
// time from creating an accepted ManagedCluster until cluster-acceptor has set HubAccepted=True on it,
// over BENCH_RECONCILES clusters one after another, through the Broker and through the relay; and how
// late a function's recheck comes back on each path (BENCH_RECHECKS samples; the bound is 1 s).
import { startEventingHub } from "../dev/local/eventing-hub.ts";
import { startFleet } from "../dev/local/fleet.ts";
import type { KubeClient, KubeObject } from "../shared/kube/client.ts";
import { ClusterLabel, ManagedClusterResource, ManagedClusterSetBindingResource, ManagedClusterSetResource, PlacementDecisionResource, PlacementResource, TaintKey, type ManagedCluster } from "../shared/api/cluster.ts";
import { rfc3339 } from "../shared/clock.ts";
import { isTrue } from "../shared/conditions.ts";
import { NamespaceResource, PodResource } from "../shared/api/kube.ts";
import { percentile, ms } from "./stats.ts";
import { untilTrue } from "./until.ts";

const POLL = { intervalMs: 10 };

const RECONCILES = Number(process.env.BENCH_RECONCILES ?? 20);
const RECHECKS = Number(process.env.BENCH_RECHECKS ?? 5);
type Pod = KubeObject & { metadata: { deletionTimestamp?: string }; status?: { conditions?: { type: string; status: string }[] } };

// Creates accepted clusters one at a time and times each until the acceptor has answered.
async function acceptLatencies(hub: KubeClient, prefix: string): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < RECONCILES; i++) {
    const name = `${prefix}-${i}`;
    const t0 = performance.now();
    await hub.create(ManagedClusterResource, { metadata: { name }, spec: { hubAcceptsClient: true, leaseDurationSeconds: 60 } });
    await untilTrue(async () => isTrue((await hub.get<ManagedCluster & KubeObject>(ManagedClusterResource, name))?.status?.conditions, "HubAcceptedManagedCluster"), `${name} HubAccepted`, 60_000, POLL);
    samples.push(performance.now() - t0);
  }
  return samples;
}

// How late a recheck arrives: placement-scheduler asks to be called back a second after a toleration
// runs out (tolerationSeconds from the taint's whole-second timeAdded); the sample is the time the
// Placement's decision loses the cluster, polled every 20 ms, minus that moment. It covers the trip
// back (through the Broker and the relay in recheck mode, or the relay's own timer), the reconcile and
// its write. The cluster is the first that acceptLatencies made, in a set bound to a fresh namespace;
// no agent runs for it, so it has OCM's unreachable taint, which the Placements tolerate for good.
const TOLERATION_SECONDS = 2;
async function recheckLateness(hub: KubeClient, prefix: string): Promise<number[]> {
  const ns = `${prefix}-rechecks`;
  const clusterName = `${prefix}-0`;
  await hub.create(NamespaceResource, { metadata: { name: ns } });
  await hub.create(ManagedClusterSetResource, { metadata: { name: ns }, spec: { clusterSelector: { selectorType: "LabelSelector", labelSelector: { matchLabels: { "bench-rechecks": prefix } } } } });
  await hub.create(ManagedClusterSetBindingResource, { metadata: { name: ns, namespace: ns }, spec: { clusterSet: ns } });
  await hub.patch(ManagedClusterResource, clusterName, { metadata: { labels: { "bench-rechecks": prefix } } });
  const decided = async (placement: string) => {
    const { items } = await hub.list<KubeObject & { status?: { decisions?: { clusterName: string }[] } }>(PlacementDecisionResource, { namespace: ns, labelSelector: `${ClusterLabel.Placement}=${placement}` });
    return items.flatMap((d) => d.status?.decisions ?? []).map((d) => d.clusterName);
  };
  const samples: number[] = [];
  for (let i = 0; i < RECHECKS; i++) {
    const placement = `brief-${i}`;
    const key = `bench.ocm-functions.io/brief-${i}`;
    await hub.create(PlacementResource, { metadata: { name: placement, namespace: ns }, spec: { tolerations: [{ key, operator: "Exists", tolerationSeconds: TOLERATION_SECONDS }, { key: TaintKey.Unreachable, operator: "Exists" }] } });
    await untilTrue(async () => (await decided(placement)).includes(clusterName), `${placement} decides ${clusterName}`, 60_000, POLL);
    const added = Math.floor(Date.now() / 1000) * 1000;
    await hub.patch(ManagedClusterResource, clusterName, { spec: { taints: [{ key, effect: "NoSelect", timeAdded: rfc3339(new Date(added)) }] } });
    await untilTrue(async () => !(await decided(placement)).includes(clusterName), `${placement} drops ${clusterName}`, 120_000, POLL);
    samples.push(performance.now() + performance.timeOrigin - (added + TOLERATION_SECONDS * 1000 + 1000));
    await hub.patch(ManagedClusterResource, clusterName, { spec: { taints: null } });
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
        await untilTrue(async () => (await env.hubAdmin.list<Pod>(PodResource, selector)).items.some((p) => p.metadata.name !== old!.metadata.name && ready(p)), `${fn} pod`, 120_000, POLL);
        figures[`pod start after delete: ${fn}`] = ms(performance.now() - t0);
      }
      figures["event-to-reconcile via Broker (HubAccepted)"] = summary(await acceptLatencies(env.hubAdmin, "broker"));
      figures[`recheck lateness via Broker (placement-scheduler, ${TOLERATION_SECONDS} s toleration)`] = summary(await recheckLateness(env.hubAdmin, "broker"));
    } finally {
      await env.stop();
    }
    const fleet = await startFleet({ spokes: [], resyncMs: 60_000 });
    try {
      figures["event-to-reconcile via relay (HubAccepted)"] = summary(await acceptLatencies(fleet.hub, "relay"));
      figures[`recheck lateness via relay (placement-scheduler, ${TOLERATION_SECONDS} s toleration)`] = summary(await recheckLateness(fleet.hub, "relay"));
    } finally {
      await fleet.stop();
    }
    return figures;
  },
};
