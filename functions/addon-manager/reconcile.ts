// Manages each ManagedClusterAddOn on the hub as OCM's addon-manager and, for AddOnTemplate add-ons,
// the addon-framework inside it do (ocm-protocol §6): the owner reference to the ClusterManagementAddOn,
// configReferences and Configured, registration and hub permissions, the deploy ManifestWorks and
// ManifestApplied, Progressing; and, for every add-on, Available=Unknown while its cluster is Unknown
// (§4.5). The root kind is ManagedClusterAddOn, read and written as v1alpha1 (the storage version and
// the only one served: our CRDs have no conversion webhook, see shared/api/crds.ts).
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import type { ObjectEvent } from "../../shared/events.ts";
import { HubClusterSchema } from "../../shared/settings.ts";
import { defineFunction, type KeysOrSkip } from "../../shared/sdk.ts";
import type { KubeClient, KubeObject } from "../../shared/kube/client.ts";
import { patchStatusIfChanged } from "../../shared/apply.ts";
import { fieldSelectorOf } from "../../shared/selector-query.ts";
import { cmaControllerReference } from "../../shared/addon-owners.ts";
import { RoleBindingResource } from "../../shared/api/kube.ts";
import { ManagedClusterResource, PlacementDecisionResource, ClusterLabel, type ManagedCluster } from "../../shared/api/cluster.ts";
import { ManifestWorkResource } from "../../shared/api/work.ts";
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
import type { AddOnStatus, Config, Scene, Step } from "./scene.ts";
import { configured } from "./steps/configured.ts";
import { registration } from "./steps/registration.ts";
import { manifestApplied } from "./steps/manifest-applied.ts";
import { health } from "./steps/health.ts";
import { progressing } from "./steps/progressing.ts";
import { clusterHealth } from "./steps/cluster-health.ts";

export type { Config };

// Either mode where the keys are names; Resource mode where the payload's labels name the add-on or the
// placement. Works and bindings only with the add-on label: the hub's source watches no others.
export default defineFunction({
  name: "addon-manager",
  config: HubClusterSchema,
  watches: (c) => [
    { cluster: c.hubCluster, resource: ManagedClusterAddOnV1alpha1Resource, mode: "Either", verbs: ["add", "update"], root: true, keys: addonKeys },
    { cluster: c.hubCluster, resource: ClusterManagementAddOnV1alpha1Resource, verbs: ["add", "update"], keys: (e, io) => addonsKeys(io, { name: e.ref.name }) },
    // the cluster's health and its image-registries annotation
    { cluster: c.hubCluster, resource: ManagedClusterResource, mode: "Either", verbs: ["update"], keys: (e, io) => addonsKeys(io, { namespace: e.ref.name }), related: [{ resource: ManagedClusterAddOnV1alpha1Resource, namespace: "{name}", required: true }] },
    { cluster: c.hubCluster, resource: AddOnTemplateResource, verbs: ["add", "update"], keys: configKeys },
    { cluster: c.hubCluster, resource: AddOnDeploymentConfigV1alpha1Resource, keys: configKeys },
    { cluster: c.hubCluster, resource: PlacementDecisionResource, verbs: ["update"], keys: decisionKeys },
    // the work agent's status: ManifestApplied and Progressing follow it
    { cluster: c.hubCluster, resource: ManifestWorkResource, labelSelector: AddOnLabel.AddonName, verbs: ["update", "delete"], keys: labelledKeys },
    // a hub-permission binding changed or removed by hand is put back
    { cluster: c.hubCluster, resource: RoleBindingResource, labelSelector: AddOnLabel.AddonName, verbs: ["update", "delete"], keys: labelledKeys },
  ],
  resyncSeconds: 60,
  // The addon-manager function (functions/addon-manager) on the hub: keeps ManagedClusterAddOns' owner
  // reference and status, the deploy ManifestWorks of AddOnTemplate add-ons, and the RoleBindings that
  // grant their agents the templates' hub permissions.
  //
  // Binding: a template names any ClusterRole (CurrentCluster) or role (SingleNamespace) for its agent,
  // so the RoleBindings need `bind` on clusterroles and roles without resourceNames; holding every role a
  // template might name is not possible. Whoever may write AddOnTemplates can therefore grant add-on
  // agents any role in cluster namespaces and in the namespaces the templates name, as in OCM, where
  // templates are an administrator's object.
  writes: (c) => [
    { cluster: c.hubCluster, why: "the owner reference", apiGroups: ["addon.open-cluster-management.io"], resources: ["managedclusteraddons"], verbs: ["update"] },
    { cluster: c.hubCluster, why: "the add-on's status", apiGroups: ["addon.open-cluster-management.io"], resources: ["managedclusteraddons/status"], verbs: ["patch", "update"] },
    { cluster: c.hubCluster, why: "blockOwnerDeletion on owner references to these (OwnerReferencesPermissionEnforcement)", apiGroups: ["addon.open-cluster-management.io"], resources: ["clustermanagementaddons/finalizers", "managedclusteraddons/finalizers"], verbs: ["update"] },
    { cluster: c.hubCluster, why: "clusters (health, image mirrors), and the placements whose configs apply to their clusters", apiGroups: ["cluster.open-cluster-management.io"], resources: ["managedclusters", "placements", "placementdecisions"], verbs: ["get", "list", "watch"] },
    { cluster: c.hubCluster, why: "the deploy ManifestWorks of AddOnTemplate add-ons", apiGroups: ["work.open-cluster-management.io"], resources: ["manifestworks"], verbs: ["create", "update", "delete"] },
    { cluster: c.hubCluster, why: "the RoleBindings that grant template add-on agents their hub permissions", apiGroups: ["rbac.authorization.k8s.io"], resources: ["rolebindings"], verbs: ["create", "update", "delete"] },
    { cluster: c.hubCluster, why: "a template names any ClusterRole or role for its agent, so bind cannot be narrowed by name (templates are an administrator's object, as in OCM)", apiGroups: ["rbac.authorization.k8s.io"], resources: ["clusterroles", "roles"], verbs: ["bind"] },
  ],
  reconcile,
});

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
// (OCM deploys only once RegistrationApplied is set); a template add-on's health after the deploy, as
// OCM's deploy controller probes it; Progressing after the deploy (it compares the works just written
// with the desired configs); the cluster's health last, since a cluster gone Unknown overrides whatever
// Available said. An add-on of no ClusterManagementAddOn, of a self-managed one, or being deleted only
// gets the last.
function stepsFor(s: Scene): Step[] {
  if (!s.cma || s.mca.metadata.deletionTimestamp) return [clusterHealth];
  const template = isTemplateAddon(s.cma) ? [registration, manifestApplied, health] : [];
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
  // a reference to an unserved version (v1beta1, written by earlier builds) never resolves for the
  // garbage collector, so it is replaced like one to another CMA
  if (refs.some((r) => r.uid === owner.uid && r.apiVersion === owner.apiVersion)) return mca;
  // a reference to an earlier CMA of the same name (deleted and made again) is replaced
  const others = refs.filter((r) => !(r.kind === owner.kind && r.name === owner.name));
  const updated = await hub.update<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, { ...mca, metadata: { ...mca.metadata, ownerReferences: [...others, owner] } });
  io.log.info({ addon: mca.metadata.name, cluster: mca.metadata.namespace }, "owner reference to the ClusterManagementAddOn set");
  return updated;
}

const labelsOf = (e: ObjectEvent) => (e.object?.metadata as { labels?: Record<string, string> } | undefined)?.labels;
const keyOf = (hub: string, a: KubeObject): Key => ({ cluster: hub, namespace: a.metadata.namespace, name: a.metadata.name! });
const addons = async (io: Io<Config>, o: { namespace?: string; name?: string } = {}) =>
  (await io.cluster(io.config.hubCluster).list<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, { namespace: o.namespace, fieldSelector: o.name ? fieldSelectorOf({ "metadata.name": o.name }) : undefined })).items;
const addonsKeys = async (io: Io<Config>, o: { namespace?: string; name?: string }) => (await addons(io, o)).map((a) => keyOf(io.config.hubCluster, a));

function addonKeys(event: ObjectEvent): KeysOrSkip {
  const { namespace, name } = event.ref;
  return namespace ? [{ cluster: event.cluster, namespace, name }] : { skip: "ManagedClusterAddOn without namespace" };
}

function labelledKeys(event: ObjectEvent): KeysOrSkip {
  const labels = labelsOf(event);
  const addon = labels?.[AddOnLabel.AddonName];
  if (!addon) return { skip: `${event.ref.kind} ${event.ref.name} names no add-on (or came in Reference mode; the resync covers it)` };
  const ns = labels?.[AddOnLabel.AddonNamespace] ?? event.ref.namespace;
  return ns ? [{ cluster: event.cluster, namespace: ns, name: addon }] : { skip: `${event.ref.kind} without namespace` };
}

// An AddOnTemplate or AddOnDeploymentConfig wakes the add-ons that use it, or whose CMA defaults to it.
async function configKeys(event: ObjectEvent, io: Io<Config>): Promise<KeysOrSkip> {
  const hub = io.config.hubCluster;
  const name = event.ref.name;
  const resource = event.ref.kind === AddOnTemplateResource.kind ? AddOnConfigResource.AddOnTemplates : AddOnConfigResource.AddOnDeploymentConfigs;
  const ref = { resource, namespace: event.ref.namespace ?? "", name };
  const [all, cmas] = await Promise.all([addons(io), io.cluster(hub).list<ClusterManagementAddOnV1alpha1>(ClusterManagementAddOnV1alpha1Resource)]);
  const defaultedBy = new Set(cmas.items.filter((c) => (c.spec.supportedConfigs ?? []).some((sc) => sc.resource === resource && sc.defaultConfig?.name === name && (sc.defaultConfig.namespace ?? "") === ref.namespace)).map((c) => c.metadata.name));
  const keys = all.filter((a) => defaultedBy.has(a.metadata.name) || usesConfig(a, ref)).map((a) => keyOf(hub, a));
  return keys.length ? keys : { skip: `no add-on uses ${resource} ${ref.namespace}/${name}` };
}

// A decision of a placement some CMA installs by; one without the placement label wakes every user of
// its namespace.
async function decisionKeys(event: ObjectEvent, io: Io<Config>): Promise<KeysOrSkip> {
  const namespace = event.ref.namespace;
  const placement = labelsOf(event)?.[ClusterLabel.Placement];
  const { items } = await io.cluster(io.config.hubCluster).list<ClusterManagementAddOnV1alpha1>(ClusterManagementAddOnV1alpha1Resource);
  const users = items.filter((c) => (c.spec.installStrategy?.placements ?? []).some((p) => p.namespace === namespace && (placement === undefined || p.name === placement)));
  const keys = (await Promise.all(users.map((c) => addonsKeys(io, { name: c.metadata.name })))).flat();
  return keys.length ? keys : { skip: `no add-on configured by placement ${namespace}/${placement ?? "*"}` };
}

function usesConfig(a: ManagedClusterAddOnV1alpha1, ref: { resource: string; namespace: string; name: string }): boolean {
  const inSpec = (a.spec.configs ?? []).some((c) => c.resource === ref.resource && c.name === ref.name && (c.namespace ?? "") === ref.namespace);
  const inStatus = (a.status?.configReferences ?? []).some((c) => c.resource === ref.resource && c.desiredConfig?.name === ref.name && (c.desiredConfig.namespace ?? "") === ref.namespace);
  return inSpec || inStatus;
}
