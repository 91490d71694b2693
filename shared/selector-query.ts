// metav1.LabelSelector as the API server's ?labelSelector= text, with apimachinery's meaning
// (LabelSelectorAsSelector): no selector selects nothing, an empty one selects everything, and a
// selector it would refuse is reported instead of being sent.
import type { LabelSelector } from "./api/meta.ts";

export type SelectorQuery =
  | { selects: "nothing" }
  | { selects: "matching"; labelSelector: string } // "" selects every object
  | { invalid: string };

const labelName = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const dns1123Subdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

// apimachinery's IsQualifiedName: [prefix/]name, the prefix a DNS subdomain, the name at most 63.
export function labelKeyProblem(key: string): string | undefined {
  const parts = key.split("/");
  if (parts.length > 2) return `label key ${JSON.stringify(key)} has more than one "/"`;
  const [prefix, name] = parts.length === 2 ? [parts[0]!, parts[1]!] : [undefined, parts[0]!];
  if (prefix !== undefined && (prefix.length === 0 || prefix.length > 253 || !dns1123Subdomain.test(prefix))) return `label key ${JSON.stringify(key)}: the prefix must be a DNS subdomain`;
  if (name.length === 0 || name.length > 63 || !labelName.test(name)) return `label key ${JSON.stringify(key)}: the name must be 1-63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric`;
  return undefined;
}

// apimachinery's IsValidLabelValue: empty, or at most 63 of the name's characters.
export function labelValueProblem(value: string): string | undefined {
  if (value === "") return undefined;
  if (value.length > 63 || !labelName.test(value)) return `label value ${JSON.stringify(value)} must be at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric`;
  return undefined;
}

// apimachinery's message for a label value it refuses, at the path it gives (values[i][key]).
function invalidValue(key: string, value: string, i: number): string | undefined {
  const reasons: string[] = [];
  if (value.length > 63) reasons.push("must be no more than 63 characters");
  if (value !== "" && !labelName.test(value))
    reasons.push(
      "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
    );
  return reasons.length ? `values[${i}][${key}]: Invalid value: ${JSON.stringify(value)}: ${reasons.join("; ")}` : undefined;
}

// The reasons are worded as LabelSelectorAsSelector words them, since OCM's placement status repeats them.
export function selectorQuery(selector: LabelSelector | undefined): SelectorQuery {
  if (!selector) return { selects: "nothing" };
  const parts: string[] = [];
  for (const [key, value] of Object.entries(selector.matchLabels ?? {})) {
    const problem = labelKeyProblem(key) ?? invalidValue(key, value, 0);
    if (problem) return { invalid: problem };
    parts.push(`${key}=${value}`);
  }
  for (const { key, operator, values = [] } of selector.matchExpressions ?? []) {
    switch (operator) {
      case "In":
      case "NotIn":
        if (values.length === 0) return { invalid: "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty" };
        break;
      case "Exists":
      case "DoesNotExist":
        if (values.length > 0) return { invalid: `values: Invalid value: []string{${values.map((v) => JSON.stringify(v)).join(", ")}}: values set must be empty for exists and does not exist` };
        break;
      default:
        return { invalid: `${JSON.stringify(operator)} is not a valid label selector operator` };
    }
    const problem = labelKeyProblem(key) ?? values.map((v, i) => invalidValue(key, v, i)).find((p) => p !== undefined);
    if (problem) return { invalid: problem };
    if (operator === "In" || operator === "NotIn") parts.push(`${key} ${operator.toLowerCase()} (${values.join(",")})`);
    else parts.push(operator === "Exists" ? key : `!${key}`);
  }
  return { selects: "matching", labelSelector: parts.join(",") };
}

// A selector the client can send (matching) or skip sending (nothing: no object can match it).
export type LabelQuery = Exclude<SelectorQuery, { invalid: string }>;

// A label selector requiring each key of `equal` to carry its value, each key of `present` to be there
// and each of `absent` to be missing. The values are data (names of add-ons, placements, clusters, sets): one no label can hold
// (a legal custom resource name of 64 to 253 characters, say) selects nothing, as the API server would
// answer if it did not refuse the selector with a 400. A bad key is ours, a bug, and throws.
export function labelsQuery(equal: Record<string, string>, o: { present?: readonly string[]; absent?: readonly string[] } = {}): LabelQuery {
  const parts: string[] = [];
  for (const [key, value] of Object.entries(equal)) {
    const keyProblem = labelKeyProblem(key);
    if (keyProblem) throw new Error(`refusing to select by ${keyProblem}`);
    if (labelValueProblem(value)) return { selects: "nothing" };
    parts.push(`${key}=${value}`);
  }
  for (const [keys, term] of [[o.present ?? [], (k: string) => k] as const, [o.absent ?? [], (k: string) => `!${k}`] as const]) {
    for (const key of keys) {
      const keyProblem = labelKeyProblem(key);
      if (keyProblem) throw new Error(`refusing to select by ${keyProblem}`);
      parts.push(term(key));
    }
  }
  return { selects: "matching", labelSelector: parts.join(",") };
}

// apimachinery's fields.EscapeValue: in a field selector's value a backslash, "," and "=" are each
// written with a backslash before them, which the API server's parser takes away again. Unescaped, a
// name with "=" or a backslash is a selector the API server refuses (400), and one with "," adds a term
// of the name's choosing. The client URL-encodes the whole (so "?", "#", "&" and "%" travel as they are).
export const escapeFieldValue = (value: string): string => value.replace(/[\\,=]/g, (c) => `\\${c}`);

// Field selector text requiring each field to equal its value, escaped.
export const fieldSelectorOf = (equal: Record<string, string>): string =>
  Object.entries(equal)
    .map(([field, value]) => `${field}=${escapeFieldValue(value)}`)
    .join(",");
