// Installs add-ons by a ClusterManagementAddOn's install strategy (ocm-protocol §6.2): Manual installs
// nothing; Placements keeps a ManagedClusterAddOn in the namespace of every cluster the listed
// Placements select, and deletes the add-on's ManagedClusterAddOns from every other cluster.
// The root kind is ClusterManagementAddOn; add-on objects are read and written as v1alpha1 (storage).
import { HubClusterSchema, type HubCluster } from "../../shared/settings.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import type { ObjectEvent } from "../../shared/events.ts";
import { defineFunction, type KeysOrSkip } from "../../shared/sdk.ts";
import type { KubeClient } from "../../shared/kube/client.ts";
import { isAlreadyExists } from "../../shared/kube/errors.ts";
import { ClusterLabel, ManagedClusterResource, PlacementDecisionResource, PlacementResource, type ManagedCluster } from "../../shared/api/cluster.ts";
import { cmaControllerReference } from "../../shared/addon-owners.ts";
import {
  AddOnAnnotation,
  AddOnAnnotationPrefix,
  AddOnLifecycle,
  ClusterManagementAddOnV1alpha1Resource,
  DefaultAddOnInstallNamespace,
  ManagedClusterAddOnV1alpha1Resource,
  type ClusterManagementAddOnV1alpha1,
  type ManagedClusterAddOnV1alpha1,
} from "../../shared/api/addon.ts";
import { placementClusters, type PlacementRef } from "../../shared/placement-decisions.ts";
import { fieldSelectorOf } from "../../shared/selector-query.ts";

// Only which cluster is the hub (shared/settings.ts); events from any other cluster are not ours.
export type Config = HubCluster;

// PlacementDecision events in Resource mode carry the placement label that names their Placement; the
// CMA's may come in either mode, the keys being names.
export default defineFunction({
  name: "addon-installer",
  config: HubClusterSchema,
  watches: (c) => [
    { cluster: c.hubCluster, resource: ClusterManagementAddOnV1alpha1Resource, mode: "Either", verbs: ["add", "update"], root: true },
    // A hand-deleted or hand-made add-on is put back in line with the strategy of the CMA of its name.
    { cluster: c.hubCluster, resource: ManagedClusterAddOnV1alpha1Resource, verbs: ["add", "delete"], keys: (e) => [{ cluster: c.hubCluster, name: e.ref.name }] },
    { cluster: c.hubCluster, resource: PlacementResource, verbs: ["add", "delete"], keys: (e, io) => cmasUsing(io, { namespace: e.ref.namespace ?? "", name: e.ref.name }) },
    { cluster: c.hubCluster, resource: PlacementDecisionResource, keys: decisionKeys },
  ],
  resyncSeconds: 60,
  // The addon-installer function (functions/addon-installer) on the hub: reads ClusterManagementAddOns,
  // placements and their decisions, and creates or deletes ManagedClusterAddOns in cluster namespaces.
  writes: (c) => [
    { cluster: c.hubCluster, why: "blockOwnerDeletion on the CMA owner reference needs update on the owner's finalizers (OwnerReferencesPermissionEnforcement, where that admission plugin is on)", apiGroups: ["addon.open-cluster-management.io"], resources: ["clustermanagementaddons/finalizers"], verbs: ["update"] },
    { cluster: c.hubCluster, why: "the add-ons the strategy installs and removes in cluster namespaces", apiGroups: ["addon.open-cluster-management.io"], resources: ["managedclusteraddons"], verbs: ["create", "delete"] },
    { cluster: c.hubCluster, why: "clusters: do they exist, and which addon.open-cluster-management.io annotations to copy", apiGroups: ["cluster.open-cluster-management.io"], resources: ["managedclusters", "placements", "placementdecisions"], verbs: ["get", "list", "watch"] },
  ],
  reconcile,
});

// A payload without the placement label (or none at all) wakes every user of the namespace.
function decisionKeys(event: ObjectEvent, io: Io<Config>): Promise<KeysOrSkip> {
  const labels = (event.object?.metadata as { labels?: Record<string, string> } | undefined)?.labels;
  return cmasUsing(io, { namespace: event.ref.namespace ?? "", name: labels?.[ClusterLabel.Placement] });
}

async function cmasUsing(io: Io<Config>, ref: { namespace: string; name?: string }): Promise<KeysOrSkip> {
  const hub = io.config.hubCluster;
  const { items } = await io.cluster(hub).list<ClusterManagementAddOnV1alpha1>(ClusterManagementAddOnV1alpha1Resource);
  const keys = items
    .filter((cma) => (cma.spec.installStrategy?.placements ?? []).some((p) => p.namespace === ref.namespace && (ref.name === undefined || p.name === ref.name)))
    .map((cma) => ({ cluster: hub, name: cma.metadata.name }));
  return keys.length ? keys : { skip: `no ClusterManagementAddOn installs by placement ${ref.namespace}/${ref.name ?? "*"}` };
}

export async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const hub = io.cluster(key.cluster);
  const cma = await hub.get<ClusterManagementAddOnV1alpha1>(ClusterManagementAddOnV1alpha1Resource, key.name);
  if (!cma) {
    io.log.info({ addon: key.name }, "skipped: no ClusterManagementAddOn (its add-ons go with it through owner references)");
    return done;
  }
  const skip = whyNotInstalling(cma);
  if (skip) {
    io.log.info({ addon: key.name, reason: skip }, "skipped");
    return done;
  }
  const selected = await selectedClusters(hub, cma.spec.installStrategy?.placements ?? []);
  const { items } = await hub.list<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, { fieldSelector: fieldSelectorOf({ "metadata.name": cma.metadata.name }) });
  const plan = planInstall(selected, items);

  // OCM tries every cluster and reports the errors together; the retry redoes what failed. Several are
  // thrown as one AggregateError, whose every member the runtime decides and logs.
  const errors: unknown[] = [];
  for (const cluster of plan.add) {
    try {
      if (await installOn(hub, cma, cluster)) io.log.info({ addon: key.name, cluster }, "installed: the cluster is selected by a placement");
      else io.log.info({ addon: key.name, cluster }, "not installed: the selected cluster does not exist");
    } catch (err) {
      errors.push(err);
    }
  }
  for (const cluster of plan.remove) {
    try {
      await hub.delete(ManagedClusterAddOnV1alpha1Resource, cma.metadata.name, cluster);
      io.log.info({ addon: key.name, cluster }, "uninstalled: no placement selects the cluster");
    } catch (err) {
      errors.push(err);
    }
  }
  if (errors.length === 1) throw errors[0];
  if (errors.length) throw new AggregateError(errors, `${errors.length} clusters failed for add-on ${key.name}`);
  return done;
}

// Why this CMA's add-ons are not ours to install, or undefined.
export function whyNotInstalling(cma: ClusterManagementAddOnV1alpha1): string | undefined {
  if (cma.metadata.annotations?.[AddOnAnnotation.Lifecycle] === AddOnLifecycle.Self) return "the add-on manages its own lifecycle";
  if (cma.metadata.deletionTimestamp) return "ClusterManagementAddOn is deleting";
  const type = cma.spec.installStrategy?.type ?? "Manual";
  if (type !== "Placements") return `install strategy ${type}`;
  return undefined;
}

// The union of the decisions of every listed Placement; a Placement that does not exist adds nothing.
async function selectedClusters(hub: KubeClient, placements: readonly PlacementRef[]): Promise<Set<string>> {
  const selected = new Set<string>();
  for (const p of placements) for (const c of (await placementClusters(hub, p)) ?? []) selected.add(c);
  return selected;
}

// OCM deletes the add-on from every unselected cluster, also where it was created by hand: under the
// Placements strategy the placements alone decide. An add-on already deleting is left to finish.
export function planInstall(selected: ReadonlySet<string>, existing: readonly ManagedClusterAddOnV1alpha1[]): { add: string[]; remove: string[] } {
  const have = new Set(existing.map((a) => a.metadata.namespace!));
  return {
    add: [...selected].filter((c) => !have.has(c)).sort(),
    remove: existing.filter((a) => !selected.has(a.metadata.namespace!) && !a.metadata.deletionTimestamp).map((a) => a.metadata.namespace!).sort(),
  };
}

// false when the cluster does not exist: there is no namespace to install into, and the resync
// installs once the cluster registers.
async function installOn(hub: KubeClient, cma: ClusterManagementAddOnV1alpha1, cluster: string): Promise<boolean> {
  const mc = await hub.get<ManagedCluster>(ManagedClusterResource, cluster);
  if (!mc) return false;
  const annotations = addonAnnotationsOf(mc);
  const addon: ManagedClusterAddOnV1alpha1 = {
    metadata: {
      name: cma.metadata.name,
      namespace: cluster,
      ownerReferences: [cmaControllerReference(cma)],
      ...(Object.keys(annotations).length ? { annotations } : {}),
    },
    spec: { installNamespace: DefaultAddOnInstallNamespace },
  };
  try {
    await hub.create(ManagedClusterAddOnV1alpha1Resource, addon);
  } catch (err) {
    if (!isAlreadyExists(err)) throw err;
  }
  return true;
}

// OCM copies the cluster's annotations under addon.open-cluster-management.io (hosting cluster, ...).
export function addonAnnotationsOf(mc: ManagedCluster): Record<string, string> {
  return Object.fromEntries(Object.entries(mc.metadata.annotations ?? {}).filter(([k]) => k.startsWith(AddOnAnnotationPrefix)));
}
