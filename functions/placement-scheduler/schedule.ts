// The scheduling itself, with no I/O: which clusters a Placement selects, in what decision groups and
// PlacementDecisions, and the status conditions that say so. It follows OCM's placement controller:
// filters (predicates, then taints and tolerations), prioritizers summed by weight, the best
// numberOfClusters by score and then by name, groups from the decision strategy, at most 100 clusters
// per PlacementDecision.
import {
  ClusterLabel,
  PlacementConditionType,
  PlacementDisableAnnotation,
  PlacementResource,
  TaintEffect,
  type ManagedCluster,
  type Placement,
  type PlacementDecision,
  type Taint,
} from "../../shared/api/cluster.ts";
import type { NewCondition } from "../../shared/conditions.ts";
import { matches, selectorProblem } from "../../shared/label-match.ts";
import type { LabelSelector } from "../../shared/api/meta.ts";
import { parseQuantity, quantityToNumber } from "../../shared/quantity.ts";
import { compileCel, type CelProgram } from "./cel.ts";

export const MaxDecisionsPerObject = 100;
const MaxScore = 100;
// The annotation that stops OCM's scheduler from touching a Placement (shared: agent-config-rollout
// reads it too).
export const SchedulingDisabledAnnotation = PlacementDisableAnnotation;

export const Prioritizer = {
  Balance: "Balance",
  Steady: "Steady",
  ResourceAllocatableCPU: "ResourceAllocatableCPU",
  ResourceAllocatableMemory: "ResourceAllocatableMemory",
} as const;

// A configuration error, named after the part of the scheduler that found it as OCM names it
// ("Predicate", "TaintToleration", or "" for the prioritizer policy and the decision strategy).
export type Problem = { plugin: string; message: string };

export type Facts = {
  placement: Placement;
  clusters: readonly ManagedCluster[]; // members of the eligible sets, none deleting
  decided: ReadonlySet<string>; // clusters in this placement's present decisions
  otherDecisions: ReadonlyMap<string, number>; // per cluster, decisions of every other placement (Balance)
  now: Date;
};

export type Schedule = {
  selected: ManagedCluster[]; // best first
  feasible: number;
  unscheduled: number;
  scores: Map<string, number>;
  problem?: Problem;
  recheckAt?: Date; // when a toleration runs out for a cluster that is tolerated now
};

const claimsOf = (c: ManagedCluster) => Object.fromEntries((c.status?.clusterClaims ?? []).map((x) => [x.name ?? "", x.value ?? ""]));

type ClusterSelector = { labelSelector?: LabelSelector; claimSelector?: Pick<LabelSelector, "matchExpressions">; celSelector?: { celExpressions?: string[] } };

// A predicate's selector as one test, or the reason it cannot be used.
function compileSelector(s: ClusterSelector | undefined): ((c: ManagedCluster) => boolean) | { error: string } {
  const labelSelector = s?.labelSelector ?? {};
  const claimSelector = { matchExpressions: s?.claimSelector?.matchExpressions ?? [] };
  const problem = selectorProblem(labelSelector) ?? selectorProblem(claimSelector);
  if (problem) return { error: problem };
  const programs: CelProgram[] = [];
  for (const e of s?.celSelector?.celExpressions ?? []) {
    const p = compileCel(e);
    if ("error" in p) return p;
    programs.push(p);
  }
  return (c) => matches(labelSelector, c.metadata.labels) && matches(claimSelector, claimsOf(c)) && programs.every((p) => p(c));
}

// Predicates are ORed; within one, label, claim and CEL selectors are ANDed.
function filterByPredicates(p: Placement, clusters: readonly ManagedCluster[]): ManagedCluster[] | Problem {
  const predicates = p.spec.predicates ?? [];
  if (predicates.length === 0 || clusters.length === 0) return [...clusters];
  const tests: ((c: ManagedCluster) => boolean)[] = [];
  for (const pr of predicates) {
    const t = compileSelector(pr.requiredClusterSelector as ClusterSelector | undefined);
    if ("error" in t) return { plugin: "Predicate", message: t.error };
    tests.push(t);
  }
  return clusters.filter((c) => tests.some((t) => t(c)));
}

type Toleration = NonNullable<Placement["spec"]["tolerations"]>[number];

// Whether one taint is tolerated, and until when when the toleration has a time limit.
function tolerates(taint: Taint, t: Toleration, now: Date): { ok: boolean; until?: Date } {
  if (t.effect && t.effect !== taint.effect) return { ok: false };
  if (t.key && t.key !== taint.key) return { ok: false };
  const op = t.operator ?? "Equal";
  const matched = op === "Exists" || ((op === "Equal" || op === "") && (t.value ?? "") === (taint.value ?? ""));
  if (!matched) return { ok: false };
  if (t.tolerationSeconds === undefined || t.tolerationSeconds === null) return { ok: true };
  const until = new Date(Date.parse(taint.timeAdded ?? "") + Number(t.tolerationSeconds) * 1000);
  return now < until ? { ok: true, until } : { ok: false };
}

// PreferNoSelect never filters; NoSelectIfNew keeps clusters already decided; NoSelect needs a toleration.
function clusterTolerated(c: ManagedCluster, tolerations: readonly Toleration[], decided: boolean, now: Date): { ok: boolean; until?: Date } {
  let until: Date | undefined;
  for (const taint of c.spec?.taints ?? []) {
    if (taint.effect === TaintEffect.PreferNoSelect) continue;
    if (taint.effect === TaintEffect.NoSelectIfNew && decided) continue;
    const hit = tolerations.map((t) => tolerates(taint, t, now)).find((r) => r.ok);
    if (!hit) return { ok: false };
    if (hit.until && (!until || hit.until < until)) until = hit.until;
  }
  return { ok: true, until };
}

function tolerationProblem(tolerations: readonly Toleration[]): Problem | undefined {
  for (const t of tolerations) {
    if (!t.key && t.operator !== "Exists") return { plugin: "TaintToleration", message: "If the key is empty, operator must be Exists." };
    if (t.operator === "Exists" && t.value) return { plugin: "TaintToleration", message: "If the operator is Exists, the value should be empty." };
  }
  return undefined;
}

const coordinateKey = (c: { type?: string; builtIn?: string; addOn?: { resourceName: string; scoreName: string } }) =>
  c.type === "AddOn" ? `AddOn/${c.addOn?.resourceName ?? ""}/${c.addOn?.scoreName ?? ""}` : `BuiltIn/${c.builtIn ?? ""}`;

// The prioritizers and their weights: in Additive mode (the default) Balance and Steady weigh 1 unless
// configured otherwise; in Exact mode only what is configured counts. Weight 0 turns one off.
export function prioritizerWeights(p: Placement): Map<string, number> | Problem {
  const mode = p.spec.prioritizerPolicy?.mode ?? "Additive";
  if (mode !== "Additive" && mode !== "Exact" && mode !== "") return { plugin: "", message: `incorrect prioritizer policy mode: ${mode}` };
  const weights = new Map<string, number>(mode === "Exact" ? [] : [[`BuiltIn/${Prioritizer.Balance}`, 1], [`BuiltIn/${Prioritizer.Steady}`, 1]]);
  for (const c of p.spec.prioritizerPolicy?.configurations ?? []) {
    if (!c.scoreCoordinate) return { plugin: "", message: "scoreCoordinate field is required" };
    weights.set(coordinateKey(c.scoreCoordinate), c.weight ?? 1);
  }
  for (const [key, w] of weights) {
    if (w === 0) {
      weights.delete(key);
      continue;
    }
    const [type, name] = key.split("/");
    if (type === "BuiltIn" && !Object.values(Prioritizer).includes(name as never)) return { plugin: "", message: `incorrect builtin prioritizer: ${name}` };
    if (type === "AddOn") return { plugin: "", message: `AddOn prioritizers are not supported: this hub does not serve AddOnPlacementScores (${key})` };
  }
  return weights;
}

// Balance: a cluster with no other placement's decision scores 100, the busiest -100.
function balanceScores(clusters: readonly ManagedCluster[], others: ReadonlyMap<string, number>): Map<string, number> {
  const max = Math.max(0, ...others.values());
  return new Map(
    clusters.map((c) => {
      const count = others.get(c.metadata.name);
      return [c.metadata.name, count === undefined ? MaxScore : 2 * Math.trunc(MaxScore * (0.5 - count / max))];
    }),
  );
}

// Steady: clusters already decided score 100, the others 0.
const steadyScores = (clusters: readonly ManagedCluster[], decided: ReadonlySet<string>) => new Map(clusters.map((c) => [c.metadata.name, decided.has(c.metadata.name) ? MaxScore : 0]));

// The most allocatable scores 100, the least -100; a cluster that reports no allocatable (or no
// capacity) for the resource gets no score.
function allocatableScores(clusters: readonly ManagedCluster[], resource: "cpu" | "memory"): Map<string, number> {
  const amounts = new Map<string, number>();
  for (const c of clusters) {
    const alloc = c.status?.allocatable?.[resource];
    const cap = c.status?.capacity?.[resource];
    if (alloc === undefined || cap === undefined) continue;
    try {
      amounts.set(c.metadata.name, quantityToNumber(parseQuantity(alloc)));
    } catch {
      // an unparseable quantity is as good as none
    }
  }
  if (amounts.size === 0) return new Map();
  const min = Math.min(...amounts.values());
  const max = Math.max(...amounts.values());
  return new Map([...amounts].map(([name, a]) => [name, max === min ? MaxScore : Math.trunc(((a - min) / (max - min) - 0.5) * 2 * MaxScore)]));
}

function prioritizerScores(key: string, clusters: readonly ManagedCluster[], f: Facts): Map<string, number> {
  switch (key) {
    case `BuiltIn/${Prioritizer.Balance}`:
      return balanceScores(clusters, f.otherDecisions);
    case `BuiltIn/${Prioritizer.Steady}`:
      return steadyScores(clusters, f.decided);
    case `BuiltIn/${Prioritizer.ResourceAllocatableCPU}`:
      return allocatableScores(clusters, "cpu");
    default:
      return allocatableScores(clusters, "memory");
  }
}

export function schedule(f: Facts): Schedule {
  const p = f.placement;
  const none = (problem: Problem): Schedule => ({ selected: [], feasible: 0, unscheduled: 0, scores: new Map(), problem });
  const predicated = filterByPredicates(p, f.clusters);
  if (!Array.isArray(predicated)) return none(predicated);
  const tolerations = p.spec.tolerations ?? [];
  const badToleration = predicated.length > 0 ? tolerationProblem(tolerations) : undefined;
  if (badToleration) return none(badToleration);
  let recheckAt: Date | undefined;
  const feasible = predicated.filter((c) => {
    const t = clusterTolerated(c, tolerations, f.decided.has(c.metadata.name), f.now);
    if (t.ok && t.until && (!recheckAt || t.until < recheckAt)) recheckAt = t.until;
    return t.ok;
  });
  const weights = prioritizerWeights(p);
  if (!(weights instanceof Map)) return none(weights);
  const scores = new Map(feasible.map((c) => [c.metadata.name, 0]));
  for (const [key, weight] of weights)
    for (const [name, score] of prioritizerScores(key, feasible, f)) scores.set(name, (scores.get(name) ?? 0) + score * weight);
  const ranked = [...feasible].sort((a, b) => scores.get(b.metadata.name)! - scores.get(a.metadata.name)! || compareNames(a.metadata.name, b.metadata.name));
  const wanted = p.spec.numberOfClusters ?? ranked.length;
  const selected = ranked.slice(0, Math.max(0, wanted));
  const unscheduled = p.spec.numberOfClusters === undefined ? 0 : wanted - selected.length;
  return { selected, feasible: feasible.length, unscheduled, scores, recheckAt };
}

// Go's string order (bytes), which is what OCM's sorts use.
const compareNames = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

export type DecisionGroup = { name: string; clusters: string[] };

// clustersPerDecisionGroup as a count: an int, or a percentage of the selected clusters rounded up; out
// of range means all of them.
function groupLength(v: number | string | undefined, total: number): number | Problem {
  let n = total;
  if (typeof v === "number") n = v;
  else if (typeof v === "string") {
    const pct = v.endsWith("%") ? Number(v.slice(0, -1)) : NaN;
    if (v.slice(0, -1).trim() === "" || !Number.isFinite(pct)) return { plugin: "", message: `${v} invalid type: string is not a percentage` };
    n = Math.ceil((pct / 100) * total);
  }
  return n <= 0 || n > total ? total : n;
}

function chunk(names: string[], size: number): string[][] {
  const sorted = [...names].sort(compareNames);
  const out: string[][] = [];
  for (let i = 0; i < sorted.length; i += size) out.push(sorted.slice(i, i + size));
  return out;
}

// The decision groups: each named group takes the selected clusters its selector matches (a cluster
// goes to the first group that matches it), the rest form unnamed groups; every group is cut to the
// group length. No selected cluster still gives one empty group. A group whose selector is invalid
// stops there: the groups made before it are kept, as OCM keeps them.
export function decisionGroups(p: Placement, selected: readonly ManagedCluster[]): { groups: DecisionGroup[]; problem?: Problem } {
  const strategy = p.spec.decisionStrategy?.groupStrategy;
  const length = groupLength(strategy?.clustersPerDecisionGroup ?? "100%", selected.length);
  if (typeof length !== "number") return { groups: [], problem: length };
  const left = new Set(selected.map((c) => c.metadata.name));
  const groups: DecisionGroup[] = [];
  for (const g of strategy?.decisionGroups ?? []) {
    const test = compileSelector(g.groupClusterSelector as ClusterSelector);
    if ("error" in test) return { groups, problem: { plugin: "", message: test.error } };
    const members = selected.filter((c) => left.has(c.metadata.name) && test(c)).map((c) => c.metadata.name);
    for (const m of members) left.delete(m);
    for (const part of chunk(members, length)) groups.push({ name: g.groupName, clusters: part });
  }
  for (const part of chunk([...left], length)) groups.push({ name: "", clusters: part });
  return { groups: groups.length > 0 ? groups : [{ name: "", clusters: [] }] };
}

export type GroupStatus = { decisionGroupIndex: number; decisionGroupName: string; decisions: string[]; clusterCount: number };

// The PlacementDecisions the groups make, named <placement>-decision-<n> from 1, each owned by the
// Placement and labelled with it and its group.
export function placementDecisions(p: Placement, groups: readonly DecisionGroup[]): { decisions: PlacementDecision[]; groups: GroupStatus[] } {
  const decisions: PlacementDecision[] = [];
  const status: GroupStatus[] = [];
  groups.forEach((g, index) => {
    const slices: string[][] = [];
    for (let i = 0; i < g.clusters.length; i += MaxDecisionsPerObject) slices.push(g.clusters.slice(i, i + MaxDecisionsPerObject));
    if (slices.length === 0) slices.push([]);
    const names: string[] = [];
    for (const slice of slices) {
      const name = `${p.metadata.name}-decision-${decisions.length + 1}`;
      names.push(name);
      decisions.push({
        apiVersion: `${PlacementResource.group}/v1beta1`,
        kind: "PlacementDecision",
        metadata: {
          name,
          namespace: p.metadata.namespace,
          labels: { [ClusterLabel.Placement]: p.metadata.name, [ClusterLabel.DecisionGroupName]: g.name, [ClusterLabel.DecisionGroupIndex]: String(index) },
          ownerReferences: [
            { apiVersion: `${PlacementResource.group}/${PlacementResource.version}`, kind: PlacementResource.kind, name: p.metadata.name, uid: p.metadata.uid ?? "", controller: true, blockOwnerDeletion: true },
          ],
        },
        status: { decisions: slice.map((clusterName) => ({ clusterName, reason: "" })) },
      });
    }
    status.push({ decisionGroupIndex: index, decisionGroupName: g.name, decisions: names, clusterCount: g.clusters.length });
  });
  return { decisions, groups: status };
}

export function misconfiguredCondition(problem: Problem | undefined): NewCondition {
  return problem
    ? { type: PlacementConditionType.PlacementMisconfigured, status: "True", reason: "Misconfigured", message: `${problem.plugin}:${problem.message}` }
    : { type: PlacementConditionType.PlacementMisconfigured, status: "False", reason: "Succeedconfigured", message: "Placement configurations check pass" };
}

export type Counts = { clusterSetsInSpec: readonly string[]; eligibleSets: readonly string[]; bindings: number; available: number; selected: number; unscheduled: number };

export function satisfiedCondition(c: Counts): NewCondition {
  const type = PlacementConditionType.PlacementSatisfied;
  if (c.bindings === 0) return { type, status: "False", reason: "NoManagedClusterSetBindings", message: "No valid ManagedClusterSetBindings found in placement namespace" };
  if (c.eligibleSets.length === 0) return { type, status: "False", reason: "NoIntersection", message: `None of ManagedClusterSets [${c.clusterSetsInSpec.join(",")}] is bound to placement namespace` };
  if (c.available === 0) return { type, status: "False", reason: "AllManagedClusterSetsEmpty", message: `All ManagedClusterSets [${c.eligibleSets.join(",")}] have no member ManagedCluster` };
  if (c.selected === 0) return { type, status: "False", reason: "NoManagedClusterMatched", message: "No ManagedCluster matches any of the cluster predicate" };
  if (c.unscheduled === 0) return { type, status: "True", reason: "AllDecisionsScheduled", message: "All cluster decisions scheduled" };
  return { type, status: "False", reason: "NotAllDecisionsScheduled", message: `${c.unscheduled} cluster decisions unscheduled` };
}
