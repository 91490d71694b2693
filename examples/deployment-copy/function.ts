// deployment-copy: copies a Deployment from a source cluster (the hub, by default) to the clusters its
// annotation selects, and keeps them in step. Written with the SDK (shared/sdk.ts) in one file.
//
// - A Deployment on the source annotated `examples.ocm-functions.io/copy-to: <label selector>` is
//   copied to every target cluster (the clusters this function has credentials for, TARGETS) whose
//   ManagedCluster on the source matches the selector. A target that stops matching loses its copy.
// - Each copy carries the cross-cluster owner marks (shared/cross-cluster-owner.ts), so a change to a
//   copy, or its deletion, wakes the source; a deleted copy is made again. The function seals each copy
//   it creates with its key (COPY_SEAL_KEY), and updates, deletes or collects only sealed copies: a
//   Deployment that someone else marked is left alone.
// - Each copy's rollout is summarised on the source, in the annotation `examples.ocm-functions.io/copies`:
//   {"<cluster>": "<ready>/<replicas>" | "unreachable"}.
// - Deleting the source deletes its copies first (the owner finalizer waits for every target, an
//   unreachable one included); a copy whose source is gone or was recreated is collected.
import { isDeepStrictEqual } from "node:util";
import { z } from "zod";
import { DeploymentResource, NamespaceResource } from "../../shared/api/kube.ts";
import { ManagedClusterResource } from "../../shared/api/cluster.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import type { KubeObject } from "../../shared/kube/client.ts";
import { classifyError } from "../../shared/kube/errors.ts";
import { CopySeal, CopySealKeySchema, OwnedLabel, UNREACHABLE_RECHECK_MS, collectOrphanedCopy, createSealedCopy, ensureCopiesFinalizer, finalizeOwner, ownedBy, ownerOf, sealedMarks, sealedOwnerOf, type ObjectKey } from "../../shared/cross-cluster-owner.ts";
import { defineFunction } from "../../shared/sdk.ts";

export const CopyToAnnotation = "examples.ocm-functions.io/copy-to";
export const CopiesAnnotation = "examples.ocm-functions.io/copies";

const clusterList = z.preprocess((v) => (typeof v === "string" ? v.split(",").map((s) => s.trim()).filter(Boolean) : v), z.array(z.string().min(1)));
export const ConfigSchema = z.object({
  source: z.string().min(1).default("hub"), // SOURCE
  targets: clusterList, // TARGETS: comma-separated cluster names
  copySealKey: CopySealKeySchema, // COPY_SEAL_KEY: base64 of at least 32 random bytes, from a Secret
});
export type Config = z.infer<typeof ConfigSchema>;

type Deployment = KubeObject & { spec?: Record<string, unknown>; status?: { replicas?: number; readyReplicas?: number } };
const annotationsOf = (o: KubeObject) => (o.metadata.annotations ?? {}) as Record<string, string>;

export default defineFunction({
  name: "deployment-copy",
  config: ConfigSchema,
  watches: (c) => [
    { cluster: c.source, resource: DeploymentResource, root: true },
    { cluster: c.source, resource: ManagedClusterResource }, // a cluster's labels choose its copies
    ...c.targets.map((cluster) => ({ cluster, resource: DeploymentResource, labelSelector: `${OwnedLabel}=true` })),
  ],
  resyncSeconds: 300,
  map,
  reconcile,
});

// A copy wakes its source, and itself (to be collected when the source is gone); a ManagedCluster
// wakes every source that names targets.
async function map(event: { cluster: string; ref: { kind: string; namespace?: string; name: string }; object?: KubeObject }, io: Io<Config>): Promise<Key[] | { skip: string }> {
  const c = io.config;
  if (event.ref.kind === ManagedClusterResource.kind) {
    const { items } = await io.cluster(c.source).list<Deployment>(DeploymentResource);
    return items.filter((d) => annotationsOf(d)[CopyToAnnotation] !== undefined).map((d) => ({ cluster: c.source, namespace: d.metadata.namespace, name: d.metadata.name! }));
  }
  const self = { cluster: event.cluster, namespace: event.ref.namespace, name: event.ref.name };
  const owner = event.object ? ownerOf(event.object, event.cluster) : undefined;
  return owner && owner.cluster === c.source ? [self, { cluster: c.source, namespace: owner.namespace, name: owner.name }] : [self];
}

async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const c = io.config;
  const seal = CopySeal.fromBase64(c.copySealKey);
  if (key.cluster !== c.source) return collectOrphanedCopy(io, { cluster: key.cluster, resource: DeploymentResource, namespace: key.namespace, name: key.name }, seal);
  const owner: ObjectKey = { cluster: c.source, resource: DeploymentResource, namespace: key.namespace, name: key.name };
  const source = await io.cluster(c.source).get<Deployment>(DeploymentResource, key.name, key.namespace);
  if (!source) return done; // its copies are collected one by one, each woken by its own events
  if (source.metadata.deletionTimestamp) return finalizeOwner(io, owner, { resource: DeploymentResource, clusters: c.targets, namespace: key.namespace }, seal);
  const selector = annotationsOf(source)[CopyToAnnotation];
  const chosen = new Set(selector === undefined ? [] : (await io.cluster(c.source).list(ManagedClusterResource, { labelSelector: selector })).items.map((m) => m.metadata.name!));
  const withFinalizer = chosen.size > 0 ? ((await ensureCopiesFinalizer(io, owner)) as Deployment | undefined) : source;
  if (!withFinalizer) return done;

  const summary: Record<string, string> = {};
  for (const target of c.targets) {
    try {
      const copy = chosen.has(target) ? await keepCopy(io, seal, target, withFinalizer) : await dropCopy(io, seal, target, withFinalizer);
      if (copy) summary[target] = `${copy.status?.readyReplicas ?? 0}/${copy.status?.replicas ?? 0}`;
    } catch (err) {
      if (classifyError(err) !== "transient") throw err;
      io.log.warn({ target, error: err instanceof Error ? err.message : String(err) }, "target unreachable");
      if (chosen.has(target)) summary[target] = "unreachable";
    }
  }
  await writeSummary(io, withFinalizer, summary);
  return Object.values(summary).includes("unreachable") ? { recheckInMs: UNREACHABLE_RECHECK_MS } : done;
}

// The copy as the source has it: its spec and labels, plus the sealed owner marks. Written only when it differs.
async function keepCopy(io: Io<Config>, seal: CopySeal, target: string, source: Deployment): Promise<Deployment> {
  const client = io.cluster(target);
  const { namespace, name } = source.metadata;
  const at: ObjectKey = { cluster: target, resource: DeploymentResource, namespace, name: name! };
  const present = await client.get<Deployment>(DeploymentResource, name!, namespace);
  if (!present) {
    const marks = ownedBy(source, io.config.source);
    const labels = { ...(source.metadata.labels as Record<string, string> | undefined), ...marks.labels };
    if (!(await client.get(NamespaceResource, namespace!))) await client.create(NamespaceResource, { metadata: { name: namespace } }).catch((err) => (classifyError(err) === "already-exists" ? undefined : Promise.reject(err)));
    const created = await createSealedCopy<Deployment>(io, seal, at, { metadata: { name, namespace, labels, annotations: marks.annotations }, spec: source.spec });
    io.log.info({ target, deployment: `${namespace}/${name}` }, "copy created");
    return created;
  }
  // only a copy this function made (its seal) is updated; marks anyone else wrote make nothing ours
  const owner = sealedOwnerOf(seal, present, at);
  if (!owner) throw new Error(`${target} has a Deployment ${namespace}/${name} that is not this function's copy: left alone`);
  const marks = sealedMarks(seal, source, io.config.source, at, present.metadata.uid!);
  const labels = { ...(source.metadata.labels as Record<string, string> | undefined), ...marks.labels };
  const annotations = { ...marks.annotations };
  const same = isDeepStrictEqual(present.spec, source.spec) && owner.uid === source.metadata.uid && Object.entries(labels).every(([k, v]) => (present.metadata.labels as Record<string, string> | undefined)?.[k] === v) && Object.entries(annotations).every(([k, v]) => annotationsOf(present)[k] === v);
  if (same) return present;
  const updated = await client.update<Deployment>(DeploymentResource, { ...present, metadata: { ...present.metadata, labels, annotations: { ...annotationsOf(present), ...annotations } }, spec: source.spec });
  io.log.info({ target, deployment: `${namespace}/${name}` }, "copy updated");
  return updated;
}

// A target no longer chosen: its copy of this source goes; anything else there stays, marked or not.
async function dropCopy(io: Io<Config>, seal: CopySeal, target: string, source: Deployment): Promise<undefined> {
  const client = io.cluster(target);
  const present = await client.get<Deployment>(DeploymentResource, source.metadata.name!, source.metadata.namespace);
  const at: ObjectKey = { cluster: target, resource: DeploymentResource, namespace: source.metadata.namespace, name: source.metadata.name! };
  if (present && sealedOwnerOf(seal, present, at)?.uid === source.metadata.uid) {
    await client.delete(DeploymentResource, present.metadata.name!, present.metadata.namespace, { uid: present.metadata.uid });
    io.log.info({ target, deployment: `${source.metadata.namespace}/${source.metadata.name}` }, "copy deleted: the target is no longer selected");
  }
  return undefined;
}

async function writeSummary(io: Io<Config>, source: Deployment, summary: Record<string, string>): Promise<void> {
  const text = JSON.stringify(Object.fromEntries(Object.entries(summary).sort()));
  if (annotationsOf(source)[CopiesAnnotation] === text) return;
  await io.cluster(io.config.source).patch(DeploymentResource, source.metadata.name!, { metadata: { resourceVersion: source.metadata.resourceVersion, annotations: { [CopiesAnnotation]: text } } }, { namespace: source.metadata.namespace });
}
