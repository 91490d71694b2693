// agent-config against a real hub and spoke (a fleet with one auto-approved cluster), under its own spoke
// identity and the cluster's hub identity: an AgentConfig assigned on the hub is checked, checkpointed,
// tried, promoted or rolled back (docs/agent-config.md), judged from health records the test writes as
// the heartbeat and spoke-cluster-status would, with a clock the test moves. The fleet's own relays
// and heartbeat are stopped once the cluster has joined, so the test's calls are the only ones.
import { describe, it, expect, beforeAll, afterAll, beforeEach } from "vitest";
import { startFleet, type Fleet } from "../../dev/local/fleet.ts";
import { startApiserver, stopApiserver } from "../../dev/control-plane/restart.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { KubeError } from "../../shared/kube/errors.ts";
import { ClusterRoleResource, ConfigMapResource, CustomResourceDefinitionResource } from "../../shared/api/kube.ts";
import { HubRbacName } from "../../shared/api/register.ts";
import { crds } from "../../shared/api/crds.ts";
import { AgentNamespaceDefault } from "../../shared/api/registration.ts";
import { DefaultLeaseDurationSeconds, ManagedClusterResource, type ManagedCluster } from "../../shared/api/cluster.ts";
import {
  AgentConfigConditionType,
  AgentConfigGroup,
  AgentConfigMessage,
  AgentConfigName,
  AgentConfigReason,
  AgentConfigResource,
  type AgentConfig,
  type AgentSettings,
} from "../../shared/api/agent-config.ts";
import {
  AgentHealthConfigMapName,
  CheckpointConfigMapName,
  HealthKey,
  InstallTimeHash,
  parseCheckpoint,
  readActiveSettings,
  settingsHash,
  type Checkpoint,
  type HealthRecord,
} from "../../shared/agent-config.ts";
import { findCondition } from "../../shared/conditions.ts";
import { manualClock, rfc3339 } from "../../shared/clock.ts";
import { handleEvent, jsonLog, reconcileKey, serve, type Io, type Outcome } from "../../shared/harness.ts";
import type { FunctionEvent } from "../../shared/events.ts";
import fn, { judge, ConfigSchema, ConfigNotServedReason, configNotServedMessage, type Config } from "../../functions/agent-config/reconcile.ts";
import { identityFor, objectEvent, postEvent, startFunctionServer, testIo, tickEvent } from "../support/functions.ts";
import { eventually } from "../support/eventually.ts";
import { joinedThenQuiet } from "../support/fixtures.ts";

// Own timeouts, not the runner's defaults: starting the fleet (control planes, functions, relays) and
// joining take up to a minute or two on a loaded 2-core machine; restarting the hub's API server takes
// seconds.
const FLEET_START_MS = 240_000;
const FLEET_TEST_MS = 90_000;

const C = "cluster1";
const HUB = "hub";
const NS = AgentNamespaceDefault;
const key = { cluster: C, name: C };

type ConfigMap = KubeObject & { data?: Record<string, string> };
type AgentConfigObject = AgentConfig & KubeObject;
type Cluster = ManagedCluster & KubeObject;

let fleet: Fleet;
let hub: KubeClient; // hub admin: assigns configs, reads what the agent reported
let spoke: KubeClient; // spoke admin: plays the components that keep health records, reads the checkpoint
let fnKubeconfig: string;
let leaseMs: number;
let hubRestarted = false;

beforeAll(async () => {
  // No heartbeat sidecar: the test writes its health records.
  fleet = await startFleet({ spokes: [{ name: C, autoApprove: true }], resyncMs: 60_000, heartbeats: false });
  hub = fleet.hub;
  spoke = KubeClient.fromKubeconfig(fleet.clusters.get(C).adminKubeconfig);
  fnKubeconfig = await identityFor(fleet.clusters.get(C), fn.spec.name);
  // Joined, and the cluster's identity may read its AgentConfigs (granted at acceptance).
  await joinedThenQuiet(fleet, C, agent().io, (asCluster) => asCluster.list(AgentConfigResource, { namespace: C }));
  const mc = await hub.get<Cluster>(ManagedClusterResource, C);
  leaseMs = (mc?.spec?.leaseDurationSeconds || DefaultLeaseDurationSeconds) * 1000;
}, FLEET_START_MS);

afterAll(async () => {
  spoke?.close();
  if (hubRestarted) await stopApiserver(fleet.clusters.get(HUB)); // fleet.stop() knows only the first process
  await fleet?.stop();
});

// Every test starts from nothing assigned, no checkpoint and no health records.
beforeEach(async () => {
  await hub.delete(AgentConfigResource, AgentConfigName, C);
  await eventually(async () => expect(await hub.get(AgentConfigResource, AgentConfigName, C)).toBeUndefined());
  for (const name of [CheckpointConfigMapName, AgentHealthConfigMapName]) await spoke.delete(ConfigMapResource, name, NS);
});

function agent(o: { allow?: string; installTime?: AgentSettings } = {}) {
  const clock = manualClock();
  const io: Io<Config> = testIo({ [C]: fnKubeconfig }, ConfigSchema.parse({ managementCluster: C, clusterName: C, allow: o.allow, installTime: o.installTime }), clock);
  return { io, clock, run: (): Promise<Outcome> => reconcileKey(fn.spec, io, key) };
}

// The hub admin's assignment: the cluster's AgentConfig with exactly this spec.
async function assign(spec: { settings?: unknown; trialSeconds?: number }): Promise<AgentConfigObject> {
  const have = await hub.get<AgentConfigObject>(AgentConfigResource, AgentConfigName, C);
  if (have) return hub.update<AgentConfigObject>(AgentConfigResource, { ...have, spec: spec as AgentConfig["spec"] });
  return hub.create<AgentConfigObject>(AgentConfigResource, { metadata: { name: AgentConfigName, namespace: C }, spec: spec as AgentConfig["spec"] });
}

const assigned = () => hub.get<AgentConfigObject>(AgentConfigResource, AgentConfigName, C);
const hubCluster = () => hub.get<Cluster>(ManagedClusterResource, C);
const checkpointMap = () => spoke.get<ConfigMap>(ConfigMapResource, CheckpointConfigMapName, NS);
const checkpoint = async (): Promise<Checkpoint> => parseCheckpoint((await checkpointMap())?.data);
const reported = async () => findCondition((await assigned())?.status?.conditions, AgentConfigConditionType.AgentConfigOK);
const mirrored = async () => findCondition((await hubCluster())?.status?.conditions, AgentConfigConditionType.AgentConfigOK);

// What the heartbeat (key heartbeat) or spoke-cluster-status (statusSync) writes, exactly.
async function record(which: HealthKey, r: { hash: string; ok: boolean; since: Date; error?: string }): Promise<void> {
  const value: HealthRecord = { hash: r.hash, ok: r.ok, since: r.since.toISOString(), ...(r.error ? { error: r.error } : {}) };
  const data = { [which]: JSON.stringify(value) };
  if (await spoke.get(ConfigMapResource, AgentHealthConfigMapName, NS)) await spoke.patch(ConfigMapResource, AgentHealthConfigMapName, { data }, { namespace: NS });
  else await spoke.create<ConfigMap>(ConfigMapResource, { metadata: { name: AgentHealthConfigMapName, namespace: NS }, data });
}

// The resourceVersions of everything the function writes: equal before and after means nothing written.
const versions = async () => {
  const [cm, ac, mc] = await Promise.all([checkpointMap(), assigned(), hubCluster()]);
  return [cm?.metadata.resourceVersion, ac?.metadata.resourceVersion, mc?.metadata.resourceVersion];
};

const condition = (reason: string, status: string, message: string) => ({ type: AgentConfigConditionType.AgentConfigOK, status, reason, message });

describe("which events wake the agent", { timeout: FLEET_TEST_MS }, () => {
  const event = (cluster: string, kind: string, name: string, namespace?: string, apiVersion = kind === "AgentConfig" ? `${AgentConfigGroup}/v1alpha1` : "v1"): FunctionEvent => ({
    type: "object",
    verb: "update",
    cluster,
    ref: { apiVersion, kind, name, namespace },
  });
  it.each([
    { name: "the cluster's AgentConfig on the hub", event: event(HUB, "AgentConfig", AgentConfigName, C), wakes: true },
    { name: "a fleet-level AgentConfig in the cluster's namespace", event: event(HUB, "AgentConfig", "fleet-tuning", C), wakes: false },
    { name: "another cluster's AgentConfig", event: event(HUB, "AgentConfig", AgentConfigName, "cluster2"), wakes: false },
    { name: "an AgentConfig on the spoke", event: event(C, "AgentConfig", AgentConfigName, C), wakes: false },
    { name: "the checkpoint", event: event(C, "ConfigMap", CheckpointConfigMapName, NS), wakes: true },
    { name: "the health records", event: event(C, "ConfigMap", AgentHealthConfigMapName, NS), wakes: true },
    { name: "another ConfigMap of the agent namespace", event: event(C, "ConfigMap", "c1-kube-apiserver-probe", NS), wakes: false },
    { name: "a ConfigMap named agent-health elsewhere", event: event(C, "ConfigMap", AgentHealthConfigMapName, "default"), wakes: false },
    { name: "a resync tick", event: { type: "tick" } as FunctionEvent, wakes: true },
  ])("$name: wakes the cluster's key: $wakes", async ({ event, wakes }) => {
    expect(await fn.spec.keys(event, agent().io)).toEqual(wakes ? [key] : { skip: expect.any(String) });
  });
});

describe("no assignment", { timeout: FLEET_TEST_MS }, () => {
  it("reports ConfigNotAssigned on the ManagedCluster and writes no checkpoint, then nothing more when called again", async () => {
    const a = agent();
    expect(await a.run()).toEqual({ done: true });
    expect(await mirrored()).toMatchObject(condition(AgentConfigReason.ConfigNotAssigned, "True", AgentConfigMessage.notAssigned));
    expect(await checkpointMap()).toBeUndefined();
    expect(await readActiveSettings(spoke, NS)).toEqual({ hash: InstallTimeHash, settings: {} });
    const before = await versions();
    a.clock.advance(30_000);
    expect(await a.run()).toEqual({ done: true });
    expect(await versions()).toEqual(before);
  });
});

describe("a good config", { timeout: FLEET_TEST_MS }, () => {
  it("is checkpointed and tried, then becomes last-known-good once the trial has passed with both records ok, as reported on the hub", async () => {
    const a = agent();
    const settings = { statusSyncIntervalSeconds: 30, logLevel: "debug" as const, features: { FastResync: true } };
    const hash = settingsHash(settings);
    const ac = await assign({ settings, trialSeconds: 120 });
    const started = a.clock.now();

    expect(await a.run()).toEqual({ recheckInMs: 120_000 });
    expect(await checkpoint()).toEqual({
      active: { hash, settings },
      assigned: { hash, settings, trialSeconds: 120, since: started.toISOString() },
      lastKnownGood: { hash: InstallTimeHash, settings: {} },
    });
    expect(await readActiveSettings(spoke, NS)).toEqual({ hash, settings });
    const onTrial = condition(AgentConfigReason.ConfigOnTrial, "Unknown", AgentConfigMessage.onTrial(hash, rfc3339(new Date(started.getTime() + 120_000))));
    expect((await assigned())?.status).toMatchObject({ assigned: { hash }, active: { hash }, lastKnownGood: { hash: InstallTimeHash }, lastError: "" });
    expect(await reported()).toMatchObject({ ...onTrial, observedGeneration: ac.metadata.generation });
    expect(await mirrored()).toMatchObject(onTrial);

    // the components run it and say so
    a.clock.advance(5_000);
    await record(HealthKey.Heartbeat, { hash, ok: true, since: a.clock.now() });
    await record(HealthKey.StatusSync, { hash, ok: true, since: a.clock.now() });
    a.clock.advance(55_000);
    expect(await a.run()).toEqual({ recheckInMs: 60_000 });
    expect(await reported()).toMatchObject(onTrial);

    a.clock.advance(60_000);
    expect(await a.run()).toEqual({ done: true });
    expect((await checkpoint()).lastKnownGood).toEqual({ hash, settings });
    expect((await checkpoint()).active).toEqual({ hash, settings });
    const active = condition(AgentConfigReason.ConfigActive, "True", AgentConfigMessage.active(hash));
    expect((await assigned())?.status).toMatchObject({ assigned: { hash }, active: { hash }, lastKnownGood: { hash }, lastError: "" });
    expect(await reported()).toMatchObject({ ...active, lastTransitionTime: rfc3339(a.clock.now()) });
    expect(await mirrored()).toMatchObject(active);

    // nothing changed: nothing written
    const before = await versions();
    a.clock.advance(30_000);
    expect(await a.run()).toEqual({ done: true });
    expect(await versions()).toEqual(before);
  });

  it("goes back to the install-time settings when the AgentConfig is removed", async () => {
    const a = agent();
    await assign({ settings: { logLevel: "warn" } });
    await a.run();
    expect((await readActiveSettings(spoke, NS)).settings).toEqual({ logLevel: "warn" });
    await hub.delete(AgentConfigResource, AgentConfigName, C);
    await eventually(async () => expect(await assigned()).toBeUndefined());
    expect(await a.run()).toEqual({ done: true });
    expect(await readActiveSettings(spoke, NS)).toEqual({ hash: InstallTimeHash, settings: {} });
    expect(await checkpoint()).toEqual({ active: { hash: InstallTimeHash, settings: {} }, lastKnownGood: { hash: InstallTimeHash, settings: {} } });
    expect(await mirrored()).toMatchObject(condition(AgentConfigReason.ConfigNotAssigned, "True", AgentConfigMessage.notAssigned));
  });
});

describe("a refused config", { timeout: FLEET_TEST_MS }, () => {
  // The hub's CRD keeps keys it does not know (an agent may be newer than it); the agent refuses them.
  it.each([
    { name: "a misspelt setting", settings: { statusSyncIntervalSecs: 30 }, error: 'spec.settings: Unrecognized key: "statusSyncIntervalSecs"' },
    { name: "a misspelt heartbeat field", settings: { heartbeat: { proxyUrl: "http://proxy.example:3128" } }, error: 'spec.settings.heartbeat: Unrecognized key: "proxyUrl"' },
    // issue 23: what the CRD's pattern cannot say, the agent's schema does
    { name: "a proxy URL whose user name is not UTF-8 once decoded", settings: { heartbeat: { proxyURL: "http://%ff@127.0.0.1:9" } }, error: "spec.settings.heartbeat.proxyURL: proxy URL http://127.0.0.1:9: the user name is not valid percent-encoded UTF-8" },
    { name: "a feature gate named with a dot", settings: { features: { "a.b": true } }, error: 'spec.settings.features."a.b": Invalid key in record: a feature gate is named by a letter, then letters and digits' },
  ])("is ConfigInvalid for $name, and the checkpoint of the config before it is left as it was", async ({ settings, error }) => {
    const a = agent();
    const good = { logLevel: "info" as const };
    await assign({ settings: good });
    await a.run();
    const kept = await checkpointMap();
    expect(parseCheckpoint(kept?.data).active.hash).toBe(settingsHash(good));

    await assign({ settings });
    expect((await assigned())?.spec?.settings).toEqual(settings); // stored by the hub as written
    a.clock.advance(1_000);
    await a.run();
    const refused = condition(AgentConfigReason.ConfigInvalid, "False", AgentConfigMessage.invalid(error));
    expect(await reported()).toMatchObject(refused);
    expect(await mirrored()).toMatchObject(refused);
    expect((await assigned())?.status).toMatchObject({ assigned: { hash: settingsHash(settings) }, active: { hash: settingsHash(good) }, lastError: refused.message });
    expect((await checkpointMap())?.metadata.resourceVersion).toBe(kept?.metadata.resourceVersion);
  });

  type Row = { name: string; allow: string; installTime?: AgentSettings; settings: AgentSettings; refusedPath?: string };
  it.each<Row>([
    { name: "refuses a proxy when only sync, log level and features may change", allow: "statusSyncIntervalSeconds,logLevel,features", settings: { logLevel: "debug", heartbeat: { proxyURL: "http://proxy.example:3128" } }, refusedPath: "heartbeat.proxyURL" },
    { name: "refuses a feature gate outside the one allowed", allow: "features.FastResync", settings: { features: { FastResync: true, Other: false } }, refusedPath: "features.Other" },
    { name: "refuses everything when nothing may change", allow: "none", settings: { relayResyncSeconds: 120 }, refusedPath: "relayResyncSeconds" },
    { name: "accepts what the allow-list names (a feature gate under features)", allow: "statusSyncIntervalSeconds,logLevel,features", settings: { logLevel: "debug", features: { FastResync: true } } },
    { name: "accepts a path outside the list set to its install-time value", allow: "logLevel", installTime: { relayResyncSeconds: 300 }, settings: { logLevel: "debug", relayResyncSeconds: 300 } },
  ])("$name", async ({ allow, installTime, settings, refusedPath }) => {
    const a = agent({ allow, installTime });
    await assign({ settings });
    await a.run();
    if (refusedPath) {
      const refused = condition(AgentConfigReason.ConfigNotAllowed, "False", AgentConfigMessage.notAllowed(refusedPath));
      expect(await reported()).toMatchObject(refused);
      expect(await mirrored()).toMatchObject(refused);
      expect(await checkpointMap()).toBeUndefined(); // nothing applied
      expect(await readActiveSettings(spoke, NS)).toEqual({ hash: InstallTimeHash, settings: {} });
    } else {
      expect(await reported()).toMatchObject({ reason: AgentConfigReason.ConfigOnTrial });
      expect(await readActiveSettings(spoke, NS)).toEqual({ hash: settingsHash(settings), settings });
    }
  });
});

describe("the hub's CRD (issue 23)", { timeout: FLEET_TEST_MS }, () => {
  // Whoever may write AgentConfigs on the hub (here the rollout function's own identity, which writes the
  // clusters' ones) cannot store a setting past its bound: the API server refuses it, naming the field.
  it.each([
    { name: "relayResyncSeconds 2147484 (a tick every millisecond once times 1000)", spec: { settings: { relayResyncSeconds: 2_147_484 } }, says: /spec\.settings\.relayResyncSeconds: Invalid value: 2147484: .*less than or equal to 86400/ },
    { name: "statusSyncIntervalSeconds past a day", spec: { settings: { statusSyncIntervalSeconds: 86_401 } }, says: /spec\.settings\.statusSyncIntervalSeconds: Invalid value: 86401: .*less than or equal to 86400/ },
    { name: "clusterClaimLimit past 1000", spec: { settings: { clusterClaimLimit: 1_001 } }, says: /spec\.settings\.clusterClaimLimit: Invalid value: 1001: .*less than or equal to 1000/ },
    { name: "trialSeconds past a day", spec: { trialSeconds: 86_401 }, says: /spec\.trialSeconds: Invalid value: 86401: .*less than or equal to 86400/ },
    { name: "a proxy URL with a malformed % escape (http://%zz@…, which crashed the agent)", spec: { settings: { heartbeat: { proxyURL: "http://%zz@127.0.0.1:9" } } }, says: /spec\.settings\.heartbeat\.proxyURL: Invalid value: "http:\/\/%zz@127\.0\.0\.1:9": .*should match/ },
    { name: "more than 64 feature gates", spec: { settings: { features: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`Gate${i}`, true])) } }, says: /spec\.settings\.features: Too many: 65: must have at most 64 items/ },
  ])("refuses $name", async ({ spec: body, says }) => {
    const writer = KubeClient.fromKubeconfig(await identityFor(fleet.clusters.get(HUB), "agent-config-rollout", "-bounds"));
    try {
      const err = await writer.create<AgentConfigObject>(AgentConfigResource, { metadata: { name: "bounds", namespace: C }, spec: body as AgentConfig["spec"] }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(KubeError);
      expect((err as KubeError).code).toBe(422);
      expect((err as KubeError).message).toMatch(says);
      expect(await hub.get(AgentConfigResource, "bounds", C)).toBeUndefined();
    } finally {
      writer.close();
    }
  });
});

describe("a config that fails its trial", { timeout: FLEET_TEST_MS }, () => {
  it("is rolled back within the trial once the heartbeat has said ok: false under it for a lease duration of a reachable hub, and not tried again until another is assigned", async () => {
    const a = agent();
    const bad = { heartbeat: { proxyURL: "http://10.255.255.1:3128" } };
    const hash = settingsHash(bad);
    await assign({ settings: bad, trialSeconds: 600 });
    const started = a.clock.now();
    await a.run();
    expect((await checkpoint()).active.hash).toBe(hash);

    a.clock.advance(5_000);
    const error = "proxyconnect tcp: dial tcp 10.255.255.1:3128: i/o timeout";
    const failingSince = a.clock.now();
    await record(HealthKey.Heartbeat, { hash, ok: false, since: failingSince, error });
    await record(HealthKey.StatusSync, { hash, ok: true, since: failingSince });
    expect(await a.run()).toEqual({ recheckInMs: leaseMs });
    a.clock.advance(leaseMs - 1_000);
    expect(await a.run()).toEqual({ recheckInMs: 1_000 });
    expect((await checkpoint()).active.hash).toBe(hash);

    a.clock.advance(1_000);
    expect(await a.run()).toEqual({ done: true });
    expect(a.clock.now().getTime()).toBeLessThan(started.getTime() + 600_000); // within the trial
    const why = `heartbeat failing since ${failingSince.toISOString()}: ${error}`;
    expect(await checkpoint()).toEqual({
      active: { hash: InstallTimeHash, settings: {} },
      assigned: { hash, settings: bad, trialSeconds: 600, since: started.toISOString() },
      lastKnownGood: { hash: InstallTimeHash, settings: {} },
      failed: { hash, reason: why },
    });
    expect(await readActiveSettings(spoke, NS)).toEqual({ hash: InstallTimeHash, settings: {} });
    const rolledBack = condition(AgentConfigReason.ConfigRolledBack, "False", AgentConfigMessage.rolledBack({ lastKnownGood: InstallTimeHash, assigned: hash, why }));
    expect(await reported()).toMatchObject(rolledBack);
    expect(await mirrored()).toMatchObject(rolledBack);
    expect((await assigned())?.status).toMatchObject({ assigned: { hash }, active: { hash: InstallTimeHash }, lastKnownGood: { hash: InstallTimeHash }, lastError: rolledBack.message });

    // the same config again (the heartbeat healthy on last-known-good meanwhile): not tried again
    await record(HealthKey.Heartbeat, { hash: InstallTimeHash, ok: true, since: a.clock.now() });
    await assign({ settings: bad, trialSeconds: 900 });
    a.clock.advance(1_000);
    expect(await a.run()).toEqual({ done: true });
    expect((await checkpoint()).active.hash).toBe(InstallTimeHash);
    expect(await reported()).toMatchObject({ reason: AgentConfigReason.ConfigRolledBack });

    // a different one is tried
    const fixed = { heartbeat: { proxyURL: "" } };
    await assign({ settings: fixed });
    expect(await a.run()).toEqual({ recheckInMs: 120_000 });
    expect(await checkpoint()).toMatchObject({ active: { hash: settingsHash(fixed) }, lastKnownGood: { hash: InstallTimeHash } });
    expect((await checkpoint()).failed).toBeUndefined();
    expect(await reported()).toMatchObject({ reason: AgentConfigReason.ConfigOnTrial });
  });

  it("is rolled back a lease duration after its trial when a component never reported running it", async () => {
    const a = agent();
    const settings = { clusterClaimLimit: 5 };
    const hash = settingsHash(settings);
    await assign({ settings, trialSeconds: 60 });
    await a.run();
    await record(HealthKey.Heartbeat, { hash, ok: true, since: a.clock.now() }); // statusSync stays silent
    a.clock.advance(60_000);
    expect(await a.run()).toEqual({ recheckInMs: leaseMs });
    expect(await reported()).toMatchObject({ reason: AgentConfigReason.ConfigOnTrial });
    a.clock.advance(leaseMs);
    expect(await a.run()).toEqual({ done: true });
    expect(await reported()).toMatchObject({
      reason: AgentConfigReason.ConfigRolledBack,
      message: AgentConfigMessage.rolledBack({ lastKnownGood: InstallTimeHash, assigned: hash, why: "statusSync did not report running it by the end of its trial" }),
    });
    expect((await checkpoint()).active.hash).toBe(InstallTimeHash);
  });
});

describe("a hub outage during a trial", { timeout: FLEET_TEST_MS * 2 }, () => {
  it("judges nothing while the hub is down, keeps the checkpoint, and completes the trial once the hub is back", async () => {
    const a = agent();
    const settings = { relayResyncSeconds: 120 };
    const hash = settingsHash(settings);
    await assign({ settings, trialSeconds: 120 });
    await a.run();
    await record(HealthKey.StatusSync, { hash, ok: true, since: a.clock.now() });
    const kept = await checkpointMap();

    // The hub goes away: the heartbeat cannot renew, and says so under the trial hash.
    const hubPlane = fleet.clusters.get(HUB);
    hubRestarted = true;
    await stopApiserver(hubPlane);
    try {
      a.clock.advance(10_000);
      await record(HealthKey.Heartbeat, { hash, ok: false, since: a.clock.now(), error: "dial tcp: connect: connection refused" });
      a.clock.advance(200_000); // past the trial and far past a lease duration
      const reply = await handleEvent(fn.spec, a.io, tickEvent(C));
      expect(reply.statusCode).toBe(503); // so the source tries again
      expect((await checkpointMap())?.metadata.resourceVersion).toBe(kept?.metadata.resourceVersion);
      expect(await readActiveSettings(spoke, NS)).toEqual({ hash, settings });
    } finally {
      await startApiserver(hubPlane);
    }

    // Back: the heartbeat's failures while the hub was down are not the config's. Its retries were
    // backed off for up to a lease, so it gets one lease to find the hub, and one more to stay failing.
    a.clock.advance(1_000);
    await eventually(async () => expect(await a.run()).toEqual({ recheckInMs: 2 * leaseMs }));
    expect((await checkpointMap())?.metadata.resourceVersion).toBe(kept?.metadata.resourceVersion);
    expect(await reported()).toMatchObject({ reason: AgentConfigReason.ConfigOnTrial });
    a.clock.advance(leaseMs + 5_000); // a lease after the return, the heartbeat has not retried yet: still no verdict
    expect(await a.run()).toEqual({ recheckInMs: leaseMs - 5_000 });
    expect(await reported()).toMatchObject({ reason: AgentConfigReason.ConfigOnTrial });

    a.clock.advance(5_000);
    await record(HealthKey.Heartbeat, { hash, ok: true, since: a.clock.now() });
    expect(await a.run()).toEqual({ done: true });
    expect(await checkpoint()).toMatchObject({ active: { hash }, lastKnownGood: { hash } });
    expect(await reported()).toMatchObject({ reason: AgentConfigReason.ConfigActive, status: "True" });
    expect(await mirrored()).toMatchObject({ reason: AgentConfigReason.ConfigActive, status: "True" });
  });
});

describe("the margin after an outage, on values", () => {
  const lease = 60_000;
  const settings = { logLevel: "debug" as const };
  const hash = settingsHash(settings);
  const t0 = Date.parse("2026-01-01T00:00:00Z");
  const at = (ms: number) => new Date(t0 + ms);
  const verdictAt = (now: number, reachableSince: number) =>
    judge({
      assigned: { metadata: { name: AgentConfigName, namespace: "c" }, spec: { settings, trialSeconds: 600 } },
      checkpoint: { active: { hash, settings }, assigned: { hash, settings, trialSeconds: 600, since: at(0).toISOString() }, lastKnownGood: { hash: InstallTimeHash, settings: {} } },
      health: { heartbeat: { hash, ok: false, since: at(10_000).toISOString(), error: "refused" }, statusSync: { hash, ok: true, since: at(0).toISOString() } },
      now: at(now),
      hubReachableSince: at(reachableSince),
      leaseMs: lease,
      allow: "all",
      installTime: {},
      defaultTrialSeconds: 120,
    }).condition.reason;

  it("without an outage, a failing heartbeat rolls back one lease after it began failing", () => {
    expect(verdictAt(10_000 + lease - 1, 0)).toBe(AgentConfigReason.ConfigOnTrial);
    expect(verdictAt(10_000 + lease, 0)).toBe(AgentConfigReason.ConfigRolledBack);
  });

  it("after the hub came back during the trial, the failures count from a lease after its return, and not for ever", () => {
    const back = 100_000;
    expect(verdictAt(back + lease, back)).toBe(AgentConfigReason.ConfigOnTrial);
    expect(verdictAt(back + 2 * lease - 1, back)).toBe(AgentConfigReason.ConfigOnTrial);
    expect(verdictAt(back + 2 * lease, back)).toBe(AgentConfigReason.ConfigRolledBack);
  });
});

describe("events", { timeout: FLEET_TEST_MS }, () => {
  const agentConfigEvent = (ac: AgentConfigObject) => objectEvent({ cluster: HUB, object: { apiVersion: `${AgentConfigGroup}/v1alpha1`, kind: AgentConfigResource.kind, ...ac } });

  it("changes nothing on duplicated and out-of-order events", async () => {
    const a = agent();
    const first = await assign({ settings: { logLevel: "warn" } });
    const firstEvent = agentConfigEvent(first);
    expect((await handleEvent(fn.spec, a.io, firstEvent)).statusCode).toBe(204);
    const second = await assign({ settings: { logLevel: "error" } });
    const secondEvent = agentConfigEvent(second);
    expect((await handleEvent(fn.spec, a.io, secondEvent)).statusCode).toBe(204);
    const settled = await checkpoint();
    expect(settled.active).toEqual({ hash: settingsHash({ logLevel: "error" }), settings: { logLevel: "error" } });
    const before = await versions();

    for (const e of [secondEvent, firstEvent, firstEvent, secondEvent]) expect((await handleEvent(fn.spec, a.io, e)).statusCode).toBe(204);
    expect(await versions()).toEqual(before);
    expect(await checkpoint()).toEqual(settled);
  });

  it("answers a malformed event with 400 through our CloudEvents HTTP server (shared/cloudevents-server.ts), and reconciles a good one", async () => {
    const a = agent();
    await assign({ settings: { logLevel: "debug" } });
    const server = await startFunctionServer(serve(fn.spec, () => a.io));
    try {
      const { cluster: _dropped, ...noCluster } = agentConfigEvent((await assigned())!);
      expect((await postEvent(server.url, noCluster)).status).toBe(400);
      expect(await checkpointMap()).toBeUndefined();
      const ref = objectEvent({ cluster: C, object: { apiVersion: "v1", kind: "ConfigMap", metadata: { name: AgentHealthConfigMapName, namespace: NS } }, mode: "ref" });
      expect((await postEvent(server.url, ref)).status).toBe(204);
      expect(await readActiveSettings(spoke, NS)).toEqual({ hash: settingsHash({ logLevel: "debug" }), settings: { logLevel: "debug" } });
    } finally {
      await server.close();
    }
  });
});

// Issue 24, item 6: OCM's own hub serves no config.ocm-functions.io and grants a cluster nothing in it.
// The fleet's hub is made into one: our CRD deleted, the shared registration role without its
// AgentConfig rules, as OCM's hub has it; then both come back, as on a hub upgraded to ours.
describe("a hub that serves no AgentConfigs", { timeout: 180_000 }, () => {
  type Role = KubeObject & { rules: { apiGroups?: string[] }[] };
  type Crd = KubeObject & { spec: { group: string }; status?: { conditions?: { type: string; status: string }[] } };
  const ours = crds.find((c) => (c as unknown as Crd).spec.group === AgentConfigGroup) as unknown as Crd;
  const served = async () => {
    try {
      await hub.request("GET", `/apis/${AgentConfigGroup}/${AgentConfigResource.version}`);
      return true;
    } catch {
      return false;
    }
  };

  it("answers its ticks 204 and says so once, with ConfigNotServed on the ManagedCluster, then picks up an AgentConfig once the hub serves them", async () => {
    const role = (await hub.get<Role>(ClusterRoleResource, HubRbacName.RegistrationClusterRole))!;
    const lines: { level: string; msg: string; reason?: string }[] = [];
    const a = agent();
    const io: Io<Config> = { ...a.io, log: jsonLog(fn.spec.name, (line) => lines.push(JSON.parse(line))) };
    const server = await startFunctionServer(serve(fn.spec, () => io));
    try {
      await hub.update(ClusterRoleResource, { ...role, rules: role.rules.filter((r) => !r.apiGroups?.includes(AgentConfigGroup)) });
      await hub.delete(CustomResourceDefinitionResource, ours.metadata.name!);
      await eventually(async () => expect(await served()).toBe(false), { timeoutMs: 60_000 });

      for (let i = 0; i < 4; i++) {
        a.clock.advance(60_000);
        const reply = await postEvent(server.url, tickEvent(i % 2 ? HUB : C));
        expect(reply.status, reply.body).toBe(204);
      }
      expect(await mirrored()).toMatchObject(condition(ConfigNotServedReason, "True", configNotServedMessage));
      expect(await readActiveSettings(spoke, NS)).toEqual({ hash: InstallTimeHash, settings: {} });
      expect(lines.filter((l) => l.level === "error")).toEqual([]);
      expect(lines.filter((l) => l.reason === ConfigNotServedReason)).toHaveLength(1);
    } finally {
      // a CRD being deleted is still there until its objects are: created again once it is gone
      const existing = await eventually(async () => {
        const crd = await hub.get<Crd>(CustomResourceDefinitionResource, ours.metadata.name!);
        expect(crd?.metadata.deletionTimestamp).toBeUndefined();
        return crd;
      }, { timeoutMs: 60_000 });
      if (!existing) await hub.create(CustomResourceDefinitionResource, ours);
      const now = (await hub.get<Role>(ClusterRoleResource, HubRbacName.RegistrationClusterRole))!;
      await hub.update(ClusterRoleResource, { ...now, rules: role.rules });
    }

    try {
      await eventually(async () => expect(await served()).toBe(true), { timeoutMs: 60_000 });
      const settings = { logLevel: "debug" as const };
      await eventually(() => assign({ settings }), { timeoutMs: 30_000 });
      await eventually(async () => {
        const reply = await postEvent(server.url, tickEvent(C));
        expect(reply.status, reply.body).toBe(204);
        expect((await mirrored())?.reason).toBe(AgentConfigReason.ConfigOnTrial);
      }, { timeoutMs: 30_000 });
      expect(await readActiveSettings(spoke, NS)).toEqual({ hash: settingsHash(settings), settings });
    } finally {
      await server.close();
    }
  });
});
