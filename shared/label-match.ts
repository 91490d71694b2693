// metav1.LabelSelector tested in memory, with the meaning selector-query.ts gives it on the wire: the
// terms are ANDed, an empty selector selects everything, and a selector the API server would refuse
// is an error rather than one that quietly matches nothing.
import type { LabelSelector } from "./api/meta.ts";
import { selectorQuery } from "./selector-query.ts";

// Why the API server would refuse the selector, or undefined when it is well formed.
export function selectorProblem(s: LabelSelector): string | undefined {
  const q = selectorQuery(s);
  return "invalid" in q ? q.invalid : undefined;
}

// Whether labels satisfy a well-formed selector (check selectorProblem first).
export function matches(s: LabelSelector, labels: Readonly<Record<string, string>> | undefined): boolean {
  const l = labels ?? {};
  for (const [k, v] of Object.entries(s.matchLabels ?? {})) if (l[k] !== v) return false;
  return (s.matchExpressions ?? []).every(({ key, operator, values = [] }) => {
    const has = Object.hasOwn(l, key);
    if (operator === "In") return has && values.includes(l[key]!);
    if (operator === "NotIn") return !has || !values.includes(l[key]!);
    if (operator === "Exists") return has;
    if (operator === "DoesNotExist") return !has;
    return false;
  });
}

// A watch's label selector string as a LabelSelector object (what an ApiServerSource's resource takes,
// and what matches() tests). Only the forms our watches use: `key`, `!key`, `key=value` and
// `key!=value`, comma-separated.
export function labelSelectorObject(selector: string): LabelSelector {
  const matchLabels: Record<string, string> = {};
  const matchExpressions: NonNullable<LabelSelector["matchExpressions"]> = [];
  for (const term of selector.split(",").map((t) => t.trim()).filter(Boolean)) {
    const m = /^(!)?([A-Za-z0-9./_-]+)(?:\s*(!=|==|=)\s*([A-Za-z0-9._-]*))?$/.exec(term);
    if (!m) throw new Error(`label selector ${JSON.stringify(selector)}: ${JSON.stringify(term)} is not key, !key, key=value or key!=value`);
    const [, not, key, op, value] = m as unknown as [string, string | undefined, string, string | undefined, string | undefined];
    if (not && op) throw new Error(`label selector ${JSON.stringify(selector)}: ${JSON.stringify(term)} mixes ! with an operator`);
    if (!op) matchExpressions.push({ key, operator: not ? "DoesNotExist" : "Exists" });
    else if (op === "!=") matchExpressions.push({ key, operator: "NotIn", values: [value ?? ""] });
    else matchLabels[key] = value ?? "";
  }
  return { ...(Object.keys(matchLabels).length ? { matchLabels } : {}), ...(matchExpressions.length ? { matchExpressions } : {}) };
}
