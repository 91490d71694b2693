// Accepts and denies ManagedClusters on the hub (ocm-protocol §4.2): the cluster namespace, the RBAC that
// lets an accepted cluster's agents in (and the narrower RBAC after a deny), the cluster lease,
// HubAcceptedManagedCluster, auto-acceptance, and the RBAC cleanup once the cluster goes.
import { createClusterLease } from "../../shared/cluster-lease.ts";
import { HubSettingsSchema, hubSettingsFromEnv, type HubSettings } from "../../shared/settings.ts";
import { ManagedClusterMessage } from "../../shared/api/health.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import type { ObjectEvent, TickEvent } from "../../shared/events.ts";
import { defineFunction, type KeysOrSkip, type Watch } from "../../shared/sdk.ts";
import type { KubeClient, KubeObject } from "../../shared/kube/client.ts";
import { addFinalizer, createOrUpdate, patchStatusIfChanged, removeFinalizer, wouldWrite } from "../../shared/apply.ts";
import { hasCondition, isTrue, setCondition, type NewCondition } from "../../shared/conditions.ts";
import { rfc3339 } from "../../shared/clock.ts";
import type { ApiResource } from "../../shared/api/meta.ts";
import {
  CertificateSigningRequestResource,
  ClusterRoleBindingResource,
  ClusterRoleResource,
  KubeAPIServerClientSignerName,
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
  type ManagedCluster,
} from "../../shared/api/cluster.ts";
import { ManifestWorkResource, WorkFinalizer } from "../../shared/api/work.ts";
import { AddonNameLabel } from "../../shared/api/registration.ts";
import { HubRbacName } from "../../shared/api/register.ts";
import { CsrConditionType, type CertificateSigningRequest } from "../../shared/api/certificates.ts";
import { bootstrapApprovable } from "../../shared/cluster-csr.ts";
import { readRequest } from "../../shared/pki.ts";
import { clusterNamespace, clusterRole, clusterRoleBinding, registrationClusterRole, roleBinding, workClusterRole } from "./rbac.ts";

// Both hub functions read the same settings (shared/settings.ts).
export const ConfigSchema = HubSettingsSchema;
export type Config = HubSettings;
export const configFromEnv = hubSettingsFromEnv;

// The root kind is ManagedCluster, all its changes: a deleted cluster's RBAC goes. A cluster is also
// woken by the objects labelled with its name when someone changes or removes them (put them back), by
// a bootstrap CSR (auto-acceptance), and by a ManifestWork leaving its namespace (the last one gone frees
// the work RoleBinding's finalizer). Those come in Resource mode: the payload carries the label.
export const fn = defineFunction({
  name: "cluster-acceptor",
  config: ConfigSchema,
  env: configFromEnv,
  watches: (c) => [
    { cluster: c.hubCluster, resource: ManagedClusterResource, mode: "Either", root: true },
    ...[ClusterRoleResource, ClusterRoleBindingResource, RoleResource, RoleBindingResource, NamespaceResource].map(
      (resource): Watch<Config> => ({ cluster: c.hubCluster, resource, labelSelector: ClusterLabel.ClusterName, verbs: ["update", "delete"], keys: (e, io) => keysOfLabelled(e, io, resource) }),
    ),
    { cluster: c.hubCluster, resource: CertificateSigningRequestResource, labelSelector: ClusterLabel.ClusterName, verbs: ["add"], keys: keysOfCsr },
    {
      cluster: c.hubCluster,
      resource: ManifestWorkResource,
      verbs: ["delete"],
      keys: (e) => (e.ref.namespace ? [{ cluster: e.cluster, name: e.ref.namespace }] : { skip: "ManifestWork without namespace" }),
    },
  ],
  resyncSeconds: 60,
  resync,
  reconcile,
});
export const spec = fn.spec;

// A resync tick reconciles the clusters that differ from what their last reconcile leaves, judged from
// one list per kind instead of a reconcile (nine reads) per cluster: one deleting, awaiting
// auto-acceptance or a deny; an accepted one without its condition, finalizer, namespace or any RBAC
// object as desired (its auto-acceptance mark waits for its next event); and a gone one whose RBAC
// remains. The shared ClusterRoles, when drifted, wake one accepted cluster, whose reconcile writes them.
async function resync(io: Io<Config>, tick: TickEvent): Promise<KeysOrSkip> {
  const cluster = io.config.hubCluster;
  if (tick.cluster && tick.cluster !== cluster) return { skip: `tick for cluster ${tick.cluster}, where this function reconciles nothing` };
  const hub = io.cluster(cluster);
  const labelled = { labelSelector: ClusterLabel.ClusterName };
  const [clusters, namespaces, roles, clusterBindings, bindings] = await Promise.all([
    hub.list<ManagedCluster>(ManagedClusterResource),
    hub.list(NamespaceResource, labelled),
    hub.list(ClusterRoleResource, labelled),
    hub.list(ClusterRoleBindingResource, labelled),
    hub.list(RoleBindingResource, labelled),
  ]);
  const byName = (items: KubeObject[]) => new Map(items.map((o) => [`${o.metadata.namespace ?? ""}/${o.metadata.name}`, o]));
  const found = { namespaces: byName(namespaces.items), roles: byName(roles.items), clusterBindings: byName(clusterBindings.items), bindings: byName(bindings.items) };
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

type Found = Record<"namespaces" | "roles" | "clusterBindings" | "bindings", Map<string, KubeObject>>;

export function needsLook(c: ManagedCluster, found: Found, config: Config): boolean {
  const name = c.metadata.name;
  if (c.metadata.deletionTimestamp) return true;
  if (!c.spec?.hubAcceptsClient) return wasAccepted(c) || isAutoAcceptPending(c, config);
  if (!hasCondition(c.status?.conditions, acceptedCondition) || !c.metadata.finalizers?.includes(ClusterFinalizer.ApiResourceCleanup)) return true;
  if (!found.namespaces.has(`/${name}`)) return true;
  const work = found.bindings.get(`${name}/${HubRbacName.workRoleBinding(name)}`);
  return (
    wouldWrite(found.roles.get(`/${HubRbacName.cluster(name)}`), clusterRole(name, true), ["rules"]) ||
    wouldWrite(found.clusterBindings.get(`/${HubRbacName.cluster(name)}`), clusterRoleBinding(name), ["subjects"]) ||
    wouldWrite(found.bindings.get(`${name}/${HubRbacName.registrationRoleBinding(name)}`), roleBinding(name, "registration"), ["subjects"]) ||
    wouldWrite(work, roleBinding(name, "work"), ["subjects"]) ||
    !(work?.metadata.finalizers as string[] | undefined)?.includes(WorkFinalizer.ManifestWorkCleanup)
  );
}

// OCM requeues after 5 s while ManifestWorks keep the work RoleBinding's finalizer in place.
const WORKS_REMAIN_RECHECK_MS = 5_000;

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
    io.log.info({ cluster: name }, "cluster is gone: removing its RBAC");
    return removeClusterRbac(io, hub, name);
  }
  if (cluster.metadata.deletionTimestamp) {
    const outcome = await removeClusterRbac(io, hub, name);
    if ("recheckInMs" in outcome) return outcome;
    await removeFinalizer(hub, ManagedClusterResource, cluster, ClusterFinalizer.ApiResourceCleanup);
    io.log.info({ cluster: name }, "cluster is deleting: RBAC removed, finalizer released");
    return done;
  }
  if (isAutoAcceptPending(cluster, io.config) && (await bootstrappedByAutoApprovalUser(hub, name, io.config.autoApprovalUsers))) {
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
  return accept(io, hub, cluster);
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

async function bootstrappedByAutoApprovalUser(hub: KubeClient, cluster: string, autoApproval: readonly string[]): Promise<boolean> {
  const { items } = await hub.list<CertificateSigningRequest>(CertificateSigningRequestResource, {
    labelSelector: `${ClusterLabel.ClusterName}=${cluster},!${AddonNameLabel}`,
    fieldSelector: `spec.signerName=${KubeAPIServerClientSignerName}`,
  });
  for (const csr of items) {
    if (isDenied(csr)) continue;
    const judged = bootstrapApprovable(csr, await readRequest(csr.spec.request), autoApproval);
    if (!("reason" in judged) && judged.cluster === cluster) return true;
  }
  return false;
}

const isDenied = (csr: CertificateSigningRequest) => (csr.status?.conditions ?? []).some((c) => c.type === CsrConditionType.Denied);

async function autoAccept(hub: KubeClient, c: ManagedCluster, now: Date): Promise<ManagedCluster> {
  const patch = {
    metadata: { resourceVersion: c.metadata.resourceVersion, annotations: { [ClusterAnnotation.AutomaticallyAcceptedOn]: rfc3339(now) } },
    ...(c.spec?.hubAcceptsClient ? {} : { spec: { hubAcceptsClient: true } }),
  };
  return hub.patch<ManagedCluster>(ManagedClusterResource, c.metadata.name, patch);
}

async function accept(io: Io<Config>, hub: KubeClient, cluster: ManagedCluster): Promise<Outcome> {
  const name = cluster.metadata.name;
  // OCM collects the apply errors into the condition instead of stopping at the first.
  const errors: unknown[] = [];
  const attempt = async (step: () => Promise<unknown>) => {
    try {
      await step();
    } catch (err) {
      errors.push(err);
    }
  };
  await attempt(() => createOrUpdate(hub, NamespaceResource, clusterNamespace(name), []));
  const finalized = await addFinalizer(hub, ManagedClusterResource, cluster, ClusterFinalizer.ApiResourceCleanup);
  // A joining agent waits for all of these, so each wave is written at once.
  const [roles, bindings] = acceptedRbacSteps(hub, name);
  await Promise.all([...roles!, () => createLeaseIfMissing(hub, name, io.clock.now())].map(attempt));
  await Promise.all(bindings!.map(attempt));

  const condition = errors.length === 0 ? acceptedCondition : acceptErrorCondition(errors);
  await writeAccepted(hub, finalized, condition, io.clock.now());
  if (errors.length > 0) {
    io.log.warn({ cluster: name, errors: errors.map(messageOf) }, "accepted with errors");
    throw errors[0]; // its class decides whether the source retries
  }
  io.log.info({ cluster: name }, "accepted");
  return done;
}

async function deny(io: Io<Config>, hub: KubeClient, cluster: ManagedCluster): Promise<Outcome> {
  const name = cluster.metadata.name;
  await createOrUpdate(hub, ClusterRoleResource, clusterRole(name, false), ["rules"]);
  await createOrUpdate(hub, ClusterRoleBindingResource, clusterRoleBinding(name), ["subjects"]);
  const outcome = await removeRoleBindings(io, hub, name);
  // As OCM: the condition waits until the work agent has cleaned up the cluster's ManifestWorks.
  if ("recheckInMs" in outcome) return outcome;
  await writeAccepted(hub, cluster, deniedCondition, io.clock.now());
  io.log.info({ cluster: name }, "denied: agent RBAC narrowed to reading its cluster");
  return done;
}

async function writeAccepted(hub: KubeClient, cluster: ManagedCluster, condition: NewCondition, now: Date): Promise<void> {
  const conditions = setCondition(cluster.status?.conditions, condition, now);
  await patchStatusIfChanged(hub, ManagedClusterResource, cluster, { ...cluster.status, conditions });
}

const acceptedCondition: NewCondition = {
  type: ManagedClusterConditionType.HubAccepted,
  status: "True",
  reason: ManagedClusterReason.HubClusterAdminAccepted,
  message: ManagedClusterMessage.HubClusterAdminAccepted,
};
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

// Cluster gone or deleting: its ClusterRole, ClusterRoleBinding and both RoleBindings go.
async function removeClusterRbac(io: Io<Config>, hub: KubeClient, cluster: string): Promise<Outcome> {
  await hub.delete(ClusterRoleBindingResource, HubRbacName.cluster(cluster));
  await hub.delete(ClusterRoleResource, HubRbacName.cluster(cluster));
  return removeRoleBindings(io, hub, cluster);
}

// The work RoleBinding keeps its finalizer until namespace <cluster> holds no ManifestWork, so the
// work agent can still remove what it applied.
async function removeRoleBindings(io: Io<Config>, hub: KubeClient, cluster: string): Promise<Outcome> {
  await hub.delete(RoleBindingResource, HubRbacName.registrationRoleBinding(cluster), cluster);
  await hub.delete(RoleBindingResource, HubRbacName.workRoleBinding(cluster), cluster);
  const works = await hub.list(ManifestWorkResource, { namespace: cluster });
  if (works.items.length > 0) {
    io.log.info({ cluster, works: works.items.length }, "work RoleBinding kept: ManifestWorks remain");
    return { recheckInMs: WORKS_REMAIN_RECHECK_MS };
  }
  const workBinding = await hub.get(RoleBindingResource, HubRbacName.workRoleBinding(cluster), cluster);
  if (workBinding) await removeFinalizer(hub, RoleBindingResource, workBinding, WorkFinalizer.ManifestWorkCleanup);
  return done;
}

// Ordered so that every role exists before its binding: the API server's bind check resolves the role
// to confirm the writer holds all its permissions.
// In two waves: the roles, then the bindings (the API server checks a binding against the rules of the
// role it names, so the role must be there first). Within a wave the objects are independent.
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
