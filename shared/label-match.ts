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
