// The spoke's work agent (OCM §7): a ManifestWork in the cluster's namespace on the hub is applied to
// this cluster, recorded in an AppliedManifestWork that owns what it applied, reported back in the
// work's status, and cleaned up when manifests or the work go. Every run recomputes from the hub work
// and spoke state; the AppliedManifestWork's status is the memory of what was applied.
import { createHash } from "node:crypto";
import { isDeepStrictEqual } from "node:util";
import type { ApiResource, Condition, OwnerReference } from "../../shared/api/meta.ts";
import {
  AppliedManifestWorkResource,
  ManifestReason,
  ManifestWorkResource,
  WorkConditionType,
  WorkFinalizer,
  type ManifestConfigOption,
} from "../../shared/api/work.ts";
import { addFinalizer, patchStatusIfChanged } from "../../shared/apply.ts";
import { findCondition, isTrue, setCondition } from "../../shared/conditions.ts";
import { asAgent } from "../../shared/agent-hub.ts";
import { managedClusterOf } from "../../shared/settings.ts";
import { withAgentHub } from "../../shared/hub-credentials.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import { defineFunction } from "../../shared/sdk.ts";
import type { KubeObject } from "../../shared/kube/client.ts";
import { classifyError, isAlreadyExists } from "../../shared/kube/errors.ts";
import { refusal } from "./admission.ts";
import { ConfigSchema, type Config } from "./config.ts";
import { applyManifest, apiMessage, IgnoreFieldError, ServerSideApplyConflictError } from "./apply.ts";
import { deleteAppliedResources, sortApplied, untracked, type AppliedResource } from "./cleanup.ts";
import { resolver, splitApiVersion, type Resolver } from "./discovery.ts";
import { readFeedback } from "./feedback.ts";
import { findManifestConfig, type ResourceMeta } from "./manifest-config.ts";
import { applyOrder, applyRank, UNLISTED_RANK } from "./order.ts";
import { appliedWorkOwner, isOwnedByTheWork, removalOf } from "./ownership.ts";
import type { Applied, Ctx, Work } from "./context.ts";
import { PENDING_DELETION_RECHECK_MS, finalizeApplied, finalizeWork, logDisposals, normalized, throwFirst } from "./finalize.ts";
import { appliedRecord, ocmResourceMeta, manifestStatuses, refusedCondition, workConditions, type AppliedOutcome, type ManifestOutcome, type ReadOutcome } from "./status.ts";

export { ConfigSchema, type Config };

// OCM's HubHash: lowercase hex sha256 of the hub server URL exactly as the hub kubeconfig writes it.
export const hubHashOf = (server: string) => createHash("sha256").update(server).digest("hex");
export const appliedWorkName = (hubHash: string, work: string) => `${hubHash}-${work}`;
const APPLIED_NAME = /^[0-9a-f]{64}-(.+)$/;

const MIN_ERROR_RECHECK_MS = 1_000;
const MAX_ERROR_RECHECK_MS = 300_000;


// The root kind is ManifestWork on the hub, in the cluster's namespace, keyed by itself; an
// AppliedManifestWork on the spoke wakes the work it is named after. The hub is reached with the
// agent's own credentials, so a resync tick's keys come from keysOnTick, not a list through io.
export default defineFunction({
  name: "work-applier",
  config: ConfigSchema,
  watches: (c) => [
    { cluster: c.hubCluster, resource: ManifestWorkResource, namespace: c.clusterName, mode: "Resource", root: true },
    { cluster: managedClusterOf(c), resource: AppliedManifestWorkResource, mode: "Resource", keys: (e) => appliedKeys(c, e.ref.name) },
  ],
  resyncSeconds: 60,
  // one sweep per interval: the relay ticks once for each cluster it watches
  resync: (io, tick) => (tick.cluster && tick.cluster !== io.config.managementCluster ? { skip: `tick for cluster ${tick.cluster}` } : keysOnTick(io)),
  // work-applier on the spoke. Its hub access is only the cluster's own identity, which acceptance grants
  // open-cluster-management:managedcluster:work (manifestworks and their status in the cluster namespace).
  //
  // What the agent itself needs: its AppliedManifestWorks (cluster-scoped records of what it applied,
  // with their finalizer) ...
  writes: (c) => [
    { cluster: managedClusterOf(c), why: "its AppliedManifestWorks: cluster-scoped records of what it applied", apiGroups: ["work.open-cluster-management.io"], resources: ["appliedmanifestworks"], verbs: ["create", "update", "patch", "delete"] },
    { cluster: managedClusterOf(c), why: "their status", apiGroups: ["work.open-cluster-management.io"], resources: ["appliedmanifestworks/status"], verbs: ["patch", "update"] },
    { cluster: managedClusterOf(c), why: "their finalizer", apiGroups: ["work.open-cluster-management.io"], resources: ["appliedmanifestworks/finalizers"], verbs: ["update"] },
    { cluster: c.managementCluster, namespace: c.agentNamespace, why: "the bootstrap and hub kubeconfigs the cluster's identity comes from", apiGroups: [""], resources: ["secrets"], verbs: ["get", "list", "watch"] },
    { cluster: managedClusterOf(c), role: "execution", why: "execution rights, BROAD ON PURPOSE: a ManifestWork may carry any kind, as OCM's work agent's may", apiGroups: ["*"], resources: ["*"], verbs: ["*"] },
  ],
  reconcile,
});

function appliedKeys(c: Config, name: string): Key[] | { skip: string } {
  const m = APPLIED_NAME.exec(name);
  return m ? [{ cluster: c.hubCluster, namespace: c.clusterName, name: m[1]! }] : { skip: `AppliedManifestWork ${name} is not named <hubHash>-<work>` };
}

// A resync covers every work of the cluster, and every AppliedManifestWork of this hub (one whose work
// is gone may still be finishing its cleanup).
async function keysOnTick(io: Io<Config>): Promise<Key[] | { skip: string }> {
  const c = io.config;
  const spoke = io.cluster(c.managementCluster);
  const managed = io.cluster(managedClusterOf(c));
  return withAgentHub<Key[] | { skip: string }>(
    spoke,
    c,
    io.clock.now(),
    async (hub) => {
      const prefix = `${hubHashOf(hub.cluster.server)}-`;
      const [works, applied] = await Promise.all([hub.list(ManifestWorkResource, { namespace: c.clusterName }), managed.list(AppliedManifestWorkResource)]);
      const names = new Set([...works.items.map((w) => w.metadata.name!), ...applied.items.map((a) => a.metadata.name!).filter((n) => n.startsWith(prefix)).map((n) => n.slice(prefix.length))]);
      return [...names].map((name) => ({ cluster: c.hubCluster, namespace: c.clusterName, name }));
    },
    (reason) => ({ skip: `not bootstrapped: ${reason}` }),
  );
}

export async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const c = io.config;
  return asAgent(
    io,
    // Everything applied, and its records, on the managed cluster; only the agent's secrets on the management one.
    async ({ hub, managed, now }) => {
      const ctx: Ctx = { io, hub, spoke: managed, now, hubHash: hubHashOf(hub.cluster.server) };
      const [work, applied] = await Promise.all([
        hub.get<Work>(ManifestWorkResource, key.name, key.namespace ?? c.clusterName),
        managed.get<Applied>(AppliedManifestWorkResource, appliedWorkName(ctx.hubHash, key.name)),
      ]);
      if (!work || work.metadata.deletionTimestamp) return await finalizeWork(ctx, { name: key.name, work, applied });
      let current = applied;
      if (current?.metadata.deletionTimestamp) {
        // Deleted under a live work: clean up what it owned first; a new one is made and applied after.
        current = await finalizeApplied(ctx, current);
        if (current) return { recheckInMs: PENDING_DELETION_RECHECK_MS };
      }
      return await applyWork(ctx, work, current);
    },
  );
}

async function applyWork(ctx: Ctx, original: Work, existingApplied: Applied | undefined): Promise<Outcome> {
  const { io, hub, spoke, now } = ctx;
  const c = io.config;
  // OCM adds the finalizer first, so nothing is applied that deletion could not clean up.
  const work = await addFinalizer(hub, ManifestWorkResource, original, WorkFinalizer.ManifestWorkCleanup);
  if (isTrue(work.status?.conditions, WorkConditionType.Complete)) return done; // a completed work gets no updates
  const generation = work.metadata.generation ?? 0;
  const manifests = (work.spec?.workload?.manifests ?? []) as KubeObject[];

  const refused = refusal(manifests, c.manifestLimitBytes);
  if (refused) {
    io.log.warn({ work: work.metadata.name, reason: refused }, "refused: the ManifestWork webhook would reject this work");
    const status = { ...work.status, conditions: setCondition(work.status?.conditions, refusedCondition(refused, generation), now) };
    await patchStatusIfChanged(hub, ManifestWorkResource, work, normalized(status));
    return done;
  }

  const applied = await ensureAppliedWork(ctx, work, existingApplied);
  const results = await applyAll(ctx, work, applied, resolver(spoke));
  const outcomes = await Promise.all(results.map((r) => observe(ctx, r)));

  // Record what is applied now before reporting, and delete what no longer is.
  const tracked = trackedResources(outcomes);
  let pending: AppliedResource[] = [];
  let cleanupErrors: unknown[] = [];
  if (tracked) {
    const owner = appliedWorkOwner(applied);
    const gone = untracked(applied.status?.appliedResources ?? [], tracked);
    const cleanup = await deleteAppliedResources(spoke, gone, owner);
    ({ pending, errors: cleanupErrors } = cleanup);
    logDisposals(io, applied.metadata.name!, cleanup.done);
    const appliedResources = sortApplied([...tracked, ...pending]);
    await patchStatusIfChanged(spoke, AppliedManifestWorkResource, applied, normalized({ ...applied.status, appliedResources }));
  } else {
    io.log.info({ work: work.metadata.name }, "applied resources not recorded: some manifest's object could not be told (unknown kind or failed read); nothing is pruned this time");
  }

  const manifestsStatus = manifestStatuses({ previous: work.status?.resourceStatus?.manifests, outcomes: outcomes.map((o) => o.outcome), generation, now });
  const conditions = workConditions({ previous: work.status?.conditions, manifests: manifestsStatus, generation, now });
  const status = { ...work.status, conditions, resourceStatus: { ...work.status?.resourceStatus, manifests: manifestsStatus } };
  const patched = await patchStatusIfChanged(hub, ManifestWorkResource, work, normalized(status));
  io.log.info({ work: work.metadata.name, generation, manifests: manifests.length, applied: findCondition(conditions, WorkConditionType.Applied)?.status, statusWritten: !!patched }, "work reconciled");
  throwFirst(io, applied.metadata.name!, cleanupErrors);
  return nextCheck(ctx, { results, observed: outcomes, conditions, pendingDeletion: pending.length > 0 });
}

// The AppliedManifestWork OCM keeps: spec {hubHash, agentID, manifestWorkName}, the work's labels, and
// the finalizer that deletes what it applied.
async function ensureAppliedWork(ctx: Ctx, work: Work, existing: Applied | undefined): Promise<Applied> {
  const { spoke, hubHash, io } = ctx;
  const name = appliedWorkName(hubHash, work.metadata.name!);
  const spec = { hubHash, agentID: io.config.agentID ?? hubHash, manifestWorkName: work.metadata.name! };
  const labels = work.metadata.labels ?? {};
  if (!existing) {
    try {
      return await spoke.create<Applied>(AppliedManifestWorkResource, { metadata: { name, labels, finalizers: [WorkFinalizer.AppliedManifestWorkCleanup] }, spec });
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
      // lost a race with another run: carry on with what it made
      const made = await spoke.get<Applied>(AppliedManifestWorkResource, name);
      if (!made) throw err;
      return ensureAppliedWork(ctx, work, made);
    }
  }
  const finalizers = existing.metadata.finalizers ?? [];
  const haveLabels = existing.metadata.labels ?? {};
  const sameLabels = isDeepStrictEqual(haveLabels, labels);
  if (isDeepStrictEqual(existing.spec, spec) && sameLabels && finalizers.includes(WorkFinalizer.AppliedManifestWorkCleanup)) return existing;
  const labelPatch = sameLabels ? undefined : { ...Object.fromEntries(Object.keys(haveLabels).map((k) => [k, null])), ...labels };
  return spoke.patch<Applied>(AppliedManifestWorkResource, name, {
    metadata: {
      resourceVersion: existing.metadata.resourceVersion,
      ...(labelPatch ? { labels: labelPatch } : {}),
      ...(finalizers.includes(WorkFinalizer.AppliedManifestWorkCleanup) ? {} : { finalizers: [...finalizers, WorkFinalizer.AppliedManifestWorkCleanup] }),
    },
    spec,
  });
}

type ApplyResult = {
  resourceMeta: ResourceMeta;
  resource?: ApiResource;
  option?: ManifestConfigOption;
  live?: KubeObject; // the object after applying, when the apply got that far
  liveKnown: boolean; // whether `live` is the answer (ReadOnly's undefined means missing)
  applied: AppliedOutcome;
  retry?: boolean; // a write conflict, tried again at once
  hardError?: boolean; // counts as a failure to retry later (SSA conflicts do not, as in OCM)
};

const CONFLICT_ATTEMPTS = 4; // OCM's retry.DefaultBackoff steps
const SAME_RANK_CONCURRENCY = 8;

// Manifests rank by rank in OCM's kind order (§7.2 step 3); conflicts are retried as OCM's
// RetryOnConflict does. OCM applies one at a time; here the built-in kinds of one rank (config maps,
// secrets, deployments...) do not depend on each other and go concurrently, while kinds OCM does not
// list (custom resources, which may) keep their spec order one by one.
async function applyAll(ctx: Ctx, work: Work, applied: Applied, resolve: Resolver): Promise<ApplyResult[]> {
  const manifests = (work.spec?.workload?.manifests ?? []) as KubeObject[];
  const kinds = manifests.map((m) => (typeof m?.kind === "string" && typeof m?.apiVersion === "string" ? m.kind : undefined));
  const results: (ApplyResult | undefined)[] = new Array(manifests.length);
  const owner = appliedWorkOwner(applied);
  const applyAt = async (i: number) => {
    if (!results[i] || results[i]!.retry) results[i] = await applyOne(ctx, { work, manifest: manifests[i]!, ordinal: i, owner, resolve });
  };
  for (let attempt = 1; attempt <= CONFLICT_ATTEMPTS; attempt++) {
    for (const { rank, indexes } of rankGroups(applyOrder(kinds), kinds)) {
      if (rank < UNLISTED_RANK) await eachLimited(indexes, SAME_RANK_CONCURRENCY, applyAt);
      else for (const i of indexes) await applyAt(i);
    }
    if (!results.some((r) => r!.retry)) break;
  }
  return results as ApplyResult[];
}

function rankGroups(order: readonly number[], kinds: readonly (string | undefined)[]): { rank: number; indexes: number[] }[] {
  const groups: { rank: number; indexes: number[] }[] = [];
  for (const i of order) {
    const rank = applyRank(kinds[i]);
    if (groups.at(-1)?.rank !== rank) groups.push({ rank, indexes: [] });
    groups.at(-1)!.indexes.push(i);
  }
  return groups;
}

async function eachLimited<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await fn(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

function failed(message: string, reason: typeof ManifestReason.AppliedManifestFailed | typeof ManifestReason.AppliedManifestSSAIgnoreFieldError = ManifestReason.AppliedManifestFailed): AppliedOutcome {
  return { ok: false, reason, message: reason === ManifestReason.AppliedManifestFailed ? `Failed to apply manifest: ${message}` : `Failed to process ignoreFields: ${message}` };
}

type OneManifest = { work: Work; manifest: KubeObject; ordinal: number; owner: OwnerReference; resolve: Resolver };

async function applyOne(ctx: Ctx, { work, manifest, ordinal, owner, resolve }: OneManifest): Promise<ApplyResult> {
  const meta = (manifest?.metadata ?? {}) as { name?: string; namespace?: string };
  if (typeof manifest?.apiVersion !== "string" || typeof manifest?.kind !== "string") {
    return { resourceMeta: { ordinal }, liveKnown: false, applied: failed("Object 'Kind' is missing in manifest"), hardError: true };
  }
  const { group, version } = splitApiVersion(manifest.apiVersion);
  const resourceMeta: ResourceMeta = { ordinal, group, version, kind: manifest.kind, name: meta.name ?? "", namespace: meta.namespace ?? "" };
  let resource;
  try {
    resource = await resolve.resourceFor(manifest.apiVersion, manifest.kind);
  } catch (err) {
    return { resourceMeta, liveKnown: false, applied: failed(apiMessage(err)), hardError: true };
  }
  if (!resource) return { resourceMeta, liveKnown: false, applied: failed(`the server doesn't have a resource type "${manifest.kind}"`), hardError: true };
  resourceMeta.resource = resource.plural;
  if (!resource.namespaced) resourceMeta.namespace = "";

  const owned = isOwnedByTheWork({ group, resource: resource.plural, namespace: resourceMeta.namespace ?? "", name: resourceMeta.name ?? "" }, work.spec?.deleteOption);
  const option = findManifestConfig(resourceMeta, work.spec?.manifestConfigs);
  const strategy = option?.updateStrategy ?? { type: "Update" as const };
  // A UID in a manifest would fail the write's precondition; OCM drops it.
  const { uid: _uid, ...metadata } = manifest.metadata ?? {};
  const required: KubeObject = { ...manifest, metadata };
  try {
    const live = await applyManifest({ spoke: ctx.spoke, resource, required, owner: owned ? owner : removalOf(owner), strategy });
    return { resourceMeta, resource, option, live, liveKnown: true, applied: { ok: true } };
  } catch (err) {
    if (err instanceof ServerSideApplyConflictError) return { resourceMeta, resource, option, liveKnown: false, applied: failed(err.message) };
    if (err instanceof IgnoreFieldError) return { resourceMeta, resource, option, liveKnown: false, applied: failed(err.message, ManifestReason.AppliedManifestSSAIgnoreFieldError), hardError: true };
    const kind = classifyError(err);
    ctx.io.log.warn({ work: work.metadata.name, manifest: resourceMeta, error: err instanceof Error ? err.message : String(err) }, "manifest not applied");
    return { resourceMeta, resource, option, liveKnown: false, applied: failed(apiMessage(err)), retry: kind === "conflict" || kind === "already-exists", hardError: true };
  }
}

type Observed = { outcome: ManifestOutcome; live?: KubeObject; readFailed: boolean; result: ApplyResult };

// The status side of §7.3: what is live now, and the feedback the rules read from it.
async function observe(ctx: Ctx, r: ApplyResult): Promise<Observed> {
  const c = ctx.io.config;
  const base = { resourceMeta: ocmResourceMeta(r.resourceMeta), applied: r.applied };
  if (!r.resource || !r.resourceMeta.name) return { outcome: { ...base, read: { state: "incomplete" } }, readFailed: true, result: r };
  let live = r.live;
  if (!r.liveKnown) {
    try {
      live = await ctx.spoke.get(r.resource, r.resourceMeta.name, r.resourceMeta.namespace || undefined);
    } catch (err) {
      return { outcome: { ...base, read: { state: "failed", message: apiMessage(err) } }, readFailed: true, result: r };
    }
  }
  const read: ReadOutcome = live
    ? { state: "found", feedback: readFeedback(live, r.option?.feedbackRules, { rawFeedbackJsonString: c.rawFeedbackJsonString, maxJsonRawLength: c.maxJsonRawLength }) }
    : { state: "missing" };
  return { outcome: { ...base, read }, live, readFailed: false, result: r };
}

// What the AppliedManifestWork records now, or undefined when some manifest's object cannot be told
// (unknown kind, failed read): then nothing is pruned, as OCM aborts on such errors.
function trackedResources(observed: readonly Observed[]): AppliedResource[] | undefined {
  if (observed.some((o) => o.readFailed)) return undefined;
  return observed
    .filter((o) => o.live)
    .map((o) => appliedRecord(o.result.resourceMeta, o.live!.metadata.uid));
}

// The next look: soon while deletions are pending, with a backoff (from how long Applied has been
// False) while manifests fail, at the status interval while feedback or availability can move without
// an event we see; otherwise the resync tick is enough.
function nextCheck(ctx: Ctx, { results, observed, conditions, pendingDeletion }: { results: readonly ApplyResult[]; observed: readonly Observed[]; conditions: readonly Condition[]; pendingDeletion: boolean }): Outcome {
  const c = ctx.io.config;
  const waits: number[] = [];
  if (pendingDeletion) waits.push(PENDING_DELETION_RECHECK_MS);
  if (results.some((r) => r.hardError)) {
    const since = findCondition(conditions, WorkConditionType.Applied)?.lastTransitionTime;
    const age = since ? ctx.now.getTime() - Date.parse(since) : 0;
    waits.push(Math.min(MAX_ERROR_RECHECK_MS, Math.max(MIN_ERROR_RECHECK_MS, age)));
  }
  const watching = results.some((r) => (r.option?.feedbackRules?.length ?? 0) > 0) || observed.some((o) => o.outcome.read.state !== "found");
  if (watching) waits.push(c.statusSyncIntervalMs);
  return waits.length > 0 ? { recheckInMs: Math.min(...waits) } : done;
}
