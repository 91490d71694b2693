// The ManifestWork status the agent reports (§2.3, §7.2 step 7, §7.3): per-manifest Applied, Available
// and StatusFeedbackSynced merged into what was there, and the work-level Applied and Available.
import { isDeepStrictEqual } from "node:util";
import type { Condition } from "../../shared/api/meta.ts";
import { ManifestReason, WorkConditionType, WorkReason, type ManifestCondition } from "../../shared/api/work.ts";
import { findCondition, removeCondition, setCondition, type NewCondition } from "../../shared/conditions.ts";
import type { FeedbackValue } from "./feedback.ts";
import type { ResourceMeta } from "./manifest-config.ts";

export type AppliedOutcome = { ok: true } | { ok: false; reason: typeof ManifestReason.AppliedManifestFailed | typeof ManifestReason.AppliedManifestSSAIgnoreFieldError; message: string };
export type ReadOutcome =
  | { state: "found"; feedback: { values: FeedbackValue[]; condition: NewCondition } }
  | { state: "missing" }
  | { state: "failed"; message: string }
  | { state: "incomplete" };
export type ManifestOutcome = { resourceMeta: ResourceMeta; applied: AppliedOutcome; read: ReadOutcome };

// OCM's ManifestResourceMeta has no omitempty: every field is written, "" for a core group, a
// cluster-scoped object or a part that could not be told.
export function ocmResourceMeta(m: ResourceMeta): Required<ResourceMeta> {
  return { ordinal: m.ordinal, group: m.group ?? "", version: m.version ?? "", kind: m.kind ?? "", resource: m.resource ?? "", name: m.name ?? "", namespace: m.namespace ?? "" };
}

// What the AppliedManifestWork records of an applied object (OCM's AppliedManifestResourceMeta: group
// and namespace always written, uid when known).
export function appliedRecord(m: ResourceMeta, uid: string | undefined): { group: string; version: string; resource: string; namespace: string; name: string; uid?: string } {
  return { group: m.group ?? "", version: m.version ?? "", resource: m.resource ?? "", namespace: m.namespace ?? "", name: m.name ?? "", ...(uid ? { uid } : {}) };
}

const withoutOrdinal = ({ ordinal: _o, ...rest }: ResourceMeta) => ocmResourceMeta({ ...rest, ordinal: 0 });

// OCM's MergeManifestConditions lookup: the same resource meta, else the same meta at another ordinal
// when only one old entry has it.
function previousFor(meta: ResourceMeta, previous: readonly ManifestCondition[]): ManifestCondition | undefined {
  const exact = previous.find((p) => isDeepStrictEqual(ocmResourceMeta(p.resourceMeta as ResourceMeta), ocmResourceMeta(meta)));
  if (exact) return exact;
  const same = previous.filter((p) => isDeepStrictEqual(withoutOrdinal(p.resourceMeta as ResourceMeta), withoutOrdinal(meta)));
  return same.length === 1 && Object.values(withoutOrdinal(meta)).some((v) => v !== "" && v !== 0) ? same[0] : undefined;
}

export function appliedCondition(a: AppliedOutcome, generation: number): NewCondition {
  if (a.ok) return { type: WorkConditionType.Applied, status: "True", reason: ManifestReason.AppliedManifestComplete, message: "Apply manifest complete", observedGeneration: generation };
  return { type: WorkConditionType.Applied, status: "False", reason: a.reason, message: a.message, observedGeneration: generation };
}

export function availableCondition(r: ReadOutcome): NewCondition {
  const type = WorkConditionType.Available;
  switch (r.state) {
    case "found":
      return { type, status: "True", reason: ManifestReason.ResourceAvailable, message: "Resource is available" };
    case "missing":
      return { type, status: "False", reason: ManifestReason.ResourceNotAvailable, message: "Resource is not available" };
    case "failed":
      return { type, status: "Unknown", reason: ManifestReason.FetchingResourceFailed, message: `Failed to fetch resource: ${r.message}` };
    case "incomplete":
      return { type, status: "Unknown", reason: ManifestReason.IncompleteResourceMeta, message: "Resource meta is incomplete" };
  }
}

export function manifestStatuses({ previous, outcomes, generation, now }: { previous?: readonly ManifestCondition[]; outcomes: readonly ManifestOutcome[]; generation: number; now: Date }): ManifestCondition[] {
  return outcomes.map((o) => {
    const old = previousFor(o.resourceMeta, previous ?? []);
    let conditions: Condition[] = [...(old?.conditions ?? [])];
    // A condition from another generation is replaced, not updated: its transition time starts over.
    if (findCondition(conditions, WorkConditionType.Applied)?.observedGeneration !== generation) conditions = removeCondition(conditions, WorkConditionType.Applied);
    conditions = setCondition(conditions, appliedCondition(o.applied, generation), now);
    conditions = setCondition(conditions, availableCondition(o.read), now);
    let values = old?.statusFeedback?.values ?? [];
    // An object that cannot be read keeps its last feedback (OCM skips it).
    if (o.read.state === "found") {
      const { feedback } = o.read;
      // Changed values re-add the condition, so its transition time tells when they last changed.
      if (!isDeepStrictEqual(values, feedback.values)) conditions = removeCondition(conditions, WorkConditionType.StatusFeedbackSynced);
      conditions = setCondition(conditions, feedback.condition, now);
      values = feedback.values;
    }
    return { resourceMeta: ocmResourceMeta(o.resourceMeta), statusFeedback: values.length > 0 ? { values } : {}, conditions };
  });
}

// OCM's newAggregateAvailableCondition: any False wins, then Unknown, then True when all are True.
export function aggregateAvailable(manifests: readonly ManifestCondition[], generation: number): NewCondition {
  const count = (status: string) => manifests.filter((m) => findCondition(m.conditions, WorkConditionType.Available)?.status === status).length;
  const total = manifests.length;
  const base = { type: WorkConditionType.Available, observedGeneration: generation };
  const [f, u, t] = [count("False"), count("Unknown"), count("True")];
  if (f > 0) return { ...base, status: "False", reason: WorkReason.ResourcesNotAvailable, message: `${f} of ${total} resources are not available` };
  if (u > 0) return { ...base, status: "Unknown", reason: WorkReason.ResourcesStatusUnknown, message: `${u} of ${total} resources have unknown status` };
  // OCM's message carries a trailing space.
  if (t === 0) return { ...base, status: "Unknown", reason: WorkReason.ResourcesStatusUnknown, message: "cannot get any available resource " };
  return { ...base, status: "True", reason: WorkReason.ResourcesAvailable, message: "All resources are available" };
}

// Work Applied is True iff every manifest's Applied is (OCM's allInCondition).
export function aggregateApplied(manifests: readonly ManifestCondition[], generation: number): NewCondition {
  const allApplied = manifests.every((m) => findCondition(m.conditions, WorkConditionType.Applied)?.status !== "False");
  return allApplied
    ? { type: WorkConditionType.Applied, status: "True", reason: WorkReason.AppliedManifestWorkComplete, message: "Apply manifest work complete", observedGeneration: generation }
    : { type: WorkConditionType.Applied, status: "False", reason: WorkReason.AppliedManifestWorkFailed, message: "Failed to apply manifest work", observedGeneration: generation };
}

export function workConditions({ previous, manifests, generation, now }: { previous?: readonly Condition[]; manifests: readonly ManifestCondition[]; generation: number; now: Date }): Condition[] {
  const applied = setCondition(previous, aggregateApplied(manifests, generation), now);
  return setCondition(applied, aggregateAvailable(manifests, generation), now);
}

// The webhook's verdict, reported where OCM users look: Applied=False with the webhook's message.
export function refusedCondition(message: string, generation: number): NewCondition {
  return { type: WorkConditionType.Applied, status: "False", reason: WorkReason.AppliedManifestWorkFailed, message, observedGeneration: generation };
}

export const deletingCondition: NewCondition = { type: WorkConditionType.Deleting, status: "True", reason: WorkReason.WorkDeleting, message: "ManifestWork is being deleted" };
