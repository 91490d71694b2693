// Our placement-scheduler against OCM's own placement controller (open-cluster-management.io/ocm v1.2.0,
// built by `scripts/build-tools.sh ocm`), as a differential test. Two hubs from the same harness get the
// same inputs, case by case: on `ocm` OCM's controller runs as a process and schedules them as their
// watch events arrive; on `ours` the function's reconcile runs under its own identity after each change
// (again until it writes nothing more, as the resync would). Once OCM's output has stopped changing, each
// placement's PlacementDecisions (names, labels, owner, cluster lists in order) and status
// (numberOfSelectedClusters, decisionGroups, each condition's type, status, reason and message) must be
// the same on both. A case keeps going after a difference (soft assertions) and every difference is
// printed at the end, with the case's inputs. The one thing compared loosely is the text of a CEL compile
// error after "Predicate:compilation failed: ", which cel-go words in its own way.
//
// Left out on purpose: AddOn score prioritizers and the CEL `scores` function, which need
// AddOnPlacementScores; our hub does not serve them (README). OCM's controller still needs that CRD to
// start: it is applied on its hub from the open-cluster-management.io/api module in the Go module cache.
import { describe, it, expect, beforeAll, afterAll, type ExpectStatic } from "vitest";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parse } from "yaml";
import { findOcm, ocmApiModuleDir } from "../dev/control-plane/binaries.ts";
import { startClusters, type LocalClusters } from "../dev/control-plane/clusters.ts";
import { logTail, stopProcess, type Managed } from "../dev/control-plane/processes.ts";
import { startOcmHubProgram } from "./support/ocm-programs.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { CustomResourceDefinitionResource, NamespaceResource } from "../shared/api/kube.ts";
import {
  ClusterLabel,
  ManagedClusterResource,
  ManagedClusterSetBindingResource,
  ManagedClusterSetResource,
  PlacementDecisionResource,
  PlacementResource,
  type ManagedCluster,
  type ManagedClusterSet,
  type Placement,
  type PlacementDecision,
  type Taint,
} from "../shared/api/cluster.ts";
import type { Io } from "../shared/harness.ts";
import fn, { type Config } from "../functions/placement-scheduler/reconcile.ts";
import { testIo } from "./support/functions.ts";
import { readyIdentity } from "./support/fixtures.ts";
import { SigPlacementDecisionResource } from "../shared/api/inventory.ts";
import { eventually } from "./support/eventually.ts";

const OCM = "ocm";
const OURS = "ours";
const SCORES_CRD = join("cluster", "v1alpha1", "0000_05_clusters.open-cluster-management.io_addonplacementscores.crd.yaml");
// OCM's output counts as settled once it has not changed for this long; a case that differs is looked
// at again after a longer quiet, so a slow controller is not taken for a difference.
const QUIET_MS = 700;
const RECHECK_QUIET_MS = 2_500;
const SETTLE_TIMEOUT_MS = 30_000;
const CASE_MS = 60_000;

type Hub = { name: string; admin: KubeClient };
let planes: LocalClusters | undefined;
let ocm: Hub | undefined;
let ours: Hub | undefined;
let controller: Managed | undefined;
let io: Io<Config>;

// What differs, field by field (`ocm` and `ours` values), with the case's inputs so far.
type Difference = { case: string; step: string; placement: string; inputs: string[]; fields: Record<string, { ocm: unknown; ours: unknown }> };
const differences: Difference[] = [];
const notes: string[] = [];

beforeAll(async () => {
  const programs = findOcm();
  const scoresCrd = parse(readFileSync(join(ocmApiModuleDir(), SCORES_CRD), "utf8")) as KubeObject;
  planes = await startClusters({ names: [OCM, OURS] });
  const ocmPlane = planes.get(OCM);
  ocm = { name: OCM, admin: KubeClient.fromKubeconfig(ocmPlane.adminKubeconfig) };
  ours = { name: OURS, admin: KubeClient.fromKubeconfig(planes.get(OURS).adminKubeconfig) };

  // OCM's controller watches AddOnPlacementScores; its hub serves them (and nothing else differs).
  await ocm.admin.create(CustomResourceDefinitionResource, scoresCrd);
  await eventually(async () => {
    const crd = await ocm!.admin.get<KubeObject & { status?: { conditions?: { type: string; status: string }[] } }>(CustomResourceDefinitionResource, scoresCrd.metadata.name!);
    expect(crd?.status?.conditions?.some((c) => c.type === "Established" && c.status === "True")).toBe(true);
  });
  await ocm.admin.create(NamespaceResource, { metadata: { name: "open-cluster-management-hub" } });
  // In the control plane's run directory: its guard reaps the process too if this one dies.
  controller = await startOcmHubProgram({ planeDir: ocmPlane.dir, name: "ocm-placement-controller", binary: programs.placement, command: "controller", kubeconfig: join(ocmPlane.dir, "admin.kubeconfig"), namespace: "open-cluster-management-hub" });
  // The namespace of the cases' barriers (Scene.barrier), bound to an empty set; ready once the
  // controller schedules a first barrier.
  await ocm.admin.create(NamespaceResource, { metadata: { name: SENTINELS } });
  await ocm.admin.create(ManagedClusterSetResource, { metadata: { name: SENTINELS }, spec: { clusterSelector: { selectorType: "ExclusiveClusterSetLabel" } } });
  await ocm.admin.create(ManagedClusterSetBindingResource, { metadata: { name: SENTINELS, namespace: SENTINELS }, spec: { clusterSet: SENTINELS } });
  await barrier("ready", 0, 60_000);

  const resources = [PlacementResource, PlacementDecisionResource, ManagedClusterResource, ManagedClusterSetResource, ManagedClusterSetBindingResource, SigPlacementDecisionResource];
  io = testIo({ [OURS]: await readyIdentity(planes.get(OURS), fn.spec.name, resources) }, { hubCluster: OURS });
}, 180_000);

afterAll(async () => {
  if (controller) await stopProcess(controller);
  ocm?.admin.close();
  ours?.admin.close();
  await planes?.stop();
  for (const n of notes) console.log(`[placement-conformance] note: ${n}`);
  const lines: string[] = [];
  let inputsOf = "";
  for (const d of differences) {
    if (d.case !== inputsOf) lines.push(`case ${d.case}, inputs:\n  ${d.inputs.join("\n  ")}`);
    inputsOf = d.case;
    lines.push(`${d.case} / ${d.step} / placement ${d.placement}:`);
    for (const [field, v] of Object.entries(d.fields)) lines.push(`  ${field}\n    OCM:  ${JSON.stringify(v.ocm)}\n    ours: ${JSON.stringify(v.ours)}`);
  }
  if (lines.length) console.log(`[placement-conformance] ${differences.length} placement(s) differ:\n${lines.join("\n")}`);
});

// OCM's controller works through one queue with one worker, so a case's changes may wait behind
// another's. A barrier is a placement of the case's own in SENTINELS whose clusterSets name a marker
// that no binding has: its status then names the marker ("None of ManagedClusterSets [marker] is
// bound ..."). A new marker, once it shows, means the queue has come past every placement event before
// it. It selects nothing, so no Balance counts it; ours never sees it.
const SENTINELS = "pc-sentinels";
async function barrier(id: string, n: number, timeoutMs = SETTLE_TIMEOUT_MS): Promise<void> {
  const marker = `pc-marker-${id}-${n}`;
  if (n === 0) await ocm!.admin.create(PlacementResource, { metadata: { name: id, namespace: SENTINELS }, spec: { clusterSets: [marker] } });
  else await ocm!.admin.patch(PlacementResource, id, { spec: { clusterSets: [marker] } }, { namespace: SENTINELS });
  await eventually(
    async () => {
      controllerAlive();
      const p = await ocm!.admin.get<Placement>(PlacementResource, id, SENTINELS);
      expect(p?.status?.conditions?.find((c) => c.type === "PlacementSatisfied")?.message ?? "").toContain(`[${marker}]`);
    },
    { timeoutMs, intervalMs: 50 },
  );
}

function controllerAlive(): void {
  if (controller && controller.child.exitCode !== null) throw new Error(`OCM's placement controller exited with ${controller.child.exitCode}:\n${logTail(controller)}`);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ---- what is compared

type Condition = { type: string; status: string; reason?: string; message?: string };
type PlacementView = {
  status: {
    numberOfSelectedClusters: number;
    decisionGroups: { decisionGroupIndex: number; decisionGroupName: string; decisions: string[]; clusterCount: number }[];
    conditions: Condition[];
  };
  decisions: { name: string; labels: Record<string, string>; owners: string[]; clusters: string[] }[];
};
type Snapshot = Record<string, PlacementView>;

const byNumberedName = (a: { name: string }, b: { name: string }) => a.name.localeCompare(b.name, "en", { numeric: true });

// cel-go's and our CEL's parser word a compile error each in their own way (position, expected tokens);
// that it is a compile failure of the Predicate is what must agree, so the rest is cut.
const compileFailure = (message: string | undefined) => message?.replace(/^(Predicate:compilation failed: ).*$/s, "$1…");

// The placements `names` in `ns` on one hub, with cluster names shown without the case's prefix.
async function snapshot(h: Hub, ns: string, names: readonly string[], prefix: string): Promise<Snapshot> {
  const [placements, decisions] = await Promise.all([
    h.admin.list<Placement>(PlacementResource, { namespace: ns }),
    h.admin.list<PlacementDecision>(PlacementDecisionResource, { namespace: ns }),
  ]);
  const short = (c: string) => (c.startsWith(prefix) ? c.slice(prefix.length) : c);
  const out: Snapshot = {};
  for (const name of names) {
    const p = placements.items.find((x) => x.metadata.name === name);
    const st = p?.status;
    out[name] = {
      status: {
        numberOfSelectedClusters: st?.numberOfSelectedClusters ?? 0,
        decisionGroups: (st?.decisionGroups ?? []).map((g) => ({
          decisionGroupIndex: g.decisionGroupIndex ?? 0,
          decisionGroupName: g.decisionGroupName ?? "",
          decisions: g.decisions ?? [],
          clusterCount: g.clusterCount ?? 0,
        })),
        conditions: (st?.conditions ?? [])
          .map((c) => ({ type: c.type, status: c.status, reason: c.reason, message: compileFailure(c.message) }))
          .sort((a, b) => (a.type < b.type ? -1 : a.type > b.type ? 1 : 0)),
      },
      decisions: decisions.items
        .filter((d) => d.metadata.labels?.[ClusterLabel.Placement] === name)
        .map((d) => ({
          name: d.metadata.name,
          labels: d.metadata.labels ?? {},
          owners: (d.metadata.ownerReferences ?? []).map((o) => `${o.apiVersion} ${o.kind} ${o.name} controller=${o.controller} blockOwnerDeletion=${o.blockOwnerDeletion}`),
          clusters: (d.status?.decisions ?? []).map((x) => short(x.clusterName)),
        }))
        .sort(byNumberedName),
    };
  }
  return out;
}

// The fields of two views that differ: the selected count, the groups, each condition, the decisions.
function differingFields(theirs: PlacementView, mine: PlacementView): Difference["fields"] {
  const out: Difference["fields"] = {};
  const add = (field: string, a: unknown, b: unknown) => {
    if (JSON.stringify(a) !== JSON.stringify(b)) out[field] = { ocm: a, ours: b };
  };
  add("status.numberOfSelectedClusters", theirs.status.numberOfSelectedClusters, mine.status.numberOfSelectedClusters);
  add("status.decisionGroups", theirs.status.decisionGroups, mine.status.decisionGroups);
  const types = [...new Set([...theirs.status.conditions, ...mine.status.conditions].map((c) => c.type))].sort();
  for (const t of types) add(`condition ${t}`, theirs.status.conditions.find((c) => c.type === t), mine.status.conditions.find((c) => c.type === t));
  add("decisions", theirs.decisions, mine.decisions);
  return out;
}

// OCM's output once it has stopped changing (and every placement has both conditions).
async function settledOcm(ns: string, names: readonly string[], prefix: string, quietMs: number): Promise<Snapshot> {
  const deadline = Date.now() + SETTLE_TIMEOUT_MS;
  let last = "";
  let since = Date.now();
  for (;;) {
    controllerAlive();
    const snap = await snapshot(ocm!, ns, names, prefix);
    const text = JSON.stringify(snap);
    const complete = names.every((n) => snap[n]!.status.conditions.length === 2);
    if (text !== last) {
      last = text;
      since = Date.now();
    } else if (complete && Date.now() - since >= quietMs) return snap;
    if (Date.now() > deadline) throw new Error(`OCM's output for ${ns} did not settle in ${SETTLE_TIMEOUT_MS} ms: ${text}`);
    await sleep(100);
  }
}

// ---- one case: its namespace, its own exclusive set bound there, its clusters named <id>-<short>

type ClusterSpec = {
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  claims?: Record<string, string>;
  taints?: Taint[];
  allocatable?: Record<string, string>;
  capacity?: Record<string, string>;
  kubernetes?: string; // status.version.kubernetes
  set?: string | null; // the exclusive set label; the case's set unless given, none when null
};

class Scene {
  readonly id: string;
  readonly ns: string;
  readonly set: string;
  readonly expect: ExpectStatic;
  readonly placements: string[] = [];
  readonly inputs: string[] = [];
  readonly rechecks = new Map<string, number>(); // placement → when our function asked to be called again
  // The placements OCM's controller reconciles for the changes since the last comparison, and so ours
  // does: a placement created or edited; every placement of the namespace when a cluster, set or
  // binding changes (OCM's enqueuer); those that asked for a recheck when its time comes.
  readonly dirty = new Set<string>();
  held: string[] = []; // clusters held by a finalizer while deleting
  touches = 0;
  barriers = 0;

  constructor(id: string, e: ExpectStatic) {
    this.id = id;
    this.ns = `pc-${id}`;
    this.set = `pc-${id}`;
    this.expect = e;
  }

  name(short: string): string {
    return `${this.id}-${short}`;
  }

  private note(what: string, body: unknown): void {
    this.inputs.push(`${what} ${JSON.stringify(body)}`);
  }

  async onBoth(f: (h: Hub) => Promise<unknown>): Promise<void> {
    await Promise.all([ocm!, ours!].map(f));
  }

  private allDirty(): void {
    for (const p of this.placements) this.dirty.add(p);
  }

  async init(o: { bind?: boolean } = {}): Promise<this> {
    await this.onBoth(async (h) => {
      await h.admin.create(NamespaceResource, { metadata: { name: this.ns } });
      await h.admin.create(ManagedClusterSetResource, { metadata: { name: this.set }, spec: { clusterSelector: { selectorType: "ExclusiveClusterSetLabel" } } });
    });
    this.note("namespace + exclusive set", { namespace: this.ns, set: this.set });
    if (o.bind !== false) await this.bind(this.set);
    return this;
  }

  async clusterSet(name: string, setSpec: ManagedClusterSet["spec"]): Promise<void> {
    this.note(`set ${name}`, setSpec);
    await this.onBoth((h) => h.admin.create(ManagedClusterSetResource, { metadata: { name }, spec: setSpec }));
  }

  async bind(set: string): Promise<void> {
    this.note("binding", { namespace: this.ns, clusterSet: set });
    this.allDirty();
    await this.onBoth((h) => h.admin.create(ManagedClusterSetBindingResource, { metadata: { name: set, namespace: this.ns }, spec: { clusterSet: set } }));
  }

  async unbind(set: string): Promise<void> {
    this.note("binding deleted", { namespace: this.ns, clusterSet: set });
    this.allDirty();
    await this.onBoth((h) => h.admin.delete(ManagedClusterSetBindingResource, set, this.ns));
  }

  async cluster(short: string, c: ClusterSpec = {}): Promise<void> {
    const name = this.name(short);
    const set = c.set === undefined ? this.set : c.set;
    const labels = { ...(set === null ? {} : { [ClusterLabel.ClusterSet]: set }), ...c.labels };
    const status: ManagedCluster["status"] = {};
    if (c.claims) status.clusterClaims = Object.entries(c.claims).map(([k, v]) => ({ name: k, value: v }));
    if (c.allocatable) status.allocatable = c.allocatable;
    if (c.capacity ?? c.allocatable) status.capacity = c.capacity ?? c.allocatable;
    if (c.kubernetes) status.version = { kubernetes: c.kubernetes };
    this.note(`cluster ${short}`, { labels, annotations: c.annotations, taints: c.taints, status });
    this.allDirty();
    await this.onBoth(async (h) => {
      await h.admin.create(ManagedClusterResource, { metadata: { name, labels, annotations: c.annotations }, spec: { hubAcceptsClient: true, taints: c.taints } });
      if (Object.keys(status).length) await h.admin.patch(ManagedClusterResource, name, { status }, { subresource: "status" });
    });
  }

  async clusters(shorts: readonly string[], c: ClusterSpec = {}): Promise<void> {
    for (let i = 0; i < shorts.length; i += 25) await Promise.all(shorts.slice(i, i + 25).map((s) => this.cluster(s, c)));
  }

  async patchCluster(short: string, patch: Record<string, unknown>): Promise<void> {
    this.note(`cluster ${short} patched`, patch);
    this.allDirty();
    await this.onBoth((h) => h.admin.patch(ManagedClusterResource, this.name(short), patch));
  }

  async deleteDecision(placement: string, name: string): Promise<void> {
    this.note(`decision ${name} deleted`, {});
    this.dirty.add(placement);
    await this.onBoth((h) => h.admin.delete(PlacementDecisionResource, name, this.ns));
  }

  async editDecision(placement: string, name: string, clusters: readonly string[]): Promise<void> {
    const status = { decisions: clusters.map((c) => ({ clusterName: this.name(c), reason: "" })) };
    this.note(`decision ${name} status edited`, status);
    this.dirty.add(placement);
    await this.onBoth((h) => h.admin.patch(PlacementDecisionResource, name, { status }, { namespace: this.ns, subresource: "status" }));
  }

  // Deleted, but held by a finalizer: a deleting cluster is no longer available.
  async deleteClusterHeld(short: string): Promise<void> {
    this.note(`cluster ${short} deleting (held by a finalizer)`, {});
    this.held.push(short);
    this.allDirty();
    await this.onBoth(async (h) => {
      await h.admin.patch(ManagedClusterResource, this.name(short), { metadata: { finalizers: ["test.ocm-functions.io/hold"] } });
      await h.admin.delete(ManagedClusterResource, this.name(short));
    });
  }

  async place(name: string, placementSpec: Placement["spec"] = {}): Promise<void> {
    this.note(`placement ${name}`, placementSpec);
    this.placements.push(name);
    this.dirty.add(name);
    await this.onBoth((h) => h.admin.create(PlacementResource, { metadata: { name, namespace: this.ns }, spec: placementSpec }));
  }

  async patchPlacement(name: string, specPatch: Record<string, unknown>): Promise<void> {
    this.note(`placement ${name} fn.spec patched`, specPatch);
    this.dirty.add(name);
    await this.onBoth((h) => h.admin.patch(PlacementResource, name, { spec: specPatch }, { namespace: this.ns }));
  }

  // Our function: each placement OCM reconciles too (`dirty`), in order, again while a pass still writes
  // something (OCM's controller hears of its own decision writes). More than one writing pass is noted:
  // our function does not hear of its own writes, so only the resync would take it there.
  private async settleOurs(step: string, run: readonly string[]): Promise<Snapshot> {
    let before = JSON.stringify(await snapshot(ours!, this.ns, this.placements, `${this.id}-`));
    for (let pass = 1; ; pass++) {
      for (const name of run) {
        const outcome = await fn.spec.reconcile(io, { cluster: OURS, namespace: this.ns, name });
        if ("recheckInMs" in outcome) this.rechecks.set(name, Date.now() + outcome.recheckInMs);
        else this.rechecks.delete(name);
      }
      const snap = await snapshot(ours!, this.ns, this.placements, `${this.id}-`);
      const text = JSON.stringify(snap);
      if (text === before) {
        if (pass > 2) notes.push(`${this.id} / ${step}: our function needed ${pass - 1} writing passes to settle`);
        return snap;
      }
      if (pass >= 6) throw new Error(`our function did not settle for ${this.ns}: ${text}`);
      before = text;
    }
  }

  // Both hubs settled, then every placement compared; a difference is recorded and the case goes on.
  //
  // OCM's side: past the case's barrier, then quiet for QUIET_MS. Its informers' caches can still lag
  // behind the API server under load: a placement created right after a binding may be scheduled
  // before the binding is seen, and nothing enqueues it again until the informers' resync (10
  // minutes). So when the two differ, the placements of this step are touched (an annotation, as the
  // resync would enqueue them) and OCM's output is settled again, with a longer quiet, before a
  // difference is recorded.
  async compare(step: string): Promise<void> {
    const prefix = `${this.id}-`;
    const run = this.placements.filter((p) => this.dirty.has(p));
    this.dirty.clear();
    const [first, mine] = await Promise.all([
      barrier(this.id, this.barriers++).then(() => settledOcm(this.ns, this.placements, prefix, QUIET_MS)),
      this.settleOurs(step, run),
    ]);
    let theirs = first;
    if (JSON.stringify(theirs) !== JSON.stringify(mine)) {
      this.touches++;
      await this.onBoth((h) => Promise.all(run.map((p) => h.admin.patch(PlacementResource, p, { metadata: { annotations: { "test.ocm-functions.io/touch": String(this.touches) } } }, { namespace: this.ns }))));
      theirs = await settledOcm(this.ns, this.placements, prefix, RECHECK_QUIET_MS);
      if (JSON.stringify(theirs) === JSON.stringify(mine)) notes.push(`${this.id} / ${step}: OCM agreed only once its placements were touched again`);
    }
    for (const p of this.placements) {
      if (JSON.stringify(theirs[p]) === JSON.stringify(mine[p])) continue;
      differences.push({ case: this.id, step, placement: p, inputs: [...this.inputs], fields: differingFields(theirs[p]!, mine[p]!) });
      this.expect.soft(mine[p], `${this.id} / ${step} / placement ${p}: ours (received) against OCM's (expected)`).toEqual(theirs[p]);
    }
  }

  // After `waitMs`, the placements whose callback our function asked for has come (a toleration ran
  // out) are reconciled, as the relay would call it back, and all compared.
  async afterRechecks(step: string, waitMs: number): Promise<void> {
    await sleep(Math.max(0, waitMs));
    const due = [...this.rechecks.entries()].filter(([, at]) => at <= Date.now()).map(([p]) => p);
    if (due.length === 0) notes.push(`${this.id} / ${step}: our function asked for no callback due by now`);
    for (const p of due) this.dirty.add(p);
    await this.compare(step);
  }

  // Placements and decisions go, so no later case's Balance counts them; clusters stay in their set.
  async cleanup(): Promise<void> {
    await Promise.allSettled([
      ocm!.admin.delete(PlacementResource, this.id, SENTINELS),
      ...[ocm!, ours!].map(async (h) => {
        for (const p of this.placements) await h.admin.delete(PlacementResource, p, this.ns);
        const { items } = await h.admin.list<PlacementDecision>(PlacementDecisionResource, { namespace: this.ns });
        for (const d of items) await h.admin.delete(PlacementDecisionResource, d.metadata.name, this.ns);
        for (const c of this.held) await h.admin.patch(ManagedClusterResource, this.name(c), { metadata: { finalizers: null } });
      }),
    ]);
  }
}

// A case: its own scene, cleaned up whatever happens.
async function scene(id: string, e: ExpectStatic, body: (s: Scene) => Promise<void>, o: { bind?: boolean } = {}): Promise<void> {
  const s = new Scene(id, e);
  try {
    await s.init(o);
    await body(s);
  } finally {
    await s.cleanup();
  }
}

const rfc3339 = (ms: number) => new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(".000Z", "Z");
const noSelect = (key: string, timeAdded: string, value?: string): Taint => ({ key, value, effect: "NoSelect", timeAdded });
const exact = (...c: [string, number][]): Placement["spec"]["prioritizerPolicy"] => ({
  mode: "Exact",
  configurations: c.map(([builtIn, weight]) => ({ scoreCoordinate: { type: "BuiltIn" as const, builtIn }, weight })),
});
const labelPredicate = (labelSelector: Record<string, unknown>) => ({ requiredClusterSelector: { labelSelector } });
const celPredicate = (...celExpressions: string[]) => ({ requiredClusterSelector: { celSelector: { celExpressions } } });

// ---- the cases. These run side by side: each case's clusters, set and namespace are its own, and with
// one placement deciding a cluster (or no ranking) Balance sees nothing of another case.

describe.concurrent("OCM's placement controller and our placement-scheduler decide alike", () => {
  it("no binding in the namespace; a binding to a set that does not exist", async ({ expect }) => {
    await scene("nobind", expect, async (s) => {
      await s.clusters(["a", "b"]);
      await s.place("p");
      await s.compare("no binding");
      await s.bind("pc-nobind-missing");
      await s.compare("a binding whose set does not exist");
    }, { bind: false });
  }, CASE_MS);

  it("clusterSets naming no bound set (NoIntersection); a bound set without members; narrowing to one bound set", async ({ expect }) => {
    await scene("sets", expect, async (s) => {
      await s.clusterSet("pc-sets-empty", { clusterSelector: { selectorType: "ExclusiveClusterSetLabel" } });
      await s.bind("pc-sets-empty");
      await s.clusters(["a", "b"]);
      await s.place("nointersection", { clusterSets: ["pc-sets-unbound", "pc-sets-other"] });
      await s.place("empty", { clusterSets: ["pc-sets-empty"] });
      await s.place("narrowed", { clusterSets: ["pc-sets", "pc-sets-unbound"] });
      await s.place("all");
      await s.compare("created");
    });
  }, CASE_MS);

  it("every cluster of the bound sets, an exclusive set and a LabelSelector set", async ({ expect }) => {
    await scene("all", expect, async (s) => {
      await s.clusterSet("pc-all-picked", { clusterSelector: { selectorType: "LabelSelector", labelSelector: { matchLabels: { "pc-all/picked": "yes" } } } });
      await s.clusters(["c0", "c1", "c2"]);
      await s.cluster("outsider", { set: "pc-all-unbound", labels: { "pc-all/picked": "yes" } });
      await s.cluster("stranger", { set: "pc-all-unbound" });
      await s.place("exclusive", { clusterSets: ["pc-all"] });
      await s.compare("one set bound");
      await s.bind("pc-all-picked");
      await s.place("both");
      await s.compare("the LabelSelector set bound too");
    });
  }, CASE_MS);

  it("numberOfClusters larger and smaller than the fleet, and 0", async ({ expect }) => {
    await scene("count", expect, async (s) => {
      await s.clusters(["m1", "m2", "m3", "m4"]);
      await s.place("larger", { numberOfClusters: 6 });
      await s.place("smaller", { numberOfClusters: 2 });
      await s.place("zero", { numberOfClusters: 0 });
      await s.compare("created");
      await s.patchPlacement("larger", { numberOfClusters: 3 });
      await s.compare("larger cut to 3");
    });
  }, CASE_MS);

  it("label and claim predicates: matchLabels, matchExpressions, ANDed within one, ORed across", async ({ expect }) => {
    await scene("pred", expect, async (s) => {
      await s.cluster("prod-east", { labels: { env: "prod", tier: "1" }, claims: { region: "east" } });
      await s.cluster("prod-west", { labels: { env: "prod" }, claims: { region: "west" } });
      await s.cluster("dev-east", { labels: { env: "dev" }, claims: { region: "east", "platform.open-cluster-management.io": "AWS" } });
      await s.cluster("bare");
      await s.place("label", { predicates: [labelPredicate({ matchLabels: { env: "prod" } })] });
      await s.place("exprs", { predicates: [labelPredicate({ matchExpressions: [{ key: "env", operator: "NotIn", values: ["prod"] }, { key: "tier", operator: "DoesNotExist" }] })] });
      await s.place("exists", { predicates: [labelPredicate({ matchExpressions: [{ key: "tier", operator: "Exists" }] })] });
      await s.place("claim", { predicates: [{ requiredClusterSelector: { claimSelector: { matchExpressions: [{ key: "region", operator: "In", values: ["east"] }] } } }] });
      await s.place("and", {
        predicates: [{ requiredClusterSelector: { labelSelector: { matchLabels: { env: "prod" } }, claimSelector: { matchExpressions: [{ key: "region", operator: "In", values: ["east"] }] } } }],
      });
      await s.place("or", {
        predicates: [
          labelPredicate({ matchLabels: { env: "dev" } }),
          { requiredClusterSelector: { claimSelector: { matchExpressions: [{ key: "region", operator: "In", values: ["west"] }] } } },
        ],
      });
      await s.place("none", { predicates: [labelPredicate({ matchLabels: { env: "staging" } })] });
      await s.place("bad-operator", { predicates: [labelPredicate({ matchExpressions: [{ key: "env", operator: "Contains", values: ["prod"] }] })] });
      await s.place("bad-claim-operator", { predicates: [{ requiredClusterSelector: { claimSelector: { matchExpressions: [{ key: "region", operator: "Equals", values: ["east"] }] } } }] });
      await s.place("bad-label-value", { predicates: [labelPredicate({ matchLabels: { env: "not a label value" } })] });
      await s.compare("created");
    });
  }, CASE_MS);

  it("CEL predicates on labels, claims and status", async ({ expect }) => {
    await scene("cel", expect, async (s) => {
      await s.cluster("a", { labels: { env: "prod" }, claims: { region: "east" }, allocatable: { cpu: "4", memory: "16Gi" } });
      await s.cluster("b", { labels: { env: "prod" }, claims: { region: "west" }, allocatable: { cpu: "2", memory: "8Gi" } });
      await s.cluster("c", { labels: { env: "dev" }, claims: { region: "east" } });
      await s.place("labels", { predicates: [celPredicate('managedCluster.metadata.labels["env"] == "prod"')] });
      await s.place("claims", { predicates: [celPredicate('managedCluster.status.clusterClaims.exists(c, c.name == "region" && c.value == "east")')] });
      await s.place("anded", { predicates: [celPredicate('managedCluster.metadata.labels["env"] == "prod"', 'managedCluster.metadata.name.endsWith("-a")')] });
      await s.place("missing-key", { predicates: [celPredicate('managedCluster.status.allocatable.cpu == "4"')] });
      await s.compare("created");
    });
  }, CASE_MS);

  it("CEL with versionIsGreaterThan/versionIsLessThan, which OCM v1.2.0 does not declare: refused by both", async ({ expect }) => {
    await scene("celver", expect, async (s) => {
      await s.cluster("new", { kubernetes: "v1.31.2" });
      await s.cluster("old", { kubernetes: "v1.29.0" });
      await s.place("greater", { predicates: [celPredicate('managedCluster.status.version.kubernetes.versionIsGreaterThan("v1.30.0")')] });
      await s.place("less", { predicates: [celPredicate('managedCluster.status.version.kubernetes.versionIsLessThan("v1.30.0")')] });
      await s.compare("created");
    });
  }, CASE_MS);

  it("CEL with quantityIsGreaterThan/quantityIsLessThan, which OCM v1.2.0 does not declare: refused by both", async ({ expect }) => {
    await scene("celqty", expect, async (s) => {
      await s.cluster("big", { allocatable: { cpu: "8", memory: "64Gi" } });
      await s.cluster("small", { allocatable: { cpu: "1500m", memory: "2Gi" } });
      await s.place("greater", { predicates: [celPredicate('managedCluster.status.allocatable.memory.quantityIsGreaterThan("8Gi")')] });
      await s.place("less", { predicates: [celPredicate('managedCluster.status.allocatable.cpu.quantityIsLessThan("2")')] });
      await s.compare("created");
    });
  }, CASE_MS);

  it("CEL with Kubernetes' semver() and quantity() libraries (what OCM v1.2.0's CEL environment has)", async ({ expect }) => {
    await scene("celk8s", expect, async (s) => {
      await s.cluster("new", { labels: { version: "1.31.2" }, allocatable: { cpu: "8", memory: "64Gi" } });
      await s.cluster("old", { labels: { version: "1.29.0" }, allocatable: { cpu: "1500m", memory: "2Gi" } });
      await s.place("semver", { predicates: [celPredicate('semver(managedCluster.metadata.labels["version"]).isGreaterThan(semver("1.30.0"))')] });
      await s.place("quantity", { predicates: [celPredicate('quantity(managedCluster.status.allocatable.cpu).isLessThan(quantity("2"))')] });
      await s.compare("created");
    });
  }, CASE_MS);

  it("CEL beyond the ManagedCluster variable: OCM's environment also has the strings extension and parseJSON", async ({ expect }) => {
    await scene("celext", expect, async (s) => {
      await s.cluster("a", { labels: { zones: "z1.z2" }, annotations: { info: '{"tier":"gold"}' } });
      await s.cluster("b", { labels: { zones: "z3" }, annotations: { info: '{"tier":"silver"}' } });
      await s.place("split", { predicates: [celPredicate('managedCluster.metadata.labels["zones"].split(".").exists(z, z == "z2")')] });
      await s.place("json", { predicates: [celPredicate('managedCluster.metadata.annotations["info"].parseJSON().tier == "gold"')] });
      await s.place("regex", { predicates: [celPredicate('managedCluster.metadata.name.matches("-b$")')] });
      await s.compare("created");
    });
  }, CASE_MS);

  it("a CEL expression that does not compile", async ({ expect }) => {
    await scene("celbad", expect, async (s) => {
      await s.clusters(["a"]);
      await s.place("syntax", { predicates: [celPredicate("managedCluster.metadata.name ==")] });
      await s.compare("created");
    });
  }, CASE_MS);

  it("NoSelect taints with and without tolerations; PreferNoSelect", async ({ expect }) => {
    await scene("taint", expect, async (s) => {
      const at = rfc3339(Date.now() - 60_000);
      await s.cluster("clean");
      await s.cluster("gpu", { taints: [noSelect("gpu", at, "busy")] });
      await s.cluster("soft", { taints: [{ key: "soft", effect: "PreferNoSelect", timeAdded: at }] });
      await s.cluster("unreachable", { taints: [noSelect("cluster.open-cluster-management.io/unreachable", at)] });
      await s.place("plain");
      await s.place("equal", { tolerations: [{ key: "gpu", operator: "Equal", value: "busy" }] });
      await s.place("default-operator", { tolerations: [{ key: "gpu", value: "busy" }] });
      await s.place("wrong-value", { tolerations: [{ key: "gpu", value: "idle" }] });
      await s.place("exists-all", { tolerations: [{ operator: "Exists" }] });
      await s.place("exists-key", { tolerations: [{ key: "cluster.open-cluster-management.io/unreachable", operator: "Exists" }] });
      await s.place("effect-match", { tolerations: [{ key: "gpu", operator: "Exists", effect: "NoSelect" }] });
      await s.place("effect-mismatch", { tolerations: [{ key: "gpu", operator: "Exists", effect: "PreferNoSelect" }] });
      await s.compare("created");
    });
  }, CASE_MS);

  it("tolerationSeconds: run out, still running, and running out during the case", async ({ expect }) => {
    await scene("tolsec", expect, async (s) => {
      const key = "cluster.open-cluster-management.io/unreachable";
      const now = Date.now();
      await s.cluster("clean");
      await s.cluster("long-ago", { taints: [noSelect(key, rfc3339(now - 3_600_000))] });
      await s.cluster("recent", { taints: [noSelect(key, rfc3339(now))] });
      await s.place("minute", { tolerations: [{ key, operator: "Exists", tolerationSeconds: 60 }] });
      await s.place("hour-and-more", { tolerations: [{ key, operator: "Exists", tolerationSeconds: 7200 }] });
      await s.place("short", { tolerations: [{ key, operator: "Exists", tolerationSeconds: 8 }] });
      await s.compare("created");
      // "recent" is tolerated by "short" for 8 s from its whole-second timeAdded; our function asks to be
      // called back a second after that
      await s.afterRechecks("after the 8 s toleration ran out", Math.floor(now / 1000) * 1000 + 10_000 - Date.now());
    });
  }, CASE_MS);

  it("NoSelectIfNew keeps a decided cluster and keeps a new one out", async ({ expect }) => {
    await scene("ifnew", expect, async (s) => {
      await s.cluster("old");
      await s.place("p");
      await s.compare("created");
      const taints = [{ key: "draining", effect: "NoSelectIfNew", timeAdded: rfc3339(Date.now()) }];
      await s.patchCluster("old", { spec: { taints } });
      await s.cluster("new", { taints: taints as Taint[] });
      await s.compare("both tainted NoSelectIfNew");
    });
  }, CASE_MS);

  it("misconfigured tolerations, with and without clusters left to filter", async ({ expect }) => {
    await scene("tolbad", expect, async (s) => {
      await s.cluster("a", { labels: { env: "prod" } });
      await s.place("no-key", { tolerations: [{ operator: "Equal", value: "x" }] });
      await s.place("exists-value", { tolerations: [{ key: "k", operator: "Exists", value: "x" }] });
      await s.place("nothing-left", { predicates: [labelPredicate({ matchLabels: { env: "none" } })], tolerations: [{ operator: "Equal", value: "x" }] });
      await s.compare("created");
    });
  }, CASE_MS);

  it("ResourceAllocatableCPU and ResourceAllocatableMemory, positive and negative weights, Exact mode", async ({ expect }) => {
    await scene("res", expect, async (s) => {
      await s.cluster("small", { allocatable: { cpu: "2", memory: "64Gi" } });
      await s.cluster("medium", { allocatable: { cpu: "4500m", memory: "8Gi" } });
      await s.cluster("large", { allocatable: { cpu: "8", memory: "16Gi" } });
      await s.cluster("unreported");
      await s.cluster("no-capacity", { allocatable: { cpu: "16" }, capacity: { memory: "1Gi" } });
      await s.place("cpu", { numberOfClusters: 1, prioritizerPolicy: exact(["ResourceAllocatableCPU", 1]) });
      await s.place("memory", { numberOfClusters: 2, prioritizerPolicy: exact(["ResourceAllocatableMemory", 1]) });
      await s.place("least-cpu", { numberOfClusters: 2, prioritizerPolicy: exact(["ResourceAllocatableCPU", -1]) });
      await s.place("mixed", { numberOfClusters: 3, prioritizerPolicy: exact(["ResourceAllocatableCPU", 2], ["ResourceAllocatableMemory", -3]) });
      await s.place("no-prioritizers", { numberOfClusters: 2, prioritizerPolicy: { mode: "Exact" } });
      await s.compare("created");
    });
  }, CASE_MS);

  it("Additive mode: Steady and Balance beside the configured prioritizers, a weight replaced, a weight 0", async ({ expect }) => {
    await scene("additive", expect, async (s) => {
      await s.cluster("a", { allocatable: { cpu: "1" } });
      await s.cluster("b", { allocatable: { cpu: "2" } });
      await s.cluster("c", { allocatable: { cpu: "3" } });
      // one at a time: each ranks with Balance, which counts the others' decisions
      await s.place("p", { numberOfClusters: 1, prioritizerPolicy: { mode: "Additive", configurations: [{ scoreCoordinate: { type: "BuiltIn", builtIn: "Steady" }, weight: 3 }] } });
      await s.compare("p created");
      await s.place("cpu", { numberOfClusters: 2, prioritizerPolicy: { configurations: [{ scoreCoordinate: { type: "BuiltIn", builtIn: "ResourceAllocatableCPU" }, weight: 1 }] } });
      await s.compare("cpu created");
      await s.place("off", { numberOfClusters: 1, prioritizerPolicy: { mode: "Additive", configurations: [{ scoreCoordinate: { type: "BuiltIn", builtIn: "Unknown" }, weight: 0 }] } });
      await s.compare("off created");
      await s.patchPlacement("p", {
        prioritizerPolicy: {
          mode: "Additive",
          configurations: [
            { scoreCoordinate: { type: "BuiltIn", builtIn: "Steady" }, weight: 3 },
            { scoreCoordinate: { type: "BuiltIn", builtIn: "ResourceAllocatableCPU" }, weight: 1 },
          ],
        },
      });
      await s.compare("CPU added beside Steady 3");
      await s.patchPlacement("p", { prioritizerPolicy: exact(["ResourceAllocatableCPU", 2]) });
      await s.compare("Exact with CPU alone");
    });
  }, CASE_MS);

  it("an unknown prioritizer or prioritizer mode is PlacementMisconfigured", async ({ expect }) => {
    await scene("prioerr", expect, async (s) => {
      await s.clusters(["a"]);
      await s.place("builtin", { prioritizerPolicy: exact(["Fastest", 1]) });
      await s.place("mode", { prioritizerPolicy: { mode: "Whatever" } });
      await s.compare("created");
    });
  }, CASE_MS);

  // One ranking placement per case: OCM reconciles a namespace's placements in its queue's order, and
  // with Balance each would see the others' decisions as they stood then.
  it("a stable decision when better-named clusters join (Steady); the next best when a decided one leaves", async ({ expect }) => {
    await scene("steady", expect, async (s) => {
      await s.clusters(["m1", "m2", "m3"]);
      await s.place("p", { numberOfClusters: 2 });
      await s.compare("created");
      await s.clusters(["a1", "a2"]);
      await s.compare("better-named clusters joined");
      await s.patchCluster("m1", { metadata: { labels: { [ClusterLabel.ClusterSet]: "pc-steady-elsewhere" } } });
      await s.compare("m1 left the set");
    });
  }, CASE_MS);

  it("clusters with more allocatable CPU join a placement that ranks by it beside Steady", async ({ expect }) => {
    await scene("steadycpu", expect, async (s) => {
      await s.clusters(["m1", "m2", "m3"], { allocatable: { cpu: "4" } });
      await s.cluster("m4", { allocatable: { cpu: "2" } });
      await s.place("p", { numberOfClusters: 2, prioritizerPolicy: { configurations: [{ scoreCoordinate: { type: "BuiltIn", builtIn: "ResourceAllocatableCPU" }, weight: 1 }] } });
      await s.compare("created");
      await s.clusters(["big1"], { allocatable: { cpu: "5" } });
      await s.compare("a cluster with a little more CPU joined");
      await s.clusters(["big2", "big3"], { allocatable: { cpu: "32" } });
      await s.compare("clusters with much more CPU joined");
    });
  }, CASE_MS);

  it("clusters joining, leaving the set and deleting; the binding removed", async ({ expect }) => {
    await scene("churn", expect, async (s) => {
      await s.clusters(["a", "b", "c"]);
      await s.place("p");
      await s.compare("created");
      await s.cluster("late");
      await s.compare("a cluster joined");
      await s.patchCluster("b", { metadata: { labels: { [ClusterLabel.ClusterSet]: "pc-churn-elsewhere" } } });
      await s.compare("b left the set");
      await s.deleteClusterHeld("a");
      await s.compare("a is deleting");
      await s.editDecision("p", "p-decision-1", ["intruder"]);
      await s.compare("its decision edited by hand");
      await s.deleteDecision("p", "p-decision-1");
      await s.compare("its decision deleted");
      await s.unbind(s.set);
      await s.compare("the binding removed");
    });
  }, CASE_MS);

  it("decision groups by selector, clustersPerDecisionGroup as a percentage and as a number", async ({ expect }) => {
    await scene("groups", expect, async (s) => {
      await s.clusters(["canary-1", "canary-2"], { labels: { stage: "canary" } });
      await s.cluster("canary-3", { labels: { stage: "canary", zone: "z1" }, claims: { region: "east" } });
      await s.clusters(["c0", "c1", "c2", "c3", "c4"]);
      await s.place("percent", {
        decisionStrategy: { groupStrategy: { clustersPerDecisionGroup: "40%", decisionGroups: [{ groupName: "canary", groupClusterSelector: { labelSelector: { matchLabels: { stage: "canary" } } } }] } },
      });
      await s.place("number", { decisionStrategy: { groupStrategy: { clustersPerDecisionGroup: 2 } } });
      await s.place("overlap", {
        decisionStrategy: {
          groupStrategy: {
            clustersPerDecisionGroup: "100%",
            decisionGroups: [
              { groupName: "zone", groupClusterSelector: { labelSelector: { matchLabels: { zone: "z1" } } } },
              { groupName: "canary", groupClusterSelector: { labelSelector: { matchLabels: { stage: "canary" } } } },
              { groupName: "east", groupClusterSelector: { claimSelector: { matchExpressions: [{ key: "region", operator: "In", values: ["east"] }] } } },
              { groupName: "nobody", groupClusterSelector: { labelSelector: { matchLabels: { stage: "none" } } } },
            ],
          },
        },
      });
      await s.place("fraction", { numberOfClusters: 7, decisionStrategy: { groupStrategy: { clustersPerDecisionGroup: "33.3%" } } });
      await s.place("over", { decisionStrategy: { groupStrategy: { clustersPerDecisionGroup: "150%" } } });
      await s.place("bad", { decisionStrategy: { groupStrategy: { clustersPerDecisionGroup: "half" } } });
      await s.place("bad-first-group", {
        decisionStrategy: { groupStrategy: { decisionGroups: [{ groupName: "bad", groupClusterSelector: { labelSelector: { matchExpressions: [{ key: "stage", operator: "Near", values: ["x"] }] } } }] } },
      });
      await s.place("bad-second-group", {
        decisionStrategy: {
          groupStrategy: {
            decisionGroups: [
              { groupName: "canary", groupClusterSelector: { labelSelector: { matchLabels: { stage: "canary" } } } },
              { groupName: "bad", groupClusterSelector: { labelSelector: { matchExpressions: [{ key: "stage", operator: "Near", values: ["x"] }] } } },
            ],
          },
        },
      });
      await s.place("none-selected", { predicates: [labelPredicate({ matchLabels: { stage: "none" } })], decisionStrategy: { groupStrategy: { clustersPerDecisionGroup: "25%" } } });
      await s.compare("created");
    });
  }, CASE_MS);

  it("250 clusters make 3 decisions of at most 100; 150 make 2; a group of 120 splits too", async ({ expect }) => {
    await scene("many", expect, async (s) => {
      const names = Array.from({ length: 250 }, (_, i) => `c${String(i).padStart(3, "0")}`);
      await s.clusters(names.slice(0, 120), { labels: { group: "first" } });
      await s.clusters(names.slice(120));
      await s.place("p");
      await s.place("grouped", { decisionStrategy: { groupStrategy: { decisionGroups: [{ groupName: "first", groupClusterSelector: { labelSelector: { matchLabels: { group: "first" } } } }] } } });
      await s.compare("created");
      await s.patchPlacement("p", { numberOfClusters: 150 });
      await s.compare("numberOfClusters 150");
    });
  }, 90_000);
});

// Balance counts the decisions of every placement on the hub, so the case that ranks by it runs alone;
// so does the one whose set selects every cluster on the hub.
describe("alone on the hubs", () => {
  it("a LabelSelector set with an empty selector holds every cluster of the hub", async () => {
    await scene("global", expect, async (s) => {
      await s.clusterSet("pc-global-everything", { clusterSelector: { selectorType: "LabelSelector", labelSelector: {} } });
      await s.bind("pc-global-everything");
      await s.place("cpu", { clusterSets: ["pc-global-everything"], numberOfClusters: 4, prioritizerPolicy: exact(["ResourceAllocatableCPU", 1]) });
      await s.compare("created");
    });
  }, CASE_MS);

  it("Balance prefers clusters fewer other placements have chosen; a negative weight the busiest", async () => {
    await scene("balance", expect, async (s) => {
      await s.clusters(["a", "b", "c", "d"]);
      await s.place("first", { numberOfClusters: 2, prioritizerPolicy: exact(["Balance", 1]) });
      await s.compare("first");
      await s.place("second", { numberOfClusters: 1, prioritizerPolicy: exact(["Balance", 1]) });
      await s.compare("second");
      await s.place("third", { numberOfClusters: 3 });
      await s.compare("third, Additive");
      await s.place("busiest", { numberOfClusters: 1, prioritizerPolicy: exact(["Balance", -1]) });
      await s.compare("busiest");
      // counts now differ by cluster (up to 3): Balance's scores are fractions of the busiest, truncated
      await s.place("fractions", { numberOfClusters: 2, prioritizerPolicy: exact(["Balance", 3], ["Steady", 1]) });
      await s.compare("fractions");
    });
  }, CASE_MS);
});
