// OCM managed-serviceaccount's ClusterProfile credential syncer: the token of each ManagedServiceAccount
// labelled authentication.open-cluster-management.io/sync-to-clusterprofile=true is copied into the
// namespace of every ClusterProfile of its cluster, as the Secret "<cluster>-<name>" the ClusterProfile
// credentials plugin reads there (components/cp-creds). A copy is owned by its profile, so it goes with
// it; one whose ManagedServiceAccount no longer asks is deleted. The root kind is our ClusterProfile.
import { isDeepStrictEqual } from "node:util";
import { HubClusterSchema, type HubCluster } from "../../shared/settings.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import type { ObjectEvent } from "../../shared/events.ts";
import { defineFunction, type KeysOrSkip } from "../../shared/sdk.ts";
import type { Secret } from "../../shared/hub-credentials.ts";
import { SecretResource } from "../../shared/api/kube.ts";
import { ClusterLabel } from "../../shared/api/cluster.ts";
import { ClusterManagerName, ClusterProfileResource, InventoryLabel, type ClusterProfile } from "../../shared/api/inventory.ts";
import { ManagedServiceAccountResource, MsaLabel, type ManagedServiceAccount } from "../../shared/api/authentication.ts";

export type Config = HubCluster;

const ourProfiles = `${InventoryLabel.ClusterManager}=${ClusterManagerName}`;
const syncing = `${MsaLabel.SyncToClusterProfile}=true`;

// "<cluster>-<name>": the copy's name and its synced-from label, as OCM's syncer and plugin spell it.
export const copyName = (cluster: string, msa: string) => `${cluster}-${msa}`;

export default defineFunction({
  name: "clusterprofile-credentials",
  config: HubClusterSchema,
  // Secrets are not watched: a watch of labelled secrets in every namespace would have the hub's relay
  // list and cache every Secret on the hub. A token renewed moves its ManagedServiceAccount's
  // status.tokenSecretRef, whose event says so; a copy changed or deleted by hand is put back by the resync.
  watches: (c) => [
    { cluster: c.hubCluster, resource: ClusterProfileResource, labelSelector: ourProfiles, root: true, changes: ["metadata.uid", "metadata.deletionTimestamp"] },
    // on a hub without our profiles an account's change wakes nothing
    { cluster: c.hubCluster, resource: ManagedServiceAccountResource, keys: msaKeys, related: [{ resource: ClusterProfileResource, labelSelector: ourProfiles, required: true }], changes: ["metadata.labels", "metadata.deletionTimestamp", "status.tokenSecretRef"] },
  ],
  resyncSeconds: 60,
  // clusterprofile-credentials on the hub: reads the ManagedServiceAccounts' token Secrets in cluster
  // namespaces and writes their copies in the profiles' namespaces. Secrets in any namespace, as OCM's
  // syncer holds them: which namespaces a set is bound to is the hub admin's choice at any time.
  writes: (c) => [
    { cluster: c.hubCluster, why: "the token Secrets in cluster namespaces, and their copies in the profiles' namespaces", apiGroups: [""], resources: ["secrets"], verbs: ["get", "list", "create", "update", "delete"] },
  ],
  reconcile,
});

export async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const hub = io.cluster(key.cluster);
  const namespace = key.namespace ?? "";
  const profile = await hub.get<ClusterProfile>(ClusterProfileResource, key.name, namespace);
  // a profile gone takes its copies along (they are owned by it)
  if (!profile || profile.metadata.deletionTimestamp || profile.metadata.labels?.[InventoryLabel.ClusterManager] !== ClusterManagerName) return done;
  const cluster = profile.metadata.labels?.[ClusterLabel.ClusterName] ?? profile.metadata.name;
  const { items: msas } = await hub.list<ManagedServiceAccount>(ManagedServiceAccountResource, { namespace: cluster, labelSelector: syncing });
  const wanted = new Set<string>();
  for (const msa of msas) {
    const ref = msa.status?.tokenSecretRef?.name;
    if (!ref || msa.metadata.deletionTimestamp) continue;
    const source = await hub.get<Secret>(SecretResource, ref, cluster);
    if (!source?.data) continue;
    const name = copyName(cluster, msa.metadata.name);
    wanted.add(name);
    await writeCopy(io, profile, name, source.data);
  }
  const { items: copies } = await hub.list<Secret>(SecretResource, { namespace, labelSelector: MsaLabel.SyncedFrom });
  for (const copy of copies) {
    const copyOf = copy.metadata.name!;
    if (wanted.has(copyOf) || !ownedBy(copy, profile)) continue;
    if (await hub.delete(SecretResource, copyOf, namespace, { uid: copy.metadata.uid, resourceVersion: copy.metadata.resourceVersion }))
      io.log.info({ profile: key, secret: copy.metadata.name }, "token copy deleted: its ManagedServiceAccount no longer syncs to this profile");
  }
  return done;
}

const ownedBy = (s: Secret, p: ClusterProfile) => ((s.metadata.ownerReferences ?? []) as { uid: string }[]).some((r) => r.uid === p.metadata.uid);

async function writeCopy(io: Io<Config>, profile: ClusterProfile, name: string, data: Record<string, string>): Promise<void> {
  const hub = io.cluster(io.config.hubCluster);
  const namespace = profile.metadata.namespace!;
  const labels = { [MsaLabel.SyncedFrom]: name };
  const ownerReferences = [{ apiVersion: `${ClusterProfileResource.group}/${ClusterProfileResource.version}`, kind: ClusterProfileResource.kind, name: profile.metadata.name, uid: profile.metadata.uid ?? "", controller: true }];
  const have = await hub.get<Secret>(SecretResource, name, namespace);
  if (!have) {
    // a create that loses a race answers AlreadyExists: the retry judges the one there
    await hub.create<Secret>(SecretResource, { metadata: { name, namespace, labels, ownerReferences }, type: "Opaque", data });
    io.log.info({ profile: `${namespace}/${profile.metadata.name}`, secret: name }, "token copied to the profile's namespace");
    return;
  }
  // a Secret of that name that is not a copy of ours is left alone
  if (!ownedBy(have, profile)) {
    io.log.warn({ profile: `${namespace}/${profile.metadata.name}`, secret: name }, "token not copied: a Secret of that name is there and is not this profile's copy");
    return;
  }
  const haveLabels = (have.metadata.labels ?? {}) as Record<string, string>;
  if (isDeepStrictEqual(have.data ?? {}, data) && haveLabels[MsaLabel.SyncedFrom] === name) return;
  await hub.update<Secret>(SecretResource, { ...have, metadata: { ...have.metadata, labels: { ...haveLabels, ...labels } }, data });
  io.log.info({ profile: `${namespace}/${profile.metadata.name}`, secret: name }, "token copy updated");
}

// A ManagedServiceAccount's change concerns every profile of its cluster (its namespace).
async function msaKeys(event: ObjectEvent, io: Io<Config>): Promise<KeysOrSkip> {
  const cluster = event.ref.namespace ?? "";
  const { items } = await io.cluster(event.cluster).list<ClusterProfile>(ClusterProfileResource, { labelSelector: ourProfiles });
  const keys = items.filter((p) => (p.metadata.labels?.[ClusterLabel.ClusterName] ?? p.metadata.name) === cluster).map((p) => ({ cluster: event.cluster, namespace: p.metadata.namespace, name: p.metadata.name }));
  return keys.length > 0 ? keys : { skip: `cluster ${cluster} has no ClusterProfile` };
}
