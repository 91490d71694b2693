// placement-configmap: hands a ConfigMap on the hub to the clusters a Placement chooses, through OCM's
// own delivery: one ManifestWork per chosen cluster, which each spoke's work agent (work-applier)
// applies there. Written with the SDK (shared/sdk.ts) in one file; README.md says how to use it.
//
// - A ConfigMap on the hub labelled `examples.ocm-functions.io/placement: <placement>` is wanted on
//   every cluster of that Placement's PlacementDecisions (the Placement in the ConfigMap's namespace).
// - Per such cluster, a ManifestWork `<namespace>.<name>` in the cluster's namespace on the hub carries
//   the ConfigMap's data, and its Namespace (orphaned when the work goes: the namespace may hold other
//   things on the spoke). A cluster that leaves the decisions loses its work, and so its copy.
// - The works are in other namespaces than the ConfigMap, where an ownerReference cannot reach, so they
//   carry the cross-cluster owner marks (shared/cross-cluster-owner.ts). Deleting the ConfigMap deletes
//   its works first (the owner finalizer waits until the work agents have removed them); a work deleted
//   by hand is made again. The function seals each work it creates with its key (COPY_SEAL_KEY) and
//   updates, deletes or collects only sealed works: a work someone else marked (a cluster's agent may
//   update the works in its namespace) is never deleted.
// - Each work's state, from its Applied and Available conditions, is summarised on the ConfigMap in the
//   annotation `examples.ocm-functions.io/placed`: {"<cluster>": "Available" | "Applied" | "Failed" | "Pending" | "Conflict"}.
import { createHash } from "node:crypto";
import { isDeepStrictEqual } from "node:util";
import { z } from "zod";
import { ConfigMapResource } from "../../shared/api/kube.ts";
import { ClusterLabel, PlacementDecisionResource, type PlacementDecision } from "../../shared/api/cluster.ts";
import { ManifestWorkResource, WorkConditionType, type ManifestWork, type ManifestWorkSpec } from "../../shared/api/work.ts";
import { removeFinalizer } from "../../shared/apply.ts";
import { findCondition, isTrue } from "../../shared/conditions.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import type { KubeObject } from "../../shared/kube/client.ts";
import { CopiesFinalizer, CopySeal, CopySealKeySchema, collectOrphanedCopy, createSealedCopy, ensureCopiesFinalizer, finalizeOwner, ownedBy, ownerOf, sealedMarks, sealedOwnerOf, type ObjectKey } from "../../shared/cross-cluster-owner.ts";
import { defineFunction, type KeysOrSkip } from "../../shared/sdk.ts";

export const PlacementLabel = "examples.ocm-functions.io/placement";
export const PlacedAnnotation = "examples.ocm-functions.io/placed";
// On each work: which ConfigMap it is for, whatever that ConfigMap's incarnation (the owner marks name
// the uid), so a work left by a deleted-and-recreated ConfigMap is still found.
export const SourceLabel = "examples.ocm-functions.io/placement-configmap";

export const ConfigSchema = z.object({
  hub: z.string().min(1).default("hub"), // HUB: the hub's name in events
  copySealKey: CopySealKeySchema, // COPY_SEAL_KEY: base64 of at least 32 random bytes, from a Secret
});
export type Config = z.infer<typeof ConfigSchema>;

type ConfigMap = KubeObject & { data?: Record<string, string>; binaryData?: Record<string, string> };
type Work = ManifestWork & KubeObject;
type Summary = Record<string, "Available" | "Applied" | "Failed" | "Pending" | "Conflict">;

const labelsOf = (o: KubeObject) => (o.metadata.labels ?? {}) as Record<string, string>;
const annotationsOf = (o: KubeObject) => (o.metadata.annotations ?? {}) as Record<string, string>;
// A label value names a ConfigMap (namespace and name) of any length.
export const sourceHash = (namespace: string, name: string) => createHash("sha256").update(`${namespace}/${name}`).digest("hex").slice(0, 16);
// A namespace holds no dot, so the name is unique per ConfigMap. The work agent prefixes 65 characters
// for its AppliedManifestWork (at most 253): a longer name falls back to the hash.
export const workName = (namespace: string, name: string) => (namespace.length + name.length <= 180 ? `${namespace}.${name}` : `${namespace}.${sourceHash(namespace, name)}`);

export default defineFunction({
  name: "placement-configmap",
  config: ConfigSchema,
  watches: (c) => [
    // only the labelled ConfigMaps; one whose label is taken off arrives as a delete, and is released
    { cluster: c.hub, resource: ConfigMapResource, labelSelector: PlacementLabel, root: true },
    { cluster: c.hub, resource: PlacementDecisionResource, keys: (event, io) => configMapsOfDecision(event.ref.namespace, event.object, io) },
    { cluster: c.hub, resource: ManifestWorkResource, labelSelector: SourceLabel, keys: (event) => sourceOfWork(event.object, c.hub) },
  ],
  resyncSeconds: 300,
  reconcile,
});

// A decision changed: every ConfigMap in its namespace that names its Placement.
async function configMapsOfDecision(namespace: string | undefined, decision: KubeObject | undefined, io: Io<Config>): Promise<KeysOrSkip> {
  const placement = decision && labelsOf(decision)[ClusterLabel.Placement];
  if (!namespace || !placement) return { skip: "a PlacementDecision without its placement label" };
  const { items } = await io.cluster(io.config.hub).list(ConfigMapResource, { namespace, labelSelector: `${PlacementLabel}=${placement}` });
  return items.map((cm) => ({ cluster: io.config.hub, namespace, name: cm.metadata.name! }));
}

// A work changed (its status, or it was deleted): the ConfigMap it names.
function sourceOfWork(work: KubeObject | undefined, hub: string): KeysOrSkip {
  try {
    const owner = work && ownerOf(work, hub);
    if (!owner || owner.cluster !== hub || owner.kind !== ConfigMapResource.kind) return { skip: "a work that names no ConfigMap on the hub" };
    return [{ cluster: hub, namespace: owner.namespace, name: owner.name }];
  } catch (err) {
    return { skip: err instanceof Error ? err.message : String(err) }; // malformed marks: nothing to wake
  }
}

async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const hub = io.cluster(io.config.hub);
  const namespace = key.namespace!;
  const ownerKey: ObjectKey = { cluster: io.config.hub, resource: ConfigMapResource, namespace, name: key.name };
  const seal = CopySeal.fromBase64(io.config.copySealKey);
  const source = await hub.get<ConfigMap>(ConfigMapResource, key.name, namespace);
  // Gone without our finalizer's say (it was taken off by hand): its works are orphans now.
  if (!source) return collectWorks(io, seal, namespace, key.name);
  if (source.metadata.deletionTimestamp) return finalizeOwner(io, ownerKey, { resource: ManifestWorkResource, clusters: [io.config.hub] }, seal);

  const placement = labelsOf(source)[PlacementLabel];
  const chosen = placement ? await decidedClusters(io, namespace, placement) : new Set<string>();
  const owner = placement && !((source.metadata.finalizers ?? []) as string[]).includes(CopiesFinalizer) ? ((await ensureCopiesFinalizer(io, ownerKey)) as ConfigMap | undefined) : source;
  if (!owner) return done;

  const summary: Summary = {};
  for (const cluster of [...chosen].sort()) summary[cluster] = await keepWork(io, seal, cluster, owner);
  for (const work of await worksOf(io, namespace, key.name)) {
    if (!chosen.has(work.metadata.namespace!)) await dropWork(io, seal, work, owner);
  }
  if (!placement) return release(io, owner);
  await writeSummary(io, owner, summary);
  return done;
}

// The union of the Placement's decisions (OCM splits a long list over several PlacementDecisions).
async function decidedClusters(io: Io<Config>, namespace: string, placement: string): Promise<Set<string>> {
  const { items } = await io.cluster(io.config.hub).list<PlacementDecision & KubeObject>(PlacementDecisionResource, { namespace, labelSelector: `${ClusterLabel.Placement}=${placement}` });
  return new Set(items.flatMap((d) => (d.status?.decisions ?? []).map((x) => x.clusterName)));
}

const worksOf = async (io: Io<Config>, namespace: string, name: string) =>
  (await io.cluster(io.config.hub).list<Work>(ManifestWorkResource, { labelSelector: `${SourceLabel}=${sourceHash(namespace, name)}` })).items;

// What the work carries: the namespace (orphaned on deletion) and the ConfigMap's content.
function workSpec(source: ConfigMap): ManifestWorkSpec {
  const { name, namespace } = source.metadata;
  const configMap = { apiVersion: "v1", kind: "ConfigMap", metadata: { name, namespace }, ...(source.data ? { data: source.data } : {}), ...(source.binaryData ? { binaryData: source.binaryData } : {}) };
  return {
    workload: { manifests: [{ apiVersion: "v1", kind: "Namespace", metadata: { name: namespace } }, configMap] },
    deleteOption: { propagationPolicy: "SelectivelyOrphan", selectivelyOrphans: { orphaningRules: [{ group: "", resource: "namespaces", name: namespace! }] } },
  };
}

// Creates the cluster's work, or brings it in line with the source (content and owner marks), and
// says how far the cluster has got with it.
async function keepWork(io: Io<Config>, seal: CopySeal, cluster: string, source: ConfigMap): Promise<Summary[string]> {
  const hub = io.cluster(io.config.hub);
  const { namespace, name } = source.metadata as { namespace: string; name: string };
  const at: ObjectKey = { cluster: io.config.hub, resource: ManifestWorkResource, namespace: cluster, name: workName(namespace, name) };
  const spec = workSpec(source);
  const present = await hub.get<Work>(ManifestWorkResource, at.name, cluster);
  if (!present) {
    const marks = ownedBy(source, io.config.hub);
    const labels = { ...marks.labels, [SourceLabel]: sourceHash(namespace, name) };
    const created = await createSealedCopy<Work>(io, seal, at, { metadata: { name: at.name, namespace: cluster, labels, annotations: marks.annotations }, spec });
    io.log.info({ cluster, work: created.metadata.name }, "work created");
    return stateOf(created);
  }
  if (!isOurs(seal, present, source, io.config.hub)) {
    io.log.warn({ cluster, work: present.metadata.name }, "a work of that name is not this ConfigMap's: left alone");
    return "Conflict";
  }
  if (present.metadata.deletionTimestamp) return "Pending"; // deleted by hand: made again once it is gone
  const marks = sealedMarks(seal, source, io.config.hub, at, present.metadata.uid!);
  const labels = { ...marks.labels, [SourceLabel]: sourceHash(namespace, name) };
  const has = (have: Record<string, string>, want: Record<string, string>) => Object.entries(want).every(([k, v]) => have[k] === v);
  const same = isDeepStrictEqual(present.spec?.workload, spec.workload) && isDeepStrictEqual(present.spec?.deleteOption, spec.deleteOption) && has(labelsOf(present), labels) && has(annotationsOf(present), marks.annotations);
  if (same) return stateOf(present);
  const updated = await hub.update<Work>(ManifestWorkResource, {
    ...present,
    metadata: { ...present.metadata, labels: { ...labelsOf(present), ...labels }, annotations: { ...annotationsOf(present), ...marks.annotations } },
    spec: { ...present.spec, ...spec },
  });
  io.log.info({ cluster, work: updated.metadata.name }, "work updated");
  return stateOf(updated);
}

// A work this function sealed for this ConfigMap (by namespace and name, any incarnation); anything
// else, marked or not, is left alone.
function isOurs(seal: CopySeal, work: Work, source: ConfigMap, hub: string): boolean {
  try {
    const owner = sealedOwnerOf(seal, work, { cluster: hub, resource: ManifestWorkResource, namespace: work.metadata.namespace, name: work.metadata.name! });
    return owner?.cluster === hub && owner.kind === ConfigMapResource.kind && owner.namespace === source.metadata.namespace && owner.name === source.metadata.name;
  } catch {
    return false;
  }
}

// A cluster no longer chosen: its work goes, and the work agent removes the ConfigMap from the spoke.
async function dropWork(io: Io<Config>, seal: CopySeal, work: Work, source: ConfigMap): Promise<void> {
  if (work.metadata.deletionTimestamp || !isOurs(seal, work, source, io.config.hub)) return;
  await io.cluster(io.config.hub).delete(ManifestWorkResource, work.metadata.name!, work.metadata.namespace, { uid: work.metadata.uid });
  io.log.info({ cluster: work.metadata.namespace, work: work.metadata.name }, "work deleted: the cluster is no longer chosen");
}

// The label was taken off: the works are going (dropWork), so the finalizer and summary go too.
async function release(io: Io<Config>, source: ConfigMap): Promise<Outcome> {
  const hub = io.cluster(io.config.hub);
  const released = await removeFinalizer(hub, ConfigMapResource, source, CopiesFinalizer);
  if (annotationsOf(released)[PlacedAnnotation] !== undefined) {
    await hub.patch(ConfigMapResource, released.metadata.name!, { metadata: { resourceVersion: released.metadata.resourceVersion, annotations: { [PlacedAnnotation]: null } } }, { namespace: released.metadata.namespace });
  }
  return done;
}

// Works whose ConfigMap is gone: each is deleted once its owner is confirmed gone (or replaced).
async function collectWorks(io: Io<Config>, seal: CopySeal, namespace: string, name: string): Promise<Outcome> {
  let outcome = done;
  for (const w of await worksOf(io, namespace, name)) {
    if (w.metadata.deletionTimestamp) continue;
    const o = await collectOrphanedCopy(io, { cluster: io.config.hub, resource: ManifestWorkResource, namespace: w.metadata.namespace, name: w.metadata.name! }, seal);
    if ("recheckInMs" in o) outcome = o;
  }
  return outcome;
}

// Applied for this generation of the work, and whether what it carries is available on the spoke.
export function stateOf(work: Work): Summary[string] {
  const applied = findCondition(work.status?.conditions, WorkConditionType.Applied);
  const generation = work.metadata.generation as number | undefined;
  if (!applied || (applied.observedGeneration !== undefined && applied.observedGeneration !== generation)) return "Pending";
  if (applied.status !== "True") return "Failed";
  return isTrue(work.status?.conditions, WorkConditionType.Available) ? "Available" : "Applied";
}

async function writeSummary(io: Io<Config>, source: ConfigMap, summary: Summary): Promise<void> {
  const text = JSON.stringify(summary);
  if (annotationsOf(source)[PlacedAnnotation] === text) return;
  await io.cluster(io.config.hub).patch(ConfigMapResource, source.metadata.name!, { metadata: { resourceVersion: source.metadata.resourceVersion, annotations: { [PlacedAnnotation]: text } } }, { namespace: source.metadata.namespace });
}
