// Dynamic agent configuration end to end (docs/agent-config.md), in a fleet run as local mode runs it:
// real control planes, every function a server under its own identity fed by the relays, each spoke's
// heartbeat sidecar. The test only writes objects on the hub as its admin (AgentConfigs through the code
// of `ocmf config set`, in this process: a process of its own costs seconds of start-up on a loaded
// machine) and watches what the hub, the spokes and the sidecars do; it calls no reconcile.
//
// Clock and lease: the spokes' ManagedClusters ask for a 5 s lease and the hub's lease monitor gives
// 5 lease durations of grace (OCM's multiplier), so a cluster goes Unknown 25 s after its last renewal.
// A config that breaks the heartbeat stops renewals from the sidecar's next period (≤ 1.25 leases after
// the last renewal); the agent rolls it back a lease after the first failed renewal, and the sidecar's
// backoff (1, 2, 4 s…, capped at a lease) brings the next direct renewal within another lease: at most
// 3.25 lease durations (16 s) without a renewal, under the 25 s grace. That config's trial is 60 s, so
// without the rollback the cluster would go Unknown: the bound "never Unknown" is the rollback's doing.
//
// AGENT_CONFIG_E2E_LOG=<file> writes every function, relay and sidecar line there, with the test's own
// marks and, as each recorder stops, every state it saw.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { writeFileSync, appendFileSync } from "node:fs";
import { startClusters, freePort, type LocalClusters } from "../dev/control-plane/clusters.ts";
import { startApiserver, stopApiserver } from "../dev/control-plane/restart.ts";
import { startFleet, type Fleet } from "../dev/local/fleet.ts";
import { parseSettingsChange, rolloutStatus, setConfig, type SetOptions, type Strategy } from "../cli/config.ts";
import { KubeClient, type KubeObject, type ListOptions } from "../shared/kube/client.ts";
import { startReflector } from "../shared/kube/reflector.ts";
import type { ApiResource } from "../shared/api/meta.ts";
import { ConfigMapResource } from "../shared/api/kube.ts";
import { AgentNamespaceDefault } from "../shared/api/registration.ts";
import {
  ClusterClaimResource,
  ClusterLabel,
  DefaultClusterSetName,
  ManagedClusterConditionType,
  ManagedClusterResource,
  ManagedClusterSetBindingResource,
  PlacementDecisionResource,
  PlacementResource,
  TaintKey,
  type ManagedCluster,
  type PlacementDecision,
} from "../shared/api/cluster.ts";
import { AgentConfigConditionType, AgentConfigName, AgentConfigReason, AgentConfigResource, RolloutPhase, type AgentConfig, type AgentSettings } from "../shared/api/agent-config.ts";
import { AgentHealthConfigMapName, CheckpointConfigMapName, HealthKey, InstallTimeHash, RolloutLabel, RolloutNamespaceAnnotation, parseCheckpoint, parseHealthRecords, settingsHash } from "../shared/agent-config.ts";
import { findCondition } from "../shared/conditions.ts";
import { eventually } from "./support/eventually.ts";

// Own timeouts: the fleet (three control planes, seventeen functions, three relays, two sidecars) takes
// up to a minute or two to start and join on a loaded 2-core machine.
const FLEET_START_MS = 240_000;
const TEST_MS = 120_000;

const LEASE_SECONDS = 5;
const GRACE_MULTIPLIER = 5;
const LEASE_MS = LEASE_SECONDS * 1000;
const C1 = "cluster1";
const C2 = "cluster2";
const NS = AgentNamespaceDefault;
const FLEET_NS = "default";

type ConfigMap = KubeObject & { data?: Record<string, string> };
type AgentConfigObject = AgentConfig & KubeObject;
type Cluster = ManagedCluster & KubeObject;

let clusters: LocalClusters | undefined;
let fleet: Fleet | undefined;
let hub: KubeClient; // the hub admin
const spokes = new Map<string, KubeClient>(); // each spoke's admin: reads the checkpoint and health records
const recorders: Recorder<KubeObject>[] = [];
const logs: string[] = []; // the sidecars' lines, to see the log level they run with
const logFile = process.env.AGENT_CONFIG_E2E_LOG;
// A line of the test's own among them, to read the others by.
const mark = (msg: string, fields: object = {}) => logFile && appendFileSync(logFile, `${JSON.stringify({ level: "info", time: new Date().toISOString(), fn: "test", msg, ...fields })}\n`);

beforeAll(async () => {
  if (logFile) writeFileSync(logFile, "");
  clusters = await startClusters({ names: ["hub", C1, C2], log: () => {} });
  fleet = await startFleet({
    clusters,
    spokes: [
      { name: C1, autoApprove: true },
      { name: C2, autoApprove: true },
    ],
    resyncMs: 2_000,
    leaseDurationSeconds: LEASE_SECONDS,
    leaseGraceMultiplier: GRACE_MULTIPLIER,
    log: (line) => {
      if (logFile) appendFileSync(logFile, line);
      if (line.includes('"fn":"heartbeat-')) logs.push(line);
    },
  });
  hub = fleet.hub;
  for (const c of [C1, C2]) spokes.set(c, KubeClient.fromKubeconfig(clusters.get(c).adminKubeconfig));
  // Joined, available, renewing, and each agent-config function reporting (nothing assigned yet).
  await Promise.all(
    [C1, C2].map((c) =>
      eventually(
        async () => {
          const mc = await managedCluster(c);
          expect(mc?.spec?.leaseDurationSeconds).toBe(LEASE_SECONDS);
          expect(findCondition(mc?.status?.conditions, ManagedClusterConditionType.Joined)?.status).toBe("True");
          expect(findCondition(mc?.status?.conditions, ManagedClusterConditionType.Available)?.status).toBe("True");
          expect(findCondition(mc?.status?.conditions, AgentConfigConditionType.AgentConfigOK)?.reason).toBe(AgentConfigReason.ConfigNotAssigned);
          expect(sidecar(c).status().renewals).toBeGreaterThan(0);
        },
        { timeoutMs: 120_000, intervalMs: 500 },
      ),
    ),
  );
  mark("fleet ready");
}, FLEET_START_MS);

afterAll(async () => {
  for (const r of recorders) r.stop();
  for (const c of spokes.values()) c.close();
  await fleet?.stop();
  if (clusters) await stopApiserver(clusters.get("hub")); // it may have been restarted: clusters.stop() knows only the first process
  await clusters?.stop();
}, 60_000);

// ---- reading the fleet

const managedCluster = (name: string) => hub.get<Cluster>(ManagedClusterResource, name);
const agentConfig = (cluster: string) => hub.get<AgentConfigObject>(AgentConfigResource, AgentConfigName, cluster);
const agentConfigOK = (o: { status?: { conditions?: Parameters<typeof findCondition>[0] } } | undefined) => findCondition(o?.status?.conditions, AgentConfigConditionType.AgentConfigOK);
const spoke = (cluster: string) => spokes.get(cluster)!;
const sidecar = (cluster: string) => fleet!.heartbeats.get(cluster)!;
const checkpoint = async (cluster: string) => parseCheckpoint((await spoke(cluster).get<ConfigMap>(ConfigMapResource, CheckpointConfigMapName, NS))?.data);
const health = async (cluster: string) => parseHealthRecords((await spoke(cluster).get<ConfigMap>(ConfigMapResource, AgentHealthConfigMapName, NS))?.data);
const customClaims = (mc: Cluster | undefined) => (mc?.status?.clusterClaims ?? []).flatMap((c) => (c.name?.endsWith(".e2e.test") ? [c.name] : []));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// An AgentConfig's AgentConfigOK reason once it reads `reason` (for the hash assigned, when given).
async function reasonReached(cluster: string, reason: string, hash?: string, timeoutMs = 60_000): Promise<AgentConfigObject> {
  return eventually(
    async () => {
      const c = await agentConfig(cluster);
      if (hash) expect(c?.status?.assigned?.hash).toBe(hash);
      expect(agentConfigOK(c)?.reason).toBe(reason);
      return c!;
    },
    { timeoutMs, intervalMs: 200 },
  );
}

// `ocmf config set`'s own parsing and write, in this process.
type SetArgs = { set?: string[]; unset?: string[]; trialSeconds?: number } & (
  | { cluster: string }
  | { fleet: string; namespace: string; placement?: string; strategy?: Strategy; maxConcurrency?: number | string; maxRolledBack?: number | string }
);
const configSet = (o: SetArgs) => {
  const { set = [], unset = [], ...rest } = o;
  return setConfig(hub, { ...rest, change: parseSettingsChange(set, unset) } as SetOptions);
};

// ---- recording what happens, by watching

type Seen<T> = { at: number; type: string; object: T };
type Recorder<T> = { seen: Seen<T>[]; listed: Promise<void>; stop(): void };

// Every state of the objects `o` selects, as shared/kube/reflector.ts lists and watches them: resumed
// when the watch ends or the API server goes away (a hub outage), listed again after 410 Gone. Its own
// client: the outage breaks its connections, not the test's. Its failures are logged on stderr.
function record<T extends KubeObject>(kubeconfig: string, resource: ApiResource, o: ListOptions): Recorder<T> {
  const client = KubeClient.fromKubeconfig(kubeconfig);
  const seen: Seen<T>[] = [];
  const line = (level: string) => (fields: object, msg: string) => void process.stderr.write(`${JSON.stringify({ level, msg, ...fields })}\n`);
  const reflector = startReflector<T>({
    name: `record ${resource.plural}`,
    resource,
    ...o,
    client,
    timeoutSeconds: 600,
    backoff: { initialMs: 250, maxMs: 2_000 },
    log: { info: line("info"), warn: line("warn"), error: line("error") },
    onChange: (c) => void seen.push({ at: Date.now(), type: c.type, object: c.object }),
  });
  let stopped = false;
  const r: Recorder<T> = {
    seen,
    listed: reflector.ready,
    stop() {
      if (stopped) return;
      stopped = true;
      void reflector.stop().finally(() => client.close());
      for (const x of seen) mark(`seen ${resource.kind} ${o.namespace ?? ""}/${o.fieldSelector ?? ""}`, { at: new Date(x.at).toISOString(), type: x.type, data: (x.object as ConfigMap).data, status: x.object.status, spec: x.object.spec });
    },
  };
  recorders.push(r as unknown as Recorder<KubeObject>);
  return r;
}

const hubKubeconfig = () => clusters!.get("hub").adminKubeconfig;
const spokeKubeconfig = (cluster: string) => clusters!.get(cluster).adminKubeconfig;
const recordAgentConfig = (cluster: string) => record<AgentConfigObject>(hubKubeconfig(), AgentConfigResource, { namespace: cluster, fieldSelector: `metadata.name=${AgentConfigName}` });
const recordConfigMap = (cluster: string, name: string) => record<ConfigMap>(spokeKubeconfig(cluster), ConfigMapResource, { namespace: NS, fieldSelector: `metadata.name=${name}` });

// Consecutive distinct values, undefined left out: the transitions seen.
function transitions<T>(values: readonly (T | undefined)[]): T[] {
  const out: T[] = [];
  for (const v of values) if (v !== undefined && out.at(-1) !== v) out.push(v);
  return out;
}

// The AgentConfigOK reasons an agent reported for the config with this hash, in order.
const reasonsFor = (r: Recorder<AgentConfigObject>, hash: string) => transitions(r.seen.filter((s) => s.object.status?.assigned?.hash === hash).map((s) => agentConfigOK(s.object)?.reason));

// ---- the cases

describe("dynamic agent configuration in a local fleet", () => {
  let good: { hash: string; settings: AgentSettings }; // cluster1's last-known-good after the first case
  let closedProxy: string; // an http proxy nobody listens on

  it("tries a good config, makes it last-known-good, and the sidecar and the status function run it", { timeout: TEST_MS }, async () => {
    // Two custom claims: the status function exposes as many as its clusterClaimLimit allows.
    mark("case 1");
    for (const n of ["a", "b"]) await spoke(C1).create(ClusterClaimResource, { metadata: { name: `${n}.e2e.test` }, spec: { value: n } });
    await eventually(async () => expect(customClaims(await managedCluster(C1))).toEqual(["a.e2e.test", "b.e2e.test"]), { timeoutMs: 30_000, intervalMs: 200 });
    const hubSide = recordAgentConfig(C1);
    await hubSide.listed;
    const logsBefore = logs.length;

    const settings: AgentSettings = { statusSyncIntervalSeconds: 10, clusterClaimLimit: 1, logLevel: "debug" };
    // ocmf config set --cluster cluster1 --trial-seconds 8 statusSyncIntervalSeconds=10 clusterClaimLimit=1 logLevel=debug
    const set = await configSet({ cluster: C1, set: ["statusSyncIntervalSeconds=10", "clusterClaimLimit=1", "logLevel=debug"], trialSeconds: 8 });
    expect(set).toMatchObject({ namespace: C1, name: AgentConfigName, result: "created", hash: settingsHash(settings) });
    good = { hash: settingsHash(settings), settings };

    const active = await reasonReached(C1, AgentConfigReason.ConfigActive, good.hash);
    expect(active.status).toMatchObject({ assigned: { hash: good.hash }, active: { hash: good.hash }, lastKnownGood: { hash: good.hash }, lastError: "" });
    expect(reasonsFor(hubSide, good.hash)).toEqual([AgentConfigReason.ConfigOnTrial, AgentConfigReason.ConfigActive]);
    // the agent writes the ManagedCluster's copy after the AgentConfig's status
    await eventually(async () => expect(agentConfigOK(await managedCluster(C1))).toMatchObject({ status: "True", reason: AgentConfigReason.ConfigActive }), { timeoutMs: 15_000, intervalMs: 200 });

    // The spoke's checkpoint holds it, as active and last-known-good.
    const cp = await checkpoint(C1);
    expect(cp).toMatchObject({ active: good, lastKnownGood: good, assigned: { hash: good.hash, trialSeconds: 8 } });
    expect(cp.failed).toBeUndefined();

    // The sidecar runs it: its settings, and renewals now logged at debug level.
    expect(sidecar(C1).status().settings).toMatchObject({ hash: good.hash, logLevel: "debug" });
    await eventually(() => expect(logs.slice(logsBefore).some((l) => l.includes('"fn":"heartbeat-cluster1"') && l.includes('"level":"debug"') && l.includes('"msg":"renewed"'))).toBe(true), { timeoutMs: 15_000, intervalMs: 200 });
    // The status function runs it: one custom claim exposed, and its status writes recorded under it.
    await eventually(async () => expect(customClaims(await managedCluster(C1))).toEqual(["a.e2e.test"]), { timeoutMs: 15_000, intervalMs: 200 });
    expect(await health(C1)).toMatchObject({ [HealthKey.Heartbeat]: { hash: good.hash, ok: true }, [HealthKey.StatusSync]: { hash: good.hash, ok: true } });
    hubSide.stop();
  });

  it("rolls back a config that breaks the heartbeat within its trial, before the hub marks the cluster Unknown", { timeout: TEST_MS }, async () => {
    expect(good).toBeDefined();
    mark("case 2");
    closedProxy = `http://127.0.0.1:${await freePort()}`;
    const availability = record<Cluster>(hubKubeconfig(), ManagedClusterResource, { fieldSelector: `metadata.name=${C1}` });
    const records = recordConfigMap(C1, AgentHealthConfigMapName);
    await Promise.all([availability.listed, records.listed]);

    // config set keeps what it does not set: the good settings with a proxy nobody listens on.
    const set = await configSet({ cluster: C1, set: [`heartbeat.proxyURL=${closedProxy}`], trialSeconds: 60 });
    const broken = settingsHash({ ...good.settings, heartbeat: { proxyURL: closedProxy } });
    expect(set).toMatchObject({ result: "updated", hash: broken });

    const rolledBack = await reasonReached(C1, AgentConfigReason.ConfigRolledBack, broken, 45_000);
    expect(rolledBack.status).toMatchObject({ assigned: { hash: broken }, active: { hash: good.hash }, lastKnownGood: { hash: good.hash } });
    expect(rolledBack.status?.lastError).toMatch(new RegExp(`^using last-known-good ${good.hash}: assigned config ${broken} failed its trial: heartbeat failing since \\S+: hub: .*ECONNREFUSED`));
    await eventually(async () => expect(agentConfigOK(await managedCluster(C1))).toMatchObject({ status: "False", reason: AgentConfigReason.ConfigRolledBack }), { timeoutMs: 15_000, intervalMs: 200 });
    const cp = await checkpoint(C1);
    expect(cp).toMatchObject({ active: good, lastKnownGood: good, assigned: { hash: broken, trialSeconds: 60 }, failed: { hash: broken, reason: expect.stringMatching(/^heartbeat failing since/) } });
    // Within the trial: the verdict came before the trial would have ended.
    const rolledBackAt = Date.parse(agentConfigOK(rolledBack)!.lastTransitionTime!);
    expect(rolledBackAt).toBeLessThan(Date.parse(cp.assigned!.since) + 60_000);

    // The sidecar did run it, and its renewals through the proxy failed...
    const heartbeatRecords = records.seen.map((s) => parseHealthRecords(s.object.data)[HealthKey.Heartbeat]);
    expect(heartbeatRecords).toContainEqual(expect.objectContaining({ hash: broken, ok: false, error: expect.stringMatching(/ECONNREFUSED/) }));
    // ...then it went back to renewing directly under the last-known-good.
    const renewalsAtRollback = sidecar(C1).status().renewals;
    const back = await eventually(
      () => {
        const s = sidecar(C1).status();
        expect(s).toMatchObject({ settings: { hash: good.hash }, proxyURL: "", last: { kind: "renewed" }, failuresInARow: 0 });
        expect(s.renewals).toBeGreaterThan(renewalsAtRollback);
        return s;
      },
      { timeoutMs: 2 * LEASE_MS + 5_000, intervalMs: 100 },
    );
    expect(back.settings.proxyURL).toBeUndefined();
    await eventually(async () => expect((await health(C1))[HealthKey.Heartbeat]).toMatchObject({ hash: good.hash, ok: true }), { timeoutMs: 10_000, intervalMs: 200 });

    // Available, as the hub's lease monitor judged it throughout: a renewal is fresh again, so any
    // Unknown would have been written by now; a moment more for its event to arrive.
    await sleep(2_000);
    availability.stop();
    records.stop();
    const available = transitions(availability.seen.map((s) => findCondition(s.object.status?.conditions, ManagedClusterConditionType.Available)?.status));
    expect(available[0]).toBe("True");
    expect(available).not.toContain("Unknown");
    expect(available).toEqual(["True"]);
  });

  it("does not hold a hub outage during a trial against a healthy config", { timeout: TEST_MS }, async () => {
    const hubCluster = clusters!.get("hub");
    mark("case 3");
    const hubSide = recordAgentConfig(C2);
    const spokeSide = recordConfigMap(C2, CheckpointConfigMapName);
    const records = recordConfigMap(C2, AgentHealthConfigMapName);
    await Promise.all([hubSide.listed, spokeSide.listed, records.listed]);

    // A trial long enough to hold the outage whatever a restart of the API server costs on a loaded
    // machine (it has taken 20 s); once the agent has come through the outage, the admin shortens it.
    const set = await configSet({ cluster: C2, set: ["logLevel=debug", "statusSyncIntervalSeconds=10"], trialSeconds: 120 });
    const healthy = set.hash;
    expect(healthy).toBe(settingsHash({ logLevel: "debug", statusSyncIntervalSeconds: 10 }));
    await reasonReached(C2, AgentConfigReason.ConfigOnTrial, healthy, 30_000);
    const since = Date.parse((await checkpoint(C2)).assigned!.since);
    // The sidecar and the status function run it, and both say it works.
    const bothOk = { [HealthKey.Heartbeat]: { hash: healthy, ok: true }, [HealthKey.StatusSync]: { hash: healthy, ok: true } };
    await eventually(async () => expect(await health(C2)).toMatchObject(bothOk), { timeoutMs: 20_000, intervalMs: 200 });

    // The hub's API server dies (a kill: a graceful stop only adds seconds) and stays away until the
    // sidecar's renewals under the config have failed for more than a lease duration.
    hubCluster.apiserver!.child.kill("SIGKILL");
    await stopApiserver(hubCluster); // waits for the exit
    mark("hub stopped");
    let backAt: number;
    try {
      const failed = await eventually(
        async () => {
          const r = (await health(C2))[HealthKey.Heartbeat];
          expect(r).toMatchObject({ hash: healthy, ok: false });
          return r!;
        },
        { timeoutMs: 3 * LEASE_MS, intervalMs: 200 },
      );
      await sleep(Math.max(0, Date.parse(failed.since) + LEASE_MS + 1_000 - Date.now()));
    } finally {
      await startApiserver(hubCluster);
      backAt = Date.now();
      mark("hub back");
    }
    expect(backAt).toBeLessThan(since + 120_000); // the outage fell within the trial

    // Back: both components renew and sync again, and a lease duration later (when a rollback for
    // failures counted across the outage would have come) the config is still on trial.
    await eventually(async () => expect(await health(C2)).toMatchObject(bothOk), { timeoutMs: 30_000, intervalMs: 200 });
    await sleep(LEASE_MS);
    expect(agentConfigOK(await agentConfig(C2))?.reason).toBe(AgentConfigReason.ConfigOnTrial);
    // The admin shortens the trial to end now (same settings: the trial keeps its start); it completes.
    await configSet({ cluster: C2, trialSeconds: Math.ceil((Date.now() - since) / 1000) + 1 });
    const active = await reasonReached(C2, AgentConfigReason.ConfigActive, healthy, 30_000);
    expect(active.status).toMatchObject({ assigned: { hash: healthy }, active: { hash: healthy }, lastKnownGood: { hash: healthy }, lastError: "" });
    await eventually(async () => expect(agentConfigOK(await managedCluster(C2))).toMatchObject({ status: "True", reason: AgentConfigReason.ConfigActive }), { timeoutMs: 15_000, intervalMs: 200 });
    hubSide.stop();
    spokeSide.stop();
    records.stop();

    // No rollback in between, on the hub or on the spoke: the checkpoint ran the config, with the trial
    // begun at its assignment, until its promotion.
    expect(reasonsFor(hubSide, healthy)).toEqual([AgentConfigReason.ConfigOnTrial, AgentConfigReason.ConfigActive]);
    const checkpoints = spokeSide.seen.map((x) => parseCheckpoint(x.object.data));
    expect(checkpoints.length).toBeGreaterThan(0);
    for (const c of checkpoints) {
      expect(c.active.hash).toBe(healthy);
      expect(c.failed).toBeUndefined();
      expect(Date.parse(c.assigned!.since)).toBe(since);
    }
    expect(checkpoints.at(-1)?.lastKnownGood.hash).toBe(healthy);
    // Control: the outage was felt, as failed renewals under the config.
    const heartbeatRecords = records.seen.map((x) => parseHealthRecords(x.object.data)[HealthKey.Heartbeat]);
    expect(heartbeatRecords).toContainEqual(expect.objectContaining({ hash: healthy, ok: false }));
  });

  it("halts a fleet rollout at the first rolled-back cluster, then rolls a good config out to both", { timeout: 150_000 }, async () => {
    expect(closedProxy).toBeDefined();
    mark("case 4");
    const before2 = await agentConfig(C2);
    const lastKnownGood2 = before2?.status?.lastKnownGood?.hash;
    expect(agentConfigOK(before2)?.reason).toBe(AgentConfigReason.ConfigActive);
    const lastKnownGood1 = (await checkpoint(C1)).lastKnownGood.hash;
    expect([lastKnownGood1, lastKnownGood2]).not.toContain(InstallTimeHash);

    // The default set bound into the namespace, and a Placement over it that keeps a cluster whatever
    // its health (the rollout, not the scheduler, is what this case is about).
    await hub.create(ManagedClusterSetBindingResource, { metadata: { name: DefaultClusterSetName, namespace: FLEET_NS }, spec: { clusterSet: DefaultClusterSetName } });
    await hub.create(PlacementResource, {
      metadata: { name: "all", namespace: FLEET_NS },
      spec: { clusterSets: [DefaultClusterSetName], tolerations: [TaintKey.Unreachable, TaintKey.Unavailable].map((key) => ({ key, operator: "Exists" })) },
    });
    await eventually(
      async () => {
        const { items } = await hub.list<PlacementDecision & KubeObject>(PlacementDecisionResource, { namespace: FLEET_NS, labelSelector: `${ClusterLabel.Placement}=all` });
        expect(items.flatMap((d) => (d.status?.decisions ?? []).map((x) => x.clusterName)).sort()).toEqual([C1, C2]);
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );

    // The earlier cases wrote both clusters' configs by hand, and a rollout never takes such a config
    // over (docs/agent-config.md, "Whom the rollout acts for"): the admin hands them to this one.
    for (const cluster of [C1, C2]) {
      await hub.patch(AgentConfigResource, AgentConfigName, { metadata: { labels: { [RolloutLabel]: "e2e-tuning" }, annotations: { [RolloutNamespaceAnnotation]: FLEET_NS } } }, { namespace: cluster });
    }

    const second = recordAgentConfig(C2);
    const secondCheckpoint = recordConfigMap(C2, CheckpointConfigMapName);
    await Promise.all([second.listed, secondCheckpoint.listed]);
    const fleetConfig = () => hub.get<AgentConfigObject>(AgentConfigResource, "e2e-tuning", FLEET_NS);

    // A fleet config that breaks the heartbeat, one cluster at a time, halting at the first rollback.
    const brokenSet = await configSet({ fleet: "e2e-tuning", namespace: FLEET_NS, placement: "all", strategy: "Progressive", maxConcurrency: 1, maxRolledBack: 0, trialSeconds: 30, set: [`heartbeat.proxyURL=${closedProxy}`] });
    const broken = brokenSet.hash;
    expect(broken).toBe(settingsHash({ heartbeat: { proxyURL: closedProxy } }));
    const halted = await eventually(
      async () => {
        const f = await fleetConfig();
        expect(f?.status?.rollout?.phase).toBe(RolloutPhase.Halted);
        return f!;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    expect(halted.status).toMatchObject({ assigned: { hash: broken }, rollout: { phase: RolloutPhase.Halted, updated: [C1], rolledBack: [C1] } });
    const first = await agentConfig(C1);
    expect(first?.status).toMatchObject({ assigned: { hash: broken }, active: { hash: lastKnownGood1 }, lastKnownGood: { hash: lastKnownGood1 } });
    expect(agentConfigOK(first)?.reason).toBe(AgentConfigReason.ConfigRolledBack);
    // What `ocmf config rollout status` says (and exits 1 on), by its own code.
    const status = await rolloutStatus(hub, "e2e-tuning", FLEET_NS);
    expect(status.halted).toBe(true);
    expect(status.summary).toContain(`the rollout of ${FLEET_NS}/e2e-tuning is Halted: 1 of 2 clusters rolled back (${C1})`);

    // Halted stays halted: a few resync ticks later the second cluster still has not been given it.
    await sleep(4_000);
    expect((await fleetConfig())?.status?.rollout?.phase).toBe(RolloutPhase.Halted);
    second.stop();
    secondCheckpoint.stop();
    expect(second.seen.length).toBeGreaterThan(0);
    for (const s of second.seen) {
      expect(settingsHash(s.object.spec?.settings ?? {})).not.toBe(broken);
      expect(s.object.status?.lastKnownGood?.hash).toBe(lastKnownGood2);
    }
    expect(secondCheckpoint.seen.length).toBeGreaterThan(0);
    for (const s of secondCheckpoint.seen) expect(parseCheckpoint(s.object.data)).toMatchObject({ active: { hash: lastKnownGood2 }, lastKnownGood: { hash: lastKnownGood2 } });
    expect(agentConfigOK(await agentConfig(C2))?.reason).toBe(AgentConfigReason.ConfigActive);

    // A good fleet config in its place: it reaches both, one after the other, and succeeds.
    const goodSet = await configSet({ fleet: "e2e-tuning", namespace: FLEET_NS, set: ["logLevel=debug"], unset: ["heartbeat"], trialSeconds: 6 });
    const fine = goodSet.hash;
    expect(fine).toBe(settingsHash({ logLevel: "debug" }));
    const succeeded = await eventually(
      async () => {
        const f = await fleetConfig();
        expect(f?.status?.assigned?.hash).toBe(fine);
        expect(f?.status?.rollout?.phase).toBe(RolloutPhase.Succeeded);
        return f!;
      },
      { timeoutMs: 90_000, intervalMs: 200 },
    );
    expect(succeeded.status?.rollout).toEqual({ phase: RolloutPhase.Succeeded, updated: [C1, C2], rolledBack: [] });
    for (const c of [C1, C2]) {
      const own = await agentConfig(c);
      expect(own?.status).toMatchObject({ assigned: { hash: fine }, active: { hash: fine }, lastKnownGood: { hash: fine } });
      expect(agentConfigOK(own)?.reason).toBe(AgentConfigReason.ConfigActive);
      expect(await checkpoint(c)).toMatchObject({ active: { hash: fine }, lastKnownGood: { hash: fine } });
    }
    const done = await rolloutStatus(hub, "e2e-tuning", FLEET_NS);
    expect(done.halted).toBe(false);
    expect(done.text).toMatch(/SUCCEEDED\s+2\/2/);
  });
});
