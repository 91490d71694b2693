// my-function: copies each ConfigMap labelled `example.com/my-function: "true"` on the source cluster
// into the same namespace on every target cluster, keeps the copies in step with it, and deletes them
// when it is deleted or loses the label. Made by `ocmf new function`; the guide is docs/writing-functions.md.
//
// To make it yours, change in this order:
//   1. ConfigSchema (your settings) and `watches` (the kinds that wake the function, on which clusters);
//   2. `reconcile`: read what is, write only what differs, return an Outcome;
//   3. rbac-source.yaml and rbac-target.yaml, to what the reconcile now reads and writes;
//   4. function.test.ts, to the behaviour you want; run it until it passes.
import { isDeepStrictEqual } from "node:util";
import { z } from "zod";
import { ConfigMapResource, NamespaceResource } from "../../shared/api/kube.ts";
import { CopySeal, CopySealKeySchema, collectOrphanedCopy, createSealedCopy, ownedBy, sealedMarks, sealedOwnerOf, type ObjectKey } from "../../shared/cross-cluster-owner.ts";
import type { ObjectEvent } from "../../shared/events.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import type { KubeClient, KubeObject } from "../../shared/kube/client.ts";
import { defineFunction } from "../../shared/sdk.ts";

// Sources carry this label with "true", copies with "copy". Use a domain of your own.
export const CopyLabel = "example.com/my-function";
// When the copy was last written (io.clock): a rerun that changes nothing leaves it alone.
export const CopiedAtAnnotation = "example.com/copied-at";

// "a, b" (as an environment variable holds it) or ["a", "b"].
const clusterList = z.preprocess((v) => (typeof v === "string" ? v.split(",").map((s) => s.trim()).filter(Boolean) : v), z.array(z.string().min(1)).min(1));
// Each field is read from the variable of its name in SCREAMING_SNAKE_CASE (func.yaml's run.envs).
export const ConfigSchema = z
  .object({
    source: z.string().min(1).default("hub"), // SOURCE
    targets: clusterList.default(["cluster1", "cluster2"]), // TARGETS: comma-separated
    // COPY_SEAL_KEY: base64 of at least 32 random bytes (func.yaml reads it from a Secret). The function
    // seals the copies it creates with it, and updates or deletes only sealed ones.
    copySealKey: CopySealKeySchema,
  })
  .refine((c) => !c.targets.includes(c.source), "the source cannot be one of the targets");
export type Config = z.infer<typeof ConfigSchema>;

type ConfigMap = KubeObject & { data?: Record<string, string>; binaryData?: Record<string, string> };

const fn = defineFunction({
  name: "my-function",
  config: ConfigSchema,
  watches: (c) => [
    // The root: a labelled ConfigMap on the source. An event on one wakes its own key (source/namespace/name).
    { cluster: c.source, resource: ConfigMapResource, labelSelector: `${CopyLabel}=true`, root: true },
    // The copies. A change to one (a deletion too) wakes its source, which puts it right, and the copy
    // itself, which is collected if its source is gone. `root` makes a resync list them as well.
    ...c.targets.map((cluster) => ({ cluster, resource: ConfigMapResource, labelSelector: `${CopyLabel}=copy`, root: true, keys: copyAndSource })),
  ],
  resyncSeconds: 300, // every root object again every 5 minutes, in case an event was lost
  // What it may do beyond reading what it watches: its RBAC is made from the watches and these.
  writes: (c) =>
    c.targets.flatMap((cluster) => [
      { cluster, why: "the copies: created, sealed (patch), updated and deleted", apiGroups: [""], resources: ["configmaps"], verbs: ["create", "patch", "update", "delete"] },
      { cluster, why: "a copy's namespace, when the target lacks it", apiGroups: [""], resources: ["namespaces"], verbs: ["get", "create"] },
    ]),
  reconcile,
});
export default fn;

// A copy has its source's namespace and name, so its source's key needs no lookup.
function copyAndSource(event: ObjectEvent, io: Io<Config>): Key[] {
  const { namespace, name } = event.ref;
  return [{ cluster: event.cluster, namespace, name }, { cluster: io.config.source, namespace, name }];
}

// A key on a target is a copy: collected when its source is gone. A key on the source: every target
// gets a copy while the source exists and is labelled, and loses it otherwise.
async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const seal = CopySeal.fromBase64(io.config.copySealKey);
  if (key.cluster !== io.config.source) return collectOrphanedCopy(io, { ...key, resource: ConfigMapResource }, seal);
  const source = await io.cluster(key.cluster).get<ConfigMap>(ConfigMapResource, key.name, key.namespace);
  const wanted = source && !source.metadata.deletionTimestamp && labelsOf(source)[CopyLabel] === "true" ? source : undefined;
  const results = await Promise.allSettled(io.config.targets.map((target) => (wanted ? keepCopy(io, seal, target, wanted) : dropCopy(io, seal, target, key))));
  // Every target was tried; the first failure is thrown. The harness answers 503 for a conflict or an
  // unreachable cluster, so the event is delivered again, and 500 for anything else.
  const failed = results.find((r) => r.status === "rejected");
  if (failed) throw failed.reason;
  return done;
}

async function keepCopy(io: Io<Config>, seal: CopySeal, target: string, source: ConfigMap): Promise<void> {
  const client = io.cluster(target);
  const { namespace, name } = source.metadata;
  const at = { target, configMap: `${namespace}/${name}` };
  const place: ObjectKey = { cluster: target, resource: ConfigMapResource, namespace, name: name! };
  const copy = await client.get<ConfigMap>(ConfigMapResource, name!, namespace);
  if (copy && !isCopyOf(seal, copy, place, io.config.source)) return io.log.warn(at, "skipped: the target has a ConfigMap of this name that is not this function's copy");
  // cross-cluster owner marks, sealed once the copy exists: docs/cross-cluster-ownership.md
  const marks = copy ? sealedMarks(seal, source, io.config.source, place, copy.metadata.uid!) : ownedBy(source, io.config.source);
  const labels = { ...marks.labels, [CopyLabel]: "copy" };
  const same = copy && isDeepStrictEqual([copy.data, copy.binaryData], [source.data, source.binaryData]) && includes(labelsOf(copy), labels) && includes(annotationsOf(copy), marks.annotations);
  if (same) return;
  const metadata = { name, namespace, labels, annotations: { ...marks.annotations, [CopiedAtAnnotation]: io.clock.now().toISOString() } };
  if (copy) {
    // resourceVersion: if the copy changed since it was read, the API server answers 409 and the harness retries
    await client.update(ConfigMapResource, { metadata: { ...metadata, resourceVersion: copy.metadata.resourceVersion }, data: source.data, binaryData: source.binaryData });
    io.log.info(at, "copy updated");
  } else {
    await ensureNamespace(client, namespace!);
    await createSealedCopy(io, seal, place, { metadata, data: source.data, binaryData: source.binaryData });
    io.log.info(at, "copy created");
  }
}

async function dropCopy(io: Io<Config>, seal: CopySeal, target: string, key: Key): Promise<void> {
  const client = io.cluster(target);
  const copy = await client.get<ConfigMap>(ConfigMapResource, key.name, key.namespace);
  if (!copy || !isCopyOf(seal, copy, { cluster: target, resource: ConfigMapResource, namespace: key.namespace, name: key.name }, io.config.source)) return;
  await client.delete(ConfigMapResource, key.name, key.namespace, { uid: copy.metadata.uid });
  io.log.info({ target, configMap: `${key.namespace}/${key.name}` }, "copy deleted: its source is gone or no longer labelled");
}

// A copy this function made carries its seal over the copy and the owner its marks name; an object
// without marks, with marks anyone else wrote, or naming something else, is not ours.
function isCopyOf(seal: CopySeal, copy: ConfigMap, place: ObjectKey, source: string): boolean {
  const owner = sealedOwnerOf(seal, copy, place);
  return owner?.cluster === source && owner.kind === "ConfigMap" && owner.namespace === copy.metadata.namespace && owner.name === copy.metadata.name;
}

async function ensureNamespace(client: KubeClient, name: string): Promise<void> {
  if (!(await client.get(NamespaceResource, name))) await client.create(NamespaceResource, { metadata: { name } });
}

const labelsOf = (o: KubeObject) => (o.metadata.labels ?? {}) as Record<string, string>;
const annotationsOf = (o: KubeObject) => (o.metadata.annotations ?? {}) as Record<string, string>;
const includes = (have: Record<string, string>, want: Record<string, string>) => Object.entries(want).every(([k, v]) => have[k] === v);
