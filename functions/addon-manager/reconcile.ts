// Manages each ManagedClusterAddOn on the hub as OCM's addon-manager and, for AddOnTemplate add-ons,
// the addon-framework inside it do (ocm-protocol §6): the owner reference to the ClusterManagementAddOn,
// configReferences and Configured, registration and hub permissions, the deploy ManifestWorks and
// ManifestApplied, Progressing; and, for every add-on, Available=Unknown while its cluster is Unknown
// (§4.5). The root kind is ManagedClusterAddOn, read and written as v1alpha1 (the storage version: our
// CRDs have no conversion webhook, so v1beta1-only fields would not survive).
import { done, type FunctionSpec, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import type { FunctionEvent, ObjectEvent } from "../../shared/events.ts";
import type { KubeClient, KubeObject } from "../../shared/kube/client.ts";
import { patchStatusIfChanged } from "../../shared/apply.ts";
import { cmaControllerReference } from "../../shared/addon-owners.ts";
import { RoleBindingResource } from "../../shared/api/kube.ts";
import { ClusterGroup, ManagedClusterResource, PlacementDecisionResource, PlacementResource, ClusterLabel, type ManagedCluster } from "../../shared/api/cluster.ts";
import { ManifestWorkResource, WorkGroup } from "../../shared/api/work.ts";
import {
  AddOnAnnotation,
  AddOnDeploymentConfigV1alpha1Resource,
  AddOnGroup,
  AddOnLabel,
  AddOnLifecycle,
  AddOnTemplateResource,
  ClusterManagementAddOnV1alpha1Resource,
  ManagedClusterAddOnV1alpha1Resource,
  type ClusterManagementAddOnV1alpha1,
  type ManagedClusterAddOnV1alpha1,
} from "../../shared/api/addon.ts";
import { AddOnConfigResource } from "../../shared/api/addon-strings.ts";
import { configFromEnv, ConfigSchema, type AddOnStatus, type Config, type Scene, type Step } from "./scene.ts";
import { configured } from "./steps/configured.ts";
import { registration } from "./steps/registration.ts";
import { manifestApplied } from "./steps/manifest-applied.ts";
import { progressing } from "./steps/progressing.ts";
import { clusterHealth } from "./steps/cluster-health.ts";

export { configFromEnv, ConfigSchema, type Config };

export const spec: FunctionSpec<Config> = {
  name: "addon-manager",
  keys: keysOf,
  reconcile,
};

export async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const hub = io.cluster(key.cluster);
  const namespace = key.namespace!;
  let mca = await hub.get<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, key.name, namespace);
  if (!mca) {
    io.log.info({ addon: key.name, cluster: namespace }, "skipped: add-on is gone (its works and bindings go with it through owner references)");
    return done;
  }
  const [cluster, cma] = await Promise.all([
    hub.get<ManagedCluster>(ManagedClusterResource, namespace),
    hub.get<ClusterManagementAddOnV1alpha1>(ClusterManagementAddOnV1alpha1Resource, key.name),
  ]);
  const managed = cma && isManagedByAddonManager(cma) ? cma : undefined;
  if (managed) mca = await ensureOwner(io, hub, mca, managed);

  const s: Scene = { io, hub, mca, cluster, cma: managed, now: io.clock.now(), errors: [], configs: { problem: "not read" } };
  const status: AddOnStatus = structuredClone(mca.status ?? {});
  for (const step of stepsFor(s)) await step(s, status);
  await patchStatusIfChanged(hub, ManagedClusterAddOnV1alpha1Resource, mca, status);
  if (s.errors.length) throw s.errors[0];
  return done;
}

// In order: the desired configs first (everything after reads them); registration before the deploy
// (OCM deploys only once RegistrationApplied is set); Progressing after the deploy (it compares the
// works just written with the desired configs); the cluster's health last, since a cluster gone Unknown
// overrides whatever Available said. An add-on of no ClusterManagementAddOn, of a self-managed one, or
// being deleted only gets the last.
function stepsFor(s: Scene): Step[] {
  if (!s.cma || s.mca.metadata.deletionTimestamp) return [clusterHealth];
  const template = isTemplateAddon(s.cma) ? [registration, manifestApplied] : [];
  return [configured, ...template, progressing, clusterHealth];
}

export const isManagedByAddonManager = (cma: ClusterManagementAddOnV1alpha1) => cma.metadata.annotations?.[AddOnAnnotation.Lifecycle] !== AddOnLifecycle.Self;

// ocm templateagent.SupportAddOnTemplate: the CMA lists AddOnTemplate among its configs.
export const isTemplateAddon = (cma: ClusterManagementAddOnV1alpha1) =>
  (cma.spec.supportedConfigs ?? []).some((c) => (c.group ?? "") === AddOnGroup && c.resource === AddOnConfigResource.AddOnTemplates);

// OCM's owner controller: the CMA becomes the controller owner, so deleting it collects the add-on.
async function ensureOwner(io: Io<Config>, hub: KubeClient, mca: ManagedClusterAddOnV1alpha1, cma: ClusterManagementAddOnV1alpha1): Promise<ManagedClusterAddOnV1alpha1> {
  const owner = cmaControllerReference(cma);
  const refs = mca.metadata.ownerReferences ?? [];
  if (refs.some((r) => r.uid === owner.uid)) return mca;
  // a reference to an earlier CMA of the same name (deleted and made again) is replaced
  const others = refs.filter((r) => !(r.kind === owner.kind && r.name === owner.name));
  const updated = await hub.update<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, { ...mca, metadata: { ...mca.metadata, ownerReferences: [...others, owner] } });
  io.log.info({ addon: mca.metadata.name, cluster: mca.metadata.namespace }, "owner reference to the ClusterManagementAddOn set");
  return updated;
}

const isKind = (e: ObjectEvent, group: string, kind: string) => e.ref.kind === kind && e.ref.apiVersion.startsWith(`${group}/`);
const labelsOf = (e: ObjectEvent) => (e.object?.metadata as { labels?: Record<string, string> } | undefined)?.labels;

async function keysOf(event: FunctionEvent, io: Io<Config>): Promise<Key[] | { skip: string }> {
  const hub = io.config.hubCluster;
  const client = io.cluster(hub);
  const keyOf = (a: KubeObject): Key => ({ cluster: hub, namespace: a.metadata.namespace, name: a.metadata.name! });
  const addons = async (o: { namespace?: string; name?: string } = {}) =>
    (await client.list<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, { namespace: o.namespace, fieldSelector: o.name ? `metadata.name=${o.name}` : undefined })).items;

  if (event.type === "tick") {
    if (event.cluster && event.cluster !== hub) return { skip: `tick for cluster ${event.cluster}, not the hub` };
    return (await addons()).map(keyOf);
  }
  if (event.cluster !== hub) return { skip: `event from cluster ${event.cluster}, not the hub` };
  const { namespace, name } = event.ref;
  if (isKind(event, AddOnGroup, ManagedClusterAddOnV1alpha1Resource.kind)) return namespace ? [{ cluster: hub, namespace, name }] : { skip: "ManagedClusterAddOn without namespace" };
  if (isKind(event, AddOnGroup, ClusterManagementAddOnV1alpha1Resource.kind)) return (await addons({ name })).map(keyOf);
  // the cluster's health, its image-registries annotation, its coming and going
  if (isKind(event, ClusterGroup, ManagedClusterResource.kind)) return (await addons({ namespace: name })).map(keyOf);
  if (isKind(event, WorkGroup, ManifestWorkResource.kind) || (event.ref.kind === RoleBindingResource.kind && event.ref.apiVersion.startsWith(`${RoleBindingResource.group}/`))) {
    const labels = labelsOf(event);
    const addon = labels?.[AddOnLabel.AddonName];
    if (!addon) return { skip: `${event.ref.kind} ${name} names no add-on (or came in Reference mode; the resync covers it)` };
    const ns = labels?.[AddOnLabel.AddonNamespace] ?? namespace;
    return ns ? [{ cluster: hub, namespace: ns, name: addon }] : { skip: `${event.ref.kind} without namespace` };
  }
  if (isKind(event, AddOnGroup, AddOnDeploymentConfigV1alpha1Resource.kind) || isKind(event, AddOnGroup, AddOnTemplateResource.kind)) {
    const resource = event.ref.kind === AddOnTemplateResource.kind ? AddOnConfigResource.AddOnTemplates : AddOnConfigResource.AddOnDeploymentConfigs;
    const ref = { resource, namespace: event.ref.namespace ?? "", name };
    const [all, cmas] = await Promise.all([addons(), client.list<ClusterManagementAddOnV1alpha1>(ClusterManagementAddOnV1alpha1Resource)]);
    const defaultedBy = new Set(cmas.items.filter((c) => (c.spec.supportedConfigs ?? []).some((sc) => sc.resource === resource && sc.defaultConfig?.name === name && (sc.defaultConfig.namespace ?? "") === ref.namespace)).map((c) => c.metadata.name));
    const keys = all.filter((a) => defaultedBy.has(a.metadata.name) || usesConfig(a, ref)).map(keyOf);
    return keys.length ? keys : { skip: `no add-on uses ${resource} ${ref.namespace}/${name}` };
  }
  if (isKind(event, ClusterGroup, PlacementResource.kind) || isKind(event, ClusterGroup, PlacementDecisionResource.kind)) {
    const placement = event.ref.kind === PlacementResource.kind ? name : labelsOf(event)?.[ClusterLabel.Placement];
    const { items } = await client.list<ClusterManagementAddOnV1alpha1>(ClusterManagementAddOnV1alpha1Resource);
    const users = items.filter((c) => (c.spec.installStrategy?.placements ?? []).some((p) => p.namespace === namespace && (placement === undefined || p.name === placement)));
    const keys = (await Promise.all(users.map((c) => addons({ name: c.metadata.name })))).flat().map(keyOf);
    return keys.length ? keys : { skip: `no add-on configured by placement ${namespace}/${placement ?? "*"}` };
  }
  return { skip: `not a kind this function watches: ${event.ref.kind}` };
}

function usesConfig(a: ManagedClusterAddOnV1alpha1, ref: { resource: string; namespace: string; name: string }): boolean {
  const inSpec = (a.spec.configs ?? []).some((c) => c.resource === ref.resource && c.name === ref.name && (c.namespace ?? "") === ref.namespace);
  const inStatus = (a.status?.configReferences ?? []).some((c) => c.resource === ref.resource && c.desiredConfig?.name === ref.name && (c.desiredConfig.namespace ?? "") === ref.namespace);
  return inSpec || inStatus;
}
