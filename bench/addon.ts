// Add-on latency on a local fleet: from enabling the helloworld add-on on a joined cluster to its
// Available=True, through the hub's addon-manager and addon-csr-approver, the spoke's work agent,
// addon-registration and addon-health, each behind our CloudEvents server fed by relays.
//
// The add-on's agent cannot run (no kubelet): the bench stands in for it, as addon-framework agents
// behave: once its hub kubeconfig secret exists (a pod mounting it could start), it creates the Lease
// `helloworld` in the install namespace as the agent's ServiceAccount and keeps renewTime fresh.
//
// Functions the fleet does not serve yet are started here, with a relay of the bench's own; that relay
// watches with admin credentials (a bench shortcut: production's sources have their own ServiceAccounts).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { startFleet, type Fleet } from "../dev/local/fleet.ts";
import { startFunction, type FunctionServer } from "../dev/local/functions.ts";
import { identityFor } from "../dev/control-plane/identities.ts";
import { startRelay, type Relay } from "../components/relay/relay.ts";
import type { SourceConfig } from "../components/relay/config.ts";
import { hubCredentialsFromAgentSecrets } from "../components/relay/config.ts";
import { clientsFromKubeconfigs } from "../shared/kube/clients.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { applyManifests } from "../shared/apply.ts";
import { jsonLog, type FunctionSpec } from "../shared/harness.ts";
import { microTime, systemClock } from "../shared/clock.ts";
import { findCondition, isTrue } from "../shared/conditions.ts";
import { CertificateSigningRequestResource, LeaseResource, NamespaceResource, SecretResource } from "../shared/api/kube.ts";
import { ClusterLabel, ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { AgentNamespaceDefault } from "../shared/api/registration.ts";
import { AddOnConditionType, AddOnLabel, AddOnTemplateResource, ClusterManagementAddOnV1alpha1Resource, DefaultAddOnInstallNamespace, ManagedClusterAddOnV1alpha1Resource, type ManagedClusterAddOnV1alpha1 } from "../shared/api/addon.ts";
import { hubKubeconfigSecretName } from "../shared/api/addon-strings.ts";
import { ManifestWorkResource } from "../shared/api/work.ts";
import { bootstrappedHubClient } from "../shared/hub-credentials.ts";
import { enableAddon } from "../cli/addon.ts";
import addonManager from "../functions/addon-manager/reconcile.ts";
import addonCsrApprover from "../functions/addon-csr-approver/reconcile.ts";
import workApplier from "../functions/work-applier/reconcile.ts";
import addonRegistration from "../functions/addon-registration/reconcile.ts";
import addonHealth from "../functions/addon-health/reconcile.ts";
import { percentile, ms } from "./stats.ts";

const C = "bench";
const HELLO = "helloworld";
const NS = DefaultAddOnInstallNamespace;
const ROUNDS = Number(process.env.BENCH_ADDON_ROUNDS ?? 10);
const AGENT_SA = "helloworld-agent-sa"; // the template's ServiceAccount
const RENEW_MS = 10_000; // addon-framework renews every 60 s; sooner here, the bench is short

type Milestones = { registered: number; secret: number; lease: number; available: number };

export const addon = {
  name: "addon",
  async run(): Promise<Record<string, string | number>> {
    const fleet = await startFleet({ spokes: [{ name: C, autoApprove: true }], resyncMs: 60_000 });
    const spokeAdmin = KubeClient.fromKubeconfig(fleet.clusters.get(C).adminKubeconfig);
    const wiring = { servers: [] as FunctionServer[], relays: [] as Relay[], served: [] as string[] };
    const rounds: Milestones[] = [];
    try {
      await joined(fleet);
      await serveMissingFunctions(fleet, wiring);
      await applyManifests(fleet.hub, readFileSync(join(import.meta.dirname, "..", "manifests", "addons", "helloworld.yaml"), "utf8"));
      for (let i = 0; i < ROUNDS; i++) {
        rounds.push(await enableToAvailable(fleet, spokeAdmin));
        await disable(fleet, spokeAdmin);
      }
    } finally {
      await Promise.all(wiring.relays.map((r) => r.stop()));
      await Promise.all(wiring.servers.map((s) => s.close()));
      spokeAdmin.close();
      await fleet.stop();
    }
    // The first round also creates the install namespace; later ones find it left behind (orphaned).
    const warm = rounds.slice(1);
    const p50 = (pick: (m: Milestones) => number) => ms(percentile(warm.map(pick), 50));
    return {
      "functions served by the bench (not the fleet)": wiring.served.join(", ") || "none",
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

async function until<T>(read: () => Promise<T | undefined>, what: string, timeoutMs = 60_000): Promise<T> {
  const t0 = performance.now();
  for (;;) {
    const v = await read();
    if (v !== undefined) return v;
    if (performance.now() - t0 > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

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
    }, `${C} joined`);
  } finally {
    spoke.close();
  }
}

// Each function under its own identity; the fleet's own instance wins where it has one.
async function serveMissingFunctions(fleet: Fleet, wiring: { servers: FunctionServer[]; relays: Relay[]; served: string[] }): Promise<void> {
  const hubCluster = fleet.clusters.get("hub");
  const spokeCluster = fleet.clusters.get(C);
  const serve = async <Cfg>(cluster: string, spec: FunctionSpec<Cfg>, kubeconfigs: Record<string, string>, config: Cfg) => {
    const name = `${cluster}/${spec.name}`;
    if (fleet.functions.has(name)) return [];
    const server = await startFunction(spec, { clock: systemClock, config, log: jsonLog(spec.name, "quiet"), cluster: clientsFromKubeconfigs(kubeconfigs) });
    wiring.servers.push(server);
    wiring.served.push(name);
    return [{ name, url: server.url }];
  };
  const relay = (clusters: Record<string, { kubeconfig: string } | ReturnType<typeof hubCredentialsFromAgentSecrets>>, sources: SourceConfig[], sinks: { name: string; url: string }[]) => {
    if (!sinks.length) return;
    const r = startRelay({ clusters, sources, sinks, resync: { intervalMs: 60_000 }, log: jsonLog("relay-bench", "quiet") });
    wiring.relays.push(r);
    return r.ready;
  };
  const resource = (cluster: string, r: SourceConfig["resource"], o: Partial<SourceConfig> = {}): SourceConfig => ({ cluster, resource: r, mode: "Resource", ...o });

  // The hub's add-on functions.
  const hubSinks = [
    ...(await serve("hub", addonManager.spec, { hub: await identityFor(hubCluster, addonManager.spec.name) }, addonManager.definition.config.parse({ hubCluster: "hub" }))),
    ...(await serve("hub", addonCsrApprover.spec, { hub: await identityFor(hubCluster, addonCsrApprover.spec.name) }, addonCsrApprover.definition.config.parse({ hubCluster: "hub" }))),
  ];
  await relay(
    { hub: { kubeconfig: hubCluster.adminKubeconfig } },
    [
      resource("hub", ManagedClusterAddOnV1alpha1Resource),
      resource("hub", ClusterManagementAddOnV1alpha1Resource),
      resource("hub", AddOnTemplateResource),
      resource("hub", ManifestWorkResource),
      resource("hub", CertificateSigningRequestResource, { labelSelector: AddOnLabel.AddonName }),
    ],
    hubSinks,
  );

  // The spoke's: the work agent and the add-on agent's two functions.
  const common = { managementCluster: C, clusterName: C };
  const spokeSinks = [
    ...(await serve(C, workApplier.spec, { [C]: await identityFor(spokeCluster, workApplier.spec.name) }, workApplier.definition.config.parse(common))),
    ...(await serve(C, addonRegistration.spec, { [C]: await identityFor(spokeCluster, addonRegistration.spec.name) }, addonRegistration.definition.config.parse(common))),
    ...(await serve(C, addonHealth.spec, { [C]: await identityFor(spokeCluster, addonHealth.spec.name) }, addonHealth.definition.config.parse(common))),
  ];
  await relay(
    { [C]: { kubeconfig: spokeCluster.adminKubeconfig }, hub: hubCredentialsFromAgentSecrets(C, AgentNamespaceDefault) },
    [
      resource("hub", ManagedClusterAddOnV1alpha1Resource, { namespace: C }),
      resource("hub", CertificateSigningRequestResource, { labelSelector: `${ClusterLabel.ClusterName}=${C}` }),
      resource("hub", ManifestWorkResource, { namespace: C }),
      resource(C, NamespaceResource, { mode: "Reference" }),
      resource(C, LeaseResource),
    ],
    spokeSinks,
  );
}

const readAddon = (fleet: Fleet) => fleet.hub.get<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, HELLO, C);

async function enableToAvailable(fleet: Fleet, spoke: KubeClient): Promise<Milestones> {
  const t0 = performance.now();
  const since = () => performance.now() - t0;
  await enableAddon(fleet.hub, { addon: HELLO, clusters: [C] });
  const registered = await until(async () => ((await readAddon(fleet))?.status?.registrations?.length ? since() : undefined), "registrations");
  const secret = await until(async () => ((await spoke.get(SecretResource, hubKubeconfigSecretName(HELLO), NS)) ? since() : undefined), "hub kubeconfig secret");
  const agent = await standInAgent(fleet);
  try {
    const lease = since();
    const available = await until(async () => (findCondition((await readAddon(fleet))?.status?.conditions, AddOnConditionType.Available)?.status === "True" ? since() : undefined), "Available=True");
    return { registered, secret, lease, available };
  } finally {
    agent.stop();
  }
}

// The helloworld agent's one visible duty here: its lease, created and renewed as its ServiceAccount
// (the Role the add-on's work applied grants it leases in the install namespace).
async function standInAgent(fleet: Fleet): Promise<{ stop(): void }> {
  const client = KubeClient.fromKubeconfig(await fleet.clusters.get(C).kubeconfigFor({ user: `system:serviceaccount:${NS}:${AGENT_SA}` }));
  const renew = async () => {
    const lease = await client.get<KubeObject & { spec?: object }>(LeaseResource, HELLO, NS);
    const spec = { holderIdentity: HELLO, leaseDurationSeconds: 60, renewTime: microTime(new Date()) };
    if (lease) await client.update(LeaseResource, { ...lease, spec: { ...lease.spec, ...spec } });
    else await client.create(LeaseResource, { metadata: { name: HELLO, namespace: NS }, spec });
  };
  // the work agent may still be applying the Role that lets it
  await until(() => renew().then(() => true, () => undefined), "the agent's first lease renewal");
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
  await until(async () => ((await readAddon(fleet)) ? undefined : true), "add-on deleted");
  await until(async () => ((await fleet.hub.list(ManifestWorkResource, { namespace: C })).items.length ? undefined : true), "works deleted");
  await until(async () => ((await spoke.get(SecretResource, hubKubeconfigSecretName(HELLO), NS)) ? undefined : true), "secret removed");
}
