// Deleting what a work applied (§7.2 step 8, §7.4): resources dropped from a work, and everything an
// AppliedManifestWork recorded when it goes, except what it does not own (orphaned, ReadOnly, recreated
// by someone else) and what another work still owns (then only our owner reference goes).
import type { OwnerReference } from "../../shared/api/meta.ts";
import type { AppliedManifestWork } from "../../shared/api/work.ts";
import type { KubeClient, KubeObject } from "../../shared/kube/client.ts";
import { classifyError } from "../../shared/kube/errors.ts";
import { resourceOfRecord } from "./discovery.ts";
import { hasOtherAppliedWorkOwner, isOwnedBy, removalOf, mergeOwnerRefs } from "./ownership.ts";

export type AppliedResource = NonNullable<NonNullable<AppliedManifestWork["status"]>["appliedResources"]>[number];

type Live = KubeObject & { metadata: { ownerReferences?: OwnerReference[]; deletionTimestamp?: string } };

// What happened to one recorded resource.
export type Disposal = "gone" | "not-ours" | "released" | "deleted";

// Pure: what to do with a recorded resource given what is live (OCM's DeleteAppliedResources order).
export function disposalOf(record: AppliedResource, live: Live | undefined, owner: OwnerReference): "gone" | "not-ours" | "release" | "terminating" | "delete" {
  if (!live) return "gone";
  const refs = live.metadata.ownerReferences;
  if (!isOwnedBy(owner, refs)) return "not-ours";
  if (hasOtherAppliedWorkOwner(owner, refs)) return "release";
  // A resource recreated since it was recorded is someone else's instance: forget it.
  if (record.uid !== live.metadata.uid) return "not-ours";
  return live.metadata.deletionTimestamp ? "terminating" : "delete";
}

export const identityOf = (r: AppliedResource) => `${r.group ?? ""}/${r.resource}/${r.namespace ?? ""}/${r.name}`;

// OCM's FindUntrackedResources: recorded before, not now (any version of the same group/resource).
export function untracked(before: readonly AppliedResource[], now: readonly AppliedResource[]): AppliedResource[] {
  const kept = new Set(now.map(identityOf));
  return before.filter((r) => !kept.has(identityOf(r)));
}

export function sortApplied(rs: AppliedResource[]): AppliedResource[] {
  const key = (r: AppliedResource) => [r.group ?? "", r.version, r.resource, r.namespace ?? "", r.name];
  return rs.sort((a, b) => {
    const [ka, kb] = [key(a), key(b)];
    for (let i = 0; i < ka.length; i++) if (ka[i] !== kb[i]) return ka[i]! < kb[i]! ? -1 : 1;
    return 0;
  });
}

// Deletes (background propagation, UID precondition) or releases each resource. Returns what is
// still there to wait for, including resources a call failed on (with the errors, as thrown, so the
// harness can tell a transient failure from a bug), so none is forgotten.
export async function deleteAppliedResources(spoke: KubeClient, records: readonly AppliedResource[], owner: OwnerReference): Promise<{ pending: AppliedResource[]; errors: unknown[]; done: { record: AppliedResource; disposal: Disposal }[] }> {
  const pending: AppliedResource[] = [];
  const errors: unknown[] = [];
  const done: { record: AppliedResource; disposal: Disposal }[] = [];
  await Promise.all(
    records.map(async (record) => {
      const r = resourceOfRecord(record);
      try {
        const live = await spoke.get<Live>(r, record.name, record.namespace);
        const decision = disposalOf(record, live, owner);
        switch (decision) {
          case "gone":
          case "not-ours":
            done.push({ record, disposal: decision });
            return;
          case "release": {
            const { refs } = mergeOwnerRefs(live!.metadata.ownerReferences, [removalOf(owner)]);
            await spoke.patch(r, record.name, { metadata: { uid: live!.metadata.uid, resourceVersion: live!.metadata.resourceVersion, ownerReferences: refs } }, { namespace: record.namespace });
            done.push({ record, disposal: "released" });
            return;
          }
          case "terminating":
            pending.push(record);
            return;
          case "delete": {
            try {
              await spoke.delete(r, record.name, record.namespace, { propagationPolicy: "Background", uid: record.uid });
            } catch (err) {
              // a UID precondition that fails means the instance we recorded is gone
              if (classifyError(err) !== "conflict") throw err;
            }
            const after = await spoke.get<Live>(r, record.name, record.namespace);
            if (after && after.metadata.uid === record.uid) pending.push(record);
            else done.push({ record, disposal: "deleted" });
            return;
          }
        }
      } catch (err) {
        errors.push(err);
        pending.push(record);
      }
    }),
  );
  return { pending: sortApplied(pending), errors, done };
}
