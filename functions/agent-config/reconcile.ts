// The spoke's dynamic configuration (docs/agent-config.md), with the kubelet's dynamic config as the
// model: the cluster's AgentConfig on the hub is checked (schema, allow-list), checkpointed on the spoke,
// tried, promoted to last-known-good once the agent's health records vouch for it, or rolled back when
// they show it failing while the hub is reachable; the verdict goes to the AgentConfig's status and the
// ManagedCluster's AgentConfigOK condition. One key per agent: the cluster.
import { isDeepStrictEqual } from "node:util";
import { z } from "zod";
import {
  AgentConfigConditionType,
  AgentConfigMessage,
  AgentConfigName,
  AgentConfigReason,
  AgentConfigResource,
  AgentConfigSpecSchema,
  AgentSettingsSchema,
  DefaultTrialSeconds,
  type AgentConfig,
  type AgentConfigStatus,
  type AgentSettings,
} from "../../shared/api/agent-config.ts";
import { DefaultLeaseDurationSeconds, ManagedClusterResource, type ManagedCluster } from "../../shared/api/cluster.ts";
import { ConfigMapResource } from "../../shared/api/kube.ts";
import {
  AgentHealthConfigMapName,
  AllowListSchema,
  CheckpointConfigMapName,
  HealthKey,
  TrialHealthKeys,
  checkpointData,
  disallowedPath,
  initialCheckpoint,
  parseCheckpoint,
  parseHealthRecords,
  recordHealth,
  settingsHash,
  validateSettings,
  type AllowList,
  type Checkpoint,
  type HealthRecord,
} from "../../shared/agent-config.ts";
import { patchStatusIfChanged } from "../../shared/apply.ts";
import { setCondition, type NewCondition } from "../../shared/conditions.ts";
import { rfc3339 } from "../../shared/clock.ts";
import { asJson, asNumber, fromEnv } from "../../shared/env-settings.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import { defineFunction } from "../../shared/sdk.ts";
import { agentRefusal, bootstrappedHubClient } from "../../shared/hub-credentials.ts";
import type { KubeClient, KubeObject } from "../../shared/kube/client.ts";
import { classifyError } from "../../shared/kube/errors.ts";
import { SpokeAgentSettingsSchema } from "../../shared/settings.ts";

export const ConfigSchema = SpokeAgentSettingsSchema.extend({
  // the setting paths an assigned config may change on this cluster
  allow: fromEnv("OCM_AGENT_CONFIG_ALLOW", AllowListSchema),
  // the trial of a config without spec.trialSeconds
  defaultTrialSeconds: fromEnv("OCM_AGENT_CONFIG_TRIAL_SECONDS", z.int().min(1).default(DefaultTrialSeconds), asNumber),
  // the install-time settings, which a path outside the allow-list may still be assigned (absent paths
  // are install-time by definition)
  installTime: fromEnv("OCM_AGENT_CONFIG_INSTALL_TIME", z._default(AgentSettingsSchema, {}), asJson),
});
export type Config = z.infer<typeof ConfigSchema>;

const NAME = "agent-config";

type ConfigMap = KubeObject & { data?: Record<string, string> };
type AgentConfigObject = AgentConfig & KubeObject;

// Ours, not OCM's: OCM's own hub serves no config.ocm-functions.io and grants a cluster nothing in it
// (issue 24). That is a state of the hub, reported once as the condition below, not a defect per event.
export const ConfigNotServedReason = "ConfigNotServed";
export const configNotServedMessage = `the hub does not serve AgentConfigs (${AgentConfigResource.group}/${AgentConfigResource.version}): using the install-time settings`;
// What the read of the cluster's AgentConfig found: the hub serving none at all is told apart from
// none assigned.
const NotServed = Symbol("not served");
type ManagedClusterObject = ManagedCluster & KubeObject;

// One key per agent: its cluster. The cluster's assigned AgentConfig on the hub and the agent's
// checkpoint and health records on the spoke wake it; so does a resync tick for either cluster.
export default defineFunction({
  name: NAME,
  config: ConfigSchema,
  watches: (c) => [
    {
      cluster: c.hubCluster,
      resource: AgentConfigResource,
      namespace: c.clusterName,
      mode: "Resource",
      keys: (e) => (e.ref.name === AgentConfigName ? [agentKey(c)] : { skip: `AgentConfig ${e.ref.name} is not the cluster's assigned one (${AgentConfigName})` }),
    },
    {
      cluster: c.managementCluster,
      resource: ConfigMapResource,
      namespace: c.agentNamespace,
      mode: "Either",
      keys: (e) => ([CheckpointConfigMapName, AgentHealthConfigMapName].includes(e.ref.name) ? [agentKey(c)] : { skip: `ConfigMap ${e.ref.name} is neither the checkpoint nor the health records` }),
    },
  ],
  resyncSeconds: 60,
  resync: (io, tick) => {
    const c = io.config;
    if (tick.cluster && tick.cluster !== c.managementCluster && tick.cluster !== c.hubCluster) return { skip: `tick for cluster ${tick.cluster}` };
    return [agentKey(c)];
  },
  // agent-config on the spoke: the agent's secrets for its hub identity, the checkpoint ConfigMap
  // agent-config (written by this function only) and the health records in agent-health (its own
  // `agentConfig` record; the heartbeat and spoke-cluster-status write theirs). Its hub access is only the
  // cluster's own identity: the AgentConfig in the cluster's namespace and its status, granted at
  // acceptance, and the ManagedCluster's status.
  //
  // create cannot be narrowed to names (RBAC knows no name before the object exists), so the ConfigMap
  // rule covers the agent namespace; that namespace holds only the agent's own objects.
  writes: (c) => [
    { cluster: c.managementCluster, namespace: c.agentNamespace, why: "the bootstrap and hub kubeconfigs the cluster's identity comes from", apiGroups: [""], resources: ["secrets"], verbs: ["get"] },
    { cluster: c.managementCluster, namespace: c.agentNamespace, why: "the checkpoint agent-config and the agentConfig record in agent-health (create cannot be narrowed to names)", apiGroups: [""], resources: ["configmaps"], verbs: ["create", "update", "patch"] },
  ],
  reconcile,
});

const agentKey = (c: Config): Key => ({ cluster: c.managementCluster, name: c.clusterName });

export async function reconcile(io: Io<Config>, _key: Key): Promise<Outcome> {
  const c = io.config;
  const spoke = io.cluster(c.managementCluster);
  const got = await bootstrappedHubClient(spoke, c, io.clock.now());
  if (!("hub" in got)) {
    await recordHubReach(spoke, c, await readCheckpoint(spoke, c), io.clock.now(), `no hub identity: ${got.reason}`);
    io.log.info({ reason: got.reason }, "skipped: no hub identity yet, nothing judged");
    return done;
  }
  return reconcileWithHub(io, spoke, got.hub);
}

const readCheckpoint = async (spoke: KubeClient, c: Config): Promise<Checkpoint> =>
  parseCheckpoint((await spoke.get<ConfigMap>(ConfigMapResource, CheckpointConfigMapName, c.agentNamespace))?.data);

async function reconcileWithHub(io: Io<Config>, spoke: KubeClient, hub: KubeClient): Promise<Outcome> {
  const c = io.config;
  let read: AgentConfigObject | undefined | typeof NotServed;
  let cluster: ManagedClusterObject | undefined;
  try {
    [read, cluster] = await Promise.all([readAssigned(hub, c), hub.get<ManagedClusterObject>(ManagedClusterResource, c.clusterName)]);
  } catch (err) {
    // Refused as the cluster's identity: acceptance's grants not landed yet (or a deny). Nothing is
    // judged and nothing waits; the relay's watch under that identity wakes this again (withAgentHub).
    const refused = agentRefusal(err);
    if (refused) {
      io.log.info({ reason: refused }, "skipped: the hub refuses this cluster's identity, nothing judged");
      return done;
    }
    // Not reaching the hub says nothing about the config: judge nothing, keep the checkpoint, and let
    // the source retry. Noting the outage restarts the failure clock once the hub is back, so a record
    // that failed only because the hub was down is not held against the config.
    const kind = classifyError(err);
    if (kind === "transient" || kind === "unauthorized") {
      const error = err instanceof Error ? err.message : String(err);
      await recordHubReach(spoke, c, await readCheckpoint(spoke, c), io.clock.now(), error);
      io.log.warn({ error }, "hub unreachable: nothing judged, the checkpoint stays");
    }
    throw err;
  }

  // The hub has answered: the time and the spoke's state are taken now, not before the hub's answer. A
  // call that waited on an API server coming back (its port open, its answers held back) would otherwise
  // date the hub's return to when the call began, during the outage, and judge records read before the
  // components had their own chance to reach the hub again: the outage would be held against the config.
  const now = io.clock.now();
  const [checkpointMap, healthMap] = await Promise.all([
    spoke.get<ConfigMap>(ConfigMapResource, CheckpointConfigMapName, c.agentNamespace),
    spoke.get<ConfigMap>(ConfigMapResource, AgentHealthConfigMapName, c.agentNamespace),
  ]);
  const o = { spoke, hub, checkpointMap, checkpoint: parseCheckpoint(checkpointMap?.data), health: parseHealthRecords(healthMap?.data), now };

  const own = o.health[HealthKey.AgentConfig];
  const notServed = read === NotServed;
  const assigned = read === NotServed ? undefined : read;
  const judged = judge({
    assigned,
    notServed,
    checkpoint: o.checkpoint,
    health: o.health,
    now: o.now,
    hubReachableSince: own?.ok ? new Date(own.since) : o.now,
    leaseMs: (cluster?.spec?.leaseDurationSeconds || DefaultLeaseDurationSeconds) * 1000,
    allow: c.allow,
    installTime: c.installTime,
    defaultTrialSeconds: c.defaultTrialSeconds,
  });

  // The spoke first: what the agent runs must not depend on the report reaching the hub.
  const wrote = await writeCheckpoint(o.spoke, c.agentNamespace, o.checkpointMap, judged.checkpoint);
  await recordHubReach(o.spoke, c, judged.checkpoint, o.now, undefined, healthMap ?? null);
  if (assigned) {
    const conditions = setCondition(assigned.status?.conditions, { ...judged.condition, observedGeneration: assigned.metadata.generation as number | undefined }, o.now);
    const status: AgentConfigStatus = {
      ...assigned.status,
      assigned: { hash: judged.assignedHash! },
      active: { hash: judged.checkpoint.active.hash },
      lastKnownGood: { hash: judged.checkpoint.lastKnownGood.hash },
      lastError: judged.lastError,
      conditions,
    };
    await patchStatusIfChanged(o.hub, AgentConfigResource, assigned, status);
  }
  let reported = false;
  if (cluster) {
    const conditions = setCondition(cluster.status?.conditions, judged.condition, o.now);
    reported = (await patchStatusIfChanged(o.hub, ManagedClusterResource, cluster, { ...cluster.status, conditions })) !== undefined;
  }
  // Said once: the hub that serves no AgentConfigs is told when the ManagedCluster first shows it, and
  // not again on every tick while it stays so.
  if (notServed && reported) io.log.info({ reason: judged.condition.reason, active: judged.checkpoint.active.hash }, judged.decision);
  else if (wrote || judged.changed) io.log.info({ reason: judged.condition.reason, assigned: judged.assignedHash, active: judged.checkpoint.active.hash, lastKnownGood: judged.checkpoint.lastKnownGood.hash }, judged.decision);
  return judged.recheckInMs === undefined ? done : { recheckInMs: judged.recheckInMs };
}

// The cluster's assigned AgentConfig. OCM's hub grants a cluster nothing in our group, so there a read
// is refused (403) before the hub would say it has no such kind; discovery, which every authenticated
// user may read, tells the two apart. Refused while the hub serves the group is a real RBAC defect,
// thrown as before. The next tick looks again, so a hub that starts serving it is picked up then.
async function readAssigned(hub: KubeClient, c: Config): Promise<AgentConfigObject | undefined | typeof NotServed> {
  try {
    return await hub.get<AgentConfigObject>(AgentConfigResource, AgentConfigName, c.clusterName);
  } catch (err) {
    if (classifyError(err) !== "forbidden") throw err;
    if (await servesAgentConfigs(hub)) throw err;
    return NotServed;
  }
}

// Whether the hub's discovery lists AgentConfigs. Any answer but 200 or 404 says nothing either way
// and is thrown.
async function servesAgentConfigs(hub: KubeClient): Promise<boolean> {
  const { group, version, plural } = AgentConfigResource;
  try {
    const list = await hub.request<{ resources?: { name?: string }[] }>("GET", `/apis/${group}/${version}`);
    return (list.resources ?? []).some((r) => r.name === plural);
  } catch (err) {
    if (classifyError(err) === "not-found") return false;
    throw err;
  }
}

// The function's own health record: whether it reaches the hub as the cluster, and since when. A trial's
// failures count only from the moment the hub was last seen reachable (docs/agent-config.md: a rollback
// happens within one lease duration of the hub being reachable while renewals fail).
async function recordHubReach(spoke: KubeClient, c: Config, checkpoint: Checkpoint, now: Date, error?: string, healthMap?: ConfigMap | null): Promise<void> {
  await recordHealth(spoke, c.agentNamespace, HealthKey.AgentConfig, { hash: checkpoint.active.hash, ok: error === undefined, error }, now, healthMap);
}

async function writeCheckpoint(spoke: KubeClient, namespace: string, existing: ConfigMap | undefined, next: Checkpoint): Promise<boolean> {
  const data = checkpointData(next);
  if (!existing) {
    // No checkpoint means the install-time settings to every reader: nothing to write for those.
    if (isDeepStrictEqual(next, initialCheckpoint())) return false;
    await spoke.create<ConfigMap>(ConfigMapResource, { metadata: { name: CheckpointConfigMapName, namespace }, data });
    return true;
  }
  const sameKeys = isDeepStrictEqual(Object.keys(existing.data ?? {}).sort(), Object.keys(data).sort());
  if (sameKeys && isDeepStrictEqual(parseCheckpoint(existing.data), next)) return false;
  await spoke.update<ConfigMap>(ConfigMapResource, { ...existing, data });
  return true;
}

export type JudgeInput = {
  assigned: AgentConfig | undefined;
  notServed?: boolean; // the hub serves no AgentConfigs at all (then nothing is assigned either)
  checkpoint: Checkpoint;
  health: Partial<Record<HealthKey, HealthRecord>>;
  now: Date;
  hubReachableSince: Date; // the hub has answered the function without a break since then
  leaseMs: number; // the ManagedCluster's lease duration
  allow: AllowList;
  installTime: AgentSettings;
  defaultTrialSeconds: number;
};

export type Judgement = {
  checkpoint: Checkpoint;
  condition: NewCondition; // AgentConfigOK
  assignedHash?: string; // the hash of what the hub assigned, refused or not
  lastError: string;
  recheckInMs?: number; // the next moment the trial can be decided
  changed: boolean; // the checkpoint differs from the one given
  decision: string; // for the log
};

const condition = (reason: string, status: NewCondition["status"], message: string): NewCondition => ({ type: AgentConfigConditionType.AgentConfigOK, status, reason, message });

// The whole decision, on values: the assignment (or its refusal), then the trial of the checkpointed
// config, which goes on even while a newer assignment is refused, since that config is what runs.
export function judge(i: JudgeInput): Judgement {
  const finish = (j: Omit<Judgement, "changed">): Judgement => ({ ...j, changed: !isDeepStrictEqual(j.checkpoint, i.checkpoint) });
  if (!i.assigned) {
    // As the kubelet resets to its local config when its config source is removed.
    if (i.notServed) {
      return finish({ checkpoint: initialCheckpoint(), condition: condition(ConfigNotServedReason, "True", configNotServedMessage), lastError: "", decision: "the hub serves no AgentConfigs: install-time settings, looking again on every resync" });
    }
    return finish({ checkpoint: initialCheckpoint(), condition: condition(AgentConfigReason.ConfigNotAssigned, "True", AgentConfigMessage.notAssigned), lastError: "", decision: "no AgentConfig assigned: install-time settings" });
  }
  const spec = i.assigned.spec ?? {};
  const hash = settingsHash(spec.settings);
  const checked = checkAssigned(spec, i.allow, i.installTime);

  let checkpoint = i.checkpoint;
  if (checked.ok) checkpoint = assign(checkpoint, { hash, settings: checked.settings, trialSeconds: spec.trialSeconds ?? i.defaultTrialSeconds }, i.now);
  const trial = judgeTrial(checkpoint, i);
  checkpoint = trial.checkpoint;

  if (!checked.ok) {
    return finish({ checkpoint, condition: checked.refusal, assignedHash: hash, lastError: checked.refusal.message, recheckInMs: trial.recheckInMs, decision: `assigned config ${hash} refused (${checked.refusal.reason}): nothing applied` });
  }
  const failed = checkpoint.failed?.hash === hash ? checkpoint.failed : undefined;
  if (failed) {
    const c = condition(AgentConfigReason.ConfigRolledBack, "False", AgentConfigMessage.rolledBack({ lastKnownGood: checkpoint.lastKnownGood.hash, assigned: hash, why: failed.reason }));
    return finish({ checkpoint, condition: c, assignedHash: hash, lastError: c.message, decision: `assigned config ${hash} rolled back to last-known-good` });
  }
  if (trial.until !== undefined) {
    const c = condition(AgentConfigReason.ConfigOnTrial, "Unknown", AgentConfigMessage.onTrial(hash, rfc3339(new Date(trial.until))));
    return finish({ checkpoint, condition: c, assignedHash: hash, lastError: "", recheckInMs: trial.recheckInMs, decision: `assigned config ${hash} on trial` });
  }
  return finish({ checkpoint, condition: condition(AgentConfigReason.ConfigActive, "True", AgentConfigMessage.active(hash)), assignedHash: hash, lastError: "", decision: `assigned config ${hash} active and last-known-good` });
}

type Checked = { ok: true; settings: AgentSettings } | { ok: false; refusal: NewCondition };

// The schema first (a config that cannot be read cannot be judged further), then the allow-list.
function checkAssigned(spec: NonNullable<AgentConfig["spec"]>, allow: AllowList, installTime: AgentSettings): Checked {
  const refuse = (reason: string, message: string): Checked => ({ ok: false, refusal: condition(reason, "False", message) });
  const settings = validateSettings(spec.settings);
  if (!settings.ok) return refuse(AgentConfigReason.ConfigInvalid, AgentConfigMessage.invalid(settings.error));
  const trial = AgentConfigSpecSchema.shape.trialSeconds.safeParse(spec.trialSeconds);
  if (!trial.success) return refuse(AgentConfigReason.ConfigInvalid, AgentConfigMessage.invalid(`spec.trialSeconds: ${trial.error.issues.map((x) => x.message).join("; ")}`));
  const path = disallowedPath(settings.settings, allow, installTime);
  if (path) return refuse(AgentConfigReason.ConfigNotAllowed, AgentConfigMessage.notAllowed(path));
  return { ok: true, settings: settings.settings };
}

// A valid assignment into the checkpoint. The config rolled back last is not tried again until another
// is assigned; last-known-good runs at once; anything else starts (or continues) its trial.
function assign(cp: Checkpoint, a: { hash: string; settings: AgentSettings; trialSeconds: number }, now: Date): Checkpoint {
  if (cp.failed?.hash === a.hash) return cp;
  const { failed: _another, ...rest } = cp;
  const since = cp.assigned?.hash === a.hash ? cp.assigned.since : now.toISOString();
  const assigned = { hash: a.hash, settings: a.settings, trialSeconds: a.trialSeconds, since };
  const active = a.hash === cp.lastKnownGood.hash ? cp.lastKnownGood : { hash: a.hash, settings: a.settings };
  return { ...rest, assigned, active };
}

type TrialJudgement = { checkpoint: Checkpoint; until?: number; recheckInMs?: number };

// The trial of the checkpoint's assigned config while it is active and not yet last-known-good:
// - a record under its hash saying ok: false for a lease duration of a reachable hub fails it;
// - once trialSeconds have passed, both records saying ok: true under its hash promote it;
// - a component that has not reported running it a lease duration after the trial (with the hub
//   reachable) fails it too: a config its components cannot start on must not stay forever.
function judgeTrial(cp: Checkpoint, i: JudgeInput): TrialJudgement {
  const a = cp.assigned;
  if (!a || cp.active.hash !== a.hash || a.hash === cp.lastKnownGood.hash || cp.failed?.hash === a.hash) return { checkpoint: cp };
  const now = i.now.getTime();
  const started = Date.parse(a.since);
  const until = started + a.trialSeconds * 1000;
  // The hub seen back during the trial means an outage: the components' retries, backed off for up to
  // a lease, get one more lease to find the hub again before their failures or silence count.
  const reachable = i.hubReachableSince.getTime();
  const countFrom = reachable > started ? reachable + i.leaseMs : reachable;
  const rollBack = (reason: string): TrialJudgement => ({ checkpoint: { ...cp, active: cp.lastKnownGood, failed: { hash: a.hash, reason } } });
  const waits: number[] = [];

  for (const key of TrialHealthKeys) {
    const r = i.health[key];
    if (!r || r.hash !== a.hash || r.ok) continue;
    const failingFrom = Math.max(Date.parse(r.since), countFrom, started);
    if (now - failingFrom >= i.leaseMs) return rollBack(`${key} failing since ${r.since}${r.error ? `: ${r.error}` : ""}`);
    waits.push(failingFrom + i.leaseMs - now);
  }
  if (now < until) return { checkpoint: cp, until, recheckInMs: Math.min(until - now, ...waits) };

  const silent = TrialHealthKeys.filter((k) => i.health[k]?.hash !== a.hash);
  if (silent.length === 0 && waits.length === 0) return { checkpoint: { ...cp, lastKnownGood: { hash: a.hash, settings: a.settings } } };
  const silentFrom = Math.max(until, countFrom);
  if (silent.length > 0) {
    if (now - silentFrom >= i.leaseMs) return rollBack(`${silent.join(" and ")} did not report running it by the end of its trial`);
    waits.push(silentFrom + i.leaseMs - now);
  }
  return { checkpoint: cp, until, recheckInMs: Math.min(...waits) };
}
