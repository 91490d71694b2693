// Accepts and denies ManagedClusters on the hub (ocm-protocol §4.2): the cluster namespace, the RBAC that
// lets an accepted cluster's agents in (and the narrower RBAC after a deny), the cluster lease,
// HubAcceptedManagedCluster, auto-acceptance, and once the cluster goes OCM's resource cleanup (its
// add-ons, then its works) and the RBAC cleanup. A cluster never gets a namespace it did not get from
// here: not one of Kubernetes or the hub (reserved names), not one made for something else.
import { createClusterLease } from "../../shared/cluster-lease.ts";
import { HubSettingsSchema, type HubSettings } from "../../shared/settings.ts";
import { ManagedClusterMessage } from "../../shared/api/health.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import type { ObjectEvent, TickEvent } from "../../shared/events.ts";
import { defineFunction, type KeysOrSkip, type Related, type Watch } from "../../shared/sdk.ts";
import type { KubeClient, KubeObject } from "../../shared/kube/client.ts";
import { mayAccess } from "../../shared/kube/access-review.ts";
import { addFinalizer, createOrUpdate, patchStatusIfChanged, removeFinalizer, retryOnConflict, wouldWrite } from "../../shared/apply.ts";
import { isAlreadyExists, StaleStateError } from "../../shared/kube/errors.ts";
import { hasCondition, isTrue, setCondition, type NewCondition } from "../../shared/conditions.ts";
import { rfc3339 } from "../../shared/clock.ts";
import { sleep } from "../../shared/timers.ts";
import { isSettledBy, type SettledClause, type SettledWhen } from "../../shared/settled.ts";
import type { ApiResource } from "../../shared/api/meta.ts";
import {
  CertificateSigningRequestResource,
  ClusterRoleBindingResource,
  ClusterRoleResource,
  LeaseResource,
  NamespaceResource,
  RoleBindingResource,
  RoleResource,
} from "../../shared/api/kube.ts";
import {
  ClusterAnnotation,
  ClusterFinalizer,
  ClusterLabel,
  ManagedClusterConditionType,
  ManagedClusterLeaseName,
  ManagedClusterReason,
  ManagedClusterResource,
  isReservedClusterName,
  reservedClusterNameMessage,
  type ManagedCluster,
} from "../../shared/api/cluster.ts";
import { ManagedClusterAddOnV1alpha1Resource } from "../../shared/api/addon.ts";
import { ManifestWorkResource, WorkFinalizer } from "../../shared/api/work.ts";
import { AddonNameLabel, agentUser, clusterGroup } from "../../shared/api/registration.ts";
import { HubRbacName } from "../../shared/api/register.ts";
import { CsrConditionType, type CertificateSigningRequest } from "../../shared/api/certificates.ts";
import { bootstrapApprovable } from "../../shared/cluster-csr.ts";
import { readRequest } from "../../shared/pki.ts";
import { clusterNamespace, clusterRole, clusterRoleBinding, registrationClusterRole, roleBinding, workClusterRole } from "./rbac.ts";

// Both hub functions read the same settings (shared/settings.ts).
export type Config = HubSettings;

const acceptedCondition: NewCondition = {
  type: ManagedClusterConditionType.HubAccepted,
  status: "True",
  reason: ManagedClusterReason.HubClusterAdminAccepted,
  message: ManagedClusterMessage.HubClusterAdminAccepted,
};
const acceptedFinalizers = [ClusterFinalizer.ApiResourceCleanup, ClusterFinalizer.ResourceCleanup];
// A cluster being accepted: what every write of an acceptance is judged by in the ManagedCluster itself.
const accepting: SettledClause[] = [{ is: "spec.hubAcceptsClient", value: true }, { lacks: "metadata.deletionTimestamp" }];
// An accepted cluster, finalized and not leaving: as the definition's settled test, in a resync's
// needsLook, and for retryOnConflict while accepting.
const accepted: SettledWhen = [{ all: [...accepting, { includes: "metadata.finalizers", values: acceptedFinalizers }, { condition: acceptedCondition }] }];
const stillAccepting = (c: ManagedCluster) => isSettledBy([{ all: accepting }], c);

// The root kind is ManagedCluster, all its changes: a deleted cluster's RBAC goes. A cluster is also
// woken by the objects labelled with its name when someone changes or removes them (put them back), by
// a bootstrap CSR (auto-acceptance), and by a ManifestWork leaving its namespace (the last one gone frees
// the work RoleBinding's finalizer), or an add-on leaving it (the cleanup of a deleted cluster goes on).
// Those come in Resource mode: the payload carries the label.
export default defineFunction({
  name: "cluster-acceptor",
  config: HubSettingsSchema,
  watches: (c) => [
    // Each cluster's event comes with what accepting it is judged by (its namespace, roles and bindings
    // as the source's cache holds them), so the reconcile of a cluster that is as it should be reads
    // nothing but its lease.
    // Another function's label or taint on the cluster wakes nothing: acceptance is judged by these.
    // Nor does a finalizer change, the acceptor's own patch above all: one taken off is put back at the
    // cluster's next change it judges, or at the resync, and a deletion releases them anyway.
    {
      cluster: c.hubCluster,
      resource: ManagedClusterResource,
      mode: "Either",
      root: true,
      related: [...acceptedObjects("{name}"), ...clusterCsrs(c, "{name}")],
      changes: ["spec.hubAcceptsClient", "metadata.deletionTimestamp", "metadata.annotations", "status.conditions"],
    },
    ...[ClusterRoleResource, ClusterRoleBindingResource, RoleResource, RoleBindingResource, NamespaceResource].map(
      // each handed with the resync tick, which judges from their lists
      (resource): Watch<Config> => ({ cluster: c.hubCluster, resource, labelSelector: ClusterLabel.ClusterName, verbs: ["update", "delete"], keys: (e, io) => keysOfLabelled(e, io, resource), onTick: true }),
    ),
    {
      cluster: c.hubCluster,
      resource: CertificateSigningRequestResource,
      labelSelector: ClusterLabel.ClusterName,
      verbs: ["add"],
      keys: keysOfCsr,
      related: [...acceptedObjects(`{label:${ClusterLabel.ClusterName}}`), ...clusterCsrs(c, `{label:${ClusterLabel.ClusterName}}`)],
    },
    ...[ManifestWorkResource, ManagedClusterAddOnV1alpha1Resource].map(
      (resource): Watch<Config> => ({
        cluster: c.hubCluster,
        resource,
        verbs: ["delete"],
        keys: (e) => (e.ref.namespace ? [{ cluster: e.cluster, name: e.ref.namespace }] : { skip: `${resource.kind} without namespace` }),
      }),
    ),
  ],
  // An accepted cluster, finalized and not leaving: a change of its own needs nothing (its agent's
  // status, the acceptor's own last write). What acceptance made beside it wakes the acceptor by its own
  // watches when someone changes or removes it, and the resync judges the rest.
  settled: accepted,
  resyncSeconds: 60,
  resync,
  // The cluster-acceptor function (functions/cluster-acceptor) on the hub.
  //
  // Granting RBAC: the API server lets a writer create a role, or bind one, only if the writer already
  // holds every permission in it, or has `escalate` (roles) / `bind` (bindings) on that role.
  // - The per-cluster ClusterRole open-cluster-management:managedcluster:<c> has a name per cluster, so no
  //   resourceNames can scope escalate or bind to it. This role holds its permissions instead (CSRs,
  //   renew, managedclusters and their status), which the function mostly needs anyway.
  // - The shared ClusterRoles open-cluster-management:managedcluster:registration and :work: this role
  //   holds their permissions too (leases, add-on status, events, ManifestWorks, AgentConfigs), as OCM's hub
  //   registration controller does. `escalate` even on just those two names would let the function
  //   rewrite them into anything, and they are bound to every cluster's agents: a path to cluster-admin.
  //   Holding the permissions caps what the function can grant at what is listed here.
  // - With all of that held, the bindings need no `bind` either (nor does a named `bind` add anything).
  // Deleting ClusterRoles and bindings cannot be narrowed to the per-cluster names (unknown in advance);
  // the function deletes only names it derives from a cluster name.
  writes: (c) => [
    { cluster: c.hubCluster, why: "the finalizer and the auto-accept annotation", apiGroups: ["cluster.open-cluster-management.io"], resources: ["managedclusters"], verbs: ["update", "patch"] },
    { cluster: c.hubCluster, why: "HubAcceptedManagedCluster, and what the per-cluster role grants", apiGroups: ["cluster.open-cluster-management.io"], resources: ["managedclusters/status"], verbs: ["patch", "update"] },
    { cluster: c.hubCluster, why: "auto-accept reads CSRs; create: granted by the per-cluster role", apiGroups: ["certificates.k8s.io"], resources: ["certificatesigningrequests"], verbs: ["create"] },
    { cluster: c.hubCluster, why: "granted by the per-cluster role", apiGroups: ["register.open-cluster-management.io"], resources: ["managedclusters/clientcertificates"], verbs: ["renew"] },
    { cluster: c.hubCluster, why: "auto-accept sets hubAcceptsClient=true, which the hub's admission policy allows only with this (manifests/hub/admission-policies.yaml); OCM's registration controller holds it too", apiGroups: ["register.open-cluster-management.io"], resources: ["managedclusters/accept"], verbs: ["update"] },
    { cluster: c.hubCluster, why: "the cluster namespace: created, never updated (an existing one is not taken over) nor deleted (as OCM)", apiGroups: [""], resources: ["namespaces"], verbs: ["create"] },
    { cluster: c.hubCluster, why: "the cluster lease is created here; list/watch/update: granted by the registration role", apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["get", "list", "watch", "create", "update"] },
    { cluster: c.hubCluster, why: "get/list/watch: granted by the registration role; delete: a deleted cluster's add-ons (OCM's gc)", apiGroups: ["addon.open-cluster-management.io"], resources: ["managedclusteraddons"], verbs: ["delete"] },
    { cluster: c.hubCluster, why: "held so that the registration role can be granted", apiGroups: ["addon.open-cluster-management.io"], resources: ["managedclusteraddons/status"], verbs: ["patch", "update"] },
    { cluster: c.hubCluster, why: "granted by the registration role: the cluster's AgentConfig (docs/agent-config.md)", apiGroups: ["config.ocm-functions.io"], resources: ["agentconfigs"], verbs: ["get", "list", "watch"] },
    { cluster: c.hubCluster, why: "held so that the registration role can be granted", apiGroups: ["config.ocm-functions.io"], resources: ["agentconfigs/status"], verbs: ["patch"] },
    { cluster: c.hubCluster, why: "granted by the registration role: the cluster's ManagedServiceAccounts, read only", apiGroups: ["authentication.open-cluster-management.io"], resources: ["managedserviceaccounts"], verbs: ["get", "list", "watch"] },
    { cluster: c.hubCluster, why: "granted by the registration and work roles", apiGroups: ["", "events.k8s.io"], resources: ["events"], verbs: ["create", "patch", "update"] },
    { cluster: c.hubCluster, why: "read: do ManifestWorks still hold the work RoleBinding's finalizer; delete: a deleted cluster's works (OCM's gc); the other writes: granted by the work role", apiGroups: ["work.open-cluster-management.io"], resources: ["manifestworks"], verbs: ["update", "patch", "delete"] },
    { cluster: c.hubCluster, why: "held so that the work role can be granted", apiGroups: ["work.open-cluster-management.io"], resources: ["manifestworks/status"], verbs: ["patch", "update"] },
    { cluster: c.hubCluster, why: "HubAccepted is written once the authorizer grants the cluster's agents what acceptance bound", apiGroups: ["authorization.k8s.io"], resources: ["subjectaccessreviews"], verbs: ["create"] },
    { cluster: c.hubCluster, why: "the per-cluster roles and the bindings of an accepted cluster's agents; deleted only by names derived from a cluster's", apiGroups: ["rbac.authorization.k8s.io"], resources: ["clusterroles", "clusterrolebindings", "rolebindings"], verbs: ["create", "update", "patch", "delete"] },
  ],
  reconcile,
});

// Named from the ManagedCluster's name ({name}), as rbac.ts writes them. The shared roles and the
// bindings are conditional: each is only created or updated with the resourceVersion read
// (createOrUpdate) and decides nothing else. The namespace and the cluster's own role are not: whether
// the namespace is the cluster's decides every other write, and a refusal downgrades the role only if
// it is there.
// `c` is the template of the cluster's name in the event's object: "{name}" for a ManagedCluster, its
// cluster-name label for a CSR (whose event hands the ManagedCluster too).
const acceptedObjects = (c: string): Related[] => [
  ...(c === "{name}" ? [] : [{ resource: ManagedClusterResource, name: c }]),
  { resource: NamespaceResource, name: c },
  { resource: ClusterRoleResource, name: HubRbacName.cluster(c) },
  ...[
    { resource: ClusterRoleResource, name: HubRbacName.RegistrationClusterRole },
    { resource: ClusterRoleResource, name: HubRbacName.WorkClusterRole },
    { resource: ClusterRoleBindingResource, name: HubRbacName.cluster(c) },
    { resource: RoleBindingResource, namespace: c, name: HubRbacName.registrationRoleBinding(c) },
    { resource: RoleBindingResource, namespace: c, name: HubRbacName.workRoleBinding(c) },
  ].map((r) => ({ ...r, conditional: true })),
];

// The CSRs labelled with the cluster's name (`c` as in acceptedObjects), by which a cluster awaiting
// auto-acceptance is judged (bootstrappedByAutoApprovalUser): handed with its events while auto-approval is on.
const clusterCsrsSelector = (c: string) => `${ClusterLabel.ClusterName}=${c}`;
const clusterCsrs = (config: Config, c: string): Related[] =>
  config.autoApprovalUsers.length > 0 ? [{ resource: CertificateSigningRequestResource, labelSelector: clusterCsrsSelector(c) }] : [];

// A resync tick reconciles the clusters that differ from what their last reconcile leaves, judged from
// one list per kind instead of a reconcile (nine reads) per cluster: one deleting, awaiting
// auto-acceptance or a deny; an accepted one without its condition, finalizer, namespace (labelled for
// it), lease or any RBAC object as desired (its auto-acceptance mark waits for its next event); and a
// gone one whose RBAC remains. A cluster passed over is one whose reconcile would write nothing (issue
// 25: test/functions/cluster-acceptor.test.ts holds the two together over many varied clusters). The shared ClusterRoles, when drifted, wake one accepted cluster, whose reconcile writes them.
async function resync(io: Io<Config>, tick: TickEvent): Promise<KeysOrSkip> {
  const cluster = io.config.hubCluster;
  if (tick.cluster && tick.cluster !== cluster) return { skip: `tick for cluster ${tick.cluster}, where this function reconciles nothing` };
  const hub = io.cluster(cluster);
  const labelled = { labelSelector: ClusterLabel.ClusterName };
  const [clusters, namespaces, roles, clusterBindings, bindings, leases] = await Promise.all([
    hub.list<ManagedCluster>(ManagedClusterResource),
    hub.list(NamespaceResource, labelled),
    hub.list(ClusterRoleResource, labelled),
    hub.list(ClusterRoleBindingResource, labelled),
    hub.list(RoleBindingResource, labelled),
    hub.list(LeaseResource, labelled),
  ]);
  const byName = (items: KubeObject[]) => new Map(items.map((o) => [`${o.metadata.namespace ?? ""}/${o.metadata.name}`, o]));
  const found = {
    namespaces: byName(namespaces.items),
    roles: byName(roles.items),
    clusterBindings: byName(clusterBindings.items),
    bindings: byName(bindings.items),
    leases: byName(leases.items),
  };
  const names = new Set<string>();
  for (const c of clusters.items) if (needsLook(c, found, io.config)) names.add(c.metadata.name);
  const accepted = clusters.items.find((c) => c.spec?.hubAcceptsClient && !c.metadata.deletionTimestamp);
  const shared = [registrationClusterRole, workClusterRole];
  if (accepted && shared.some((r) => wouldWrite(found.roles.get(`/${r.metadata.name}`), r, ["rules"]))) names.add(accepted.metadata.name);
  // RBAC of clusters that are gone
  const known = new Set(clusters.items.map((c) => c.metadata.name));
  for (const o of [...roles.items, ...clusterBindings.items, ...bindings.items]) {
    const owner = (o.metadata as { labels?: Record<string, string> }).labels?.[ClusterLabel.ClusterName];
    if (owner && !known.has(owner)) names.add(owner);
  }
  return [...names].map((name) => ({ cluster, name }));
}

type Found = Record<"namespaces" | "roles" | "clusterBindings" | "bindings" | "leases", Map<string, KubeObject>>;

export function needsLook(c: ManagedCluster, found: Found, config: Config): boolean {
  const name = c.metadata.name;
  if (c.metadata.deletionTimestamp) return true;
  if (isReservedClusterName(name)) return !hasCondition(c.status?.conditions, reservedCondition(name));
  if (!c.spec?.hubAcceptsClient) return wasAccepted(c) || isAutoAcceptPending(c, config);
  if (!isSettledBy(accepted, c)) return true;
  const namespace = found.namespaces.get(`/${name}`);
  // none, or one labelled for another cluster: the reconcile creates it, or refuses the cluster
  if (!namespace || !isClusterNamespace(namespace, name)) return true;
  if (!found.leases.has(`${name}/${ManagedClusterLeaseName}`)) return true;
  const work = found.bindings.get(`${name}/${HubRbacName.workRoleBinding(name)}`);
  return (
    wouldWrite(found.roles.get(`/${HubRbacName.cluster(name)}`), clusterRole(name, true), ["rules"]) ||
    wouldWrite(found.clusterBindings.get(`/${HubRbacName.cluster(name)}`), clusterRoleBinding(name), ["subjects"]) ||
    wouldWrite(found.bindings.get(`${name}/${HubRbacName.registrationRoleBinding(name)}`), roleBinding(name, "registration"), ["subjects"]) ||
    wouldWrite(work, roleBinding(name, "work"), ["subjects"]) ||
    !(work?.metadata.finalizers as string[] | undefined)?.includes(WorkFinalizer.ManifestWorkCleanup)
  );
}

// A wait (ManifestWorks holding the work RoleBinding's finalizer, add-ons or works of a deleted cluster
// still there) is rechecked after 5 s as OCM does, then ever later while it stays the same, up to the
// resync period; it is logged when it starts or changes, not at every look.
const WAIT_FIRST_RECHECK_MS = 5_000;
const WAIT_MAX_RECHECK_MS = 60_000;
const waits = new Map<string, { what: string; looks: number }>();

function waitFor(io: Io<Config>, cluster: string, what: string, fields: object): Outcome {
  const key = `${io.config.hubCluster}/${cluster}`;
  const state = `${what} ${JSON.stringify(fields)}`;
  const last = waits.get(key);
  const looks = last?.what === state ? last.looks + 1 : 0;
  waits.set(key, { what: state, looks });
  if (looks === 0) io.log.info({ cluster, ...fields }, what);
  return { recheckInMs: Math.min(WAIT_MAX_RECHECK_MS, WAIT_FIRST_RECHECK_MS * 2 ** looks) };
}
const waitOver = (io: Io<Config>, cluster: string) => waits.delete(`${io.config.hubCluster}/${cluster}`);

// A labelled object wakes the cluster its cluster-name label names.
async function keysOfLabelled(event: ObjectEvent, io: Io<Config>, resource: ApiResource): Promise<KeysOrSkip> {
  const labels = await labelsOf(event, resource, io.cluster(event.cluster));
  if (labels === undefined) return { skip: `${event.ref.kind} ${event.ref.name} is gone; the resync covers it` };
  const cluster = labels[ClusterLabel.ClusterName];
  // The shared ClusterRoles carry the label with an empty value: they belong to no one cluster.
  if (!cluster) return { skip: `${event.ref.kind} ${event.ref.name} names no cluster` };
  if (resource === CertificateSigningRequestResource && labels[AddonNameLabel]) return { skip: "an add-on's CSR" };
  return [{ cluster: event.cluster, name: cluster }];
}

// A bootstrap CSR matters only for auto-acceptance.
const keysOfCsr = (event: ObjectEvent, io: Io<Config>): KeysOrSkip | Promise<KeysOrSkip> =>
  io.config.autoApprovalUsers.length === 0 ? { skip: "CSR event, but auto-approval is off" } : keysOfLabelled(event, io, CertificateSigningRequestResource);

// Resource mode carries the labels; a Reference-mode event needs a read.
async function labelsOf(event: ObjectEvent, resource: ApiResource, hub: KubeClient): Promise<Record<string, string> | undefined> {
  const fromPayload = event.object?.metadata as { labels?: Record<string, string> } | undefined;
  if (fromPayload) return fromPayload.labels ?? {};
  const current = await hub.get(resource, event.ref.name, event.ref.namespace);
  return current ? ((current.metadata as { labels?: Record<string, string> }).labels ?? {}) : undefined;
}

export async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const hub = io.cluster(key.cluster);
  const name = key.name;
  let cluster = await hub.get<ManagedCluster>(ManagedClusterResource, name);
  if (!cluster) {
    const works = await removeClusterRbac(hub, name);
    if (works) return worksWait(io, name, works);
    waitOver(io, name);
    io.log.info({ cluster: name }, "cluster is gone: its RBAC removed");
    return done;
  }
  if (cluster.metadata.deletionTimestamp) return cleanUp(io, hub, cluster);
  // Refused before anything is written for the cluster, whatever hubAcceptsClient or a CSR says.
  if (isReservedClusterName(name)) return refuse(io, hub, cluster, reservedCondition(name));
  const autoAccepting = isAutoAcceptPending(cluster, io.config) && (await bootstrappedByAutoApprovalUser(hub, name, io.config.autoApprovalUsers));
  let namespace: KubeObject | undefined;
  if (autoAccepting || cluster.spec?.hubAcceptsClient) {
    namespace = await hub.get(NamespaceResource, name);
    if (namespace && !isClusterNamespace(namespace, name)) return refuse(io, hub, cluster, namespaceNotOwnedCondition(name));
  }
  if (autoAccepting) {
    cluster = await autoAccept(hub, cluster, io.clock.now());
    io.log.info({ cluster: name }, "auto-accepted: its bootstrap CSR came from an auto-approval user");
  }
  if (!cluster.spec?.hubAcceptsClient) {
    if (!wasAccepted(cluster)) {
      io.log.info({ cluster: name }, "skipped: not accepted and never was");
      return done;
    }
    return deny(io, hub, cluster);
  }
  return accept(io, hub, cluster, namespace);
}

// Issue 23: the namespace <cluster> is the cluster's only when it carries the cluster-name label with
// that name: set when this function creates it, or by an admin who made it for the cluster. Any other
// namespace of that name was made for something else (kube-system, an application's), and the agent's
// RoleBindings and lease in it would hand the agent whatever lives there. OCM adopts it; we refuse.
const isClusterNamespace = (ns: KubeObject, cluster: string) => (ns.metadata as { labels?: Record<string, string> }).labels?.[ClusterLabel.ClusterName] === cluster;

// Creates the cluster namespace, or finds it already the cluster's; it never labels an existing one.
// Says whether this call created it.
async function ensureClusterNamespace(hub: KubeClient, cluster: string, read: KubeObject | undefined): Promise<boolean> {
  if (read) return false; // the caller has checked it is the cluster's
  try {
    await hub.create(NamespaceResource, clusterNamespace(cluster));
    return true;
  } catch (err) {
    if (!isAlreadyExists(err)) throw err;
    const now = await hub.get(NamespaceResource, cluster);
    if (!now || !isClusterNamespace(now, cluster)) throw new Error(namespaceNotOwnedCondition(cluster).message);
    return false;
  }
}

// A refused cluster gets its verdict in HubAcceptedManagedCluster and nothing else: no namespace, RBAC,
// lease, finalizer or auto-acceptance. A cluster refused after an acceptance (its namespace replaced)
// also loses what its ClusterRole granted beyond reading its ManagedCluster, as after a deny.
async function refuse(io: Io<Config>, hub: KubeClient, cluster: ManagedCluster, condition: NewCondition): Promise<Outcome> {
  const name = cluster.metadata.name;
  if (await hub.get(ClusterRoleResource, HubRbacName.cluster(name))) await createOrUpdate(hub, ClusterRoleResource, clusterRole(name, false), ["rules"]);
  const written = await writeAccepted(hub, cluster, condition, io.clock.now());
  if (written) io.log.warn({ cluster: name, reason: condition.reason }, `not accepted: ${condition.message}`);
  return done;
}

export const wasAccepted = (c: ManagedCluster) => isTrue(c.status?.conditions, ManagedClusterConditionType.HubAccepted);

// OCM's CSR hub driver accepts every cluster once the ManagedClusterAutoApproval gate is on. We narrow
// it to clusters whose agent bootstrapped with an auto-approval identity allowed that cluster name: a
// CSR that the csr-approver's own bootstrap rules approve (shared/cluster-csr.ts) and that no admin
// denied. A CSR that is merely labelled with the cluster proves nothing. The annotation makes it
// happen once: an admin's later hubAcceptsClient=false sticks.
export function isAutoAcceptPending(c: ManagedCluster, config: Config): boolean {
  return config.autoApprovalUsers.length > 0 && c.metadata.annotations?.[ClusterAnnotation.AutomaticallyAcceptedOn] === undefined;
}

// By the cluster-name label alone, as the event hands them (clusterCsrs): an add-on's CSR is left out
// here, another signer's by bootstrapApprovable.
async function bootstrappedByAutoApprovalUser(hub: KubeClient, cluster: string, autoApproval: readonly string[]): Promise<boolean> {
  const { items } = await hub.list<CertificateSigningRequest>(CertificateSigningRequestResource, { labelSelector: clusterCsrsSelector(cluster) });
  for (const csr of items) {
    if (csr.metadata.labels?.[AddonNameLabel] !== undefined || isDenied(csr)) continue;
    const judged = bootstrapApprovable(csr, await readRequest(csr.spec.request), autoApproval);
    if (!("reason" in judged) && judged.cluster === cluster) return true;
  }
  return false;
}

const isDenied = (csr: CertificateSigningRequest) => (csr.status?.conditions ?? []).some((c) => c.type === CsrConditionType.Denied);

// With the finalizers acceptance puts on, so that acceptance has no patch of its own to make.
async function autoAccept(hub: KubeClient, c: ManagedCluster, now: Date): Promise<ManagedCluster> {
  const finalizers = c.metadata.finalizers ?? [];
  const patch = {
    metadata: {
      resourceVersion: c.metadata.resourceVersion,
      annotations: { [ClusterAnnotation.AutomaticallyAcceptedOn]: rfc3339(now) },
      finalizers: [...finalizers, ...acceptedFinalizers.filter((f) => !finalizers.includes(f))],
    },
    ...(c.spec?.hubAcceptsClient ? {} : { spec: { hubAcceptsClient: true } }),
  };
  return hub.patch<ManagedCluster>(ManagedClusterResource, c.metadata.name, patch);
}

async function accept(io: Io<Config>, hub: KubeClient, cluster: ManagedCluster, namespace: KubeObject | undefined): Promise<Outcome> {
  const name = cluster.metadata.name;
  // OCM collects the apply errors into the condition instead of stopping at the first. A judgement found
  // stale is no failure to accept: it ends the waves at once, and the runtime judges again.
  const errors: unknown[] = [];
  const attempt = async (step: () => Promise<unknown>) => {
    try {
      await step();
    } catch (err) {
      if (err instanceof StaleStateError) throw err;
      errors.push(err);
    }
  };
  // A joining agent waits for all of this, so it is written in two waves, each at once: what needs
  // nothing (the namespace, every role), then what needs the first wave (every binding and the lease, in
  // the namespace) and both finalizers in one patch. The patch needs nothing either, but cluster-sets
  // and cluster-taints write a new cluster at the same moment, so it is often refused once and made
  // again on the new version (retryOnConflict): beside the bindings, which wait on the API server's
  // escalation check (docs/scale.md), that mostly runs within their wait; beside the namespace it made
  // the first wave longer. Strictly one wave cannot be: a RoleBinding's namespace must exist, and
  // binding the per-cluster role before it exists takes an unrestricted `bind`. A namespace created just
  // now holds no lease yet: it is created without a read first.
  const [roles, bindings] = acceptedRbacSteps(hub, name);
  let created = false;
  await Promise.all([attempt(async () => (created = await ensureClusterNamespace(hub, name, namespace))), ...roles!.map(attempt)]);
  const [finalized] = await Promise.all([
    retryOnConflict(hub, ManagedClusterResource, cluster, stillAccepting, (c) => addFinalizer(hub, ManagedClusterResource, c, ...acceptedFinalizers)),
    ...[...bindings!, () => (created ? createClusterLease(hub, name, io.clock.now()) : createLeaseIfMissing(hub, name, io.clock.now()))].map(attempt),
  ]);

  if (errors.length > 0) {
    await writeAccepted(hub, finalized, acceptErrorCondition(errors), io.clock.now());
    io.log.warn({ cluster: name, errors: errors.map(messageOf) }, "accepted with errors");
    throw errors[0]; // its class decides whether the source retries
  }
  // HubAccepted=True is what wakes the agent's work on the hub, so it is written only once the
  // authorizer grants what the bindings just written give: an agent woken by it is never refused a
  // permission still on its way, and needs no retry on 403 (issue 26).
  if (!hasCondition(finalized.status?.conditions, acceptedCondition)) {
    const pending = await grantsPending(hub, name);
    if (pending.length > 0) {
      io.log.info({ cluster: name, pending }, "accepted, but the authorizer does not grant it all yet: HubAccepted waits");
      return { recheckInMs: GRANT_RECHECK_MS };
    }
  }
  await retryOnConflict(hub, ManagedClusterResource, finalized, stillAccepting, async (c) => (await writeAccepted(hub, c, acceptedCondition, io.clock.now())) ?? c);
  io.log.info({ cluster: name }, "accepted");
  return done;
}

// The authorizer's view of a new binding lags its write by the API server's informer (milliseconds),
// so what it does not grant yet is asked again in the request a few times, GRANT_ASK_GAP_MS apart,
// before the function asks to be called back (which costs an event's round trip).
const GRANT_ASKS = 4;
const GRANT_ASK_GAP_MS = 20;
const GRANT_RECHECK_MS = 100;

// One permission per binding acceptance writes, asked of the authorizer for the cluster's agents'
// group: which of them it does not grant yet.
async function grantsPending(hub: KubeClient, cluster: string): Promise<string[]> {
  let pending = await grantsNotYet(hub, cluster);
  for (let ask = 1; ask < GRANT_ASKS && pending.length > 0; ask++) {
    await sleep(GRANT_ASK_GAP_MS);
    pending = await grantsNotYet(hub, cluster, pending);
  }
  return pending;
}

// Of `bindings` (all by default), those whose permission the authorizer does not grant yet.
async function grantsNotYet(hub: KubeClient, cluster: string, bindings?: readonly string[]): Promise<string[]> {
  const checks = {
    [HubRbacName.cluster(cluster)]: { group: ManagedClusterResource.group, resource: ManagedClusterResource.plural, subresource: "status", verb: "patch", name: cluster },
    [HubRbacName.registrationRoleBinding(cluster)]: { group: LeaseResource.group, resource: LeaseResource.plural, verb: "update", namespace: cluster, name: ManagedClusterLeaseName },
    [HubRbacName.workRoleBinding(cluster)]: { group: ManifestWorkResource.group, resource: ManifestWorkResource.plural, verb: "list", namespace: cluster },
  };
  const answers = await Promise.all(
    Object.entries(checks)
      .filter(([binding]) => !bindings || bindings.includes(binding))
      .map(async ([binding, resourceAttributes]) =>
      (await mayAccess(hub, { user: agentUser(cluster, "acceptance"), groups: [clusterGroup(cluster)], resourceAttributes })) ? [] : [binding],
    ),
  );
  return answers.flat();
}

async function deny(io: Io<Config>, hub: KubeClient, cluster: ManagedCluster): Promise<Outcome> {
  const name = cluster.metadata.name;
  await createOrUpdate(hub, ClusterRoleResource, clusterRole(name, false), ["rules"]);
  await createOrUpdate(hub, ClusterRoleBindingResource, clusterRoleBinding(name), ["subjects"]);
  const works = await removeRoleBindings(hub, name);
  // As OCM: the condition waits until the work agent has cleaned up the cluster's ManifestWorks.
  if (works) return worksWait(io, name, works);
  waitOver(io, name);
  await writeAccepted(hub, cluster, deniedCondition, io.clock.now());
  io.log.info({ cluster: name }, "denied: agent RBAC narrowed to reading its cluster");
  return done;
}

// The cluster as written, or undefined when the condition was already so.
async function writeAccepted(hub: KubeClient, cluster: ManagedCluster, condition: NewCondition, now: Date): Promise<ManagedCluster | undefined> {
  const conditions = setCondition(cluster.status?.conditions, condition, now);
  return patchStatusIfChanged(hub, ManagedClusterResource, cluster, { ...cluster.status, conditions });
}

const deniedCondition: NewCondition = {
  type: ManagedClusterConditionType.HubAccepted,
  status: "False",
  reason: ManagedClusterReason.HubClusterAdminDenied,
  message: ManagedClusterMessage.HubClusterAdminDenied,
};
// OCM's multi-line aggregate: one message per line.
export const acceptErrorCondition = (errors: readonly unknown[]): NewCondition => ({
  type: ManagedClusterConditionType.HubAccepted,
  status: "False",
  reason: ManagedClusterReason.Error,
  message: errors.map(messageOf).join("\n"),
});
const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));
const reservedCondition = (cluster: string): NewCondition => ({
  type: ManagedClusterConditionType.HubAccepted,
  status: "False",
  reason: ManagedClusterReason.ClusterNameReserved,
  message: reservedClusterNameMessage(cluster),
});
const namespaceNotOwnedCondition = (cluster: string): NewCondition => ({
  type: ManagedClusterConditionType.HubAccepted,
  status: "False",
  reason: ManagedClusterReason.ClusterNamespaceNotOwned,
  message:
    `namespace "${cluster}" exists and was not made for cluster "${cluster}" (it lacks the label ${ClusterLabel.ClusterName}=${cluster}), ` +
    `so the hub does not take it over: register the cluster under another name, or remove that namespace, or label it so if it was made for this cluster`,
});

// An accepted cluster carries both: the RBAC cleanup's (OCM's managed cluster controller) and the
// resource cleanup's (OCM's gc controller, gate ResourceCleanup, on by default). OCM's gc puts the
// second on every cluster; we put it where there is something to clean, on acceptance: a cluster never
// accepted has no namespace of its own.

// A deleted cluster (OCM's gc, pkg/registration/hub/gc): what its agents were given in its namespace is
// deleted first, kind by kind in this order, the next kind only once the last is gone; within a kind
// the lowest cleanup priority first. Its RBAC goes meanwhile (the work RoleBinding waits for the works,
// so the work agent can still remove what it applied). The namespace stays, as in OCM.
const cleanupOrder = [ManagedClusterAddOnV1alpha1Resource, ManifestWorkResource] as const;

async function cleanUp(io: Io<Config>, hub: KubeClient, cluster: ManagedCluster): Promise<Outcome> {
  const name = cluster.metadata.name;
  const remaining = await deleteNamespaceResources(hub, name);
  const deleting: NewCondition = remaining
    ? {
        type: ManagedClusterConditionType.Deleting,
        status: "False",
        reason: ManagedClusterReason.ResourceRemaining,
        message: `${remaining.count} ${remaining.plural} remain in the cluster namespace, ${remaining.pending} of them waiting for finalizers`,
      }
    : { type: ManagedClusterConditionType.Deleting, status: "True", reason: ManagedClusterReason.NoResource, message: "No resource remains in the cluster namespace" };
  const current = (await patchStatusIfChanged(hub, ManagedClusterResource, cluster, { ...cluster.status, conditions: setCondition(cluster.status?.conditions, deleting, io.clock.now()) })) ?? cluster;
  const works = await removeClusterRbac(hub, name);
  if (remaining) return waitFor(io, name, `cluster is deleting: ${remaining.plural} remain in its namespace`, { remaining: remaining.count, pending: remaining.pending });
  if (works) return worksWait(io, name, works);
  const finalizers = current.metadata.finalizers ?? [];
  const kept = finalizers.filter((f) => !(acceptedFinalizers as string[]).includes(f));
  if (kept.length !== finalizers.length) {
    await hub.patch(ManagedClusterResource, name, { metadata: { resourceVersion: current.metadata.resourceVersion, finalizers: kept } });
  }
  waitOver(io, name);
  io.log.info({ cluster: name }, "cluster is deleting: its add-ons and works deleted, RBAC removed, finalizers released");
  return done;
}

type Remaining = { plural: string; count: number; pending: number };

// Deletes the first kind still present in the cluster's namespace, its lowest cleanup priority; says
// what remains, or undefined when nothing does. Only in the cluster's own namespace: one of that name
// made for something else is none of this cluster's business.
async function deleteNamespaceResources(hub: KubeClient, cluster: string): Promise<Remaining | undefined> {
  const namespace = await hub.get(NamespaceResource, cluster);
  if (!namespace || !isClusterNamespace(namespace, cluster)) return undefined;
  for (const resource of cleanupOrder) {
    const { items } = await hub.list(resource, { namespace: cluster });
    if (items.length === 0) continue;
    const first = Math.min(...items.map(cleanupPriority));
    for (const o of items) {
      if (cleanupPriority(o) === first && !o.metadata.deletionTimestamp) await hub.delete(resource, o.metadata.name!, cluster);
    }
    const pending = items.filter((o) => ((o.metadata as { finalizers?: string[] }).finalizers?.length ?? 0) > 0).length;
    return { plural: resource.plural, count: items.length, pending };
  }
  return undefined;
}

// OCM's annotation: an integer from 0 to 100; anything else counts as 0 (deleted first).
function cleanupPriority(o: KubeObject): number {
  const value = (o.metadata as { annotations?: Record<string, string> }).annotations?.[ClusterAnnotation.CleanupPriority];
  if (value === undefined || !/^[+-]?\d+$/.test(value)) return 0;
  const n = Number(value);
  return n >= 0 && n <= 100 ? n : 0;
}

// Cluster gone or deleting: its ClusterRole, ClusterRoleBinding and both RoleBindings go. Says how many
// ManifestWorks the work RoleBinding waits for, or undefined once all are gone.
async function removeClusterRbac(hub: KubeClient, cluster: string): Promise<number | undefined> {
  await hub.delete(ClusterRoleBindingResource, HubRbacName.cluster(cluster));
  await hub.delete(ClusterRoleResource, HubRbacName.cluster(cluster));
  return removeRoleBindings(hub, cluster);
}

// The work RoleBinding keeps its finalizer until namespace <cluster> holds no ManifestWork, so the
// work agent can still remove what it applied. No work RoleBinding left, nothing to wait for.
// Says how many ManifestWorks it waits for, or undefined once done.
async function removeRoleBindings(hub: KubeClient, cluster: string): Promise<number | undefined> {
  await hub.delete(RoleBindingResource, HubRbacName.registrationRoleBinding(cluster), cluster);
  await hub.delete(RoleBindingResource, HubRbacName.workRoleBinding(cluster), cluster);
  const workBinding = await hub.get(RoleBindingResource, HubRbacName.workRoleBinding(cluster), cluster);
  if (!workBinding) return undefined;
  const works = await hub.list(ManifestWorkResource, { namespace: cluster });
  if (works.items.length > 0) return works.items.length;
  await removeFinalizer(hub, RoleBindingResource, workBinding, WorkFinalizer.ManifestWorkCleanup);
  return undefined;
}
const worksWait = (io: Io<Config>, cluster: string, works: number) => waitFor(io, cluster, "work RoleBinding kept: ManifestWorks remain", { works });

// The two waves of acceptance: the roles, then the bindings (the API server checks a binding against
// the rules of the role it names, so the role must be there first). Within a wave the objects are
// independent. The work RoleBinding is created with its finalizer; one found without it gets it.
function acceptedRbacSteps(hub: KubeClient, cluster: string): (() => Promise<unknown>)[][] {
  return [
    [
      () => createOrUpdate(hub, ClusterRoleResource, clusterRole(cluster, true), ["rules"]),
      () => createOrUpdate(hub, ClusterRoleResource, registrationClusterRole, ["rules"]),
      () => createOrUpdate(hub, ClusterRoleResource, workClusterRole, ["rules"]),
    ],
    [
      () => createOrUpdate(hub, ClusterRoleBindingResource, clusterRoleBinding(cluster), ["subjects"]),
      () => createOrUpdate(hub, RoleBindingResource, roleBinding(cluster, "registration"), ["subjects"]),
      async () => {
        const binding = await createOrUpdate(hub, RoleBindingResource, roleBinding(cluster, "work"), ["subjects"]);
        await addFinalizer(hub, RoleBindingResource, binding, WorkFinalizer.ManifestWorkCleanup);
      },
    ],
  ];
}

// Also created by the lease monitor (shared/cluster-lease.ts).
async function createLeaseIfMissing(hub: KubeClient, cluster: string, now: Date): Promise<void> {
  if (!(await hub.get(LeaseResource, ManagedClusterLeaseName, cluster))) await createClusterLease(hub, cluster, now);
}
