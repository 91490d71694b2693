// Add-on latency on a local fleet: from enabling the helloworld add-on on a joined cluster to its
// Available=True, through the hub's addon-manager and addon-csr-approver, the spoke's work agent,
// addon-registration and addon-health, each behind our CloudEvents server fed by relays.
//
// The add-on's agent cannot run (no kubelet): the bench stands in for it, as addon-framework agents
// behave: once its hub kubeconfig secret exists (a pod mounting it could start), it creates the Lease
// `helloworld` in the install namespace as the agent's ServiceAccount and keeps renewTime fresh. A
// template add-on's Available comes from its Deployment's availability (OCM's WorkloadAvailability
// prober, read through the work's status feedback), so the bench also does the kubelet's and the
// Deployment controller's part: it reports the agent's Deployment as one ready, available replica.
// The work agent reads that status back at its status sync (every 10 s, OCM's default), so enable →
// Available includes up to one such interval; the milestones before it do not.
//
// The fleet serves every function (func.yaml's), fed by its relays as in local mode.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { startFleet, type Fleet } from "../dev/local/fleet.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { applyManifests } from "../shared/apply.ts";
import { microTime } from "../shared/clock.ts";
import { findCondition, isTrue } from "../shared/conditions.ts";
import { DeploymentResource, LeaseResource, SecretResource } from "../shared/api/kube.ts";
import { ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { AddOnConditionType, DefaultAddOnInstallNamespace, ManagedClusterAddOnV1alpha1Resource, type ManagedClusterAddOnV1alpha1 } from "../shared/api/addon.ts";
import { hubKubeconfigSecretName } from "../shared/api/addon-strings.ts";
import { ManifestWorkResource } from "../shared/api/work.ts";
import { bootstrappedHubClient } from "../shared/hub-credentials.ts";
import { enableAddon } from "../cli/addon.ts";
import addonRegistration from "../functions/addon-registration/reconcile.ts";
import { percentile, ms } from "./stats.ts";
import { until } from "./until.ts";

// Each wait polls every 5 ms, as fine as the figures it times.
const TIMEOUT_MS = 60_000;
const POLL = { intervalMs: 5 };

const C = "bench";
const HELLO = "helloworld";
const NS = DefaultAddOnInstallNamespace;
const ROUNDS = Number(process.env.BENCH_ADDON_ROUNDS ?? 10);
const AGENT_SA = "helloworld-agent-sa"; // the template's ServiceAccount
const DEPLOYMENT = "helloworld-agent"; // the template's Deployment
const RENEW_MS = 10_000; // addon-framework renews every 60 s; sooner here, the bench is short

type Milestones = { registered: number; secret: number; lease: number; available: number };

export const addon = {
  name: "addon",
  async run(): Promise<Record<string, string | number>> {
    const fleet = await startFleet({ spokes: [{ name: C, autoApprove: true }], resyncMs: 60_000 });
    const spokeAdmin = KubeClient.fromKubeconfig(fleet.clusters.get(C).adminKubeconfig);
    const rounds: Milestones[] = [];
    try {
      await joined(fleet);
      await applyManifests(fleet.hub, readFileSync(join(import.meta.dirname, "..", "manifests", "addons", "helloworld.yaml"), "utf8"));
      for (let i = 0; i < ROUNDS; i++) {
        rounds.push(await enableToAvailable(fleet, spokeAdmin));
        await disable(fleet, spokeAdmin);
      }
    } finally {
      spokeAdmin.close();
      await fleet.stop();
    }
    // The first round also creates the install namespace; later ones find it left behind (orphaned).
    const warm = rounds.slice(1);
    const p50 = (pick: (m: Milestones) => number) => ms(percentile(warm.map(pick), 50));
    return {
      rounds: rounds.length,
      "enable → Available (first round)": ms(rounds[0]!.available),
      "enable → Available p50": p50((m) => m.available),
      "enable → Available p95": ms(percentile(warm.map((m) => m.available), 95)),
      "enable → Available min": ms(Math.min(...warm.map((m) => m.available))),
      "enable → Available max": ms(Math.max(...warm.map((m) => m.available))),
      "  enable → registrations in status p50": p50((m) => m.registered),
      "  enable → hub kubeconfig secret p50": p50((m) => m.secret),
      "  enable → lease created p50": p50((m) => m.lease),
    };
  },
};

// Joined, and the cluster's identity may already read its add-ons (granted at acceptance).
async function joined(fleet: Fleet): Promise<void> {
  const secrets = addonRegistration.definition.config.parse({ managementCluster: C, clusterName: C });
  const spoke = KubeClient.fromKubeconfig(fleet.clusters.get(C).adminKubeconfig);
  try {
    await until(async () => {
      const mc = await fleet.hub.get<ManagedCluster & KubeObject>(ManagedClusterResource, C);
      if (!isTrue(mc?.status?.conditions, "ManagedClusterJoined")) return undefined;
      const got = await bootstrappedHubClient(spoke, secrets, new Date());
      if (!("hub" in got)) return undefined;
      return got.hub.list(ManagedClusterAddOnV1alpha1Resource, { namespace: C }).then(() => true, () => undefined);
    }, `${C} joined`, TIMEOUT_MS, POLL);
  } finally {
    spoke.close();
  }
}

const readAddon = (fleet: Fleet) => fleet.hub.get<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, HELLO, C);

async function enableToAvailable(fleet: Fleet, spoke: KubeClient): Promise<Milestones> {
  const t0 = performance.now();
  const since = () => performance.now() - t0;
  await enableAddon(fleet.hub, { addon: HELLO, clusters: [C] });
  const registered = await until(async () => ((await readAddon(fleet))?.status?.registrations?.length ? since() : undefined), "registrations", TIMEOUT_MS, POLL);
  const secret = await until(async () => ((await spoke.get(SecretResource, hubKubeconfigSecretName(HELLO), NS)) ? since() : undefined), "hub kubeconfig secret", TIMEOUT_MS, POLL);
  const agent = await standInAgent(fleet, spoke);
  try {
    const lease = since();
    const available = await until(async () => (findCondition((await readAddon(fleet))?.status?.conditions, AddOnConditionType.Available)?.status === "True" ? since() : undefined), "Available=True", TIMEOUT_MS, POLL);
    return { registered, secret, lease, available };
  } finally {
    agent.stop();
  }
}

// The helloworld agent's one visible duty here: its lease, created and renewed as its ServiceAccount
// (the Role the add-on's work applied grants it leases in the install namespace). Once that runs, its
// pod would be ready: the agent's Deployment reported as one available replica, with the spoke's admin
// (the kubelet and the Deployment controller write that status, not the agent).
async function standInAgent(fleet: Fleet, spoke: KubeClient): Promise<{ stop(): void }> {
  const client = KubeClient.fromKubeconfig(await fleet.clusters.get(C).kubeconfigFor({ user: `system:serviceaccount:${NS}:${AGENT_SA}` }));
  const renew = async () => {
    const lease = await client.get<KubeObject & { spec?: object }>(LeaseResource, HELLO, NS);
    const spec = { holderIdentity: HELLO, leaseDurationSeconds: 60, renewTime: microTime(new Date()) };
    if (lease) await client.update(LeaseResource, { ...lease, spec: { ...lease.spec, ...spec } });
    else await client.create(LeaseResource, { metadata: { name: HELLO, namespace: NS }, spec });
  };
  // the work agent may still be applying the Role that lets it
  await until(() => renew().then(() => true, () => undefined), "the agent's first lease renewal", TIMEOUT_MS, POLL);
  const ready = { replicas: 1, updatedReplicas: 1, readyReplicas: 1, availableReplicas: 1 };
  await spoke.patch(DeploymentResource, DEPLOYMENT, { status: ready }, { namespace: NS, subresource: "status" });
  const timer = setInterval(() => void renew().catch(() => {}), RENEW_MS);
  return {
    stop() {
      clearInterval(timer);
      client.close();
    },
  };
}

// The add-on disabled and its agent gone: the add-on, its lease, its work and its secret.
async function disable(fleet: Fleet, spoke: KubeClient): Promise<void> {
  await fleet.hub.delete(ManagedClusterAddOnV1alpha1Resource, HELLO, C);
  await spoke.delete(LeaseResource, HELLO, NS);
  await until(async () => ((await readAddon(fleet)) ? undefined : true), "add-on deleted", TIMEOUT_MS, POLL);
  await until(async () => ((await fleet.hub.list(ManifestWorkResource, { namespace: C })).items.length ? undefined : true), "works deleted", TIMEOUT_MS, POLL);
  await until(async () => ((await spoke.get(SecretResource, hubKubeconfigSecretName(HELLO), NS)) ? undefined : true), "secret removed", TIMEOUT_MS, POLL);
}
