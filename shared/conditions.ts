// Status conditions with apimachinery's semantics: set whole, transition time moves only when status changes.
import type { Condition } from "./api/meta.ts";
import { rfc3339 } from "./clock.ts";

export type NewCondition = Pick<Condition, "type" | "status" | "reason" | "message"> & { observedGeneration?: number };

export function findCondition(conditions: readonly Condition[] | undefined, type: string): Condition | undefined {
  return conditions?.find((c) => c.type === type);
}

export function isTrue(conditions: readonly Condition[] | undefined, type: string): boolean {
  return findCondition(conditions, type)?.status === "True";
}

export function hasCondition(conditions: readonly Condition[] | undefined, c: NewCondition): boolean {
  const have = findCondition(conditions, c.type);
  return !!have && have.status === c.status && have.reason === c.reason && have.message === c.message && (c.observedGeneration === undefined || have.observedGeneration === c.observedGeneration);
}

// Returns a new list; the old list is left as it was so callers can compare before and after.
export function setCondition(conditions: readonly Condition[] | undefined, c: NewCondition, now: Date): Condition[] {
  const list = [...(conditions ?? [])];
  const i = list.findIndex((x) => x.type === c.type);
  const old = i >= 0 ? list[i] : undefined;
  const lastTransitionTime = old && old.status === c.status ? old.lastTransitionTime : rfc3339(now);
  const next: Condition = { ...c, lastTransitionTime } as Condition;
  if (i >= 0) list[i] = next;
  else list.push(next);
  return list;
}

export function removeCondition(conditions: readonly Condition[] | undefined, type: string): Condition[] {
  return (conditions ?? []).filter((c) => c.type !== type);
}
