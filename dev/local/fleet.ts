// Local mode: a hub and spokes on real control planes, every function behind our CloudEvents server (shared/cloudevents-server.ts) under
// its own identity, the relays that feed them (one on the hub, one per spoke, as production runs a
// ContainerSource on each cluster), and each spoke's heartbeat sidecar. Used by `npm start`, the
// end-to-end tests and the benchmarks.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { startClusters, type LocalClusters } from "../control-plane/clusters.ts";
import { identityFor } from "../control-plane/identities.ts";
import { KubeClient } from "../../shared/kube/client.ts";
import { clientsFromKubeconfigs } from "../../shared/kube/clients.ts";
import { applyManifests } from "../../shared/apply.ts";
import { jsonLog, type FunctionSpec, type Io } from "../../shared/harness.ts";
import { systemClock, type Clock } from "../../shared/clock.ts";
import { SecretResource, NamespaceResource } from "../../shared/api/kube.ts";
import { AgentNamespaceDefault, BootstrapSecretName, HubKubeconfigSecretName } from "../../shared/api/registration.ts";
import { startRelay, type Relay, type RelayOptions } from "../../components/relay/relay.ts";
import { agentSettingsCheckpoint, hubCredentialsFromAgentSecrets } from "../../components/relay/config.ts";
import { startHeartbeat, type Heartbeat } from "../../components/relay/heartbeat/sidecar.ts";
import { readFunctions, type FunctionDeployment } from "../../cli/render/func-yaml.ts";
import { multipleHubSecretName } from "../../cli/render/spoke.ts";
import { definitionOf } from "../../cli/render/definitions.ts";
import { functionEnv } from "../../cli/render/objects.ts";
import { startFunction, type FunctionServer } from "./functions.ts";
import { mergeWatches } from "../../cli/render/sources.ts";
import type { StateWatch, Watch } from "../../shared/sdk.ts";
import { createNodes } from "./nodes.ts";
import { startHelloworldAgent } from "./helloworld-agent.ts";
const manifests = join(import.meta.dirname, "..", "..", "manifests");

// name: the ManagedCluster's name; controlPlane: the local cluster it runs on (default: the same name).
// moreHubs: bootstrap kubeconfigs of other hubs, tried after this fleet's own (OCM's MultipleHubs), with
// hubConnectionTimeoutSeconds (functions/spoke-registration/hubs.ts). managedPlane: Hosted mode, the
// control plane the agent reports on and applies work to, reached with that plane's admin kubeconfig
// (OCM's external-managed-kubeconfig); controlPlane is then the management cluster, where all of the
// agent runs and nothing of it is put on the managed one.
export type SpokeOptions = { name: string; autoApprove: boolean; controlPlane?: string; managedPlane?: string; moreHubs?: readonly string[]; hubConnectionTimeoutSeconds?: number };
export type FleetOptions = {
  spokes: readonly SpokeOptions[];
  resyncMs?: number; // relay ticks; functions also ask to be called back through x-recheck-after-ms
  leaseDurationSeconds?: number; // of the ManagedClusters the spokes create (OCM's default 60)
  leaseGraceMultiplier?: number; // the hub lease monitor's grace, in lease durations (OCM's 5)
  heartbeats?: boolean; // run each spoke's heartbeat sidecar (default true)
  nodes?: boolean; // create Node objects with capacity on each spoke, since no kubelet runs (default true)
  addonAgents?: boolean; // run the example add-on's agent per spoke, since no kubelet runs its Deployment
  record?: (relay: string) => string | undefined; // a JSON-lines file per relay, when recording
  log?: (line: string) => void; // function and relay logs; default: nowhere
  clock?: Clock;
  clusters?: LocalClusters; // reuse running control planes (benchmarks start many fleets)
  relays?: boolean; // false: start none (a replay test delivers the events itself)
  autoApprovalUsers?: readonly string[]; // more for the hub's list, e.g. a simulator's bootstrap user
};

export type Fleet = {
  clusters: LocalClusters;
  hub: KubeClient; // admin
  relays: Map<string, Relay>; // "hub" and each spoke's name
  functions: Map<string, string>; // "<cluster>/<function>" (also the relay's sink name) → URL
  heartbeats: Map<string, Heartbeat>; // per spoke
  startRelay(name: string): Promise<void>;
  stopRelay(name: string): Promise<void>;
  startHeartbeat(spoke: string): Promise<void>;
  stopHeartbeat(spoke: string): Promise<void>;
  stop(): Promise<void>;
};

export async function startFleet(o: FleetOptions): Promise<Fleet> {
  const planeOf = (s: SpokeOptions) => s.controlPlane ?? s.name;
  const clusters = o.clusters ?? (await startClusters({ names: ["hub", ...new Set(o.spokes.flatMap((s) => [planeOf(s), ...(s.managedPlane ? [s.managedPlane] : [])]))] }));
  const hubCluster = clusters.get("hub");
  const hub = KubeClient.fromKubeconfig(hubCluster.adminKubeconfig);
  const clock = o.clock ?? systemClock;
  const log = (name: string) => jsonLog(name, o.log ? (line) => o.log!(line) : "quiet");
  const servers: FunctionServer[] = [];
  const functions = new Map<string, string>();
  const relayOptions = new Map<string, RelayOptions>();
  const relays = new Map<string, Relay>();
  const heartbeatStarters = new Map<string, () => Promise<Heartbeat>>();
  const heartbeats = new Map<string, Heartbeat>();
  const clients: KubeClient[] = [hub];
  const agents: { stop(): Promise<void> }[] = [];
  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      await Promise.all([...heartbeats.values(), ...agents].map((h) => h.stop()));
      await Promise.all([...relays.values()].map((r) => r.stop()));
      await Promise.all(servers.map((s) => s.close()));
      for (const c of clients) c.close();
      if (!o.clusters) await clusters.stop();
    })());

  const subscriptions = new Map(readFunctions().map((f) => [f.name, f.deploy.subscriptions.map((s) => s.filters)]));
  // Returns the relay sink for it: named "<cluster>/<function>", filtered by its func.yaml subscriptions
  // as Knative's Triggers filter what a Broker delivers.
  // The sink hands the function the observed state its watches ask for (shared/observed.ts).
  async function serveFunction<C>(cluster: string, spec: FunctionSpec<C>, kubeconfigs: Record<string, string>, config: C, state: { watches: StateWatch[] }) {
    const io: Io<C> = { clock, config, log: log(spec.name), cluster: clientsFromKubeconfigs(kubeconfigs) };
    const server = await startFunction(spec, io, stop);
    servers.push(server);
    const name = `${cluster}/${spec.name}`;
    functions.set(name, server.url);
    const filters = subscriptions.get(spec.name);
    if (!filters) throw new Error(`no functions/${spec.name}/func.yaml`);
    return { name, url: server.url, filters, state };
  }
  // Every function of a side, with its settings as a deployment reads them: func.yaml's env, with
  // what this fleet sets in place of its placeholders and defaults.
  const deployments = readFunctions();
  const functionsOf = (side: FunctionDeployment["side"], values: Record<string, string>) =>
    deployments
      .filter((f) => f.side === side)
      .map((f) => {
        const fn = definitionOf(f.name);
        const env = Object.fromEntries(functionEnv(f, values).map((e) => [e.name, e.value]));
        const config = fn.configFromEnv({ ...env, ...values });
        return {
          name: f.name,
          serve: (cluster: string, kubeconfigs: Record<string, string>) => serveFunction(cluster, fn.spec, kubeconfigs, config, fn.state(config)),
          watches: fn.definition.watches(config) as readonly Watch<unknown>[],
        };
      });
  const relayTiming = { resync: { intervalMs: o.resyncMs ?? 10_000 } };

  await applyManifests(hub, readFileSync(join(manifests, "hub", "bootstrap-rbac.yaml"), "utf8"));
  const tokens = new Map<string, Awaited<ReturnType<typeof hubCluster.createBootstrapToken>>>();
  for (const s of o.spokes) tokens.set(s.name, await hubCluster.createBootstrapToken(["system:bootstrappers:managedcluster"]));
  // Each auto-approved spoke's token may register that cluster's name and no other.
  const autoApprovalUsers = [...(o.autoApprovalUsers ?? []), ...o.spokes.filter((s) => s.autoApprove).map((s) => `${tokens.get(s.name)!.user}=${s.name}`)];

  // Hub: registration, health and add-on functions, fed by the hub relay.
  const asHub = async (fn: string) => ({ hub: await identityFor(hubCluster, fn) });
  const hubFunctions = functionsOf("hub", {
    OCM_CLUSTER_NAME: "hub",
    OCM_CLUSTER_AUTO_APPROVAL_USERS: autoApprovalUsers.join(","),
    ...(o.leaseGraceMultiplier === undefined ? {} : { OCM_LEASE_GRACE_MULTIPLIER: String(o.leaseGraceMultiplier) }),
    OCM_KUBECONFIG_DIR: "",
  });
  const hubSinks = await Promise.all(hubFunctions.map(async (f) => f.serve("hub", await asHub(f.name))));
  // The relay watches what the definitions watch (cli/render/sources.ts), as the deployed sources do.
  relayOptions.set("hub", {
    clusters: { hub: { kubeconfig: await identityFor(hubCluster, "relay-hub") } },
    sources: mergeWatches(hubFunctions.flatMap((f) => f.watches)),
    sinks: hubSinks,
    ...relayTiming,
    record: o.record?.("hub"),
  });

  // Each spoke: its bootstrap secret, its functions, its own relay that watches the hub with the spoke's
  // credentials (bootstrap first, then the issued certificate), and its heartbeat sidecar.
  for (const s of o.spokes) {
    const plane = planeOf(s);
    const spoke = clusters.get(plane);
    const admin = KubeClient.fromKubeconfig(spoke.adminKubeconfig);
    await admin.create(NamespaceResource, { metadata: { name: AgentNamespaceDefault } }).catch(() => undefined);
    // One hub: its bootstrap kubeconfig. Several: one Secret each, in order, this fleet's hub first.
    const kubeconfigs = [tokens.get(s.name)!.kubeconfig, ...(s.moreHubs ?? [])];
    const secretNames = s.moreHubs?.length ? kubeconfigs.map((_, i) => multipleHubSecretName(i)) : [BootstrapSecretName];
    for (const [i, name] of secretNames.entries()) {
      await admin.create(SecretResource, { metadata: { name, namespace: AgentNamespaceDefault }, data: { kubeconfig: Buffer.from(kubeconfigs[i]!).toString("base64") } });
    }
    const managed = s.managedPlane ? clusters.get(s.managedPlane) : undefined;
    if (o.nodes !== false) {
      const onManaged = managed ? KubeClient.fromKubeconfig(managed.adminKubeconfig) : admin;
      await createNodes(onManaged);
      if (onManaged !== admin) onManaged.close();
    }
    admin.close();
    const managedCredentials = managed ? { [managed.name]: managed.adminKubeconfig } : {};
    const asSpoke = async (fn: string) => ({ [plane]: await identityFor(spoke, fn), ...managedCredentials });
    const spokeFunctions = functionsOf("spoke", {
      OCM_CLUSTER_NAME: plane,
      OCM_HUB_CLUSTER_NAME: "hub",
      ...(managed ? { OCM_MANAGED_CLUSTER_NAME: managed.name } : {}),
      SPOKE_CLUSTER_NAME: s.name,
      SPOKE_EXTERNAL_SERVER_URLS: (managed ?? spoke).url,
      ...(o.leaseDurationSeconds === undefined ? {} : { CLUSTER_LEASE_DURATION_SECONDS: String(o.leaseDurationSeconds) }),
      ...(s.moreHubs?.length ? { BOOTSTRAP_KUBECONFIG_SECRETS: secretNames.join(",") } : {}),
      ...(s.hubConnectionTimeoutSeconds === undefined ? {} : { HUB_CONNECTION_TIMEOUT_SECONDS: String(s.hubConnectionTimeoutSeconds) }),
      OCM_KUBECONFIG_DIR: "",
    });
    const sinks = await Promise.all(spokeFunctions.map(async (f) => f.serve(s.name, await asSpoke(f.name))));
    relayOptions.set(s.name, {
      clusters: {
        [plane]: { kubeconfig: await identityFor(spoke, "relay-spoke") },
        hub: hubCredentialsFromAgentSecrets(plane, AgentNamespaceDefault),
        ...(managed ? { [managed.name]: { kubeconfig: managed.adminKubeconfig } } : {}),
      },
      // the definitions' watches, merged as the spoke's deployed relay merges them
      sources: mergeWatches(spokeFunctions.flatMap((f) => f.watches)),
      sinks,
      ...relayTiming,
      record: o.record?.(s.name),
      agentSettings: agentSettingsCheckpoint(plane, AgentNamespaceDefault), // its resync follows relayResyncSeconds
    });
    if (o.heartbeats !== false) {
      const sidecarClient = KubeClient.fromKubeconfig(await identityFor(spoke, "heartbeat"));
      clients.push(sidecarClient);
      const secrets = { agentNamespace: AgentNamespaceDefault, bootstrapSecret: BootstrapSecretName, hubSecret: HubKubeconfigSecretName, clusterName: s.name };
      heartbeatStarters.set(s.name, () => startHeartbeat({ spoke: sidecarClient, secrets, log: log(`heartbeat-${s.name}`), clock }));
    }
  }

  const startOne = async (name: string) => {
    if (relays.has(name)) return;
    const options = relayOptions.get(name);
    if (!options) throw new Error(`no relay named ${name}`);
    relays.set(name, startRelay({ ...options, clock, log: log(`relay-${name}`) }));
  };
  if (o.relays !== false) for (const name of relayOptions.keys()) await startOne(name);
  const startSidecar = async (spoke: string) => {
    const start = heartbeatStarters.get(spoke);
    if (!start) throw new Error(`no heartbeat sidecar for ${spoke}`);
    if (!heartbeats.has(spoke)) heartbeats.set(spoke, await start());
  };
  for (const spoke of heartbeatStarters.keys()) await startSidecar(spoke);
  if (o.addonAgents) {
    // on the cluster the add-on's Deployment would run on: the managed one
    for (const s of o.spokes) agents.push(await startHelloworldAgent({ spoke: clusters.get(s.managedPlane ?? planeOf(s)), clusterName: s.name, clock, log: log(`helloworld-agent-${s.name}`) }));
  }

  return {
    clusters,
    hub,
    relays,
    functions,
    heartbeats,
    startRelay: startOne,
    async stopRelay(name) {
      await relays.get(name)?.stop();
      relays.delete(name);
    },
    startHeartbeat: startSidecar,
    async stopHeartbeat(spoke) {
      await heartbeats.get(spoke)?.stop();
      heartbeats.delete(spoke);
    },
    stop,
  };
}
