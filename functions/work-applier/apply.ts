// The four update strategies of §7.2 step 6 (Update, CreateOnly, ServerSideApply, ReadOnly): each takes
// one manifest to the spoke and answers with the live object as it stands afterwards.
import { createHash } from "node:crypto";
import { isDeepStrictEqual } from "node:util";
import type { ApiResource, OwnerReference } from "../../shared/api/meta.ts";
import { WorkAnnotation, type ManifestConfigOption } from "../../shared/api/work.ts";
import { resourcePath, type KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { isConflict } from "../../shared/kube/errors.ts";
import { evaluate, parseJsonPath } from "./jsonpath.ts";
import { isRemoval, mergeMap, mergeOwnerRefs, withoutRemovalKeys } from "./ownership.ts";

export type UpdateStrategy = NonNullable<ManifestConfigOption["updateStrategy"]>;
export const DefaultFieldManager = "work-agent";

type Meta = {
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  finalizers?: string[];
  ownerReferences?: OwnerReference[];
  creationTimestamp?: string | null;
};
const metaOf = (o: KubeObject) => o.metadata as Meta;

// A failure OCM reports with AppliedManifestSSAIgnoreFieldError instead of AppliedManifestFailed.
export class IgnoreFieldError extends Error {}
// An apply another field manager refused; OCM reports it but does not retry it as an error.
export class ServerSideApplyConflictError extends Error {}

export type ApplyInput = {
  spoke: KubeClient;
  resource: ApiResource;
  required: KubeObject; // the manifest, without a UID
  owner: OwnerReference; // or a removal marker when the work must not own it
  strategy: UpdateStrategy;
};

// The live object afterwards; undefined only for ReadOnly when it does not exist.
export async function applyManifest(i: ApplyInput): Promise<KubeObject | undefined> {
  switch (i.strategy.type) {
    case "ReadOnly":
      return readLive(i);
    case "CreateOnly":
      return createOnly(i);
    case "ServerSideApply":
      return serverSideApply(i);
    default:
      return update(i);
  }
}

const readLive = (i: ApplyInput) => i.spoke.get(i.resource, metaOf(i.required).name!, metaOf(i.required).namespace);

// What a create sends: our owner reference alone (OCM replaces the manifest's own), no removal keys.
export function forCreate(required: KubeObject, owner: OwnerReference): KubeObject {
  const m = metaOf(required);
  const metadata: Meta = { ...m, labels: withoutRemovalKeys(m.labels), annotations: withoutRemovalKeys(m.annotations), ownerReferences: isRemoval(owner) ? undefined : [owner] };
  delete metadata.resourceVersion;
  return stripUndefined({ ...required, metadata });
}

async function create(i: ApplyInput): Promise<KubeObject> {
  return i.spoke.create(i.resource, forCreate(i.required, i.owner));
}

// OCM's isSameUnstructured: same kind and name, and equal apart from metadata and status. For the
// kinds here OCM uses library-go's typed appliers, which compare less: a Namespace by its metadata
// only, a Secret with stringData folded into data and the default type.
export function isSameContent(required: KubeObject, existing: KubeObject): boolean {
  const a = metaOf(required);
  const b = metaOf(existing);
  if (a.name !== b.name || (a.namespace ?? "") !== (b.namespace ?? "")) return false;
  if (required.apiVersion === "v1" && required.kind === "Namespace") return required.apiVersion === existing.apiVersion && required.kind === existing.kind;
  return isDeepStrictEqual(comparable(required), comparable(existing));
}

function comparable({ metadata: _m, status: _s, ...rest }: KubeObject): Record<string, unknown> {
  if (rest.apiVersion !== "v1" || rest.kind !== "Secret") return rest;
  const stringData = (rest.stringData ?? {}) as Record<string, string>;
  const data = { ...(rest.data as Record<string, string> | undefined), ...Object.fromEntries(Object.entries(stringData).map(([k, v]) => [k, Buffer.from(v).toString("base64")])) };
  const { stringData: _sd, ...secret } = rest;
  return { ...secret, type: secret.type ?? "Opaque", ...(Object.keys(data).length > 0 ? { data } : {}) };
}

// The Update strategy's decision: the object to PUT, or undefined when nothing differs. Labels,
// annotations and owner references are merged into the existing ones, finalizers kept, the rest is
// the manifest's (so spoke-side edits are reverted).
export function updateFor(required: KubeObject, existing: KubeObject, owner: OwnerReference): KubeObject | undefined {
  const want = metaOf(required);
  const have = metaOf(existing);
  const labels = mergeMap(have.labels, want.labels);
  const annotations = mergeMap(have.annotations, want.annotations);
  const owners = mergeOwnerRefs(have.ownerReferences, [owner]);
  if (!labels.modified && !annotations.modified && !owners.modified && isSameContent(required, existing)) return undefined;
  const metadata: Meta = {
    ...want,
    labels: labels.map,
    annotations: annotations.map,
    ownerReferences: owners.refs,
    finalizers: have.finalizers,
    resourceVersion: have.resourceVersion,
  };
  delete metadata.uid;
  delete metadata.creationTimestamp;
  return stripUndefined({ ...required, metadata });
}

async function update(i: ApplyInput): Promise<KubeObject> {
  const existing = await readLive(i);
  if (!existing) return create(i);
  const next = updateFor(i.required, existing, i.owner);
  return next ? i.spoke.update(i.resource, next) : existing;
}

async function createOnly(i: ApplyInput): Promise<KubeObject> {
  const existing = await readLive(i);
  return existing ? applyOwnerReferences(i, existing) : create(i);
}

// OCM's ApplyOwnerReferences: merge-patch the owner in (or out), guarded by UID and resourceVersion.
async function applyOwnerReferences({ spoke, resource: r, owner }: ApplyInput, live: KubeObject): Promise<KubeObject> {
  const m = metaOf(live);
  const { refs, modified } = mergeOwnerRefs(m.ownerReferences, [owner]);
  if (!modified) return live;
  return spoke.patch(r, m.name!, { metadata: { uid: m.uid, resourceVersion: m.resourceVersion, ownerReferences: refs } }, { namespace: m.namespace });
}

// OCM's removeFieldByJSONPath: the path up to its last dot must reach maps; the last key is deleted
// from each. A path that does not parse is skipped, as OCM logs and goes on.
export function removeByJsonPath(obj: KubeObject, path: string): void {
  const keys = path.split(".");
  const last = keys[keys.length - 1]!;
  const parent = path.endsWith(`.${last}`) ? path.slice(0, -(last.length + 1)) : path;
  if (!parent) return;
  let found: unknown[];
  try {
    found = evaluate(parseJsonPath(parent), obj);
  } catch {
    return;
  }
  for (const v of found) if (typeof v === "object" && v !== null && !Array.isArray(v)) delete (v as Record<string, unknown>)[last];
}

// RFC 6901: a missing path is not an error (OCM skips it); a malformed pointer is.
export function removeByJsonPointer(obj: KubeObject, pointer: string): void {
  if (pointer === "") throw new IgnoreFieldError(`JSON Pointer error in '${pointer}': the whole object cannot be ignored`);
  if (!pointer.startsWith("/")) throw new IgnoreFieldError(`JSON Pointer error in '${pointer}': a JSON pointer starts with "/"`);
  const tokens = pointer.slice(1).split("/").map((t) => t.replace(/~1/g, "/").replace(/~0/g, "~"));
  let at: unknown = obj;
  for (const t of tokens.slice(0, -1)) {
    if (Array.isArray(at)) at = /^\d+$/.test(t) ? at[Number(t)] : undefined;
    else if (typeof at === "object" && at !== null) at = (at as Record<string, unknown>)[t];
    else return;
    if (at === undefined) return;
  }
  const last = tokens[tokens.length - 1]!;
  if (Array.isArray(at)) {
    if (/^\d+$/.test(last) && Number(last) < at.length) at.splice(Number(last), 1);
  } else if (typeof at === "object" && at !== null) delete (at as Record<string, unknown>)[last];
}

// Keys sorted at every level, so equal objects hash equally.
function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(",")}]`;
  if (typeof v === "object" && v !== null) {
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson((v as Record<string, unknown>)[k])}`)
      .join(",")}}`;
  }
  return JSON.stringify(v);
}

// OCM hashes the pruned object (md5 of Go's %v); ours hashes its canonical JSON. Only equality matters.
export const specHash = (o: KubeObject) => createHash("md5").update(canonicalJson(o)).digest("hex");

// A null creationTimestamp makes the apiserver bump generation on every apply (kubernetes#67610).
function withoutNullCreationTimestamps(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(withoutNullCreationTimestamps);
  if (typeof v !== "object" || v === null) return v;
  const out: Record<string, unknown> = {};
  for (const [k, child] of Object.entries(v)) {
    if (k === "creationTimestamp" && child === null) continue;
    out[k] = withoutNullCreationTimestamps(child);
  }
  return out;
}

// What ServerSideApply sends, or undefined when the hash says the live object already has it (so
// spoke edits of ignored fields survive until the hub changes the manifest).
// `existing` is consulted only when there are ignoreFields (only then is it read).
export function serverSideApplyBody(required: KubeObject, strategy: UpdateStrategy, existing: KubeObject | undefined): { body: KubeObject; hash?: string } | undefined {
  const original = withoutNullCreationTimestamps(structuredClone(required)) as KubeObject;
  const ignoreFields = strategy.serverSideApply?.ignoreFields ?? [];
  if (ignoreFields.length === 0) return { body: original };
  const pruned = structuredClone(original);
  for (const f of ignoreFields) {
    // OnSpokeChange fields stay in the hash: when the hub changes them they are applied again.
    if (f.condition === "OnSpokeChange") continue;
    for (const p of f.jsonPaths ?? []) removeByJsonPath(pruned, p);
    for (const p of f.jsonPointers ?? []) removeByJsonPointer(pruned, p);
    for (const e of f.jqPathExpressions ?? []) throw new IgnoreFieldError(`JQ expression error in '${e}': jq path expressions are not supported by this work agent`);
  }
  const hash = specHash(pruned);
  for (const o of [pruned, original]) metaOf(o).annotations = { ...metaOf(o).annotations, [WorkAnnotation.ConfigSpecHash]: hash };
  // A new object gets the ignored fields too; afterwards they are the spoke's.
  if (!existing) return { body: original, hash };
  if (metaOf(existing).annotations?.[WorkAnnotation.ConfigSpecHash] === hash) return undefined;
  return { body: pruned, hash };
}

async function serverSideApply(i: ApplyInput): Promise<KubeObject> {
  const ssa = i.strategy.serverSideApply;
  const hasIgnoreFields = (ssa?.ignoreFields ?? []).length > 0;
  const existing = hasIgnoreFields ? await readLive(i) : undefined;
  const decided = serverSideApplyBody(i.required, i.strategy, existing);
  if (!decided) return applyOwnerReferences(i, existing!);
  const m = metaOf(decided.body);
  const query = new URLSearchParams({ fieldManager: ssa?.fieldManager || DefaultFieldManager, force: String(ssa?.force ?? false) });
  let applied: KubeObject;
  try {
    applied = await i.spoke.request<KubeObject>("PATCH", `${resourcePath(i.resource, { name: m.name, namespace: m.namespace })}?${query}`, JSON.stringify(decided.body), "application/apply-patch+yaml");
  } catch (err) {
    if (isConflict(err)) throw new ServerSideApplyConflictError(apiMessage(err));
    throw err;
  }
  return applyOwnerReferences(i, applied);
}

// The API server's own message, without our client's "VERB path: code Reason: " prefix, as OCM
// prints the Go client's error.
export function apiMessage(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  const m = /^[A-Z]+ \/\S*: \d{3} [A-Za-z]*: ([\s\S]*)$/.exec(text);
  return m ? m[1]! : text;
}

function stripUndefined<T>(o: T): T {
  return JSON.parse(JSON.stringify(o)) as T;
}
