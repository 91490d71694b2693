// `npm run bench -- agent-config`: how long a fleet of simulated spokes (BENCH_AGENT_CONFIG_CLUSTERS,
// default 100) takes to converge on a new fleet-level AgentConfig (docs/agent-config.md), driven by
// events as local mode drives it.
//
// Set-up, on one hub and one spoke control plane (no controller manager: nothing here needs one):
// - per cluster, a ManagedCluster in a set bound to the bench namespace, accepted by cluster-acceptor's
//   own reconcile (its namespace and the per-cluster hub grant), and an agent identity as the CSR flow
//   would issue it (system:open-cluster-management:<c>:<agent>, in the cluster's group and the
//   managed-clusters group, from the hub's client CA), kept in OCM's secret layout
//   (bootstrap-hub-kubeconfig, hub-kubeconfig-secret) in the cluster's own agent namespace
//   agent-<c> on the shared spoke control plane, where its checkpoint and health records live too;
// - two Placements, scheduled once by placement-scheduler's reconcile: `all` (one decision group)
//   and `grouped` (GROUPS decision groups, for ProgressivePerGroup);
// - the hub's agent-config-rollout behind our CloudEvents server under its own identity, fed by a hub
//   relay (AgentConfigs, PlacementDecisions); per cluster, the spoke's agent-config function as a
//   server under a spoke identity of its own (manifests/rbac/agent-config.yaml bound in its agent
//   namespace), its config naming the cluster and that namespace;
// - events, BENCH_AGENT_CONFIG_RELAYS=per-cluster (the default): one relay per cluster as production
//   runs one per spoke: it watches the agent namespace's ConfigMaps with a relay-spoke identity of its
//   own and the cluster's AgentConfig on the hub with the cluster's own credentials, read from the
//   hub-kubeconfig-secret as a real spoke relay reads them. =shared: one relay per side with a sink
//   per cluster filtered to its namespaces (the hub one watches as relay-hub, the spoke one as admin),
//   to compare what 100 relays cost.
// - per cluster, a simulated heartbeat and status sync: when the cluster's checkpoint changes its
//   active hash, each writes its health record for that hash (shared recordHealth, a GET and a write
//   only when hash or outcome changes, as the real ones write it). They follow the checkpoints through
//   one watch, so they report at once: a real heartbeat reports on its next renewal (up to one lease
//   duration later) and status sync on its next sync.
//
// Scenarios, in order, each from a converged fleet and with its own settings (so its own hash): All;
// Progressive with maxConcurrency 10%; ProgressivePerGroup over GROUPS groups (only when named, see
// DEFAULT_SCENARIOS); and the halt: Progressive 10% with maxRolledBack 2% while 5% of the clusters'
// simulated heartbeats report ok:false under the new hash (they roll back one lease duration,
// LEASE_SECONDS, after reporting). trialSeconds is TRIAL_SECONDS (2 s) so the machinery, not the wait,
// is measured; the trials on the critical path are reported apart. A rollout that does not finish in
// its time is reported where it stood and ends the run.
//
// Settings: BENCH_AGENT_CONFIG_CLUSTERS, BENCH_AGENT_CONFIG_TRIAL_SECONDS, BENCH_AGENT_CONFIG_RELAYS
// (per-cluster | shared), BENCH_AGENT_CONFIG_SCENARIOS (comma-separated: all, progressive, per-group,
// halt), BENCH_AGENT_CONFIG_TIMEOUT_MS (per rollout), BENCH_AGENT_CONFIG_VERBOSE (progress on stderr).
//
// Figures per scenario: creation of the fleet-level AgentConfig → phase Succeeded (or Halted); the
// first and last cluster ConfigActive; per cluster, assignment → on trial → active; the most clusters
// on trial at once; the requests each API server counted (its own apiserver_request_total, before and
// after, lease renewals and non-resource URLs left out), per cluster, with what the simulated components
// and the bench sent counted client-side and named apart; the same requests by caller (client side);
// events delivered; CPU of this process, each kube-apiserver and etcd; peak RSS.
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import type { Socket } from "node:net";
import { readFile } from "node:fs/promises";
import { startClusters, type LocalCluster, type LocalClusters } from "../dev/control-plane/clusters.ts";
import { identityFor, rolesOf } from "../dev/control-plane/identities.ts";
import { startFunction, type FunctionServer } from "../dev/local/functions.ts";
import { startRelay, type Relay, type RelayOptions } from "../components/relay/relay.ts";
import { hubCredentialsFromAgentSecrets } from "../components/relay/config.ts";
import { readFunctions } from "../cli/render/func-yaml.ts";
import { KubeClient, type KubeObject, type ListOptions } from "../shared/kube/client.ts";
import { startReflector } from "../shared/kube/reflector.ts";
import { clientsFromKubeconfigs } from "../shared/kube/clients.ts";
import { classifyError } from "../shared/kube/errors.ts";
import { issueCertificate } from "../shared/pki.ts";
import { jsonLog, reconcileKey, type FunctionSpec, type Io, type Log } from "../shared/harness.ts";
import { systemClock } from "../shared/clock.ts";
import { hubEndpoint, hubKubeconfig } from "../shared/hub-credentials.ts";
import type { ApiResource } from "../shared/api/meta.ts";
import { ConfigMapResource, NamespaceResource, RoleBindingResource, RoleResource, SecretResource } from "../shared/api/kube.ts";
import { BootstrapSecretName, HubKubeconfigLayout, HubKubeconfigSecretName, HubSecretKey, ManagedClustersGroup, agentUser, clusterGroup } from "../shared/api/registration.ts";
import {
  ClusterLabel,
  ManagedClusterResource,
  ManagedClusterSetBindingResource,
  ManagedClusterSetResource,
  PlacementDecisionResource,
  PlacementResource,
  type Placement,
  type PlacementDecision,
  type RolloutStrategy,
} from "../shared/api/cluster.ts";
import { AgentConfigConditionType, AgentConfigName, AgentConfigReason, AgentConfigResource, RolloutPhase, type AgentConfig } from "../shared/api/agent-config.ts";
import { CheckpointConfigMapName, HealthKey, InstallTimeHash, parseCheckpoint, recordHealth, settingsHash } from "../shared/agent-config.ts";
import { findCondition } from "../shared/conditions.ts";
import agentConfigFn from "../functions/agent-config/reconcile.ts";
import rolloutFn from "../functions/agent-config-rollout/reconcile.ts";
import { clusterState, type ClusterState } from "../shared/agent-config.ts";
import clusterAcceptor from "../functions/cluster-acceptor/reconcile.ts";
import placementScheduler from "../functions/placement-scheduler/reconcile.ts";
import { percentile, ms, mib } from "./stats.ts";
import { until } from "./until.ts";

const CLUSTERS = Number(process.env.BENCH_AGENT_CONFIG_CLUSTERS ?? 100);
const TRIAL_SECONDS = Number(process.env.BENCH_AGENT_CONFIG_TRIAL_SECONDS ?? 2);
const RELAYS: "per-cluster" | "shared" = process.env.BENCH_AGENT_CONFIG_RELAYS === "shared" ? "shared" : "per-cluster";
// The ManagedClusters' lease: a failing record rolls a config back this long after it is written (0
// would mean 60 s), and a component silent at the end of a trial fails it this long after.
const LEASE_SECONDS = 4;
const GROUPS = 4; // decision groups of the `grouped` placement
const RESYNC_MS = 600_000; // relay ticks: none during the bench, so every reconcile is an event's
const SPOKE = "spoke";
const NS = "bench-agent-config"; // fleet-level AgentConfigs and their Placements
const SET = "bench";
const AGENT_NAME = "bench";
const SETUP_CONCURRENCY = 10;
const VERBOSE = !!process.env.BENCH_AGENT_CONFIG_VERBOSE; // progress on stderr every 5 s

const clusterName = (i: number) => `c${String(i).padStart(3, "0")}`;
const NAMES = Array.from({ length: CLUSTERS }, (_, i) => clusterName(i));
const agentNamespace = (cluster: string) => `agent-${cluster}`;
const clusterOfNamespace = (ns: string | undefined) => (ns?.startsWith("agent-") ? ns.slice("agent-".length) : undefined);
// 5% of the fleet, spread evenly (c010, c030, c050, c070, c090 of 100)
const FAILING_COUNT = Math.max(1, Math.round(CLUSTERS * 0.05));
const FAILING = new Set(Array.from({ length: FAILING_COUNT }, (_, k) => clusterName(Math.floor(((k + 0.5) * CLUSTERS) / FAILING_COUNT))));

type Figures = Record<string, string | number>;

type Scenario = {
  name: string; // the fleet-level AgentConfig's name, and its settings' feature gate
  label: string;
  placement: string;
  strategy: RolloutStrategy;
  maxRolledBack?: string;
  fails?: boolean; // the FAILING clusters' heartbeats report ok:false under this config
  trialsInSeries: number; // trials on the critical path when nothing fails
  timeoutMs: number;
};

// ProgressivePerGroup is left out unless named (BENCH_AGENT_CONFIG_SCENARIOS=all,progressive,per-group,halt):
// at 100 clusters it took about as long as Progressive (about a minute), since the rollout's own
// reconciles, not the trials, set the pace, and with it the bench would not fit its four minutes.
const DEFAULT_SCENARIOS = "all,progressive,halt";
const perWave = Math.max(1, Math.floor(CLUSTERS / 10));
const SCENARIOS: Scenario[] = [
  { name: "all", label: "All", placement: "all", strategy: { type: "All" }, trialsInSeries: 1, timeoutMs: 150_000 },
  {
    name: "progressive",
    label: "Progressive 10%",
    placement: "all",
    strategy: { type: "Progressive", progressive: { maxConcurrency: "10%" } },
    trialsInSeries: Math.ceil(CLUSTERS / perWave),
    timeoutMs: 180_000,
  },
  { name: "per-group", label: `ProgressivePerGroup ×${GROUPS}`, placement: "grouped", strategy: { type: "ProgressivePerGroup" }, trialsInSeries: GROUPS, timeoutMs: 180_000 },
  {
    name: "halt",
    label: "halt",
    placement: "all",
    strategy: { type: "Progressive", progressive: { maxConcurrency: "10%" } },
    maxRolledBack: "2%",
    fails: true,
    trialsInSeries: Math.ceil(CLUSTERS / perWave),
    timeoutMs: 180_000,
  },
];

const sleep = (msec: number) => new Promise((r) => setTimeout(r, msec));

export const agentConfigBench = {
  name: "agent-config",
  async run(): Promise<Figures> {
    const t0 = performance.now();
    const figures: Figures = {};
    const memory = rssSampler();
    const counters = instrumentRequests();
    const logs = logCounter();
    const wiring: Wiring = { servers: [], relays: [], clients: [], follows: [] };
    let clusters: LocalClusters | undefined;
    try {
      clusters = await startClusters({ names: ["hub", SPOKE], controllers: false, log: () => {} });
      hubServer.url = clusters.get("hub").url;
      hubServer.port = new URL(hubServer.url).port;
      spokeServer.port = new URL(clusters.get(SPOKE).url).port;
      figures["control planes ready (hub, spoke)"] = ms(clusters.startupMs);
      const ctx = await setUp(clusters, wiring, counters, logs, figures);
      const wanted = (process.env.BENCH_AGENT_CONFIG_SCENARIOS ?? DEFAULT_SCENARIOS).split(",");
      const chosen = SCENARIOS.filter((x) => wanted.includes(x.name));
      for (const [i, s] of chosen.entries()) {
        const ran = await runScenario(s, ctx, memory);
        Object.assign(figures, ran.figures);
        if (!ran.finished) {
          // what the fleet is left in is no start for another rollout
          if (i + 1 < chosen.length) figures["scenarios not run (a rollout did not finish)"] = chosen.slice(i + 1).map((x) => x.label).join(", ");
          break;
        }
      }
      figures["function log lines, warn/error (whole bench)"] = logs.summary();
    } finally {
      try {
        await tearDown(wiring);
        await clusters?.stop();
      } finally {
        counters.restore();
        memory.stop();
      }
    }
    figures["peak RSS of this process (VmHWM)"] = mib(await vmHwm("self"));
    figures["bench wall time"] = ms(performance.now() - t0);
    return figures;
  },
};

// ---- set-up

type Wiring = { servers: FunctionServer[]; relays: Relay[]; clients: KubeClient[]; follows: Follow[] };

type Ctx = {
  clusters: LocalClusters;
  hubAdmin: KubeClient;
  spokeAdmin: KubeClient;
  wiring: Wiring;
  tracker: Tracker;
  sim: Simulator;
  counters: Counters;
  logs: LogCounter;
  pids: { hub: number; spoke: number; etcd: number };
  previous?: string; // the last fleet-level config, deleted before the next is created
};

async function setUp(clusters: LocalClusters, wiring: Wiring, counters: Counters, logs: LogCounter, figures: Figures): Promise<Ctx> {
  const hub = clusters.get("hub");
  const spoke = clusters.get(SPOKE);
  const admin = (c: LocalCluster, tag: string) => {
    const client = KubeClient.fromKubeconfig(c.adminKubeconfig);
    counters.tag(client, tag);
    wiring.clients.push(client);
    return client;
  };
  const hubAdmin = admin(hub, "bench");
  const spokeAdmin = admin(spoke, "bench");
  const simClient = admin(spoke, "simulated heartbeat + status sync");

  const t1 = performance.now();
  await hubAdmin.create(NamespaceResource, { metadata: { name: NS } });
  await hubAdmin.create(ManagedClusterSetResource, { metadata: { name: SET }, spec: { clusterSelector: { selectorType: "ExclusiveClusterSetLabel" } } });
  await hubAdmin.create(ManagedClusterSetBindingResource, { metadata: { name: SET, namespace: NS }, spec: { clusterSet: SET } });
  const acceptorIo = functionIo("cluster-acceptor", clusterAcceptor.definition.config.parse({ hubCluster: "hub", autoApprovalUsers: [] }), { hub: await identityFor(hub, "cluster-acceptor") }, logs, wiring);
  const bootstrap = await hub.createBootstrapToken(["system:bootstrappers:managedcluster"]);
  const hubSecretKubeconfig = hubKubeconfig(hubEndpoint(bootstrap.kubeconfig));
  const roles = { agentConfig: rbacRoles("agent-config"), relay: rbacRoles("relay-spoke") };
  const identities = new Map<string, { agentConfig: string; relay?: string }>();
  await eachLimited(NAMES, SETUP_CONCURRENCY, async (c) => {
    // the hub: the cluster, accepted as the acceptor accepts it
    await hubAdmin.create(ManagedClusterResource, { metadata: { name: c, labels: { [ClusterLabel.ClusterSet]: SET } }, spec: { hubAcceptsClient: true, leaseDurationSeconds: LEASE_SECONDS } });
    await reconcileKey(clusterAcceptor.spec, acceptorIo, { cluster: "hub", name: c });
    // the spoke: the agent namespace, the agent's secrets, the function's (and relay's) identity
    const ns = agentNamespace(c);
    const cert = await issueCertificate(hub.clientCa, { subject: { commonName: agentUser(c, AGENT_NAME), organizations: [clusterGroup(c), ManagedClustersGroup] }, usage: "client" });
    await spokeAdmin.create(NamespaceResource, { metadata: { name: ns } });
    const b64 = (s: string) => Buffer.from(s).toString("base64");
    await spokeAdmin.create(SecretResource, { metadata: { name: BootstrapSecretName, namespace: ns }, data: { [HubSecretKey.Kubeconfig]: b64(bootstrap.kubeconfig) } });
    await spokeAdmin.create(SecretResource, {
      metadata: { name: HubKubeconfigSecretName, namespace: ns },
      data: {
        [HubSecretKey.Kubeconfig]: b64(hubSecretKubeconfig),
        [HubSecretKey.TlsCert]: b64(cert.certPem),
        [HubSecretKey.TlsKey]: b64(cert.keyPem),
        [HubSecretKey.ClusterName]: b64(c),
        [HubSecretKey.AgentName]: b64(AGENT_NAME),
      },
    });
    identities.set(c, {
      agentConfig: await namespacedIdentity(spoke, spokeAdmin, roles.agentConfig, ns, `ocm-functions:agent-config:${c}`),
      relay: RELAYS === "per-cluster" ? await namespacedIdentity(spoke, spokeAdmin, roles.relay, ns, `ocm-functions:relay-spoke:${c}`) : undefined,
    });
    // what the real heartbeat and status sync would have recorded before any config was assigned
    await recordHealth(simClient, ns, HealthKey.Heartbeat, { hash: InstallTimeHash, ok: true }, new Date());
    await recordHealth(simClient, ns, HealthKey.StatusSync, { hash: InstallTimeHash, ok: true }, new Date());
  });
  await schedulePlacements(hub, hubAdmin, logs, wiring);
  figures[`${CLUSTERS} clusters set up (hub: accepted, identity; spoke: namespace, secrets, RBAC)`] = ms(performance.now() - t1);

  // Observers: the bench's own watches (WATCH is not counted below), which also drive the simulation.
  const tracker = new Tracker();
  const sim = new Simulator(simClient);
  wiring.follows.push(
    follow(hubAdmin, AgentConfigResource, {}, (type, o) => tracker.onAgentConfig(type, o as AgentConfig & KubeObject)),
    follow(hubAdmin, ManagedClusterResource, {}, () => tracker.touch()),
    follow(spokeAdmin, ConfigMapResource, {}, (type, o) => {
      tracker.touch();
      const cluster = clusterOfNamespace(o.metadata.namespace);
      if (cluster && o.metadata.name === CheckpointConfigMapName && type !== "DELETED") sim.onCheckpoint(cluster, parseCheckpoint((o as { data?: Record<string, string> }).data).active.hash);
    }),
  );
  await Promise.all(wiring.follows.map((f) => f.ready));

  const t2 = performance.now();
  // startFunctionServer raises the limit by one per server, which would turn run.ts's "no limit" (0)
  // into 1: a finite limit while they start, then none again.
  process.setMaxListeners(10_000);
  await startFunctionsAndRelays(clusters, identities, wiring, logs);
  process.setMaxListeners(0);
  await Promise.all(wiring.relays.map((r) => r.ready));
  const ctx: Ctx = { clusters, hubAdmin, spokeAdmin, wiring, tracker, sim, counters, logs, pids: { hub: hub.apiserver!.child.pid!, spoke: spoke.apiserver!.child.pid!, etcd: clusters.etcd.child.pid! } };
  await quiet(ctx, 180_000);
  const relayNote = RELAYS === "per-cluster" ? `${wiring.relays.length} relays (1 hub + 1 per cluster)` : `${wiring.relays.length} relays (1 per side, a sink per cluster)`;
  figures[`functions (${CLUSTERS + 1} servers) and ${relayNote} started → quiet`] = ms(performance.now() - t2);
  figures["  watches open (hub / spoke kube-apiserver)"] = `${await watchers(hubAdmin)} / ${await watchers(spokeAdmin)}`;
  figures["  RSS of this process, fleet running and idle"] = mib(process.memoryUsage.rss());
  return ctx;
}

function functionIo<C>(fn: string, config: C, kubeconfigs: Record<string, string>, logs: LogCounter, wiring: Wiring): Io<C> {
  const clients = clientsFromKubeconfigs(kubeconfigs);
  for (const name of Object.keys(kubeconfigs)) wiring.clients.push(clients(name));
  return { clock: systemClock, config, log: logs.log(fn), cluster: clients };
}

// The namespaced Roles of a function or component (rolesOf: a function's from its definition), written
// into `namespace` and bound to `user` there, as identityFor binds them in the agent namespace of a real
// spoke; the ClusterRoles are left out (neither the agent-config function nor a relay that watches only
// ConfigMaps needs them).
type RoleDoc = KubeObject & { kind?: string; rules?: unknown };
const rbacRoles = (fn: string): RoleDoc[] => rolesOf(fn).filter((d) => d.kind === "Role");

async function namespacedIdentity(cluster: LocalCluster, admin: KubeClient, roles: RoleDoc[], namespace: string, user: string): Promise<string> {
  for (const role of roles) {
    const name = role.metadata.name!;
    await admin.create(RoleResource, { metadata: { name, namespace }, rules: role.rules });
    await admin.create(RoleBindingResource, {
      metadata: { name, namespace },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name },
      subjects: [{ kind: "User", apiGroup: "rbac.authorization.k8s.io", name: user }],
    });
  }
  return cluster.kubeconfigFor({ user });
}

async function schedulePlacements(hub: LocalCluster, admin: KubeClient, logs: LogCounter, wiring: Wiring): Promise<void> {
  const io = functionIo("placement-scheduler", placementScheduler.definition.config.parse({ hubCluster: "hub" }), { hub: await identityFor(hub, "placement-scheduler") }, logs, wiring);
  const placements: { name: string; spec: Placement["spec"]; groups: number }[] = [
    { name: "all", spec: {}, groups: 1 },
    { name: "grouped", spec: { decisionStrategy: { groupStrategy: { clustersPerDecisionGroup: `${100 / GROUPS}%` } } }, groups: GROUPS },
  ];
  for (const p of placements) {
    await admin.create<Placement & KubeObject>(PlacementResource, { metadata: { name: p.name, namespace: NS }, spec: p.spec });
    // a new CRD's storage answers 429 for a moment
    await transientRetried(() => reconcileKey(placementScheduler.spec, io, { cluster: "hub", namespace: NS, name: p.name }));
    const { items } = await transientRetried(() => admin.list<PlacementDecision & KubeObject>(PlacementDecisionResource, { namespace: NS, labelSelector: `${ClusterLabel.Placement}=${p.name}` }));
    const decided = items.reduce((n, d) => n + (d.status?.decisions?.length ?? 0), 0);
    const groups = new Set(items.map((d) => d.metadata.labels?.[ClusterLabel.DecisionGroupIndex])).size;
    if (decided !== CLUSTERS || groups !== p.groups) throw new Error(`placement ${p.name}: ${decided} clusters in ${groups} groups decided, wanted ${CLUSTERS} in ${p.groups}`);
  }
}

async function startFunctionsAndRelays(clusters: LocalClusters, identities: Map<string, { agentConfig: string; relay?: string }>, wiring: Wiring, logs: LogCounter): Promise<void> {
  const hub = clusters.get("hub");
  const spoke = clusters.get(SPOKE);
  const subscriptions = new Map(readFunctions().map((f) => [f.name, f.deploy.subscriptions.map((s) => s.filters)]));
  const serve = async <C>(spec: FunctionSpec<C>, io: Io<C>) => {
    const server = await startFunction(spec, io);
    wiring.servers.push(server);
    return server.url;
  };
  const relay = (name: string, options: RelayOptions) => {
    const r = startRelay({ ...options, resync: { intervalMs: RESYNC_MS }, log: logs.log(`relay-${name}`) });
    wiring.relays.push(r);
  };

  const rolloutIo = functionIo(rolloutFn.spec.name, rolloutFn.definition.config.parse({ hubCluster: "hub" }), { hub: await identityFor(hub, rolloutFn.spec.name) }, logs, wiring);
  const rolloutSink = { name: `hub/${rolloutFn.spec.name}`, url: await serve(rolloutFn.spec, rolloutIo), filters: subscriptions.get(rolloutFn.spec.name)! };

  const agentFilters = subscriptions.get(agentConfigFn.spec.name)!;
  const hubSinks: { name: string; url: string; filters: Record<string, string>[] }[] = [];
  const spokeSinks: typeof hubSinks = [];
  await eachLimited(NAMES, SETUP_CONCURRENCY, async (c) => {
    const ns = agentNamespace(c);
    const id = identities.get(c)!;
    const config = agentConfigFn.definition.config.parse({ managementCluster: SPOKE, hubCluster: "hub", clusterName: c, agentNamespace: ns });
    const url = await serve(agentConfigFn.spec, functionIo(agentConfigFn.spec.name, config, { [SPOKE]: id.agentConfig }, logs, wiring));
    const name = `${c}/${agentConfigFn.spec.name}`;
    if (RELAYS === "per-cluster") {
      relay(c, {
        clusters: { [SPOKE]: { kubeconfig: id.relay! }, hub: hubCredentialsFromAgentSecrets(SPOKE, ns) },
        sources: [
          { cluster: SPOKE, resource: ConfigMapResource, namespace: ns, mode: "Reference" }, // the checkpoint and health records
          { cluster: "hub", resource: AgentConfigResource, namespace: c, mode: "Resource" },
        ],
        sinks: [{ name, url, filters: agentFilters }],
      });
    } else {
      // as each spoke's own Broker would: only this cluster's objects reach its function
      hubSinks.push({ name, url, filters: [{ kind: AgentConfigResource.kind, namespace: c, cluster: "hub" }] });
      spokeSinks.push({ name, url, filters: [{ kind: ConfigMapResource.kind, namespace: ns, cluster: SPOKE }] });
    }
  });
  const onHub = (resource: ApiResource) => ({ cluster: "hub", resource, mode: "Resource" as const });
  relay("hub", {
    clusters: { hub: { kubeconfig: await identityFor(hub, "relay-hub") } },
    sources: [onHub(AgentConfigResource), onHub(PlacementDecisionResource)],
    sinks: [rolloutSink, ...hubSinks],
  });
  if (RELAYS === "shared") {
    relay(SPOKE, { clusters: { [SPOKE]: { kubeconfig: spoke.adminKubeconfig } }, sources: [{ cluster: SPOKE, resource: ConfigMapResource, mode: "Reference" }], sinks: spokeSinks });
  }
}

async function tearDown(w: Wiring): Promise<void> {
  await Promise.allSettled(w.follows.map((f) => f.stop()));
  await Promise.allSettled(w.relays.map((r) => r.stop()));
  await Promise.allSettled(w.servers.map((s) => s.close()));
  for (const c of w.clients) c.close();
}

// ---- a scenario

type Snapshot = {
  connections: Counts;
  hub: Counts;
  spoke: Counts;
  callers: Counts;
  newAgentHubClients: number;
  cpu: NodeJS.CpuUsage;
  ticks: { hub: number; spoke: number; etcd: number };
  sinks: Counts;
  logs: Counts;
};

async function snapshot(ctx: Ctx): Promise<Snapshot> {
  const [hub, spoke, hubTicks, spokeTicks, etcdTicks] = await Promise.all([
    requestCounts(ctx.hubAdmin),
    requestCounts(ctx.spokeAdmin),
    cpuTicksMs(ctx.pids.hub),
    cpuTicksMs(ctx.pids.spoke),
    cpuTicksMs(ctx.pids.etcd),
  ]);
  const sinks: Counts = new Map();
  for (const r of ctx.wiring.relays) {
    for (const s of r.status().sinks) {
      const who = s.name.startsWith("hub/") ? "rollout" : "agents";
      for (const k of ["delivered", "rechecks", "retries", "rejected", "gaveUp"] as const) add(sinks, `${who} ${k}`, s[k]);
    }
  }
  return {
    connections: new Map(ctx.counters.connections),
    hub,
    spoke,
    callers: new Map(ctx.counters.counts),
    newAgentHubClients: ctx.counters.newAgentHubClients,
    cpu: process.cpuUsage(),
    ticks: { hub: hubTicks, spoke: spokeTicks, etcd: etcdTicks },
    sinks,
    logs: new Map(ctx.logs.counts),
  };
}

// A rollout that does not finish within its time is reported where it stood, and ends the bench's
// scenarios (finished: false).
async function runScenario(s: Scenario, ctx: Ctx, memory: RssSampler): Promise<{ figures: Figures; finished: boolean }> {
  const { hubAdmin, tracker, sim } = ctx;
  const settings = { features: { [`bench-${s.name}`]: true } };
  const hash = settingsHash(settings);
  // Two fleet-level configs over the same clusters would take them from each other: the last goes first.
  if (ctx.previous) {
    await hubAdmin.delete(AgentConfigResource, ctx.previous, NS);
    await quiet(ctx, 60_000);
  }
  sim.failHash = s.fails ? hash : undefined;
  const before = await snapshot(ctx);
  memory.resetWindow();
  const t = tracker.begin(s.name, hash);
  await hubAdmin.create<AgentConfig & KubeObject>(AgentConfigResource, {
    metadata: { name: s.name, namespace: NS },
    spec: { settings, trialSeconds: TRIAL_SECONDS, placementRef: { name: s.placement }, rolloutStrategy: s.strategy, ...(s.maxRolledBack ? { maxRolledBack: s.maxRolledBack } : {}) },
  });
  ctx.previous = s.name;
  const progress = VERBOSE ? setInterval(() => process.stderr.write(`${s.label} +${ms(performance.now() - t.t0)}: ${describe(ctx)}\n`), 5_000) : undefined;
  const timeoutMs = Number(process.env.BENCH_AGENT_CONFIG_TIMEOUT_MS ?? s.timeoutMs);
  let done: Timeline["done"];
  try {
    done = await until(async () => t.done, `${s.label}: the rollout finished`, timeoutMs).catch(() => undefined);
  } finally {
    clearInterval(progress);
  }
  const quietAt = done ? await quiet(ctx, 60_000) : undefined;
  const after = await snapshot(ctx);
  const windowRss = memory.windowMax();

  const L = `[${s.label}]`;
  const f: Figures = {};
  if (!done) f[`${L} NOT FINISHED within ${ms(timeoutMs)}`] = describe(ctx);
  const since = (m: Map<string, number>) => [...m.values()].map((x) => x - t.t0);
  const between = (from: Map<string, number>, to: Map<string, number>) => [...to].flatMap(([c, at]) => (from.has(c) ? [at - from.get(c)!] : []));
  const p50max = (xs: number[]) => (xs.length ? `${ms(percentile(xs, 50))} / ${ms(Math.max(...xs))}` : "n/a");
  const activeAt = since(t.active);
  if (s.fails && done) {
    const updatedAfter = [...t.assigned.values()].filter((at) => at > done.at).length;
    f[`${L} Progressive 10%, ${FAILING.size} of ${CLUSTERS} failing (heartbeat ok:false), maxRolledBack 2%: created → ${done.phase}`] = ms(done.at - t.t0);
    f[`${L} clusters updated when the status said ${done.phase} (status.rollout.updated)`] = `${done.updated} of ${CLUSTERS} (${done.rolledBack} rolled back by then)`;
    f[`${L} clusters given the config by the end`] =
      `${t.assigned.size} (${updatedAfter} of them after the status said ${done.phase}); ConfigActive ${t.active.size}, rolled back ${t.rolledBack.size}: ${[...t.rolledBack.keys()].sort().join(", ")}`;
    f[`${L} assigned → ConfigRolledBack p50/max (lease ${LEASE_SECONDS} s)`] = p50max(between(t.assigned, t.rolledBack));
  } else if (done) {
    f[`${L} created → phase ${done.phase}`] = ms(done.at - t.t0);
    f[`${L} first / last cluster ConfigActive`] = activeAt.length ? `${ms(Math.min(...activeAt))} / ${ms(Math.max(...activeAt))}` : "none";
    const trials = s.trialsInSeries * TRIAL_SECONDS * 1000;
    f[`${L} of which trials in series (${s.trialsInSeries} × ${TRIAL_SECONDS} s) / the rest`] = `${ms(trials)} / ${ms(done.at - t.t0 - trials)}`;
  }
  f[`${L} per cluster: assigned → on trial p50/max`] = p50max(between(t.assigned, t.onTrial));
  f[`${L} per cluster: on trial → ConfigActive p50/max (trial ${TRIAL_SECONDS} s)`] = p50max(between(t.onTrial, t.active));
  f[`${L} most clusters on trial at once`] = t.maxProgressing;
  if (quietAt !== undefined) f[`${L} created → quiet`] = ms(quietAt - t.t0);
  Object.assign(f, requestFigures(L, before, after));
  const sinks = delta(after.sinks, before.sinks);
  const g = (k: string) => sinks.get(k) ?? 0;
  const agents = `${g("agents delivered")} = ${(g("agents delivered") / CLUSTERS).toFixed(1)} per cluster`;
  const agentsDetail = `of them rechecks ${g("agents rechecks")}; retries ${g("agents retries")}, dropped ${g("agents rejected") + g("agents gaveUp")}`;
  f[`${L} events delivered: rollout / agent-config`] = `${g("rollout delivered")} (retries ${g("rollout retries")}) / ${agents} (${agentsDetail})`;
  const opened = delta(after.connections, before.connections);
  f[`${L} connections opened to the hub / spoke apiserver (TLS)`] =
    `${opened.get("hub") ?? 0} / ${opened.get("spoke") ?? 0} (hub clients the agents made, one per reconcile: ${after.newAgentHubClients - before.newAgentHubClients})`;
  const cpu = (after.cpu.user + after.cpu.system - before.cpu.user - before.cpu.system) / 1000;
  f[`${L} CPU: this process / hub apiserver / spoke apiserver / etcd`] =
    `${ms(cpu)} / ${ms(after.ticks.hub - before.ticks.hub)} / ${ms(after.ticks.spoke - before.ticks.spoke)} / ${ms(after.ticks.etcd - before.ticks.etcd)}`;
  f[`${L} peak RSS of this process in the scenario`] = mib(windowRss);
  const logLines = delta(after.logs, before.logs);
  if (logLines.size) f[`${L} function log lines (warn/error, conflicts)`] = [...logLines].map(([k, n]) => `${k} ×${n}`).join("; ");
  return { figures: f, finished: done !== undefined };
}

function requestFigures(L: string, before: Snapshot, after: Snapshot): Figures {
  const f: Figures = {};
  const callers = delta(after.callers, before.callers);
  for (const side of ["hub", "spoke"] as const) {
    const server = delta(after[side], before[side]);
    const own = (caller: string, verbs: Set<string>) => sumWhere(callers, (k) => k.startsWith(`${side}|${caller}|`) && verbs.has(k.split("|")[2]!.split(" ")[0]!));
    const simW = own("simulated heartbeat + status sync", WRITES);
    const simR = own("simulated heartbeat + status sync", READS);
    const benchW = own("bench", WRITES);
    const benchR = own("bench", READS);
    const w = pick(server, WRITES);
    const r = pick(server, READS);
    const not = [simW || simR ? `simulated components ${simW} writes, ${simR} reads` : "", benchW || benchR ? `bench ${benchW} writes, ${benchR} reads` : ""].filter(Boolean).join("; ");
    f[`${L} ${side} apiserver: writes / reads per cluster (functions only)`] =
      `${((w.total - simW - benchW) / CLUSTERS).toFixed(1)} / ${((r.total - simR - benchR) / CLUSTERS).toFixed(1)}${not ? ` (counted: ${w.total} writes, ${r.total} reads, of them ${not})` : ""}`;
    f[`${L}   ${side} writes`] = w.text;
    f[`${L}   ${side} reads`] = r.text;
  }
  // client side, by identity: which function sends what
  const byCaller: Counts = new Map();
  for (const [k, n] of callers) {
    const [side, caller, what] = k.split("|") as [string, string, string];
    if (caller === "bench" || caller.startsWith("simulated")) continue;
    add(byCaller, `${side} ${caller} ${READS.has(what.split(" ")[0]!) ? "reads" : "writes"}`, n);
  }
  f[`${L} per cluster by caller (client side)`] = [...byCaller].map(([k, n]) => `${k} ${(n / CLUSTERS).toFixed(1)}`).join(", ");
  const rolloutReads = [...callers].filter(([k]) => k.startsWith("hub|rollout|") && READS.has(k.split("|")[2]!.split(" ")[0]!));
  f[`${L}   rollout reads`] = rolloutReads.map(([k, n]) => `${k.split("|")[2]} ×${n}`).join(", ") || "none";
  return f;
}

// ---- following the fleet: timestamps per cluster, the rollout's verdict, quiet

type Timeline = {
  name: string;
  hash: string;
  t0: number;
  assigned: Map<string, number>; // the cluster's own config carries the new settings
  onTrial: Map<string, number>;
  active: Map<string, number>;
  rolledBack: Map<string, number>;
  states: Map<string, ClusterState>;
  maxProgressing: number;
  done?: { at: number; phase: string; updated: number; rolledBack: number };
};

class Tracker {
  lastChange = performance.now();
  timeline?: Timeline;

  touch(): void {
    this.lastChange = performance.now();
  }

  begin(name: string, hash: string): Timeline {
    this.timeline = { name, hash, t0: performance.now(), assigned: new Map(), onTrial: new Map(), active: new Map(), rolledBack: new Map(), states: new Map(), maxProgressing: 0 };
    return this.timeline;
  }

  progressing(): number {
    let n = 0;
    for (const s of this.timeline?.states.values() ?? []) if (s === "progressing") n++;
    return n;
  }

  onAgentConfig(type: string, o: AgentConfig & KubeObject): void {
    this.touch();
    const t = this.timeline;
    if (!t || type === "DELETED") return;
    const now = performance.now();
    if (o.metadata.name === AgentConfigName) {
      const c = o.metadata.namespace!;
      const first = (m: Map<string, number>) => (m.has(c) ? undefined : m.set(c, now));
      if (settingsHash(o.spec?.settings ?? {}) === t.hash) first(t.assigned);
      const ok = findCondition(o.status?.conditions, AgentConfigConditionType.AgentConfigOK);
      if (ok?.reason === AgentConfigReason.ConfigOnTrial && o.status?.assigned?.hash === t.hash) first(t.onTrial);
      if (ok?.reason === AgentConfigReason.ConfigActive && o.status?.active?.hash === t.hash) first(t.active);
      if (ok?.reason === AgentConfigReason.ConfigRolledBack && o.status?.assigned?.hash === t.hash) first(t.rolledBack);
      t.states.set(c, clusterState(o, t.hash));
      t.maxProgressing = Math.max(t.maxProgressing, this.progressing());
      return;
    }
    if (o.metadata.name !== t.name || o.metadata.namespace !== NS || t.done) return;
    const rollout = o.status?.rollout;
    if (o.status?.assigned?.hash !== t.hash || (rollout?.phase !== RolloutPhase.Succeeded && rollout?.phase !== RolloutPhase.Halted)) return;
    t.done = { at: now, phase: rollout.phase, updated: rollout.updated?.length ?? 0, rolledBack: rollout.rolledBack?.length ?? 0 };
  }
}

// Where a scenario stands, for a timeout's message and BENCH_AGENT_CONFIG_VERBOSE.
function describe(ctx: Ctx): string {
  const t = ctx.tracker.timeline;
  const states: Counts = new Map();
  for (const st of t?.states.values() ?? []) add(states, st, 1);
  let pending = 0;
  let inFlight = 0;
  for (const r of ctx.wiring.relays) for (const s of r.status().sinks) (pending += s.pending), (inFlight += s.inFlight);
  const rollout = ctx.wiring.relays.flatMap((r) => r.status().sinks).find((s) => s.name.startsWith("hub/"));
  return [
    `assigned ${t?.assigned.size ?? 0}, on trial ${t?.onTrial.size ?? 0}, active ${t?.active.size ?? 0}, rolled back ${t?.rolledBack.size ?? 0}`,
    `states ${[...states].map(([k, n]) => `${k} ${n}`).join(" ")}`,
    `sinks pending ${pending}, in flight ${inFlight}`,
    `rollout sink delivered ${rollout?.delivered} retries ${rollout?.retries} pending ${rollout?.pending} in flight ${rollout?.inFlight}`,
    `RSS ${mib(process.memoryUsage.rss())}`,
  ].join("; ");
}

// Nothing delivered or in flight on any relay, no cluster on trial, the simulation idle, and no
// object the functions write changed for a second. Returns when that quiet began.
async function quiet(ctx: Ctx, timeoutMs: number): Promise<number> {
  const t0 = performance.now();
  let busyAt = t0;
  for (;;) {
    const now = performance.now();
    const busy = ctx.sim.busy() || ctx.tracker.progressing() > 0 || ctx.wiring.relays.some((r) => r.status().sinks.some((s) => s.pending > 0 || s.inFlight > 0));
    if (busy) busyAt = now;
    const since = Math.max(busyAt, ctx.tracker.lastChange);
    if (now - since >= 1_000) return since;
    if (now - t0 > timeoutMs) throw new Error(`not quiet within ${timeoutMs} ms (on trial: ${ctx.tracker.progressing()}, simulation busy: ${ctx.sim.busy()})`);
    await sleep(100);
  }
}

// A list, then a watch resumed from the last resourceVersion until stopped (re-listed after a 410).
type Follow = { ready: Promise<void>; stop(): Promise<void> };

// shared/kube/reflector.ts's list-then-watch; its failures (a new CRD's storage answers 429 for a moment
// after the control plane starts) are said once each on stderr.
const benchLine = (level: string) => (fields: object, msg: string) => void process.stderr.write(`agent-config bench: ${level}: ${msg} ${JSON.stringify(fields)}\n`);
function follow(client: KubeClient, r: ApiResource, o: ListOptions, on: (type: string, object: KubeObject) => void): Follow {
  return startReflector({
    name: r.plural,
    resource: r,
    ...o,
    client,
    timeoutSeconds: 300,
    backoff: { initialMs: 200, maxMs: 2_000 },
    log: { info: () => {}, warn: benchLine("warn"), error: benchLine("error") },
    onChange: (c) => on(c.type, c.object),
  });
}

// ---- the simulated heartbeat and status sync

class Simulator {
  failHash?: string; // the FAILING clusters' heartbeats fail under this hash
  private recorded = new Map<string, string>(); // cluster → the hash its components run
  private chains = new Map<string, Promise<void>>();
  private running = 0;
  private readonly client: KubeClient;

  constructor(client: KubeClient) {
    this.client = client;
    for (const c of NAMES) this.recorded.set(c, InstallTimeHash);
  }

  busy(): boolean {
    return this.running > 0;
  }

  // The checkpoint's active hash is what every component runs from now on: each records how it fares.
  onCheckpoint(cluster: string, hash: string): void {
    if (this.recorded.get(cluster) === hash) return;
    this.recorded.set(cluster, hash);
    const failing = this.failHash === hash && FAILING.has(cluster);
    this.running++;
    const next = (this.chains.get(cluster) ?? Promise.resolve())
      .then(() => this.record(cluster, hash, failing))
      .finally(() => this.running--);
    this.chains.set(cluster, next);
  }

  private async record(cluster: string, hash: string, failing: boolean): Promise<void> {
    const ns = agentNamespace(cluster);
    const heartbeat = failing ? { hash, ok: false, error: "simulated: lease renewals fail under this config" } : { hash, ok: true };
    for (let attempt = 1; ; attempt++) {
      try {
        const now = new Date();
        await Promise.all([recordHealth(this.client, ns, HealthKey.Heartbeat, heartbeat, now), recordHealth(this.client, ns, HealthKey.StatusSync, { hash, ok: true }, now)]);
        return;
      } catch (err) {
        if (attempt >= 5) {
          process.stderr.write(`agent-config bench: simulated health record for ${cluster} not written: ${err instanceof Error ? err.message : String(err)}\n`);
          return;
        }
        await sleep(200);
      }
    }
  }
}

// ---- counting: the API servers' own counts, and what each identity sent (client side)

type Counts = Map<string, number>;
const WRITES = new Set(["POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"]);
const READS = new Set(["GET", "LIST"]);

const add = (m: Counts, k: string, n: number) => m.set(k, (m.get(k) ?? 0) + n);

function delta(after: Counts, before: Counts): Counts {
  const d: Counts = new Map();
  for (const [k, n] of after) if (n - (before.get(k) ?? 0) !== 0) d.set(k, n - (before.get(k) ?? 0));
  return new Map([...d].sort(([a], [b]) => (a < b ? -1 : 1)));
}

const sumWhere = (c: Counts, test: (k: string) => boolean) => [...c].reduce((n, [k, v]) => (test(k) ? n + v : n), 0);

function pick(c: Counts, verbs: Set<string>): { total: number; text: string } {
  const rows = [...c].filter(([k]) => verbs.has(k.split(" ")[0]!)).sort(([, a], [, b]) => b - a);
  const total = rows.reduce((n, [, v]) => n + v, 0);
  return { total, text: `${total}${rows.length ? `: ${rows.map(([k, v]) => `${k} ×${v}`).join(", ")}` : ""}` };
}

// "VERB resource[/subresource][ (code)]" → requests, from the API server's apiserver_request_total.
// Left out: watches, non-resource URLs (the bench's own /metrics) and leases (the API server renews its
// own identity lease; nothing measured here writes a lease).
async function requestCounts(client: KubeClient): Promise<Counts> {
  const text = await client.request<string>("GET", "/metrics");
  const counts: Counts = new Map();
  for (const line of text.split("\n")) {
    if (!line.startsWith("apiserver_request_total{")) continue;
    const labels = Object.fromEntries([...line.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (!labels.resource || labels.verb === "WATCH" || labels.resource === "leases") continue;
    const code = labels.code?.startsWith("2") ? "" : ` (${labels.code})`;
    add(counts, `${labels.verb} ${labels.resource}${labels.subresource ? `/${labels.subresource}` : ""}${code}`, Number(line.slice(line.lastIndexOf(" ") + 1)));
  }
  return counts;
}

async function watchers(client: KubeClient): Promise<number> {
  const text = await client.request<string>("GET", "/metrics");
  let n = 0;
  for (const line of text.split("\n")) if (line.startsWith("apiserver_longrunning_requests{") && line.includes('verb="WATCH"')) n += Number(line.slice(line.lastIndexOf(" ") + 1));
  return n;
}

type Counters = {
  counts: Counts; // "side|caller|VERB resource[/sub]"
  connections: Counts; // new TCP (here: TLS) connections to "hub" / "spoke", from this process
  newAgentHubClients: number; // hub clients of the cluster identity seen for the first time
  tag(client: KubeClient, caller: string): void;
  restore(): void;
};

// Wraps KubeClient's one exchange method for the bench's duration, so every request of every function,
// relay and simulated component in this process is counted by who sent it: the bench's own clients by
// tag, the others by the kubeconfig user (the cluster's identity is the hub kubeconfig's default-auth).
function instrumentRequests(): Counters {
  const tags = new WeakMap<KubeClient, string>();
  const seen = new WeakSet<KubeClient>();
  const original = KubeClient.prototype.request;
  // every client socket this process opens, by the API server it connects to
  const onSocket = (message: unknown) => {
    const socket = (message as { socket: Socket }).socket;
    socket.once("connect", () => {
      const port = String(socket.remotePort);
      const to = port === hubServer.port ? "hub" : port === spokeServer.port ? "spoke" : undefined;
      if (to) add(counters.connections, to, 1);
    });
  };
  subscribe("net.client.socket", onSocket);
  const counters: Counters = {
    counts: new Map(),
    connections: new Map(),
    newAgentHubClients: 0,
    tag: (client, caller) => tags.set(client, caller),
    restore: () => {
      KubeClient.prototype.request = original;
      unsubscribe("net.client.socket", onSocket);
    },
  };
  const callerOf = (client: KubeClient): string => {
    const tagged = tags.get(client);
    if (tagged) return tagged;
    const user = client.user.name;
    if (user === HubKubeconfigLayout.user) return "cluster identity";
    if (user.startsWith(`ocm-functions:${rolloutFn.spec.name}`)) return "rollout";
    if (user.startsWith(`ocm-functions:${agentConfigFn.spec.name}:`)) return "agent-config";
    if (user.startsWith("ocm-functions:relay")) return "relay";
    return user.replace(/^ocm-functions:/, "");
  };
  KubeClient.prototype.request = function <T>(this: KubeClient, method: string, path: string, body?: unknown, contentType?: string): Promise<T> {
    const url = new URL(path, "https://x");
    const parts = url.pathname.split("/").filter(Boolean); // api[s], [group], version, [namespaces, ns], plural, [name, [sub]]
    if (parts[0] === "api" || parts[0] === "apis") {
      const afterVersion = parts.slice(parts[0] === "api" ? 2 : 3);
      const rel = afterVersion[0] === "namespaces" && afterVersion.length > 2 ? afterVersion.slice(2) : afterVersion;
      const verb = method === "GET" ? (rel.length === 1 ? "LIST" : "GET") : method;
      const caller = callerOf(this);
      const side = this.server === hubServer.url ? "hub" : "spoke";
      add(counters.counts, `${side}|${caller}|${verb} ${rel[0] ?? "?"}${rel[2] ? `/${rel[2]}` : ""}`, 1);
      if (caller === "cluster identity" && !seen.has(this)) {
        seen.add(this);
        counters.newAgentHubClients++;
      }
    }
    return original.call(this, method, path, body, contentType) as Promise<T>;
  };
  return counters;
}
// The API servers' URLs and ports, known once the control planes run.
const hubServer = { url: "", port: "" };
const spokeServer = { port: "" };

// ---- function logs: warnings, errors and conflict retries, by function and message

type LogCounter = { counts: Counts; log(fn: string): Log; summary(): string };

function logCounter(): LogCounter {
  const counts: Counts = new Map();
  const firstError = new Map<string, string>(); // the error field of a warning's first line
  const kind = (fn: string) => (fn.startsWith("relay-") && fn !== "relay-hub" ? "relay-<cluster>" : fn);
  return {
    counts,
    log: (fn) =>
      jsonLog(fn, (line) => {
        if (line.startsWith('{"level":"info"') && !line.includes('"msg":"conflict')) return;
        const { level, msg, error } = JSON.parse(line) as { level: string; msg: string; error?: unknown };
        const key = `${kind(fn)} ${level}: ${msg}`;
        add(counts, key, 1);
        if (error !== undefined && !firstError.has(key)) firstError.set(key, String(error).slice(0, 160));
      }),
    summary: () => (counts.size ? [...counts].map(([k, n]) => `${k} ×${n}${firstError.has(k) ? ` (first: ${firstError.get(k)})` : ""}`).join("; ") : "none"),
  };
}

// ---- CPU, memory, helpers

// utime + stime of a process, in ms (USER_HZ is 100 on Linux).
async function cpuTicksMs(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

async function vmHwm(pid: number | "self"): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  return Number(/VmHWM:\s+(\d+) kB/.exec(status)?.[1] ?? 0) * 1024;
}

type RssSampler = { resetWindow(): void; windowMax(): number; stop(): void };

function rssSampler(): RssSampler {
  let windowMax = 0;
  const timer = setInterval(() => (windowMax = Math.max(windowMax, process.memoryUsage.rss())), 250);
  timer.unref();
  return {
    resetWindow: () => (windowMax = process.memoryUsage.rss()),
    windowMax: () => Math.max(windowMax, process.memoryUsage.rss()),
    stop: () => clearInterval(timer),
  };
}

async function eachLimited<T>(items: readonly T[], limit: number, f: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) await f(items[next++]!);
    }),
  );
}

async function transientRetried<T>(f: () => Promise<T>, timeoutMs = 30_000): Promise<T> {
  const t0 = performance.now();
  for (;;) {
    try {
      return await f();
    } catch (err) {
      if (classifyError(err) !== "transient" || performance.now() - t0 > timeoutMs) throw err;
      await sleep(200);
    }
  }
}

