// Which clusters a fleet-level AgentConfig's rollout updates next, with no I/O: each cluster's state
// from its own AgentConfig, the rollout strategy's order and pace (OCM's All, Progressive with
// maxConcurrency, ProgressivePerGroup), and the halt once more clusters rolled back than maxRolledBack.
import { RolloutPhase } from "../../shared/api/agent-config.ts";
import type { RolloutStrategy } from "../../shared/api/cluster.ts";
import { countOf, type ClusterState } from "../../shared/agent-config.ts";

export type Target = { cluster: string; group: number; groupName: string };
export type Plan = { phase: RolloutPhase; update: string[]; updated: string[]; rolledBack: string[] };

export function plan(o: { strategy: RolloutStrategy | undefined; targets: readonly Target[]; states: ReadonlyMap<string, ClusterState>; maxRolledBack: number | string | undefined }): Plan {
  const stateOf = (c: string) => o.states.get(c) ?? "pending";
  const total = o.targets.length;
  const rolledBack = o.targets.filter((t) => stateOf(t.cluster) === "rolledBack").map((t) => t.cluster).sort();
  const updated = o.targets.filter((t) => stateOf(t.cluster) !== "pending").map((t) => t.cluster).sort();
  const base = { updated, rolledBack };
  if (rolledBack.length > countOf(o.maxRolledBack, total, Math.floor(total / 10))) return { phase: RolloutPhase.Halted, update: [], ...base };
  if (o.targets.every((t) => stateOf(t.cluster) === "succeeded")) return { phase: RolloutPhase.Succeeded, update: [], ...base };
  const ordered = orderTargets(o.targets, o.strategy);
  const pending = ordered.filter((t) => stateOf(t.cluster) === "pending");
  const type = o.strategy?.type ?? "All";
  if (type === "Progressive") {
    const inFlight = o.targets.filter((t) => stateOf(t.cluster) === "progressing").length;
    const limit = Math.max(1, countOf(o.strategy?.progressive?.maxConcurrency, total, total));
    return { phase: RolloutPhase.Progressing, update: pending.slice(0, Math.max(0, limit - inFlight)).map((t) => t.cluster), ...base };
  }
  if (type === "ProgressivePerGroup") {
    // the first group with a cluster not yet finished is the one rolling; the next waits for it
    const finished = (t: Target) => stateOf(t.cluster) === "succeeded" || stateOf(t.cluster) === "rolledBack";
    const current = ordered.find((t) => !finished(t));
    const group = current ? ordered.filter((t) => t.group === current.group) : [];
    return { phase: RolloutPhase.Progressing, update: group.filter((t) => stateOf(t.cluster) === "pending").map((t) => t.cluster), ...base };
  }
  return { phase: RolloutPhase.Progressing, update: pending.map((t) => t.cluster), ...base };
}

// Mandatory decision groups first (by name or index, in the order listed), then the rest by group
// index; clusters by name within a group.
function orderTargets(targets: readonly Target[], strategy: RolloutStrategy | undefined): Target[] {
  const mandatory = (strategy?.type === "Progressive" ? strategy.progressive : strategy?.type === "ProgressivePerGroup" ? strategy.progressivePerGroup : undefined)?.mandatoryDecisionGroups ?? [];
  const rank = (t: Target) => {
    const i = mandatory.findIndex((m) => (m.groupName !== undefined && m.groupName === t.groupName) || (m.groupIndex !== undefined && m.groupIndex === t.group));
    return i >= 0 ? i : mandatory.length;
  };
  return [...targets].sort((a, b) => rank(a) - rank(b) || a.group - b.group || (a.cluster < b.cluster ? -1 : a.cluster > b.cluster ? 1 : 0));
}
