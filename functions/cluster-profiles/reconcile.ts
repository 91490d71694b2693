// Publishes the fleet as SIG-Multicluster's Cluster Inventory (KEP-4322), as OCM's ClusterProfile
// lifecycle and status controllers do (gate ClusterProfile): a ClusterProfile named after each cluster
// in every namespace with a Bound ManagedClusterSetBinding whose set selects it, labelled and described
// as OCM does, its status following the ManagedCluster's (version, claims as properties, Available as
// ControlPlaneHealthy, Joined), and an access provider with the cluster's API server and CA. A profile
// goes when its cluster, binding or set does. The root kind is ClusterProfile: a key is one profile.
import { HubClusterSchema, type HubCluster } from "../../shared/settings.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import type { ObjectEvent, TickEvent } from "../../shared/events.ts";
import { defineFunction, type KeysOrSkip } from "../../shared/sdk.ts";
import type { KubeClient } from "../../shared/kube/client.ts";
import { patchStatusIfChanged } from "../../shared/apply.ts";
import { findCondition, isTrue, setCondition } from "../../shared/conditions.ts";
import { setSelects } from "../../shared/cluster-set-members.ts";
import {
  ClusterLabel,
  ClusterSetBindingConditionType,
  ManagedClusterConditionType,
  ManagedClusterResource,
  ManagedClusterSetBindingResource,
  ManagedClusterSetResource,
  type ManagedCluster,
  type ManagedClusterSet,
  type ManagedClusterSetBinding,
} from "../../shared/api/cluster.ts";
import {
  ClusterManagerName,
  ClusterProfileConditionType,
  ClusterProfileResource,
  ExecExtensionName,
  InventoryLabel,
  PropertySchema,
  type AccessProvider,
  type ClusterProfile,
  type Property,
} from "../../shared/api/inventory.ts";

// Only which cluster is the hub (shared/settings.ts); events from any other cluster are not ours.
export type Config = HubCluster;

// The profiles a cluster manager other than us publishes are not ours to judge: only those with our
// label are watched, and one of another manager under the same name is left alone.
const ours = `${InventoryLabel.ClusterManager}=${ClusterManagerName}`;
const profilesOfCluster = `${ours},${ClusterLabel.ClusterName}={name}`;
const fleet = { resource: ManagedClusterResource };
const sets = { resource: ManagedClusterSetResource };
// every binding, not a namespace's: one list answers the keys of an event across namespaces and each key's judging
const bindings = { resource: ManagedClusterSetBindingResource };
const ourProfiles = { resource: ClusterProfileResource, labelSelector: ours };

export default defineFunction({
  name: "cluster-profiles",
  config: HubClusterSchema,
  // Each event comes with what its keys and their judging need from the source's cache: the sets,
  // the bindings, the fleet and our profiles, so neither mapping an event nor judging a profile reads.
  watches: (c) => [
    // our own profiles: one changed or deleted by hand is put back; its cluster and its namespace's bindings come with it
    { cluster: c.hubCluster, resource: ClusterProfileResource, labelSelector: ours, root: true, related: [{ resource: ManagedClusterResource, name: "{name}" }, bindings, sets] },
    // a cluster: its profiles wherever its sets are bound, and wherever it has one now; on a hub with no
    // binding at all (where no profile can be) its changes wake nothing
    { cluster: c.hubCluster, resource: ManagedClusterResource, keys: clusterKeys, related: [sets, { ...bindings, required: true }, { resource: ClusterProfileResource, labelSelector: profilesOfCluster }], changes: ["metadata.labels", "metadata.deletionTimestamp", "spec.managedClusterClientConfigs", "status.version", "status.clusterClaims", "status.conditions"] },
    // a set: every profile in the namespaces it is bound to
    { cluster: c.hubCluster, resource: ManagedClusterSetResource, keys: setKeys, related: [{ ...bindings, required: true }, fleet, ourProfiles], changes: ["spec", "metadata.deletionTimestamp"] },
    // a binding: every profile in its namespace (its Bound condition comes from cluster-sets after its creation)
    { cluster: c.hubCluster, resource: ManagedClusterSetBindingResource, keys: bindingKeys, related: [sets, fleet, bindings, ourProfiles], changes: ["spec", "status.conditions", "metadata.deletionTimestamp"] },
  ],
  resyncSeconds: 60,
  resync,
  // The cluster-profiles function (functions/cluster-profiles) on the hub: creates and deletes its
  // ClusterProfiles, merge-patches their labels and status with the resourceVersion judged.
  writes: (c) => [
    { cluster: c.hubCluster, why: "its profiles: created for a cluster of a bound set, labelled, deleted when it leaves", apiGroups: ["multicluster.x-k8s.io"], resources: ["clusterprofiles"], verbs: ["create", "patch", "delete"] },
    { cluster: c.hubCluster, why: "its profiles' status, from their clusters'", apiGroups: ["multicluster.x-k8s.io"], resources: ["clusterprofiles/status"], verbs: ["patch"] },
  ],
  reconcile,
});

export async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const hub = io.cluster(key.cluster);
  const namespace = key.namespace ?? "";
  const [profile, cluster, allBindings, allSets] = await Promise.all([
    hub.get<ClusterProfile>(ClusterProfileResource, key.name, namespace),
    hub.get<ManagedCluster>(ManagedClusterResource, key.name),
    hub.list<ManagedClusterSetBinding>(ManagedClusterSetBindingResource),
    hub.list<ManagedClusterSet>(ManagedClusterSetResource),
  ]);
  const nsBindings = allBindings.items.filter((b) => b.metadata.namespace === namespace);
  const wanted = cluster && !cluster.metadata.deletionTimestamp && boundSetsSelecting(cluster, nsBindings, allSets.items).length > 0;
  if (profile && !isOurs(profile)) {
    io.log.info({ profile: key, manager: profile.spec?.clusterManager?.name }, "left alone: a profile of another cluster manager");
    return done;
  }
  if (!wanted) {
    if (profile && !profile.metadata.deletionTimestamp) {
      // the resourceVersion judged: a profile changed since is judged again
      if (await hub.delete(ClusterProfileResource, key.name, namespace, { uid: profile.metadata.uid, resourceVersion: profile.metadata.resourceVersion }))
        io.log.info({ profile: key }, "cluster profile deleted: its cluster is in no set bound here");
    }
    return done;
  }
  if (profile?.metadata.deletionTimestamp) return done; // its delete event brings it back
  let present = profile;
  if (!present) {
    // a create that loses a race answers AlreadyExists: the retry judges the one there
    present = await hub.create<ClusterProfile>(ClusterProfileResource, newProfile(namespace, cluster));
    io.log.info({ profile: key }, "cluster profile created");
  }
  const status = profileStatus(present, cluster, io.clock.now(), io.log);
  const patched = await patchStatusIfChanged(hub, ClusterProfileResource, present, status);
  if (patched) {
    present = patched;
    io.log.info({ profile: key, healthy: findCondition(status.conditions, ClusterProfileConditionType.ControlPlaneHealthy)?.status }, "cluster profile status updated");
  }
  const labels = profileLabels(cluster);
  if (Object.entries(labels).some(([k, v]) => present.metadata.labels?.[k] !== v)) {
    await hub.patch<ClusterProfile>(ClusterProfileResource, key.name, { metadata: { resourceVersion: present.metadata.resourceVersion, labels } }, { namespace });
    io.log.info({ profile: key, labels }, "cluster profile labels updated");
  }
  return done;
}

const isOurs = (p: ClusterProfile) => p.spec?.clusterManager?.name === ClusterManagerName && p.metadata.labels?.[InventoryLabel.ClusterManager] === ClusterManagerName;

// The sets bound to a namespace that select the cluster: a binding counts while it is Bound (cluster-sets
// says so once its set exists) and its set is there.
export function boundSetsSelecting(cluster: ManagedCluster, nsBindings: readonly ManagedClusterSetBinding[], allSets: readonly ManagedClusterSet[]): string[] {
  const byName = new Map(allSets.map((s) => [s.metadata.name, s]));
  return nsBindings
    .filter((b) => isTrue(b.status?.conditions, ClusterSetBindingConditionType.Bound))
    .map((b) => byName.get(b.spec?.clusterSet ?? b.metadata.name))
    .filter((s): s is ManagedClusterSet => !!s && setSelects(s, cluster))
    .map((s) => s.metadata.name);
}

// OCM's labels: the manager, the cluster's name, and its exclusive set ("" when it has none, as OCM writes it).
export const profileLabels = (cluster: ManagedCluster): Record<string, string> => ({
  [InventoryLabel.ClusterManager]: ClusterManagerName,
  [InventoryLabel.ClusterSet]: cluster.metadata.labels?.[ClusterLabel.ClusterSet] ?? "",
  [ClusterLabel.ClusterName]: cluster.metadata.name,
});

const newProfile = (namespace: string, cluster: ManagedCluster): ClusterProfile => ({
  metadata: { name: cluster.metadata.name, namespace, labels: profileLabels(cluster) },
  spec: { displayName: cluster.metadata.name, clusterManager: { name: ClusterManagerName } },
});

// The status the cluster asks for. Conditions other than the two we set, and access providers of other
// names (a credentials syncer's), are kept as they are.
export function profileStatus(profile: ClusterProfile, cluster: ManagedCluster, now: Date, log: { warn(fields: object, msg: string): void }): NonNullable<ClusterProfile["status"]> {
  const before = profile.status ?? {};
  let conditions = before.conditions ?? [];
  for (const [from, to] of [
    [ManagedClusterConditionType.Available, ClusterProfileConditionType.ControlPlaneHealthy],
    [ManagedClusterConditionType.Joined, ClusterProfileConditionType.Joined],
  ] as const) {
    const c = findCondition(cluster.status?.conditions, from);
    // a cluster without the condition leaves the profile's as it was, as OCM does
    if (c) conditions = setCondition(conditions, { type: to, status: c.status, reason: c.reason, message: c.message }, now);
  }
  const provider = accessProvider(cluster);
  const others = (before.accessProviders ?? []).filter((p) => p.name !== ClusterManagerName);
  const accessProviders = provider ? [...others, provider] : others;
  // an empty list is left out, as OCM's Go types write it (omitempty, or a nil list the API server drops)
  const status: NonNullable<ClusterProfile["status"]> = {
    ...before,
    conditions,
    version: cluster.status?.version?.kubernetes ? { kubernetes: cluster.status.version.kubernetes } : {},
    properties: properties(cluster, log),
    accessProviders,
  };
  for (const list of ["conditions", "properties", "accessProviders"] as const) if (status[list]?.length === 0) delete status[list];
  return status;
}

// Claims as properties. The API takes no empty value and at most 1,024 characters: such a claim is left
// out with a warning (OCM writes it and its whole status patch is refused).
function properties(cluster: ManagedCluster, log: { warn(fields: object, msg: string): void }): Property[] {
  const out: Property[] = [];
  for (const claim of cluster.status?.clusterClaims ?? []) {
    const property = { name: claim.name ?? "", value: claim.value ?? "" };
    if (PropertySchema.safeParse(property).success) out.push(property);
    else log.warn({ cluster: cluster.metadata.name, claim: property.name }, "claim left out of the cluster's profile: the Cluster Inventory API takes no such name or value");
  }
  return out;
}

// How a consumer reaches the cluster: the API server and CA the agent reports in
// spec.managedClusterClientConfigs, under OCM's provider name, with the cluster's name in the exec
// extension a credential plugin reads (provideClusterInfo).
export function accessProvider(cluster: ManagedCluster): AccessProvider | undefined {
  const config = cluster.spec?.managedClusterClientConfigs?.find((c) => c.url);
  if (!config) return undefined;
  return {
    name: ClusterManagerName,
    cluster: {
      server: config.url,
      ...(config.caBundle ? { "certificate-authority-data": config.caBundle } : {}),
      extensions: [{ name: ExecExtensionName, extension: { clusterName: cluster.metadata.name } }],
    },
  };
}

// ---- which profiles an event concerns

const keysIn = (hub: string, pairs: Iterable<readonly [string, string]>): Key[] => {
  const seen = new Map<string, Key>();
  for (const [namespace, name] of pairs) seen.set(`${namespace}/${name}`, { cluster: hub, namespace, name });
  return [...seen.values()];
};

// The namespaces whose bound sets select the cluster now, and those where it has a profile (a set it left).
async function clusterKeys(event: ObjectEvent, io: Io<Config>): Promise<KeysOrSkip> {
  const hub = io.cluster(event.cluster);
  const name = event.ref.name;
  const [allSets, allBindings, existing] = await Promise.all([
    hub.list<ManagedClusterSet>(ManagedClusterSetResource),
    hub.list<ManagedClusterSetBinding>(ManagedClusterSetBindingResource),
    hub.list<ClusterProfile>(ClusterProfileResource, { labelSelector: profilesOfCluster.replace("{name}", name) }),
  ]);
  const cluster = event.verb !== "delete" ? (event.object as ManagedCluster | undefined) : undefined;
  const selecting = new Set(cluster ? allSets.items.filter((s) => setSelects(s, cluster)).map((s) => s.metadata.name) : []);
  const namespaces = allBindings.items.filter((b) => selecting.has(b.spec?.clusterSet ?? b.metadata.name)).map((b) => b.metadata.namespace!);
  const keys = keysIn(event.cluster, [...namespaces, ...existing.items.map((p) => p.metadata.namespace!)].map((ns) => [ns, name] as const));
  return keys.length > 0 ? keys : { skip: "a cluster in no bound set and with no profile" };
}

// Every profile there is or should be in `namespaces`.
async function profilesIn(hub: KubeClient, hubName: string, namespaces: ReadonlySet<string>): Promise<Key[]> {
  if (namespaces.size === 0) return [];
  const [fleetList, allSets, allBindings, existing] = await Promise.all([
    hub.list<ManagedCluster>(ManagedClusterResource),
    hub.list<ManagedClusterSet>(ManagedClusterSetResource),
    hub.list<ManagedClusterSetBinding>(ManagedClusterSetBindingResource),
    hub.list<ClusterProfile>(ClusterProfileResource, { labelSelector: ours }),
  ]);
  const pairs: [string, string][] = [];
  for (const ns of namespaces) {
    const nsBindings = allBindings.items.filter((b) => b.metadata.namespace === ns);
    for (const c of fleetList.items) if (boundSetsSelecting(c, nsBindings, allSets.items).length > 0) pairs.push([ns, c.metadata.name]);
  }
  for (const p of existing.items) if (namespaces.has(p.metadata.namespace!)) pairs.push([p.metadata.namespace!, p.metadata.name]);
  return keysIn(hubName, pairs);
}

async function setKeys(event: ObjectEvent, io: Io<Config>): Promise<KeysOrSkip> {
  const hub = io.cluster(event.cluster);
  const { items } = await hub.list<ManagedClusterSetBinding>(ManagedClusterSetBindingResource);
  const namespaces = new Set(items.filter((b) => (b.spec?.clusterSet ?? b.metadata.name) === event.ref.name).map((b) => b.metadata.namespace!));
  const keys = await profilesIn(hub, event.cluster, namespaces);
  return keys.length > 0 ? keys : { skip: "a set bound nowhere" };
}

async function bindingKeys(event: ObjectEvent, io: Io<Config>): Promise<KeysOrSkip> {
  const keys = await profilesIn(io.cluster(event.cluster), event.cluster, new Set([event.ref.namespace ?? ""]));
  return keys.length > 0 ? keys : { skip: "no cluster of a bound set there, and no profile" };
}

// Every profile there is and every one there should be.
async function resync(io: Io<Config>, tick: TickEvent): Promise<KeysOrSkip> {
  const hub = io.config.hubCluster;
  if (tick.cluster && tick.cluster !== hub) return { skip: `tick for cluster ${tick.cluster}, not the hub` };
  const client = io.cluster(hub);
  const [allBindings, existing] = await Promise.all([client.list<ManagedClusterSetBinding>(ManagedClusterSetBindingResource), client.list<ClusterProfile>(ClusterProfileResource, { labelSelector: ours })]);
  const namespaces = new Set([...allBindings.items, ...existing.items].map((o) => o.metadata.namespace!));
  return profilesIn(client, hub, namespaces);
}
