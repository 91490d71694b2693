// Cross-cluster ownership: the marks a copy on one cluster carries to name its owner on another, and
// the garbage collection of copies (orphans collected, owner deletion waiting for its copies, orphaning
// on request). Only copies the function sealed (an HMAC over the copy's own identity, uid included,
// and its owner's, under the function's key) are ever deleted or released: marks alone are writable by
// anyone who may patch the object. The convention, the seal and how it differs from Kubernetes'
// ownerReferences: docs/cross-cluster-ownership.md.
import { createHash, createHmac, timingSafeEqual } from "node:crypto";
import { z } from "zod";
import type { ApiResource } from "./api/meta.ts";
import { addFinalizer, removeFinalizer } from "./apply.ts";
import { done, type Io, type Outcome } from "./harness.ts";
import { pathSegmentProblem, resourcePath, type KubeClient, type KubeObject } from "./kube/client.ts";
import { classifyError } from "./kube/errors.ts";

const prefix = "multicluster.ocm-functions.io";
export const OwnedLabel = `${prefix}/owned` as const;
export const OwnerHashLabel = `${prefix}/owner-hash` as const;
export const OwnerAnnotation = {
  cluster: `${prefix}/owner-cluster`,
  apiVersion: `${prefix}/owner-api-version`,
  kind: `${prefix}/owner-kind`,
  namespace: `${prefix}/owner-namespace`,
  name: `${prefix}/owner-name`,
  uid: `${prefix}/owner-uid`,
} as const;
// On the copy: the function's seal over the copy (cluster, kind, namespace, name, uid) and its owner.
export const SealAnnotation = `${prefix}/seal` as const;
// On the owner: "Orphan" releases its copies when it is deleted, "Delete" (or no annotation) deletes them.
export const DeletePolicyAnnotation = `${prefix}/delete-policy` as const;
export const CopiesFinalizer = `${prefix}/copies` as const;
// metav1.FinalizerOrphanDependents: the API server adds it on a DELETE with propagationPolicy=Orphan.
export const OrphanFinalizer = "orphan";

// The owner's cluster is partitioned away, or a copy cluster is: ask again later, delete nothing.
export const UNREACHABLE_RECHECK_MS = 15_000;
// Copies are going (their own finalizers hold them) or a write lost a race: look again soon.
export const WAITING_RECHECK_MS = 2_000;

const dns1123Label = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const dns1123Subdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

export const CrossClusterOwnerSchema = z.object({
  cluster: z.string().max(253).regex(dns1123Subdomain, "a cluster name is a DNS-1123 subdomain"),
  // group/version, or a bare version for the core group; versions are DNS-1035 labels.
  apiVersion: z.string().regex(/^([a-z0-9]([-a-z0-9.]*[a-z0-9])?\/)?[a-z]([-a-z0-9]*[a-z0-9])?$/, "not an apiVersion"),
  kind: z.string().regex(/^[A-Za-z][A-Za-z0-9]*$/, "not a kind"),
  namespace: z.string().max(63).regex(dns1123Label, "a namespace is a DNS-1123 label").optional(),
  name: z
    .string()
    .max(253)
    .superRefine((s, ctx) => {
      const problem = pathSegmentProblem(s);
      if (problem) ctx.addIssue({ code: "custom", message: `a name ${problem}` });
    }),
  uid: z.guid("not a uid"),
});
export type CrossClusterOwner = z.infer<typeof CrossClusterOwnerSchema>;

export type OwnerMarks = { labels: Record<string, string>; annotations: Record<string, string> };

// An object addressed on one cluster: an owner, or a copy.
export type ObjectKey = { cluster: string; resource: ApiResource; namespace?: string; name: string };
// Where an owner's copies may be: their kind, the clusters to look on, and one namespace or all.
export type CopyPlaces = { resource: ApiResource; clusters: readonly string[]; namespace?: string };

export type GcIo = Pick<Io, "cluster" | "log">;

// Marks that claim to name an owner but do not: reported, never guessed from.
export class MalformedOwnerMarks extends Error {
  readonly problems: string[];
  constructor(copy: string, problems: string[]) {
    super(`${copy} carries malformed cross-cluster owner marks: ${problems.join("; ")}`);
    this.name = "MalformedOwnerMarks";
    this.problems = problems;
  }
}

// The function's key for sealing its copies: at least 32 random bytes, known only to the function (a
// setting read from a Secret). Whoever holds it can make any object look like a copy: keep it as you
// keep the function's credentials.
export const CopySealKeySchema = z.string().superRefine((s, ctx) => {
  const problem = sealKeyProblem(s);
  if (problem) ctx.addIssue({ code: "custom", message: problem });
});
const MIN_KEY_BYTES = 32;
const SEAL_VERSION = "v1";

function sealKeyProblem(text: string): string | undefined {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4 !== 0) return "the copy seal key is not base64";
  const bytes = Buffer.from(text, "base64").length;
  return bytes < MIN_KEY_BYTES ? `the copy seal key has ${bytes} bytes, not at least ${MIN_KEY_BYTES}` : undefined;
}

export class CopySeal {
  readonly #key: Buffer;
  private constructor(key: Buffer) {
    this.#key = key;
  }

  // From the setting's base64 text; a clear error for anything shorter than 32 bytes or not base64.
  static fromBase64(text: string): CopySeal {
    const problem = sealKeyProblem(text);
    if (problem) throw new Error(problem);
    return new CopySeal(Buffer.from(text, "base64"));
  }

  // The seal of a copy with this identity (its uid as the API server gave it) and this owner.
  sealOf(copy: ObjectKey, uid: string, owner: CrossClusterOwner): string {
    const identity = JSON.stringify([
      SEAL_VERSION,
      [copy.cluster, copy.resource.group, copy.resource.kind, copy.namespace ?? "", copy.name, uid],
      [owner.cluster, groupOf(owner.apiVersion), owner.kind, owner.namespace ?? "", owner.name, owner.uid],
    ]);
    return `${SEAL_VERSION}.${createHmac("sha256", this.#key).update(identity).digest("base64url")}`;
  }

  matches(seal: string | undefined, copy: ObjectKey, uid: string, owner: CrossClusterOwner): boolean {
    if (seal === undefined) return false;
    const want = Buffer.from(this.sealOf(copy, uid, owner));
    const have = Buffer.from(seal);
    return have.length === want.length && timingSafeEqual(have, want);
  }
}

const mapOf = (o: KubeObject, field: "labels" | "annotations") => (o.metadata[field] ?? {}) as Record<string, string>;
const finalizersOf = (o: KubeObject) => (o.metadata.finalizers ?? []) as string[];
const describe = (o: KubeObject, cluster?: string) =>
  `${o.kind ?? "object"} ${o.metadata.namespace ? `${o.metadata.namespace}/` : ""}${o.metadata.name}${cluster ? ` on ${cluster}` : ""}`;
const groupOf = (apiVersion: string) => (apiVersion.includes("/") ? apiVersion.slice(0, apiVersion.indexOf("/")) : "");

// The group, not the version: an owner read through another served version still has the same copies.
function ownerHash(o: CrossClusterOwner): string {
  const identity = JSON.stringify([o.cluster, groupOf(o.apiVersion), o.kind, o.namespace ?? "", o.name, o.uid]);
  return createHash("sha256").update(identity).digest("hex").slice(0, 16);
}

function ownerIdentity(owner: KubeObject, ownerCluster: string): CrossClusterOwner {
  const { apiVersion, kind, metadata } = owner;
  // A listed item has no apiVersion or kind; a reference without them could not be resolved.
  if (!apiVersion || !kind || !metadata.name || !metadata.uid) throw new Error(`an owner needs apiVersion, kind, name and uid (read it with get): ${describe(owner)}`);
  return CrossClusterOwnerSchema.parse({ cluster: ownerCluster, apiVersion, kind, namespace: metadata.namespace || undefined, name: metadata.name, uid: metadata.uid });
}

// The labels and annotations to merge into a copy of `owner`, which lives on `ownerCluster`.
export function ownedBy(owner: KubeObject, ownerCluster: string): OwnerMarks {
  const o = ownerIdentity(owner, ownerCluster);
  const annotations: Record<string, string> = {
    [OwnerAnnotation.cluster]: o.cluster,
    [OwnerAnnotation.apiVersion]: o.apiVersion,
    [OwnerAnnotation.kind]: o.kind,
    [OwnerAnnotation.name]: o.name,
    [OwnerAnnotation.uid]: o.uid,
  };
  if (o.namespace) annotations[OwnerAnnotation.namespace] = o.namespace;
  return { labels: { [OwnedLabel]: "true", [OwnerHashLabel]: ownerHash(o) }, annotations };
}

// Every copy of `owner` (this incarnation: the uid is in the hash), as a label selector.
export function copiesSelector(owner: KubeObject, ownerCluster: string): string {
  return `${OwnedLabel}=true,${OwnerHashLabel}=${ownerHash(ownerIdentity(owner, ownerCluster))}`;
}

// The owner a copy names; undefined for an object that carries none of the marks. Any mark present
// makes it a claimed copy, and then every mark must be whole and agree, or MalformedOwnerMarks.
export function ownerOf(copy: KubeObject, copyCluster?: string): CrossClusterOwner | undefined {
  const labels = mapOf(copy, "labels");
  const annotations = mapOf(copy, "annotations");
  const claimed = OwnedLabel in labels || OwnerHashLabel in labels || Object.values(OwnerAnnotation).some((a) => a in annotations);
  if (!claimed) return undefined;
  const problems: string[] = [];
  if (labels[OwnedLabel] !== "true") problems.push(`label ${OwnedLabel} is ${JSON.stringify(labels[OwnedLabel])}, not "true"`);
  const fields = Object.fromEntries(Object.entries(OwnerAnnotation).map(([field, a]) => [field, annotations[a]]));
  const parsed = CrossClusterOwnerSchema.safeParse(fields);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      const annotation = OwnerAnnotation[issue.path[0] as keyof typeof OwnerAnnotation];
      problems.push(`annotation ${annotation}: ${fields[issue.path[0] as string] === undefined ? "missing" : issue.message}`);
    }
  } else if (labels[OwnerHashLabel] !== ownerHash(parsed.data)) {
    // A copy whose hash disagrees would be invisible to copiesSelector, so its owner would never wait for it.
    problems.push(`label ${OwnerHashLabel} is ${JSON.stringify(labels[OwnerHashLabel])}, but the owner annotations hash to "${ownerHash(parsed.data)}"`);
  }
  if (problems.length) throw new MalformedOwnerMarks(describe(copy, copyCluster), problems);
  return parsed.data!;
}

// What the function may do with an object found at a copy's place: nothing unless it is a copy it sealed.
export type CopyJudgement =
  | { state: "unmarked" } // carries no marks: not a copy at all
  | { state: "foreign"; reason: string } // marks without this function's valid seal: never touched
  | { state: "sealed"; owner: CrossClusterOwner }; // a copy this function made, for `owner`

// Whether `copy`, found at `at`, is a copy this function sealed. The seal covers the copy's cluster,
// kind, namespace, name and uid, and its owner: marks written by hand, or copied from a real copy onto
// another object (another uid), are foreign. A sealed copy's marks must still be whole (MalformedOwnerMarks).
export function judgeCopy(seal: CopySeal, copy: KubeObject, at: ObjectKey): CopyJudgement {
  const labels = mapOf(copy, "labels");
  const annotations = mapOf(copy, "annotations");
  const marked = OwnedLabel in labels || OwnerHashLabel in labels || SealAnnotation in annotations || Object.values(OwnerAnnotation).some((a) => a in annotations);
  if (!marked) return { state: "unmarked" };
  const claimed = CrossClusterOwnerSchema.safeParse(Object.fromEntries(Object.entries(OwnerAnnotation).map(([field, a]) => [field, annotations[a]])));
  if (!claimed.success) return { state: "foreign", reason: "its owner annotations do not name an owner, so no seal can match them" };
  if (!copy.metadata.uid) throw new Error(`${describe(copy, at.cluster)} has no uid: judge a copy as read from its cluster`);
  if (annotations[SealAnnotation] === undefined) return { state: "foreign", reason: `it has no ${SealAnnotation} annotation` };
  if (!seal.matches(annotations[SealAnnotation], at, copy.metadata.uid, claimed.data)) return { state: "foreign", reason: `its ${SealAnnotation} annotation is not this function's seal of this object and owner` };
  const owner = ownerOf(copy, at.cluster)!; // sealed, so a label out of step is a defect to report
  return { state: "sealed", owner };
}

// The owner a copy names, only when this function sealed it; undefined for an unmarked or foreign object.
export function sealedOwnerOf(seal: CopySeal, copy: KubeObject, at: ObjectKey): CrossClusterOwner | undefined {
  const judged = judgeCopy(seal, copy, at);
  return judged.state === "sealed" ? judged.owner : undefined;
}

// The marks, seal included, for the copy at `copy` whose uid is `uid`: for updating a sealed copy
// (to a new owner incarnation too), where the uid is known.
export function sealedMarks(seal: CopySeal, owner: KubeObject, ownerCluster: string, copy: ObjectKey, uid: string): OwnerMarks {
  const marks = ownedBy(owner, ownerCluster);
  return { labels: marks.labels, annotations: { ...marks.annotations, [SealAnnotation]: seal.sealOf(copy, uid, ownerIdentity(owner, ownerCluster)) } };
}

// Creates a copy (its body carrying ownedBy's marks), then seals it: the uid the seal covers exists
// only once the API server has made the object. The seal is written with the created resourceVersion,
// so it lands on that object or nowhere. If it cannot be written, the unsealed copy, which would be
// foreign to the function forever, is deleted (that uid only) and the error is thrown.
export async function createSealedCopy<T extends KubeObject>(io: GcIo, seal: CopySeal, copy: ObjectKey, body: T): Promise<T> {
  const client = io.cluster(copy.cluster);
  const owner = ownerOf(body, copy.cluster);
  if (!owner) throw new Error(`${describe(body, copy.cluster)}: a copy is created with ownedBy's marks`);
  if (body.metadata.name !== copy.name || (body.metadata.namespace ?? undefined) !== copy.namespace) throw new Error(`${describe(body, copy.cluster)} is not at ${copy.namespace ? `${copy.namespace}/` : ""}${copy.name}`);
  const created = await client.create<T>(copy.resource, body);
  const annotations = { [SealAnnotation]: seal.sealOf(copy, created.metadata.uid!, owner) };
  try {
    return await client.patch<T>(copy.resource, copy.name, { metadata: { resourceVersion: created.metadata.resourceVersion, annotations } }, { namespace: copy.namespace });
  } catch (err) {
    try {
      await client.delete(copy.resource, copy.name, copy.namespace, { uid: created.metadata.uid });
    } catch (cleanup) {
      io.log.error({ copy: { cluster: copy.cluster, namespace: copy.namespace, name: copy.name, uid: created.metadata.uid }, error: cleanup instanceof Error ? cleanup.message : String(cleanup) }, "an unsealed copy is left: delete it by hand");
    }
    throw err;
  }
}

const foreignLog = (io: GcIo, copy: KubeObject, cluster: string, reason: string) =>
  io.log.warn({ object: { cluster, namespace: copy.metadata.namespace, name: copy.metadata.name, uid: copy.metadata.uid }, reason }, "left alone: forged or foreign cross-cluster owner marks");

// Where `apiVersion`/`kind` is served on the cluster, by discovery; undefined when it is not. A GET of
// an unserved resource answers 404 just as a missing object does, so only discovery tells them apart.
async function servedResource(client: KubeClient, apiVersion: string, kind: string): Promise<ApiResource | undefined> {
  const group = groupOf(apiVersion);
  const version = apiVersion.slice(apiVersion.indexOf("/") + 1);
  let list: { resources?: { name: string; kind: string; namespaced: boolean }[] };
  try {
    list = await client.request("GET", group ? `/apis/${group}/${version}` : `/api/${version}`);
  } catch (err) {
    if (classifyError(err) === "not-found") return undefined;
    throw err;
  }
  const found = list.resources?.find((r) => r.kind === kind && !r.name.includes("/"));
  return found && { group, version, kind, plural: found.name, namespaced: found.namespaced };
}

type OwnerVerdict =
  | { state: "present" | "gone" | "replaced" }
  | { state: "unreachable" | "unserved"; reason: string }
  | { state: "mismatch"; reason: string };

// What became of the owner a copy names, read live on the owner's cluster. Only a 404 for a served
// kind, or another uid under the name, says it is gone; every other failure says "don't know".
async function judgeOwner(io: GcIo, owner: CrossClusterOwner): Promise<OwnerVerdict> {
  const client = io.cluster(owner.cluster); // no credentials for it: thrown, never read as "gone"
  try {
    const r = await servedResource(client, owner.apiVersion, owner.kind);
    if (!r) return { state: "unserved", reason: `${owner.kind} in ${owner.apiVersion} is not served on ${owner.cluster}` };
    if (r.namespaced !== (owner.namespace !== undefined)) return { state: "mismatch", reason: `${owner.kind} is ${r.namespaced ? "namespaced, but no owner namespace is named" : "cluster-scoped, but an owner namespace is named"}` };
    const found = await client.get(r, owner.name, owner.namespace);
    if (!found) return { state: "gone" };
    return { state: found.metadata.uid === owner.uid ? "present" : "replaced" };
  } catch (err) {
    if (classifyError(err) === "transient") return { state: "unreachable", reason: err instanceof Error ? err.message : String(err) };
    throw err;
  }
}

// DELETE only the object that was read: another uid or a newer resourceVersion answers 409. false
// when it is already gone.
async function deleteExactly(client: KubeClient, r: ApiResource, o: KubeObject, propagationPolicy: "Background" | "Orphan" = "Background"): Promise<boolean> {
  const body = { kind: "DeleteOptions", apiVersion: "v1", propagationPolicy, preconditions: { uid: o.metadata.uid, resourceVersion: o.metadata.resourceVersion } };
  try {
    await client.request("DELETE", resourcePath(r, { name: o.metadata.name, namespace: o.metadata.namespace }), body);
    return true;
  } catch (err) {
    if (classifyError(err) === "not-found") return false;
    throw err;
  }
}

// Every promise settled before the first failure is thrown: one cluster's error must not cut short
// the work on the others.
async function allSettled<T>(work: Promise<T>[]): Promise<T[]> {
  const settled = await Promise.allSettled(work);
  const failed = settled.find((s) => s.status === "rejected");
  if (failed) throw failed.reason;
  return settled.map((s) => (s as PromiseFulfilledResult<T>).value);
}

// Takes the owner marks off a copy, as Kubernetes' orphaning takes the ownerReference off a dependent.
function releaseCopy(client: KubeClient, r: ApiResource, copy: KubeObject): Promise<KubeObject> {
  const annotations = Object.fromEntries([...Object.values(OwnerAnnotation), SealAnnotation].map((a) => [a, null]));
  const patch = { metadata: { resourceVersion: copy.metadata.resourceVersion, labels: { [OwnedLabel]: null, [OwnerHashLabel]: null }, annotations } };
  return client.patch(r, copy.metadata.name!, patch, { namespace: copy.metadata.namespace });
}

// Deletes the copy at `copy` when the owner it names is gone or was replaced by a new incarnation.
// A copy that is gone, or carries no marks, is no concern; one without this function's seal is not
// its copy (logged, never deleted). An owner that cannot be read (its cluster unreachable, its kind
// not served) keeps the copy: a partition must never delete copies.
export async function collectOrphanedCopy(io: GcIo, copy: ObjectKey, seal: CopySeal): Promise<Outcome> {
  const client = io.cluster(copy.cluster);
  const current = await client.get(copy.resource, copy.name, copy.namespace);
  if (!current) return done;
  const judged = judgeCopy(seal, current, copy);
  if (judged.state === "unmarked") return done;
  if (judged.state === "foreign") {
    foreignLog(io, current, copy.cluster, judged.reason);
    return done;
  }
  const owner = judged.owner;
  const at = { copy: { cluster: copy.cluster, namespace: copy.namespace, name: copy.name }, owner };
  const verdict = await judgeOwner(io, owner);
  switch (verdict.state) {
    case "present":
      return done;
    case "unreachable":
      io.log.warn({ ...at, reason: verdict.reason }, "kept: the owner's cluster is unreachable");
      return { recheckInMs: UNREACHABLE_RECHECK_MS };
    case "unserved":
      io.log.warn({ ...at, reason: verdict.reason }, "kept: the owner's kind is not served");
      return { recheckInMs: UNREACHABLE_RECHECK_MS };
    case "mismatch":
      throw new MalformedOwnerMarks(describe(current, copy.cluster), [verdict.reason]);
    case "gone":
    case "replaced":
      // A conflict here means the copy changed since it was read (recreated, re-marked): the retry rereads it.
      await deleteExactly(client, copy.resource, current);
      io.log.info({ ...at, reason: verdict.state === "gone" ? "the owner is gone" : "the owner was recreated with another uid" }, "collected: orphaned copy deleted");
      return done;
  }
}

// Puts the copies finalizer on the owner, so its deletion waits for its copies. Call it before writing
// the first copy. undefined when the owner is gone; an owner being deleted is returned as it is, since
// Kubernetes refuses new finalizers on it (422).
export async function ensureCopiesFinalizer(io: GcIo, owner: ObjectKey): Promise<KubeObject | undefined> {
  const client = io.cluster(owner.cluster);
  const current = await client.get(owner.resource, owner.name, owner.namespace);
  if (!current || current.metadata.deletionTimestamp) return current;
  return addFinalizer(client, owner.resource, current, CopiesFinalizer);
}

export type DeletePolicy = "Orphan" | "Delete";

// Orphan when either request is there: Kubernetes' `orphan` finalizer or our annotation. Orphaning
// wins over an annotation that says Delete: keeping copies can be undone, deleting them cannot.
export function deletePolicyOf(owner: KubeObject): DeletePolicy {
  const value = mapOf(owner, "annotations")[DeletePolicyAnnotation];
  if (value !== undefined && value !== "Orphan" && value !== "Delete") {
    throw new Error(`${describe(owner)}: annotation ${DeletePolicyAnnotation} is ${JSON.stringify(value)}, not "Orphan" or "Delete"`);
  }
  return finalizersOf(owner).includes(OrphanFinalizer) ? "Orphan" : (value ?? "Delete");
}

type Look = { cluster: string; copies: KubeObject[] } | { cluster: string; unreachable: string };

async function lookForCopies(io: GcIo, places: CopyPlaces, cluster: string, selector: string): Promise<Look> {
  try {
    const { items } = await io.cluster(cluster).list(places.resource, { namespace: places.namespace, labelSelector: selector });
    return { cluster, copies: items.map((i) => ({ ...i, kind: places.resource.kind })) }; // listed items carry no kind
  } catch (err) {
    if (classifyError(err) === "transient") return { cluster, unreachable: err instanceof Error ? err.message : String(err) };
    throw err;
  }
}

// The copies this function sealed among those listed on one cluster; the rest are logged and left alone.
function sealedAmong(io: GcIo, seal: CopySeal, places: CopyPlaces, cluster: string, listed: KubeObject[], log: boolean): KubeObject[] {
  const ours: KubeObject[] = [];
  for (const copy of listed) {
    const at = { cluster, resource: places.resource, namespace: copy.metadata.namespace, name: copy.metadata.name! };
    const judged = judgeCopy(seal, copy, at);
    if (judged.state === "sealed") ours.push(copy);
    else if (log && judged.state === "foreign") foreignLog(io, copy, cluster, judged.reason);
  }
  return ours;
}

// Deletes or releases this function's copies found on one cluster, then lists again: only a list
// without any of them confirms.
async function settleCopies(io: GcIo, seal: CopySeal, places: CopyPlaces, look: { cluster: string; copies: KubeObject[] }, o: { policy: DeletePolicy; selector: string }): Promise<"clear" | "waiting" | "unreachable"> {
  if (!look.copies.length) return "clear";
  const client = io.cluster(look.cluster);
  try {
    for (const copy of look.copies) {
      try {
        if (o.policy === "Orphan") await releaseCopy(client, places.resource, copy);
        else if (!copy.metadata.deletionTimestamp) await deleteExactly(client, places.resource, copy);
      } catch (err) {
        // Changed since the list (another replica got there first): the confirming list decides.
        if (classifyError(err) !== "conflict" && classifyError(err) !== "not-found") throw err;
      }
    }
    const after = await client.list(places.resource, { namespace: places.namespace, labelSelector: o.selector });
    const left = sealedAmong(io, seal, places, look.cluster, after.items.map((i) => ({ ...i, kind: places.resource.kind })), false);
    return left.length ? "waiting" : "clear";
  } catch (err) {
    if (classifyError(err) === "transient") return "unreachable";
    throw err;
  }
}

// For an owner being deleted that holds the copies finalizer: deletes (or, on request, releases) the
// copies this function sealed for it on every cluster of `places`, and removes the finalizer only once
// every one of them has confirmed that none is left. Objects that carry the owner's marks without the
// seal are not its copies: logged, never touched, never waited for. An unreachable cluster keeps the
// finalizer on and asks for a recheck.
export async function finalizeOwner(io: GcIo, owner: ObjectKey, places: CopyPlaces, seal: CopySeal): Promise<Outcome> {
  const client = io.cluster(owner.cluster);
  let current = await client.get(owner.resource, owner.name, owner.namespace);
  if (!current?.metadata.deletionTimestamp || !finalizersOf(current).includes(CopiesFinalizer)) return done;
  const policy = deletePolicyOf(current);
  // Kubernetes' garbage collector takes `orphan` off within milliseconds without waiting for other
  // finalizers, so a request seen once is written down: later calls, after a partition, still orphan.
  if (policy === "Orphan" && mapOf(current, "annotations")[DeletePolicyAnnotation] !== "Orphan") {
    const patch = { metadata: { resourceVersion: current.metadata.resourceVersion, annotations: { [DeletePolicyAnnotation]: "Orphan" } } };
    current = await client.patch<KubeObject>(owner.resource, owner.name, patch, { namespace: owner.namespace });
  }
  const selector = copiesSelector(current, owner.cluster);
  const listed = await allSettled(places.clusters.map((c) => lookForCopies(io, places, c, selector)));
  // Never guessed: one malformed copy of ours anywhere stops the whole deletion before anything is written.
  const malformed: string[] = [];
  const looks: Look[] = listed.map((look) => {
    if (!("copies" in look)) return look;
    const ours: KubeObject[] = [];
    for (const copy of look.copies) {
      try {
        const copyKey = { cluster: look.cluster, resource: places.resource, namespace: copy.metadata.namespace, name: copy.metadata.name! };
        const judged = judgeCopy(seal, copy, copyKey);
        if (judged.state === "foreign") foreignLog(io, copy, look.cluster, judged.reason);
        if (judged.state !== "sealed") continue;
        if (judged.owner.uid !== current.metadata.uid || judged.owner.cluster !== owner.cluster) malformed.push(`${describe(copy, look.cluster)} names another owner than its hash label`);
        else ours.push(copy);
      } catch (err) {
        if (!(err instanceof MalformedOwnerMarks)) throw err;
        malformed.push(err.message);
      }
    }
    return { cluster: look.cluster, copies: ours };
  });
  if (malformed.length) throw new MalformedOwnerMarks(describe(current, owner.cluster), [`its copies cannot be finalized: ${malformed.join("; ")}`]);

  const states = await allSettled(looks.map((look) => ("copies" in look ? settleCopies(io, seal, places, look, { policy, selector }) : Promise.resolve("unreachable" as const))));
  const pending = places.clusters.filter((_, i) => states[i] !== "clear");
  const key = { cluster: owner.cluster, namespace: owner.namespace, name: owner.name };
  if (pending.length) {
    const unreachable = places.clusters.filter((_, i) => states[i] === "unreachable");
    io.log.info({ owner: key, policy, waitingFor: pending, unreachable }, "kept the copies finalizer: copies not yet confirmed gone");
    return { recheckInMs: unreachable.length ? UNREACHABLE_RECHECK_MS : WAITING_RECHECK_MS };
  }
  await removeFinalizer(client, owner.resource, current, CopiesFinalizer);
  io.log.info({ owner: key, policy, clusters: places.clusters }, policy === "Orphan" ? "finalized: copies released" : "finalized: copies deleted");
  return done;
}

// Deletes an owner with a policy for its copies, written on the owner first: the annotation is the
// request that outlives the `orphan` finalizer. The DELETE is for the object that was annotated (uid
// and resourceVersion preconditions). false when the owner is already gone.
export async function deleteOwner(io: GcIo, owner: ObjectKey, policy: DeletePolicy): Promise<boolean> {
  const client = io.cluster(owner.cluster);
  let current = await client.get(owner.resource, owner.name, owner.namespace);
  if (!current) return false;
  if (mapOf(current, "annotations")[DeletePolicyAnnotation] !== policy) {
    const patch = { metadata: { resourceVersion: current.metadata.resourceVersion, annotations: { [DeletePolicyAnnotation]: policy } } };
    current = await client.patch<KubeObject>(owner.resource, owner.name, patch, { namespace: owner.namespace });
  }
  return deleteExactly(client, owner.resource, current, policy === "Orphan" ? "Orphan" : "Background");
}
