// Deletion (§7.4): the work's finalizer waits for its AppliedManifestWork, whose finalizer deletes or
// releases every resource it recorded; and the reporting both paths share.
import { AppliedManifestWorkResource, ManifestWorkResource, WorkFinalizer } from "../../shared/api/work.ts";
import { patchStatusIfChanged, removeFinalizer } from "../../shared/apply.ts";
import { setCondition } from "../../shared/conditions.ts";
import { done, type Io, type Outcome } from "../../shared/harness.ts";
import { deleteAppliedResources, type AppliedResource } from "./cleanup.ts";
import type { Applied, Ctx, Work } from "./context.ts";
import { appliedWorkOwner } from "./ownership.ts";
import type { Config } from "./config.ts";
import { deletingCondition } from "./status.ts";

export const PENDING_DELETION_RECHECK_MS = 1_000;

// §7.4: Deleting=True, delete the AppliedManifestWork, and once its finalizer has dealt with every
// resource it recorded, let the work go.
export async function finalizeWork(ctx: Ctx, { name, work, applied }: { name: string; work?: Work; applied?: Applied }): Promise<Outcome> {
  const { io, hub, spoke } = ctx;
  if (!work) {
    // An AppliedManifestWork whose work is gone is evicted by OCM after a grace period (not done here);
    // one already being deleted is finished.
    if (!applied?.metadata.deletionTimestamp) return done;
    return (await finalizeApplied(ctx, applied)) ? { recheckInMs: PENDING_DELETION_RECHECK_MS } : done;
  }
  if (!work.metadata.finalizers?.includes(WorkFinalizer.ManifestWorkCleanup)) return done;
  let current: Work = work;
  let left = applied;
  if (left) {
    const status = { ...work.status, conditions: setCondition(work.status?.conditions, { ...deletingCondition, observedGeneration: work.metadata.generation }, ctx.now) };
    current = (await patchStatusIfChanged(hub, ManifestWorkResource, work, normalized(status))) ?? work;
    if (!left.metadata.deletionTimestamp) {
      await spoke.delete(AppliedManifestWorkResource, left.metadata.name!);
      io.log.info({ work: name, applied: left.metadata.name }, "work deleted: deleting its AppliedManifestWork");
      left = await spoke.get<Applied>(AppliedManifestWorkResource, left.metadata.name!);
    }
    if (left) left = await finalizeApplied(ctx, left);
    if (left) return { recheckInMs: PENDING_DELETION_RECHECK_MS };
  }
  await removeFinalizer(hub, ManifestWorkResource, current, WorkFinalizer.ManifestWorkCleanup);
  io.log.info({ work: name }, "work finalizer removed: everything it applied is cleaned up");
  return done;
}

// The AppliedManifestWork finalizer: returns the object while it still exists (resources terminating,
// or someone else's finalizer), undefined once it is gone.
export async function finalizeApplied(ctx: Ctx, applied: Applied): Promise<Applied | undefined> {
  const { io, spoke } = ctx;
  if (!applied.metadata.finalizers?.includes(WorkFinalizer.AppliedManifestWorkCleanup)) return applied;
  const records = applied.status?.appliedResources ?? [];
  const { pending, errors, done: dealt } = await deleteAppliedResources(spoke, records, appliedWorkOwner(applied));
  logDisposals(io, applied.metadata.name!, dealt);
  const current = (await patchStatusIfChanged(spoke, AppliedManifestWorkResource, applied, normalized({ ...applied.status, appliedResources: pending }))) ?? applied;
  throwFirst(io, applied.metadata.name!, errors);
  if (pending.length > 0) {
    io.log.info({ applied: applied.metadata.name, pending: pending.length }, "waiting for applied resources to terminate");
    return current;
  }
  await removeFinalizer(spoke, AppliedManifestWorkResource, current, WorkFinalizer.AppliedManifestWorkCleanup);
  return spoke.get<Applied>(AppliedManifestWorkResource, applied.metadata.name!);
}

export function logDisposals(io: Io<Config>, applied: string, dealt: readonly { record: AppliedResource; disposal: string }[]): void {
  for (const d of dealt) if (d.disposal !== "gone") io.log.info({ applied, resource: d.record, disposal: d.disposal }, "applied resource no longer kept by this work");
}

// After the status that records what is left has been written: every failure is logged, the first one
// is thrown as it came (so the harness answers 503 to what a retry can fix).
export function throwFirst(io: Io<Config>, applied: string, errors: readonly unknown[]): void {
  for (const err of errors) io.log.warn({ applied, error: err instanceof Error ? err.message : String(err) }, "cleanup failed: will retry");
  if (errors.length > 0) throw errors[0];
}

// JSON as the API server returns it (no undefined members), so comparisons with what was read hold.
export function normalized<T>(v: T): T {
  return JSON.parse(JSON.stringify(v)) as T;
}
