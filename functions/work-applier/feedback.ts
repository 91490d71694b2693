// Status feedback (§7.3): values read from a live object by WellKnownStatus or JSONPaths rules, typed as
// OCM types them, and the StatusFeedbackSynced condition that reports how the reading went.
import { FeedbackValueType, ManifestReason, WorkConditionType, type ManifestConfigOption } from "../../shared/api/work.ts";
import type { NewCondition } from "../../shared/conditions.ts";
import type { KubeObject } from "../../shared/kube/client.ts";
import { evaluate, parseJsonPath } from "./jsonpath.ts";

export type FeedbackRule = NonNullable<ManifestConfigOption["feedbackRules"]>[number];
export type FieldValue =
  | { type: typeof FeedbackValueType.Integer; integer: number }
  | { type: typeof FeedbackValueType.String; string: string }
  | { type: typeof FeedbackValueType.Boolean; boolean: boolean }
  | { type: typeof FeedbackValueType.JsonRaw; jsonRaw: string };
export type FeedbackValue = { name: string; fieldValue: FieldValue };

export type FeedbackSettings = {
  rawFeedbackJsonString: boolean; // OCM's RawFeedbackJsonString gate, off by default
  maxJsonRawLength: number; // --max-json-raw-length, default 1024
};

type NamedPath = { name: string; path: string; version?: string };

// OCM's well-known statuses, by group/version/kind exactly.
const wellKnown: Readonly<Record<string, readonly NamedPath[]>> = {
  "apps/v1/Deployment": [
    { name: "ReadyReplicas", path: ".status.readyReplicas" },
    { name: "Replicas", path: ".status.replicas" },
    { name: "AvailableReplicas", path: ".status.availableReplicas" },
  ],
  "batch/v1/Job": [
    { name: "JobComplete", path: '.status.conditions[?(@.type=="Complete")].status' },
    { name: "JobSucceeded", path: ".status.succeeded" },
  ],
  "/v1/Pod": [
    { name: "PodReady", path: '.status.conditions[?(@.type=="Ready")].status' },
    { name: "PodPhase", path: ".status.phase" },
  ],
  "apps/v1/DaemonSet": [
    { name: "NumberReady", path: ".status.numberReady" },
    { name: "DesiredNumberScheduled", path: ".status.desiredNumberScheduled" },
    { name: "NumberAvailable", path: ".status.numberAvailable" },
  ],
};

function groupVersionKind(obj: KubeObject): { group: string; version: string; kind: string } {
  const apiVersion = obj.apiVersion ?? "";
  const slash = apiVersion.lastIndexOf("/");
  return { group: slash < 0 ? "" : apiVersion.slice(0, slash), version: slash < 0 ? apiVersion : apiVersion.slice(slash + 1), kind: obj.kind ?? "" };
}

// Go's schema.GroupVersionKind.String(), which OCM's error message prints.
const gvkString = (g: { group: string; version: string; kind: string }) => `${g.group}/${g.version}, Kind=${g.kind}`;

// Go's type name for a JSON value it cannot turn into Integer/String/Boolean, as the message prints it.
function goTypeName(v: unknown): string {
  if (Array.isArray(v)) return "[]interface {}";
  if (typeof v === "number") return "float64";
  return "map[string]interface {}";
}

function valueByPath(p: NamedPath, obj: KubeObject, s: FeedbackSettings): FeedbackValue | undefined {
  let found: unknown[];
  try {
    found = evaluate(parseJsonPath(p.path), obj);
  } catch (err) {
    throw new Error(`failed to parse json path ${p.path} of ${p.name} with error: ${(err as Error).message}`);
  }
  if (found.length === 0) return undefined;
  // Without the gate only the first match counts; with it, several matches are reported as a list.
  const value = found.length === 1 || !s.rawFeedbackJsonString ? found[0] : found;
  if (value === null || value === undefined) return undefined;
  if (typeof value === "number" && Number.isInteger(value)) return { name: p.name, fieldValue: { type: "Integer", integer: value } };
  if (typeof value === "string") return { name: p.name, fieldValue: { type: "String", string: value } };
  if (typeof value === "boolean") return { name: p.name, fieldValue: { type: "Boolean", boolean: value } };
  if (s.rawFeedbackJsonString) {
    const jsonRaw = JSON.stringify(value);
    if (Buffer.byteLength(jsonRaw) > s.maxJsonRawLength) throw new Error(`the length of returned json raw string for name ${p.name} is larger than the maximum length ${s.maxJsonRawLength}`);
    return { name: p.name, fieldValue: { type: "JsonRaw", jsonRaw } };
  }
  throw new Error(`the type ${goTypeName(value)} of the value for ${p.name} is not found`);
}

function pathsOf(rule: FeedbackRule, obj: KubeObject): { paths: NamedPath[]; errors: string[] } {
  const gvk = groupVersionKind(obj);
  if (rule.type === "WellKnownStatus") {
    const paths = wellKnown[`${gvk.group}/${gvk.version}/${gvk.kind}`];
    return paths ? { paths: [...paths], errors: [] } : { paths: [], errors: [`cannot find the wellknown statuses for resource with gvk ${gvkString(gvk)}`] };
  }
  const paths: NamedPath[] = [];
  const errors: string[] = [];
  for (const p of rule.jsonPaths ?? []) {
    if (p.version && p.version !== gvk.version) errors.push(`version set in the path ${p.name} is not matched for the related resource`);
    else paths.push(p);
  }
  return { paths, errors };
}

// utilerrors.NewAggregate's message: one error as it is, several deduplicated in brackets.
function aggregate(errors: readonly string[]): string {
  const unique = [...new Set(errors)];
  return unique.length === 1 ? unique[0]! : `[${unique.join(", ")}]`;
}

export function readFeedback(obj: KubeObject, rules: readonly FeedbackRule[] | undefined, s: FeedbackSettings): { values: FeedbackValue[]; condition: NewCondition } {
  const type = WorkConditionType.StatusFeedbackSynced;
  if (!rules || rules.length === 0) return { values: [], condition: { type, status: "True", reason: ManifestReason.NoStatusFeedbackSynced, message: "" } };
  const values: FeedbackValue[] = [];
  const errors: string[] = [];
  for (const rule of rules) {
    const { paths, errors: ruleErrors } = pathsOf(rule, obj);
    errors.push(...ruleErrors);
    for (const p of paths) {
      try {
        const v = valueByPath(p, obj, s);
        if (v) values.push(v);
      } catch (err) {
        errors.push((err as Error).message);
      }
    }
  }
  if (errors.length > 0) return { values, condition: { type, status: "False", reason: ManifestReason.StatusFeedbackSyncFailed, message: `Sync status feedback failed with error ${aggregate(errors)}` } };
  return { values, condition: { type, status: "True", reason: ManifestReason.StatusFeedbackSynced, message: "" } };
}
