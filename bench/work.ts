// Work delivery latency: a ManifestWork of 50 manifests (namespace, RBAC, service, deployments,
// config maps, secrets) from its creation on the hub to Applied=True there, delivered as production
// delivers it (a relay watching the hub with the cluster's credentials, the work-applier behind the
// CloudEvents server its bundle runs); and the reconcile alone, for a fresh work and for a run with nothing to do.
import { startFleet } from "../dev/local/fleet.ts";
import { startFunction } from "../dev/local/functions.ts";
import { identityFor } from "../dev/control-plane/identities.ts";
import { startRelay } from "../components/relay/relay.ts";
import { hubCredentialsFromAgentSecrets } from "../components/relay/config.ts";
import { clientsFromKubeconfigs } from "../shared/kube/clients.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { jsonLog, reconcileKey, type Io } from "../shared/harness.ts";
import { systemClock } from "../shared/clock.ts";
import { isTrue } from "../shared/conditions.ts";
import { ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { AgentNamespaceDefault } from "../shared/api/registration.ts";
import { ManifestWorkResource, type ManifestWork } from "../shared/api/work.ts";
import { bootstrappedHubClient } from "../shared/hub-credentials.ts";
import fn, { type Config } from "../functions/work-applier/reconcile.ts";
import { percentile, ms } from "./stats.ts";

const CLUSTER = "bench";
const DELIVERED = 10; // works through the relay
const DIRECT = 5; // works reconciled directly

function manifests(ns: string): object[] {
  const m: object[] = [
    { apiVersion: "v1", kind: "Namespace", metadata: { name: ns } },
    { apiVersion: "v1", kind: "ServiceAccount", metadata: { name: "app", namespace: ns } },
    { apiVersion: "rbac.authorization.k8s.io/v1", kind: "Role", metadata: { name: "app", namespace: ns }, rules: [{ apiGroups: [""], resources: ["configmaps"], verbs: ["get"] }] },
    { apiVersion: "rbac.authorization.k8s.io/v1", kind: "RoleBinding", metadata: { name: "app", namespace: ns }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "app" }, subjects: [{ kind: "ServiceAccount", name: "app", namespace: ns }] },
    { apiVersion: "v1", kind: "Service", metadata: { name: "app", namespace: ns }, spec: { selector: { app: "app" }, ports: [{ port: 80 }] } },
  ];
  for (let i = 0; i < 5; i++) {
    m.push({
      apiVersion: "apps/v1",
      kind: "Deployment",
      metadata: { name: `app-${i}`, namespace: ns },
      spec: { replicas: 1, selector: { matchLabels: { app: `app-${i}` } }, template: { metadata: { labels: { app: `app-${i}` } }, spec: { containers: [{ name: "main", image: "nginx:1.27" }] } } },
    });
  }
  for (let i = 0; i < 20; i++) m.push({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: `config-${i}`, namespace: ns }, data: { key: `value-${i}` } });
  for (let i = 0; i < 20; i++) m.push({ apiVersion: "v1", kind: "Secret", metadata: { name: `secret-${i}`, namespace: ns }, stringData: { key: `value-${i}` } });
  return m.reverse(); // the namespace last: the agent's kind order has to put it first
}

export const work = {
  name: "work",
  async run(): Promise<Record<string, string | number>> {
    const fleet = await startFleet({ spokes: [{ name: CLUSTER, autoApprove: true }], resyncMs: 600_000 });
    const spokeCluster = fleet.clusters.get(CLUSTER);
    const config = fn.definition.config.parse({ managementCluster: CLUSTER, clusterName: CLUSTER });
    const io: Io<Config> = { clock: systemClock, config, log: jsonLog(fn.spec.name, "quiet"), cluster: clientsFromKubeconfigs({ [CLUSTER]: await identityFor(spokeCluster, fn.spec.name) }) };
    const delivered: number[] = [];
    const direct: number[] = [];
    const idle: number[] = [];
    const server = await startFunction(fn.spec, io);
    let relay: ReturnType<typeof startRelay> | undefined;
    try {
      await joinedWithWorkAccess(fleet.hub, io);
      relay = startRelay({
        clusters: { [CLUSTER]: { kubeconfig: await identityFor(spokeCluster, "relay-spoke") }, hub: hubCredentialsFromAgentSecrets(CLUSTER, AgentNamespaceDefault) },
        sources: [{ cluster: "hub", resource: ManifestWorkResource, namespace: CLUSTER, mode: "Resource" }],
        sinks: [{ name: `${CLUSTER}/${fn.spec.name}`, url: server.url }],
        resync: { intervalMs: 0 },
        log: jsonLog("relay", "quiet"),
      });
      await relay.ready;

      for (let i = 0; i < DELIVERED; i++) {
        const name = `delivered-${i}`;
        const t0 = performance.now();
        await createWork(fleet.hub, name, manifests(`bench-delivered-${i}`));
        await appliedOnHub(fleet.hub, name, t0);
        delivered.push(performance.now() - t0);
      }

      // The same, with the function called directly: the reconcile's own share. The relay is let go
      // quiet first: a delivery cut off by stop() holds the function server's connection open for a
      // minute, and close() waits for it.
      await untilQuiet(relay);
      await relay.stop();
      relay = undefined;
      for (let i = 0; i < DIRECT; i++) {
        const name = `direct-${i}`;
        await createWork(fleet.hub, name, manifests(`bench-direct-${i}`));
        const t0 = performance.now();
        await reconcileKey(fn.spec, io, { cluster: "hub", namespace: CLUSTER, name });
        direct.push(performance.now() - t0);
        const t1 = performance.now();
        await reconcileKey(fn.spec, io, { cluster: "hub", namespace: CLUSTER, name });
        idle.push(performance.now() - t1);
      }
    } finally {
      await relay?.stop();
      await server.close();
      await fleet.stop();
    }
    return {
      "manifests per work": manifests("x").length,
      "created → Applied via relay p50": ms(percentile(delivered, 50)),
      "created → Applied via relay p95": ms(percentile(delivered, 95)),
      "created → Applied via relay min": ms(Math.min(...delivered)),
      "created → Applied via relay max": ms(Math.max(...delivered)),
      "reconcile, fresh work p50": ms(percentile(direct, 50)),
      "reconcile, nothing to do p50": ms(percentile(idle, 50)),
    };
  },
};

async function untilQuiet(relay: ReturnType<typeof startRelay>): Promise<void> {
  const deadline = performance.now() + 60_000;
  while (relay.status().sinks.some((s) => s.pending > 0 || s.inFlight > 0) && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20));
}

async function createWork(hub: KubeClient, name: string, m: object[]): Promise<void> {
  await hub.create<ManifestWork & KubeObject>(ManifestWorkResource, { metadata: { name, namespace: CLUSTER }, spec: { workload: { manifests: m as Record<string, unknown>[] } } });
}

async function appliedOnHub(hub: KubeClient, name: string, t0: number): Promise<void> {
  for (;;) {
    const w = await hub.get<ManifestWork & KubeObject>(ManifestWorkResource, name, CLUSTER);
    if (isTrue(w?.status?.conditions, "Applied")) return;
    if (performance.now() - t0 > 60_000) throw new Error(`${name} not Applied within 60 s: ${JSON.stringify(w?.status?.conditions)}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

// Joined, and the cluster's identity may read its works (granted at acceptance).
async function joinedWithWorkAccess(hub: KubeClient, io: Io<Config>): Promise<void> {
  const deadline = performance.now() + 60_000;
  for (;;) {
    const mc = await hub.get<ManagedCluster & KubeObject>(ManagedClusterResource, CLUSTER);
    if (isTrue(mc?.status?.conditions, "ManagedClusterJoined")) {
      const got = await bootstrappedHubClient(io.cluster(CLUSTER), io.config, new Date());
      if ("hub" in got) {
        const ok = await got.hub.list(ManifestWorkResource, { namespace: CLUSTER }).then(() => true, () => false);
        if (ok) return;
      }
    }
    if (performance.now() > deadline) throw new Error(`${CLUSTER} did not join within 60 s`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
