// The agent's side of the checkpoint (docs/agent-config.md), in zod/mini: the ConfigMap the spoke's
// agent-config function writes and every other component reads its settings from, the health records
// components keep during a trial, the canonical hash of settings and the merge over install-time
// values. The relay and its heartbeat read it, without zod's full API; shared/agent-config.ts
// re-exports it beside the allow-list and the rollout's vocabulary.
import { createHash } from "node:crypto";
import * as z from "zod/mini";
import { AgentSettingsSchema, SettingBounds, type AgentSettings } from "./api/agent-settings.ts";
import { ConfigMapResource } from "./api/kube.ts";
import type { KubeClient, KubeObject } from "./kube/client.ts";
import { isAlreadyExists } from "./kube/errors.ts";

export type { AgentSettings } from "./api/agent-settings.ts";

// ConfigMap in the agent namespace on the spoke, written only by the agent-config function.
export const CheckpointConfigMapName = "agent-config";
// ConfigMap in the agent namespace: one health record per component, each written by that component.
export const AgentHealthConfigMapName = "agent-health";

export const CheckpointKey = { Active: "active", Assigned: "assigned", LastKnownGood: "lastKnownGood", Failed: "failed" } as const;
export type CheckpointKey = (typeof CheckpointKey)[keyof typeof CheckpointKey];

// heartbeat: the sidecar's lease renewals; statusSync: spoke-cluster-status's status writes; agentConfig:
// whether the agent-config function itself reaches the hub (the judge's proof of a reachable hub).
export const HealthKey = { Heartbeat: "heartbeat", StatusSync: "statusSync", AgentConfig: "agentConfig" } as const;
export type HealthKey = (typeof HealthKey)[keyof typeof HealthKey];
// The records a trial is judged by: both must say ok under the trial hash for a config to pass.
export const TrialHealthKeys: readonly HealthKey[] = [HealthKey.Heartbeat, HealthKey.StatusSync];

const isoTime = z.string().check(z.refine((s) => !Number.isNaN(Date.parse(s)), { message: "not a time" }));

// What to run now: the only key other components read.
const hash = z.string().check(z.minLength(1));
export const ActiveConfigSchema = z.object({ hash, settings: AgentSettingsSchema });
export type ActiveConfig = z.infer<typeof ActiveConfigSchema>;
// The last valid assigned config, and when its trial began (RFC 3339).
export const AssignedConfigSchema = z.extend(ActiveConfigSchema, { trialSeconds: z.int().check(z.minimum(SettingBounds.trialSeconds.min), z.maximum(SettingBounds.trialSeconds.max)), since: isoTime });
export type AssignedConfig = z.infer<typeof AssignedConfigSchema>;
export const LastKnownGoodSchema = ActiveConfigSchema;
export type LastKnownGood = z.infer<typeof LastKnownGoodSchema>;
// The assigned config rolled back last: not tried again until the hub assigns a different one.
export const FailedConfigSchema = z.object({ hash, reason: z.string() });
export type FailedConfig = z.infer<typeof FailedConfigSchema>;

export type Checkpoint = { active: ActiveConfig; assigned?: AssignedConfig; lastKnownGood: LastKnownGood; failed?: FailedConfig };

// { hash: the active hash the component runs, ok, since: the first observation with that outcome under
// that hash, error }, rewritten only when hash or ok changes.
export const HealthRecordSchema = z.object({ hash, ok: z.boolean(), since: isoTime, error: z.optional(z.string()) });
export type HealthRecord = z.infer<typeof HealthRecordSchema>;
export type HealthObservation = { hash: string; ok: boolean; error?: string };

// JSON with every object's keys sorted and no whitespace: equal settings give equal text, whatever the
// order a writer used. Undefined members are left out, as JSON leaves them out.
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  if (Array.isArray(value)) return `[${value.map((v) => (v === undefined ? "null" : canonicalJson(v))).join(",")}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
}

// sha256 of the canonical settings JSON, the first 16 hex digits. Absent settings are {}.
export function settingsHash(settings: unknown): string {
  return createHash("sha256")
    .update(canonicalJson(settings ?? {}))
    .digest("hex")
    .slice(0, 16);
}

// The install-time settings: no override at all.
export const InstallTimeHash = settingsHash({});
export const installTimeConfig = (): ActiveConfig => ({ hash: InstallTimeHash, settings: {} });
export const initialCheckpoint = (): Checkpoint => ({ active: installTimeConfig(), lastKnownGood: installTimeConfig() });

// `settings` over the install-time values: a field set wins, an absent one keeps the install-time value;
// heartbeat and features merge key by key.
export function mergeSettings(installTime: AgentSettings, settings: AgentSettings): AgentSettings {
  const out: Record<string, unknown> = { ...installTime };
  for (const [key, value] of Object.entries(settings)) {
    if (value === undefined) continue;
    const base = out[key];
    out[key] = isPlainObject(value) && isPlainObject(base) ? { ...base, ...value } : value;
  }
  return out as AgentSettings;
}

export const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

// The checkpoint from the ConfigMap's data. A key that is missing or unreadable counts as absent; an
// unreadable active or last-known-good falls back to the install-time settings, as the kubelet falls
// back to its local config when a checkpoint is corrupt.
export function parseCheckpoint(data: Readonly<Record<string, string>> | undefined): Checkpoint {
  const lastKnownGood = parseJsonKey(data, CheckpointKey.LastKnownGood, LastKnownGoodSchema) ?? installTimeConfig();
  const active = parseJsonKey(data, CheckpointKey.Active, ActiveConfigSchema) ?? lastKnownGood;
  const assigned = parseJsonKey(data, CheckpointKey.Assigned, AssignedConfigSchema);
  const failed = parseJsonKey(data, CheckpointKey.Failed, FailedConfigSchema);
  return { active, lastKnownGood, ...(assigned ? { assigned } : {}), ...(failed ? { failed } : {}) };
}

// The ConfigMap data for a checkpoint: each value JSON, absent parts left out.
export function checkpointData(c: Checkpoint): Record<string, string> {
  const data: Record<string, string> = { [CheckpointKey.Active]: JSON.stringify(c.active), [CheckpointKey.LastKnownGood]: JSON.stringify(c.lastKnownGood) };
  if (c.assigned) data[CheckpointKey.Assigned] = JSON.stringify(c.assigned);
  if (c.failed) data[CheckpointKey.Failed] = JSON.stringify(c.failed);
  return data;
}

export function parseHealthRecords(data: Readonly<Record<string, string>> | undefined): Partial<Record<HealthKey, HealthRecord>> {
  const out: Partial<Record<HealthKey, HealthRecord>> = {};
  for (const key of Object.values(HealthKey)) {
    const record = parseJsonKey(data, key, HealthRecordSchema);
    if (record) out[key] = record;
  }
  return out;
}

function parseJsonKey<T>(data: Readonly<Record<string, string>> | undefined, key: string, schema: z.ZodMiniType<T>): T | undefined {
  const text = data?.[key];
  if (text === undefined) return undefined;
  try {
    const parsed = schema.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

// The checkpoint's active key as the components read it (the install-time config when it is absent or
// unreadable), with why it was not used when it was present: only an agent-config function older than
// the component, or a hand edit, writes settings the component's schema refuses, and that is said.
export function readActiveKey(text: string | undefined): { active: ActiveConfig; error?: string } {
  if (text === undefined) return { active: installTimeConfig() };
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    return { active: installTimeConfig(), error: `active: not JSON: ${(err as Error).message}` };
  }
  const parsed = ActiveConfigSchema.safeParse(json);
  if (parsed.success) return { active: parsed.data };
  return { active: installTimeConfig(), error: parsed.error.issues.map((i) => `${showPath(["active", ...i.path.map(String)])}: ${issueMessage(i)}`).join("; ") };
}

type ConfigMap = KubeObject & { data?: Record<string, string> };

// What a component runs with now: the checkpoint's active config, or the install-time settings when
// there is no checkpoint (or it is unreadable). Merge it over the component's own install-time values
// with mergeSettings. API errors are thrown: the caller keeps what it runs until it can read again.
export async function readActiveSettings(client: KubeClient, namespace: string): Promise<ActiveConfig> {
  const cm = await client.get<ConfigMap>(ConfigMapResource, CheckpointConfigMapName, namespace);
  return parseJsonKey(cm?.data, CheckpointKey.Active, ActiveConfigSchema) ?? installTimeConfig();
}

// The record to write after an observation, or undefined when the stored one already says it (same
// hash, same outcome): records change with the outcome, never once per renewal.
export function nextHealthRecord(previous: HealthRecord | undefined, observed: HealthObservation, now: Date): HealthRecord | undefined {
  if (previous && previous.hash === observed.hash && previous.ok === observed.ok) return undefined;
  return { hash: observed.hash, ok: observed.ok, since: now.toISOString(), ...(observed.error ? { error: observed.error } : {}) };
}

// Writes the component's record under `key` in the agent-health ConfigMap when its hash or outcome
// changed; true when it wrote. Each component patches only its own key, so writers never conflict.
// `read` is the ConfigMap as the caller has just read it (null: absent), which saves reading it again.
export async function recordHealth(client: KubeClient, namespace: string, key: HealthKey, observed: HealthObservation, now: Date, read?: ConfigMap | null): Promise<boolean> {
  const cm = read === undefined ? await client.get<ConfigMap>(ConfigMapResource, AgentHealthConfigMapName, namespace) : (read ?? undefined);
  const next = nextHealthRecord(parseHealthRecords(cm?.data)[key], observed, now);
  if (!next) return false;
  const data = { [key]: JSON.stringify(next) };
  if (!cm) {
    try {
      await client.create<ConfigMap>(ConfigMapResource, { metadata: { name: AgentHealthConfigMapName, namespace }, data });
      return true;
    } catch (err) {
      if (!isAlreadyExists(err)) throw err; // another component created it first: patch our key in
    }
  }
  await client.patch(ConfigMapResource, AgentHealthConfigMapName, { data }, { namespace });
  return true;
}

// A setting's path as its segments: a key of the settings, of heartbeat, or a feature gate's name, which
// are never split again.
export type SettingPath = readonly string[];

// How a path is shown: segments joined with ".", a segment that itself holds a dot (or is empty) quoted.
export const showPath = (path: SettingPath) => path.map((s) => (s === "" || s.includes(".") ? JSON.stringify(s) : s)).join(".");

// A record key's issue says only "Invalid key in record": what is wrong with the key comes after it.
export const issueMessage = (i: z.core.$ZodIssue): string => (i.code === "invalid_key" ? `${i.message}: ${i.issues.map((x) => x.message).join("; ")}` : i.message);
