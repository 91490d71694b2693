// Who owns what the work agent applies (§7.2 step 5, §7.4): the AppliedManifestWork as owner, the
// deleteOption that orphans, and the metadata merges OCM uses (owner refs, labels, annotations).
import { isDeepStrictEqual } from "node:util";
import type { OwnerReference } from "../../shared/api/meta.ts";
import { AppliedManifestWorkResource, WorkGroup, type ManifestWorkSpec } from "../../shared/api/work.ts";

export const AppliedManifestWorkApiVersion = `${WorkGroup}/${AppliedManifestWorkResource.version}`;

// A plain owner reference, neither controller nor blocking: several works may own one resource.
export function appliedWorkOwner(applied: { metadata: { name?: string; uid?: string } }): OwnerReference {
  return { apiVersion: AppliedManifestWorkApiVersion, kind: AppliedManifestWorkResource.kind, name: applied.metadata.name!, uid: applied.metadata.uid! };
}

// OCM marks "remove this owner" by a UID with a trailing dash (library-go's MergeOwnerRefs reads it).
export const removalOf = (owner: OwnerReference): OwnerReference => ({ ...owner, uid: `${owner.uid}-` });
export const isRemoval = (owner: OwnerReference) => owner.uid.endsWith("-");

export type ResourceIdentity = { group: string; resource: string; namespace: string; name: string };

// OCM's OwnedByTheWork: Foreground (the default) owns everything, Orphan nothing, SelectivelyOrphan
// everything but exact matches of its rules.
export function isOwnedByTheWork(id: ResourceIdentity, deleteOption: ManifestWorkSpec["deleteOption"]): boolean {
  switch (deleteOption?.propagationPolicy) {
    case undefined:
    case "Foreground":
      return true;
    case "Orphan":
      return false;
  }
  const rules = deleteOption?.selectivelyOrphans?.orphaningRules ?? [];
  return !rules.some((r) => (r.group ?? "") === id.group && r.resource === id.resource && (r.namespace ?? "") === id.namespace && r.name === id.name);
}

const groupOf = (apiVersion: string) => (apiVersion.includes("/") ? apiVersion.slice(0, apiVersion.indexOf("/")) : "");
const sameOwner = (a: OwnerReference, b: OwnerReference) => a.name === b.name && a.kind === b.kind && groupOf(a.apiVersion) === groupOf(b.apiVersion);

// library-go's MergeOwnerRefs: add or refresh each required owner; a removal marker takes it out.
export function mergeOwnerRefs(existing: readonly OwnerReference[] | undefined, required: readonly OwnerReference[]): { refs: OwnerReference[]; modified: boolean } {
  const refs = [...(existing ?? [])];
  let modified = false;
  for (const want of required) {
    const remove = isRemoval(want);
    const o = remove ? { ...want, uid: want.uid.slice(0, -1) } : want;
    const i = refs.findIndex((r) => sameOwner(o, r));
    if (i < 0) {
      if (!remove) {
        refs.push(o);
        modified = true;
      }
    } else if (remove) {
      refs.splice(i, 1);
      modified = true;
    } else if (!isDeepStrictEqual(refs[i], o)) {
      refs[i] = o;
      modified = true;
    }
  }
  return { refs, modified };
}

// library-go's MergeMap for labels and annotations: required keys win; a key ending in "-" removes it.
export function mergeMap(existing: Readonly<Record<string, string>> | undefined, required: Readonly<Record<string, string>> | undefined): { map: Record<string, string>; modified: boolean } {
  const map = { ...(existing ?? {}) };
  let modified = false;
  for (const [k, v] of Object.entries(required ?? {})) {
    if (k.endsWith("-")) {
      const key = k.slice(0, -1);
      if (key in map) {
        delete map[key];
        modified = true;
      }
    } else if (map[k] !== v) {
      map[k] = v;
      modified = true;
    }
  }
  return { map, modified };
}

// Labels and annotations as created: removal markers mean nothing on a new object.
export function withoutRemovalKeys(m: Readonly<Record<string, string>> | undefined): Record<string, string> | undefined {
  if (!m) return undefined;
  return Object.fromEntries(Object.entries(m).filter(([k]) => !k.endsWith("-")));
}

export function isOwnedBy(owner: OwnerReference, refs: readonly OwnerReference[] | undefined): boolean {
  return (refs ?? []).some((r) => r.uid === owner.uid);
}

// Another AppliedManifestWork (another work, or the same work from another hub) also owns it.
export function hasOtherAppliedWorkOwner(owner: OwnerReference, refs: readonly OwnerReference[] | undefined): boolean {
  return (refs ?? []).some((r) => r.apiVersion === AppliedManifestWorkApiVersion && r.kind === AppliedManifestWorkResource.kind && r.uid !== owner.uid);
}
