// Writes that converge: create-or-update of owned fields, status patches only on change, finalizers;
// every update carries the resourceVersion it read, so a concurrent writer gets a conflict, not a loss.
import { isDeepStrictEqual } from "node:util";
import { parseAllDocuments } from "yaml";
import { resourceOfKind } from "./api/kinds.ts";
import { mergePatchFrom } from "./merge-patch.ts";
import type { ApiResource } from "./api/meta.ts";
import type { KubeClient, KubeObject } from "./kube/client.ts";
import { isAlreadyExists, isConflict, StaleStateError } from "./kube/errors.ts";

type Meta = { labels?: Record<string, string>; annotations?: Record<string, string>; finalizers?: string[] };

// Creates `desired`, or brings the existing object's listed top-level fields, labels and annotations
// to what `desired` says (other labels and fields are left alone). Returns what is stored now.
export async function createOrUpdate<T extends KubeObject>(client: KubeClient, r: ApiResource, desired: T, fields: readonly string[], raced = false): Promise<T> {
  const { name, namespace } = desired.metadata;
  const existing = await client.get<T>(r, name!, namespace);
  if (!existing) {
    try {
      return await client.create(r, desired);
    } catch (err) {
      // Lost a race with another writer: read again, once; a second loss goes to the caller's retry.
      if (!isAlreadyExists(err) || raced) throw err;
      return createOrUpdate(client, r, desired, fields, true);
    }
  }
  const next = withDesired(existing, desired, fields);
  if (isDeepStrictEqual(next, existing)) return existing;
  return client.update(r, next);
}

// What createOrUpdate would make of an existing object: the desired labels and annotations added, the
// named fields replaced.
export function withDesired<T extends KubeObject>(existing: T, desired: T, fields: readonly string[]): T {
  const next = structuredClone(existing) as T & { metadata: Meta };
  const want = desired.metadata as Meta;
  const have = next.metadata as Meta;
  if (want.labels) have.labels = { ...have.labels, ...want.labels };
  if (want.annotations) have.annotations = { ...have.annotations, ...want.annotations };
  for (const f of fields) (next as Record<string, unknown>)[f] = (desired as Record<string, unknown>)[f];
  return next;
}

// Whether createOrUpdate would write: missing, or not as desired.
export const wouldWrite = <T extends KubeObject>(existing: T | undefined, desired: T, fields: readonly string[]) =>
  !existing || !isDeepStrictEqual(withDesired(existing, desired, fields), existing);

// Merge-patches status when it differs, removed keys as null so maps shrink too; the patch carries
// resourceVersion so it is optimistic.
export async function patchStatusIfChanged<T extends KubeObject & { status?: unknown }>(client: KubeClient, r: ApiResource, before: T, status: T["status"]): Promise<T | undefined> {
  if (isDeepStrictEqual(before.status ?? {}, status ?? {})) return undefined;
  const patch = { metadata: { resourceVersion: before.metadata.resourceVersion }, status: mergePatchFrom(before.status ?? {}, status ?? {}) };
  return client.patch<T>(r, before.metadata.name!, patch, { namespace: before.metadata.namespace, subresource: "status" });
}

export async function addFinalizer<T extends KubeObject>(client: KubeClient, r: ApiResource, obj: T, ...wanted: string[]): Promise<T> {
  const finalizers = (obj.metadata as Meta).finalizers ?? [];
  const missing = wanted.filter((f) => !finalizers.includes(f));
  if (missing.length === 0) return obj;
  // one patch for all of them, with the resourceVersion they were judged missing at
  return client.patch<T>(r, obj.metadata.name!, { metadata: { resourceVersion: obj.metadata.resourceVersion, finalizers: [...finalizers, ...missing] } }, { namespace: obj.metadata.namespace });
}

export async function removeFinalizer<T extends KubeObject>(client: KubeClient, r: ApiResource, obj: T, finalizer: string): Promise<T> {
  const finalizers = (obj.metadata as Meta).finalizers ?? [];
  if (!finalizers.includes(finalizer)) return obj;
  return client.patch<T>(r, obj.metadata.name!, { metadata: { resourceVersion: obj.metadata.resourceVersion, finalizers: finalizers.filter((f) => f !== finalizer) } }, { namespace: obj.metadata.namespace });
}

// client-go's RetryOnConflict for one object: a write refused for a stale resourceVersion is made
// again on the object as it is now, when what the write was judged by still holds there (`holds`, and
// the same uid). Anything else, or a third refusal, goes to the caller, and the runtime judges the whole
// key again. It spares a reconcile whose object another function wrote meanwhile (a label, a taint)
// the rerun of all its other reads and writes. A stale judgement (StaleStateError) is never retried here.
const WRITE_CONFLICT_TRIES = 3;
export async function retryOnConflict<T extends KubeObject>(client: KubeClient, r: ApiResource, judged: T, holds: (now: T) => boolean, write: (current: T) => Promise<T>): Promise<T> {
  let current = judged;
  for (let tries = 1; ; tries++) {
    try {
      return await write(current);
    } catch (err) {
      if (!isConflict(err) || err instanceof StaleStateError || tries >= WRITE_CONFLICT_TRIES) throw err;
      const now = await client.get<T>(r, judged.metadata.name!, judged.metadata.namespace);
      if (!now || now.metadata.uid !== judged.metadata.uid || !holds(now)) throw err;
      current = now;
    }
  }
}

// Creates or updates every object of a multi-document YAML text (RBAC, namespaces, add-on templates).
export async function applyManifests(client: KubeClient, yamlText: string): Promise<KubeObject[]> {
  const applied: KubeObject[] = [];
  for (const doc of parseAllDocuments(yamlText)) {
    const obj = doc.toJS() as (KubeObject & Record<string, unknown>) | null;
    if (!obj) continue;
    const fields = Object.keys(obj).filter((k) => !["apiVersion", "kind", "metadata", "status"].includes(k));
    applied.push(await createOrUpdate(client, resourceOfKind(obj.apiVersion!, obj.kind!), obj, fields));
  }
  return applied;
}
