// The agent's side of dynamic configuration (docs/agent-config.md): the checkpoint and health records
// (shared/checkpoint.ts, re-exported), the allow-list, the check of an assigned config's settings, and
// the fleet rollout's vocabulary.
import { isDeepStrictEqual } from "node:util";
import { z } from "zod";
import { AgentConfigConditionType, AgentConfigGroup, AgentConfigReason, type AgentConfig } from "./api/agent-config.ts";
import { AgentSettingsSchema, FeatureGateNamePattern, settingShapes, type AgentSettings } from "./api/agent-settings.ts";
import { issueMessage, isPlainObject, settingsHash, showPath, type SettingPath } from "./checkpoint.ts";
import { findCondition } from "./conditions.ts";

export * from "./checkpoint.ts";

// The allow-list (OCM_AGENT_CONFIG_ALLOW): setting paths an assigned config may change on this
// cluster. A path allows everything under it (`features` allows `features.SomeGate`). Paths are
// compared segment by segment, never as strings: `features.a` must not allow a gate named `a.b`
// (issue 23; the schema refuses such names too, but the allow-list does not rely on it).
export type AllowList = "all" | readonly string[];

// Paths an allow-list may name: each setting, each heartbeat field, `features` and any `features.<gate>`.
export const settingPaths: readonly string[] = settingShapes.flatMap((s) => [s.key, ...(s.kind === "group" ? Object.keys(s.fields).map((k) => `${s.key}.${k}`) : [])]);
const gatePath = new RegExp(`^features\\.${FeatureGateNamePattern.slice(1)}`);
const isKnownPath = (p: string) => settingPaths.includes(p) || gatePath.test(p);

// Unset or empty: all (the default); "none": nothing may be changed remotely; else comma-separated
// paths, each one a known setting path.
export const AllowListSchema = z
  .string()
  .optional()
  .transform((s, ctx): AllowList => {
    const text = (s ?? "").trim();
    if (text === "" || text === "all") return "all";
    if (text === "none") return [];
    const paths = text.split(",").map((p) => p.trim()).filter(Boolean);
    for (const p of paths) if (!isKnownPath(p)) ctx.addIssue({ code: "custom", message: `${p} is not a setting path (${settingPaths.join(", ")}, features.<gate>)` });
    return paths;
  });
export const parseAllowList = (text: string | undefined): AllowList => AllowListSchema.parse(text);


// An allow-list entry's segments: every known path is a setting, or a setting and one key under it.
const entrySegments = (entry: string): SettingPath => {
  const dot = entry.indexOf(".");
  return dot < 0 ? [entry] : [entry.slice(0, dot), entry.slice(dot + 1)];
};

const isPrefix = (prefix: SettingPath, path: SettingPath) => prefix.length <= path.length && prefix.every((s, i) => s === path[i]);

export const isPathAllowed = (path: SettingPath, allow: AllowList) => allow === "all" || allow.some((a) => isPrefix(entrySegments(a), path));


// Every leaf a config sets, as its segments (["heartbeat", "proxyURL"], ["features", "SomeGate"]), in the
// sorted order of their shown paths.
export function settingLeaves(settings: AgentSettings): SettingPath[] {
  const walk = (o: Record<string, unknown>, prefix: SettingPath): SettingPath[] =>
    Object.entries(o).flatMap(([k, v]) => (v === undefined ? [] : isPlainObject(v) ? walk(v, [...prefix, k]) : [[...prefix, k]]));
  return walk(settings as Record<string, unknown>, []).sort((a, b) => (showPath(a) < showPath(b) ? -1 : showPath(a) > showPath(b) ? 1 : 0));
}

const valueAt = (o: unknown, path: SettingPath): unknown => path.reduce<unknown>((v, k) => (isPlainObject(v) && Object.hasOwn(v, k) ? v[k] : undefined), o);

// The first path the config sets outside the allow-list to something other than the install-time
// value (as showPath shows it), or undefined when the config may be applied. A config is refused as a
// whole, never in part.
export function disallowedPath(settings: AgentSettings, allow: AllowList, installTime: AgentSettings = {}): string | undefined {
  const path = settingLeaves(settings).find((p) => !isPathAllowed(p, allow) && !isDeepStrictEqual(valueAt(settings, p), valueAt(installTime, p)));
  return path && showPath(path);
}


export type SettingsJudgement = { ok: true; settings: AgentSettings } | { ok: false; error: string };

// An AgentConfig's spec.settings checked against the schema (absent = {}), in the schema's own words.
export function validateSettings(raw: unknown): SettingsJudgement {
  const parsed = AgentSettingsSchema.safeParse(raw ?? {});
  if (parsed.success) return { ok: true, settings: parsed.data };
  const error = parsed.error.issues.map((i) => `${showPath(["spec", "settings", ...i.path.map(String)])}: ${issueMessage(i)}`).join("; ");
  return { ok: false, error };
}

// ---- the fleet rollout's vocabulary, read by agent-config-rollout and by `ocmf config rollout status`

// On each cluster's AgentConfig the rollout writes: which fleet-level config it came from.
export const RolloutLabel = `${AgentConfigGroup}/rollout`;
export const RolloutNamespaceAnnotation = `${AgentConfigGroup}/rollout-namespace`;

// pending: not given this config yet; progressing: given it, on trial; succeeded: it became the
// cluster's last-known-good; rolledBack: the cluster refused it or rolled it back.
export type ClusterState = "pending" | "progressing" | "succeeded" | "rolledBack";

export function clusterState(config: AgentConfig | undefined, hash: string): ClusterState {
  if (!config || settingsHash(config.spec?.settings ?? {}) !== hash) return "pending";
  const status = config.status;
  const ok = findCondition(status?.conditions, AgentConfigConditionType.AgentConfigOK);
  if (status?.assigned?.hash !== hash || !ok) return "progressing";
  if (ok.reason === AgentConfigReason.ConfigActive && status.active?.hash === hash) return "succeeded";
  if (ok.reason === AgentConfigReason.ConfigRolledBack || ok.reason === AgentConfigReason.ConfigInvalid || ok.reason === AgentConfigReason.ConfigNotAllowed) return "rolledBack";
  return "progressing";
}

// An int, or a percentage of total rounded down (the stricter reading of a limit).
export function countOf(v: number | string | undefined, total: number, fallback: number): number {
  if (v === undefined) return fallback;
  if (typeof v === "number") return v;
  const m = /^(\d+(?:\.\d+)?)%$/.exec(v.trim());
  if (m) return Math.floor((Number(m[1]) / 100) * total);
  const n = Number(v);
  if (!Number.isInteger(n)) throw new Error(`${JSON.stringify(v)} is neither an int nor a percentage`);
  return n;
}
