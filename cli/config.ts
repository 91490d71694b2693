// `ocmf config`: the AgentConfigs of docs/agent-config.md from the hub admin's side. `set` writes a
// cluster's own config (`agent` in the cluster's namespace) or a fleet-level one (a Placement and a
// rollout strategy), each KEY=VALUE checked against the settings schema before anything is written;
// `get` shows what each agent reports; `rollout status` shows a fleet-level rollout and fails when it
// halted, so a script can wait on it.
import { isDeepStrictEqual } from "node:util";
import { stringify } from "yaml";
import * as zm from "zod/mini";
import {
  AgentConfigConditionType,
  AgentConfigName,
  AgentConfigResource,
  DefaultMaxRolledBack,
  DefaultTrialSeconds,
  RolloutPhase,
  type AgentConfig,
  type AgentConfigSpec,
  type AgentSettings,
} from "../shared/api/agent-config.ts";
import { settingShapes } from "../shared/api/agent-settings.ts";
import { ManagedClusterResource, PlacementResource, type ManagedCluster, type Placement, type RolloutStrategy } from "../shared/api/cluster.ts";
import { RolloutLabel, RolloutNamespaceAnnotation, clusterState, countOf, settingLeaves, settingsHash, showPath, validateSettings } from "../shared/agent-config.ts";
import { placementClusters } from "../shared/placement-decisions.ts";
import { NamespaceResource } from "../shared/api/kube.ts";
import { findCondition } from "../shared/conditions.ts";
import type { KubeClient, KubeObject } from "../shared/kube/client.ts";
import { isAlreadyExists, isConflict, isNotFound } from "../shared/kube/errors.ts";
import { again } from "./transient.ts";


export type Strategy = NonNullable<RolloutStrategy["type"]>;

// ---- KEY=VALUE, by the schema

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
// The settings a KEY may name, as the help and the refusals list them.
export const settingKeys: readonly string[] = settingShapes.flatMap((s) => (s.kind === "group" ? Object.keys(s.fields).map((k) => `${s.key}.${k}`) : s.kind === "map" ? [`${s.key}.<name>`] : [s.key]));
const known = () => `the settings are ${settingKeys.join(", ")}`;
const shapeOf = (key: string) => settingShapes.find((s) => s.key === key);

// The schema of the one value KEY names, or why KEY names none.
function leafSchema(key: string): zm.ZodMiniType | string {
  const [head = "", ...rest] = key.split(".");
  const s = shapeOf(head);
  if (!s) return `unknown setting ${key}: ${known()}`;
  if (s.kind === "group") {
    if (!rest.length) return `${key} is a group of settings: set ${Object.keys(s.fields).map((k) => `${head}.${k}`).join(", ")}`;
    if (rest.length > 1 || !Object.hasOwn(s.fields, rest[0]!)) return `unknown setting ${key}: ${known()}`;
    return s.fields[rest[0]!]!;
  }
  if (s.kind === "map") {
    if (!rest.length) return `${key} is a group of settings: set ${head}.<name>`;
    if (rest.length > 1 || rest[0] === "") return `unknown setting ${key}: ${known()}`;
    return s.value;
  }
  return rest.length ? `unknown setting ${key}: ${known()}` : s.value;
}

// A path --unset may remove: any setting, or a whole group (heartbeat, features).
const isSettingPath = (key: string) => {
  const head = key.split(".")[0]!;
  return typeof leafSchema(key) !== "string" || (key === head && shapeOf(head) !== undefined);
};

// The text after `=` as the setting's type: integers, true/false, strings; then the schema's own check.
function parseValue(key: string, schema: zm.ZodMiniType, text: string): unknown {
  let value: unknown = text;
  if (schema instanceof zm.ZodMiniNumber) {
    if (!/^[+-]?\d+$/.test(text)) throw new Error(`${key}=${text}: give a whole number`);
    value = Number(text);
  } else if (schema instanceof zm.ZodMiniBoolean) {
    if (text !== "true" && text !== "false") throw new Error(`${key}=${text}: give true or false`);
    value = text === "true";
  }
  const parsed = schema.safeParse(value);
  if (!parsed.success) throw new Error(`${key}=${text}: ${parsed.error.issues.map((i) => i.message).join("; ")}`);
  return parsed.data;
}

export type SettingsChange = { set: [path: string, value: unknown][]; unset: string[] };

// The command line's KEY=VALUE words and --unset keys, each checked; the first problem is thrown.
// An --unset key that is no setting is kept for now: it may remove a key the object holds that this CLI
// does not know (changeSettings refuses it when the object does not hold it either).
export function parseSettingsChange(assignments: readonly string[], unset: readonly string[]): SettingsChange {
  const set: [string, unknown][] = [];
  for (const word of assignments) {
    const eq = word.indexOf("=");
    if (eq <= 0) throw new Error(`${JSON.stringify(word)} is not KEY=VALUE (${known()})`);
    const key = word.slice(0, eq);
    const schema = leafSchema(key);
    if (typeof schema === "string") throw new Error(schema);
    if (set.some(([k]) => k === key)) throw new Error(`${key} is given twice`);
    set.push([key, parseValue(key, schema, word.slice(eq + 1))]);
  }
  const overlaps = (a: string, b: string) => a === b || a.startsWith(`${b}.`) || b.startsWith(`${a}.`);
  for (const key of unset) {
    const clash = set.find(([k]) => overlaps(k, key));
    if (clash) throw new Error(`${clash[0]} is both set and unset (--unset ${key})`);
  }
  return { set, unset: [...new Set(unset)] };
}

// The settings after the change: unset paths removed (a group left empty goes too), then the values set.
// The result is checked as the agent checks it, so what is written is what the agent accepts.
export function changeSettings(current: AgentSettings | undefined, change: SettingsChange): AgentSettings {
  const out = structuredClone((current ?? {}) as Record<string, unknown>);
  for (const key of change.unset) {
    const parts = key.split(".");
    const parent = parts.slice(0, -1).reduce<unknown>((o, k) => (isObject(o) ? o[k] : undefined), out);
    const last = parts.at(-1)!;
    if (!isSettingPath(key) && !(isObject(parent) && Object.hasOwn(parent, last))) throw new Error(`unknown setting ${key}: ${known()}`);
    if (isObject(parent)) delete parent[last];
    if (parts.length === 2 && isObject(out[parts[0]!]) && !Object.keys(out[parts[0]!] as object).length) delete out[parts[0]!];
  }
  for (const [key, value] of change.set) {
    const parts = key.split(".");
    let o = out;
    for (const k of parts.slice(0, -1)) {
      if (!isObject(o[k])) o[k] = {};
      o = o[k] as Record<string, unknown>;
    }
    o[parts.at(-1)!] = value;
  }
  const judged = validateSettings(out);
  if (!judged.ok) throw new Error(`the settings would be refused by the agent: ${judged.error} (fix it with KEY=VALUE or --unset KEY)`);
  return judged.settings;
}

// ---- set

export type SetOptions = { change: SettingsChange; trialSeconds?: number } & (
  | { cluster: string }
  | { fleet: string; namespace: string; placement?: string; strategy?: Strategy; maxConcurrency?: number | string; maxRolledBack?: number | string }
);
export type SetResult = { namespace: string; name: string; result: "created" | "updated" | "unchanged"; hash: string; notes: string[] };

// Creates the AgentConfig or updates it with the resourceVersion read (a PUT), leaving its status, its
// other metadata and any spec field this command does not set as they were. A write that loses a race
// (409, or created meanwhile) is computed again from what is there now.
export async function setConfig(hub: KubeClient, o: SetOptions): Promise<SetResult> {
  const fleet = "fleet" in o;
  const namespace = fleet ? o.namespace : o.cluster;
  const name = fleet ? o.fleet : AgentConfigName;
  if (fleet && name === AgentConfigName) throw new Error(`--fleet ${name}: that name is a cluster's own config; give the fleet-level config another name`);
  if (!fleet && !o.change.set.length && !o.change.unset.length && o.trialSeconds === undefined) throw new Error("nothing to set: give KEY=VALUE, --unset KEY or --trial-seconds");
  if (!fleet && !(await again(() => hub.get<ManagedCluster & KubeObject>(ManagedClusterResource, o.cluster)))) throw new Error(`no cluster ${o.cluster} on the hub`);
  for (let attempt = 1; ; attempt++) {
    const existing = await again(() => hub.get<AgentConfig>(AgentConfigResource, name, namespace));
    if (!existing && !fleet && !o.change.set.length && o.trialSeconds === undefined) throw new Error(`${o.cluster} has no AgentConfig: nothing to unset`);
    const spec = fleet ? fleetSpec(existing, o) : { ...existing?.spec, settings: changeSettings(existing?.spec?.settings, o.change), ...(o.trialSeconds === undefined ? {} : { trialSeconds: o.trialSeconds }) };
    const hash = settingsHash(spec.settings);
    const notes = await notesFor(hub, existing, o);
    try {
      if (!existing) {
        await hub.create<AgentConfig>(AgentConfigResource, { metadata: { name, namespace }, spec });
        return { namespace, name, result: "created", hash, notes };
      }
      if (isDeepStrictEqual(spec, existing.spec)) return { namespace, name, result: "unchanged", hash, notes };
      await hub.update<AgentConfig>(AgentConfigResource, { ...existing, spec });
      return { namespace, name, result: "updated", hash, notes };
    } catch (err) {
      if ((isConflict(err) || isAlreadyExists(err)) && attempt < 5) continue;
      if (isNotFound(err) && !(await again(() => hub.get(NamespaceResource, namespace))))
        throw new Error(`namespace ${namespace} does not exist on the hub${fleet ? "" : " (the cluster's namespace is made when the cluster is accepted)"}`);
      throw err;
    }
  }
}

function fleetSpec(existing: AgentConfig | undefined, o: Extract<SetOptions, { fleet: string }>): AgentConfigSpec {
  const before = existing?.spec;
  const placement = o.placement ?? before?.placementRef?.name;
  if (!placement) throw new Error(`${o.namespace}/${o.fleet} is a new fleet-level config: give --placement NAME, the Placement in ${o.namespace} whose clusters get it`);
  let strategy: RolloutStrategy | undefined = before?.rolloutStrategy;
  if (o.strategy && o.strategy !== (strategy?.type ?? "All")) strategy = { type: o.strategy };
  else if (o.strategy && !strategy) strategy = { type: o.strategy };
  if (o.maxConcurrency !== undefined) {
    if (strategy?.type !== "Progressive") throw new Error(`--max-concurrency applies to the Progressive strategy only (this config's is ${strategy?.type ?? "All"}): add --strategy Progressive`);
    strategy = { ...strategy, progressive: { ...strategy.progressive, maxConcurrency: o.maxConcurrency } };
  }
  const spec: AgentConfigSpec = {
    ...before,
    settings: changeSettings(before?.settings, o.change),
    placementRef: { ...before?.placementRef, name: placement },
    ...(strategy ? { rolloutStrategy: strategy } : {}),
    ...(o.maxRolledBack === undefined ? {} : { maxRolledBack: o.maxRolledBack }),
    ...(o.trialSeconds === undefined ? {} : { trialSeconds: o.trialSeconds }),
  };
  return spec;
}

// What the user should know about the write: a rollout owns the cluster's config, or the Placement is not there.
async function notesFor(hub: KubeClient, existing: AgentConfig | undefined, o: SetOptions): Promise<string[]> {
  if ("cluster" in o) {
    const from = existing?.metadata.labels?.[RolloutLabel];
    if (!from) return [];
    const ns = existing?.metadata.annotations?.[RolloutNamespaceAnnotation] ?? "?";
    return [`note: the fleet-level config ${ns}/${from} wrote this cluster's config; its rollout assigns its own settings again while it is not finished`];
  }
  const placement = o.placement ?? existing?.spec?.placementRef?.name;
  if (placement && !(await again(() => hub.get<Placement & KubeObject>(PlacementResource, placement, o.namespace))))
    return [`note: there is no Placement ${placement} in ${o.namespace} yet; the rollout starts when there is`];
  return [];
}

// ---- get

type ClusterObject = ManagedCluster & KubeObject;
const dash = (s: string | undefined) => s || "-";

export type Output = "yaml" | "json";

// The object as the API server holds it, without managedFields (as kubectl shows it by default).
function printable(o: KubeObject): KubeObject {
  const { managedFields: _, ...metadata } = o.metadata;
  return { ...o, metadata };
}
const format = (o: unknown, output: Output) => (output === "json" ? JSON.stringify(o, null, 2) : stringify(o, { lineWidth: 0 }).trimEnd());

// One cluster: the status the agent reports and the settings assigned; or its object with -o.
export async function getClusterConfig(hub: KubeClient, cluster: string, output?: Output): Promise<string> {
  const [config, mc] = await Promise.all([again(() => hub.get<AgentConfig>(AgentConfigResource, AgentConfigName, cluster)), again(() => hub.get<ClusterObject>(ManagedClusterResource, cluster))]);
  if (output) {
    if (!config) throw new Error(`${cluster} has no AgentConfig (${AgentConfigResource.plural}.${AgentConfigResource.group} ${AgentConfigName} in namespace ${cluster})`);
    return format(printable(config), output);
  }
  if (!config && !mc) throw new Error(`no cluster ${cluster} on the hub, and no AgentConfig in a namespace of that name`);
  // the agent mirrors AgentConfigOK on its ManagedCluster, which says so also when no config is assigned
  const ok = findCondition(config?.status?.conditions, AgentConfigConditionType.AgentConfigOK) ?? findCondition(mc?.status?.conditions, AgentConfigConditionType.AgentConfigOK);
  const s = config?.status;
  const rows: [string, string][] = [
    ["CLUSTER", cluster],
    ["SETTINGS HASH", config ? settingsHash(config.spec?.settings ?? {}) : "-"],
    ["ASSIGNED", dash(s?.assigned?.hash)],
    ["ACTIVE", dash(s?.active?.hash)],
    ["LAST-KNOWN-GOOD", dash(s?.lastKnownGood?.hash)],
    ["TRIAL", config ? (config.spec?.trialSeconds ? `${config.spec.trialSeconds}s` : `the agent's default (${DefaultTrialSeconds}s unless set at install)`) : "-"],
    ["AGENTCONFIGOK", dash(ok?.status)],
    ["REASON", dash(ok?.reason)],
    ["MESSAGE", dash(ok?.message)],
  ];
  if (s?.lastError) rows.push(["LAST ERROR", s.lastError]);
  const from = config?.metadata.labels?.[RolloutLabel];
  if (from) rows.push(["ROLLOUT", `${config?.metadata.annotations?.[RolloutNamespaceAnnotation] ?? "?"}/${from}`]);
  const settings = config?.spec?.settings ?? {};
  const leaves = settingLeaves(settings);
  const tail = !config
    ? "No AgentConfig: the agent runs its install-time settings."
    : leaves.length
      ? table(["SETTING", "VALUE"], leaves.map((p) => [showPath(p), show(valueAt(settings, p))]))
      : "No settings: the agent runs its install-time settings.";
  return `${table(undefined, rows)}\n\n${tail}`;
}

// Every cluster (the ManagedClusters, and any namespace holding an `agent` config): one row each.
export async function listClusterConfigs(hub: KubeClient, output?: Output): Promise<string> {
  const [configs, clusters] = await Promise.all([
    again(() => hub.list<AgentConfig>(AgentConfigResource, { fieldSelector: `metadata.name=${AgentConfigName}` })),
    again(() => hub.list<ClusterObject>(ManagedClusterResource)),
  ]);
  if (output) return format({ apiVersion: "v1", kind: "List", items: configs.items.map(printable) }, output);
  const byCluster = new Map(configs.items.map((c) => [c.metadata.namespace!, c]));
  const mcs = new Map(clusters.items.map((c) => [c.metadata.name!, c]));
  const names = [...new Set([...mcs.keys(), ...byCluster.keys()])].sort();
  if (!names.length) return "No clusters.";
  const rows = names.map((name) => {
    const s = byCluster.get(name)?.status;
    const ok = findCondition(s?.conditions, AgentConfigConditionType.AgentConfigOK) ?? findCondition(mcs.get(name)?.status?.conditions, AgentConfigConditionType.AgentConfigOK);
    return [name, dash(s?.assigned?.hash), dash(s?.active?.hash), dash(s?.lastKnownGood?.hash), dash(ok?.reason)];
  });
  return table(["CLUSTER", "ASSIGNED", "ACTIVE", "LAST-KNOWN-GOOD", "REASON"], rows);
}

const valueAt = (o: unknown, path: readonly string[]): unknown => path.reduce<unknown>((v, k) => (isObject(v) ? v[k] : undefined), o);
const show = (v: unknown) => (v === "" ? '""' : typeof v === "string" ? v : JSON.stringify(v));

// Columns padded to their widest cell; without a header, a two-column list of names and values.
function table(header: string[] | undefined, rows: string[][]): string {
  const all = header ? [header, ...rows] : rows;
  const widths = all[0]!.map((_, i) => Math.max(...all.map((r) => r[i]!.length)));
  return all.map((r) => r.map((cell, i) => cell.padEnd(widths[i]!)).join("   ").trimEnd()).join("\n");
}

// ---- rollout status

export type RolloutStatus = { text: string; halted: boolean; summary: string };

// A fleet-level config's rollout as agent-config-rollout reports it, counted against the clusters its
// Placement decides now; succeeded are the decided clusters whose agent made these settings its
// last-known-good (the rollout's own definition, functions/agent-config-rollout/plan.ts).
export async function rolloutStatus(hub: KubeClient, name: string, namespace: string): Promise<RolloutStatus> {
  const fleet = await again(() => hub.get<AgentConfig>(AgentConfigResource, name, namespace));
  if (!fleet) throw new Error(`no AgentConfig ${name} in namespace ${namespace}`);
  const placement = fleet.spec?.placementRef?.name;
  if (name === AgentConfigName || !placement) throw new Error(`${namespace}/${name} is not a fleet-level AgentConfig: it names no spec.placementRef`);
  const clusters = await again(() => placementClusters(hub, { namespace, name: placement }));
  const decided = [...(clusters ?? [])].sort();
  const hash = settingsHash(fleet.spec?.settings ?? {});
  const own = await Promise.all(decided.map((c) => again(() => hub.get<AgentConfig>(AgentConfigResource, AgentConfigName, c))));
  const succeeded = own.filter((c) => clusterState(c, hash) === "succeeded").length;
  const rollout = fleet.status?.rollout;
  const phase = rollout?.phase;
  const rolledBack = rollout?.rolledBack ?? [];
  const total = decided.length;
  const limit = countOf(fleet.spec?.maxRolledBack ?? DefaultMaxRolledBack, total, 0);
  const stale = phase && fleet.status?.assigned?.hash && fleet.status.assigned.hash !== hash;
  const rows: [string, string][] = [
    ["AGENTCONFIG", `${namespace}/${name}`],
    ["PLACEMENT", clusters ? `${placement} (${total} cluster${total === 1 ? "" : "s"} decided)` : `${placement} (no such Placement)`],
    ["STRATEGY", strategyText(fleet.spec?.rolloutStrategy)],
    ["SETTINGS HASH", hash],
    ["PHASE", phase ? (stale ? `${phase} (of settings ${fleet.status!.assigned!.hash}; these settings are not rolled out yet)` : phase) : "- (the rollout has not reported yet)"],
    ["UPDATED", `${rollout?.updated?.length ?? 0}/${total}`],
    ["SUCCEEDED", `${succeeded}/${total}`],
    ["ROLLED BACK", `${rolledBack.length}/${total} (halts past ${limit}, maxRolledBack ${fleet.spec?.maxRolledBack ?? `${DefaultMaxRolledBack} by default`})`],
    ["ROLLED-BACK CLUSTERS", rolledBack.length ? rolledBack.join(", ") : "-"],
  ];
  const halted = phase === RolloutPhase.Halted;
  const summary = `the rollout of ${namespace}/${name} is Halted: ${rolledBack.length} of ${total} clusters rolled back (${rolledBack.join(", ")}), more than maxRolledBack allows; the clusters not updated keep their last-known-good`;
  return { text: table(undefined, rows), halted, summary };
}

function strategyText(s: RolloutStrategy | undefined): string {
  const type = s?.type ?? "All";
  if (type === "Progressive") return `Progressive (maxConcurrency ${s?.progressive?.maxConcurrency ?? "all"})`;
  return type;
}
