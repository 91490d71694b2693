// A settled test written as data, so that the source that feeds a function (a relay) can run it with
// no function code and not wake the function at all (shared/sdk.ts Definition.settled). The object is
// settled when any clause holds:
//   { has: "metadata.deletionTimestamp" }       the dotted path holds a value (here: it is deleting)
//   { lacksCondition: "ManagedClusterConditionAvailable" }   status.conditions has no condition of that type
// Plain on purpose: the relay loads it, and it imports nothing.
export type SettledClause = { has: string } | { lacksCondition: string };
export type SettledWhen = readonly SettledClause[];

// The value at a dotted path ("metadata.labels"), undefined where any step is missing.
export function at(o: unknown, path: string): unknown {
  let v = o;
  for (const step of path.split(".")) v = v && typeof v === "object" ? (v as Record<string, unknown>)[step] : undefined;
  return v;
}

function holds(clause: SettledClause, o: unknown): boolean {
  if ("has" in clause) {
    const v = at(o, clause.has);
    return v !== undefined && v !== null;
  }
  const conditions = at(o, "status.conditions");
  return !Array.isArray(conditions) || !conditions.some((c) => (c as { type?: unknown } | null)?.type === clause.lacksCondition);
}

export const isSettledBy = (when: SettledWhen, o: unknown): boolean => when.some((clause) => holds(clause, o));
