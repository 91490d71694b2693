// Local mode: a hub and spokes on real control planes, every function as a faas-js-runtime server under
// its own identity, and the relays that feed them: one on the hub, one per spoke (as production runs a
// ContainerSource on each cluster). Used by `npm start`, the end-to-end tests and the benchmarks.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { startClusters, type LocalClusters } from "../control-plane/clusters.ts";
import { identityFor } from "../control-plane/identities.ts";
import { KubeClient } from "../kube/client.ts";
import { clientsFromKubeconfigs } from "../kube/clients.ts";
import { applyManifests } from "../apply.ts";
import { jsonLog, type FunctionSpec, type Io } from "../harness.ts";
import { systemClock, type Clock } from "../clock.ts";
import { SecretResource, CertificateSigningRequestResource, NamespaceResource } from "../api/kube.ts";
import { ManagedClusterResource, ClusterLabel } from "../api/cluster.ts";
import { AgentNamespaceDefault, BootstrapSecretName } from "../api/registration.ts";
import { startRelay, type Relay, type RelayOptions } from "../relay/relay.ts";
import { hubCredentialsFromAgentSecrets } from "../relay/config.ts";
import { startFunction, type FunctionServer } from "./functions.ts";
import * as csrApprover from "../../functions/csr-approver/reconcile.ts";
import * as clusterAcceptor from "../../functions/cluster-acceptor/reconcile.ts";
import * as spokeRegistration from "../../functions/spoke-registration/reconcile.ts";
import * as spokeClusterStatus from "../../functions/spoke-cluster-status/reconcile.ts";

const manifests = join(import.meta.dirname, "..", "..", "manifests");

// name: the ManagedCluster's name; controlPlane: the local cluster it runs on (default: the same name).
export type SpokeOptions = { name: string; autoApprove: boolean; controlPlane?: string };
export type FleetOptions = {
  spokes: readonly SpokeOptions[];
  resyncMs?: number; // relay ticks; functions also ask to be called back through x-recheck-after-ms
  record?: (relay: string) => string | undefined; // a JSON-lines file per relay, when recording
  log?: (line: string) => void; // function and relay logs; default: nowhere
  clock?: Clock;
  clusters?: LocalClusters; // reuse running control planes (benchmarks start many fleets)
  relays?: boolean; // false: start none (a replay test delivers the events itself)
};

export type Fleet = {
  clusters: LocalClusters;
  hub: KubeClient; // admin
  relays: Map<string, Relay>; // "hub" and each spoke's name
  functions: Map<string, string>; // "<cluster>/<function>" (also the relay's sink name) → URL
  startRelay(name: string): Promise<void>;
  stopRelay(name: string): Promise<void>;
  stop(): Promise<void>;
};

export async function startFleet(o: FleetOptions): Promise<Fleet> {
  const planeOf = (s: SpokeOptions) => s.controlPlane ?? s.name;
  const clusters = o.clusters ?? (await startClusters({ names: ["hub", ...new Set(o.spokes.map(planeOf))] }));
  const hubCluster = clusters.get("hub");
  const hub = KubeClient.fromKubeconfig(hubCluster.adminKubeconfig);
  const clock = o.clock ?? systemClock;
  const log = (name: string) => jsonLog(name, o.log ? (line) => o.log!(line) : "quiet");
  const servers: FunctionServer[] = [];
  const functions = new Map<string, string>();
  const relayOptions = new Map<string, RelayOptions>();
  const relays = new Map<string, Relay>();
  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      await Promise.all([...relays.values()].map((r) => r.stop()));
      await Promise.all(servers.map((s) => s.close()));
      hub.close();
      if (!o.clusters) await clusters.stop();
    })());

  // Returns the relay sink for it: named "<cluster>/<function>", no filter (functions skip what is not theirs).
  async function serveFunction<C>(cluster: string, spec: FunctionSpec<C>, kubeconfigs: Record<string, string>, config: C) {
    const io: Io<C> = { clock, config, log: log(spec.name), cluster: clientsFromKubeconfigs(kubeconfigs) };
    const server = await startFunction(spec, io, stop);
    servers.push(server);
    const name = `${cluster}/${spec.name}`;
    functions.set(name, server.url);
    return { name, url: server.url };
  }

  await applyManifests(hub, readFileSync(join(manifests, "hub", "bootstrap-rbac.yaml"), "utf8"));
  const tokens = new Map<string, Awaited<ReturnType<typeof hubCluster.createBootstrapToken>>>();
  for (const s of o.spokes) tokens.set(s.name, await hubCluster.createBootstrapToken(["system:bootstrappers:managedcluster"]));
  const autoApprovalUsers = o.spokes.filter((s) => s.autoApprove).map((s) => tokens.get(s.name)!.user);

  // Hub: the acceptor and the CSR approver, fed by the hub relay.
  const hubSinks = await Promise.all([
    serveFunction("hub", clusterAcceptor.spec, { hub: await identityFor(hubCluster, "cluster-acceptor") }, clusterAcceptor.ConfigSchema.parse({ hubCluster: "hub", autoApprovalUsers })),
    serveFunction("hub", csrApprover.spec, { hub: await identityFor(hubCluster, "csr-approver") }, csrApprover.ConfigSchema.parse({ hubCluster: "hub", autoApprovalUsers })),
  ]);
  relayOptions.set("hub", {
    clusters: { hub: { kubeconfig: await identityFor(hubCluster, "relay-hub") } },
    sources: [
      { cluster: "hub", resource: ManagedClusterResource, mode: "Resource" },
      { cluster: "hub", resource: CertificateSigningRequestResource, mode: "Resource" },
    ],
    sinks: hubSinks,
    resync: { intervalMs: o.resyncMs ?? 10_000 },
    record: o.record?.("hub"),
  });

  // Each spoke: its bootstrap secret, its registration and status functions, and its own relay that
  // watches the hub with the spoke's credentials (bootstrap first, then the issued certificate).
  for (const s of o.spokes) {
    const plane = planeOf(s);
    const spoke = clusters.get(plane);
    const admin = KubeClient.fromKubeconfig(spoke.adminKubeconfig);
    await admin.create(NamespaceResource, { metadata: { name: AgentNamespaceDefault } }).catch(() => undefined);
    await admin.create(SecretResource, {
      metadata: { name: BootstrapSecretName, namespace: AgentNamespaceDefault },
      data: { kubeconfig: Buffer.from(tokens.get(s.name)!.kubeconfig).toString("base64") },
    });
    admin.close();
    const common = { managementCluster: plane, clusterName: s.name };
    const sinks = await Promise.all([
      serveFunction(s.name, spokeRegistration.spec, { [plane]: await identityFor(spoke, "spoke-registration") }, spokeRegistration.ConfigSchema.parse({ ...common, externalServerUrls: [spoke.url] })),
      serveFunction(s.name, spokeClusterStatus.spec, { [plane]: await identityFor(spoke, "spoke-cluster-status") }, spokeClusterStatus.ConfigSchema.parse(common)),
    ]);
    relayOptions.set(s.name, {
      clusters: { [plane]: { kubeconfig: await identityFor(spoke, "relay-spoke") }, hub: hubCredentialsFromAgentSecrets(plane, AgentNamespaceDefault) },
      sources: [
        // Reference mode: a secret's data never travels in an event (nor into a recording).
        { cluster: plane, resource: SecretResource, namespace: AgentNamespaceDefault, mode: "Reference" },
        { cluster: "hub", resource: CertificateSigningRequestResource, labelSelector: `${ClusterLabel.ClusterName}=${s.name}`, mode: "Resource" },
        { cluster: "hub", resource: ManagedClusterResource, fieldSelector: `metadata.name=${s.name}`, mode: "Resource" },
      ],
      sinks,
      resync: { intervalMs: o.resyncMs ?? 10_000 },
      record: o.record?.(s.name),
    });
  }

  const startOne = async (name: string) => {
    if (relays.has(name)) return;
    const options = relayOptions.get(name);
    if (!options) throw new Error(`no relay named ${name}`);
    relays.set(name, startRelay({ ...options, clock, log: log(`relay-${name}`) }));
  };
  if (o.relays !== false) for (const name of relayOptions.keys()) await startOne(name);

  return {
    clusters,
    hub,
    relays,
    functions,
    startRelay: startOne,
    async stopRelay(name) {
      await relays.get(name)?.stop();
      relays.delete(name);
    },
    stop,
  };
}
