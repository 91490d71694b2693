// A settled test written as data, so that the source that feeds a function (a relay) can run it with
// no function code and not wake the function at all (shared/sdk.ts Definition.settled). The object is
// settled when any clause holds:
//   { has: "metadata.deletionTimestamp" }       the dotted path holds a value (here: it is deleting)
//   { lacks: "metadata.deletionTimestamp" }     it holds none
//   { is: "spec.hubAcceptsClient", value: true }   it holds exactly that value
//   { includes: "metadata.finalizers", values: ["a", "b"] }   it holds a list with every one of them
//   { lacksCondition: "ManagedClusterConditionAvailable" }   status.conditions has no condition of that type
//   { condition: { type: "HubAcceptedManagedCluster", status: "True", reason: "..." } }   it has one of
//                                               that type with each field given as given
//   { all: [ ...clauses ] }                     every clause in it holds
// Plain on purpose: the relay loads it, and it imports nothing.
export type SettledClause =
  | { has: string }
  | { lacks: string }
  | { is: string; value: string | number | boolean }
  | { includes: string; values: string[] }
  | { lacksCondition: string }
  | { condition: { type: string; status: string; reason?: string; message?: string } }
  | { all: SettledClause[] };
export type SettledWhen = readonly SettledClause[];

// The value at a dotted path ("metadata.labels"), undefined where any step is missing.
export function at(o: unknown, path: string): unknown {
  let v = o;
  for (const step of path.split(".")) v = v && typeof v === "object" ? (v as Record<string, unknown>)[step] : undefined;
  return v;
}

const present = (v: unknown) => v !== undefined && v !== null;
type Condition = Record<string, unknown> | null;

function holds(clause: SettledClause, o: unknown): boolean {
  if ("has" in clause) return present(at(o, clause.has));
  if ("lacks" in clause) return !present(at(o, clause.lacks));
  if ("is" in clause) return at(o, clause.is) === clause.value;
  if ("includes" in clause) {
    const list = at(o, clause.includes);
    return Array.isArray(list) && clause.values.every((v) => list.includes(v));
  }
  if ("all" in clause) return clause.all.every((c) => holds(c, o));
  const conditions = at(o, "status.conditions");
  const list: Condition[] = Array.isArray(conditions) ? (conditions as Condition[]) : [];
  if ("lacksCondition" in clause) return !list.some((c) => c?.type === clause.lacksCondition);
  const want = clause.condition as Record<string, string | undefined>;
  return list.some((c) => !!c && Object.entries(want).every(([k, v]) => v === undefined || c[k] === v));
}

export const isSettledBy = (when: SettledWhen, o: unknown): boolean => when.some((clause) => holds(clause, o));
