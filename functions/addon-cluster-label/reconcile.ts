// Labels each ManagedCluster with the health of its add-ons (OCM hub add-on feature discovery):
// feature.open-cluster-management.io/addon-<a> is available, unhealthy or unreachable after the add-on's
// Available condition, and goes when the add-on does. The root kind is ManagedCluster.
import { HubClusterSchema, type HubCluster } from "../../shared/settings.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import { liveCluster } from "../../shared/live-cluster.ts";
import { defineFunction } from "../../shared/sdk.ts";
import { findCondition } from "../../shared/conditions.ts";
import { ManagedClusterConditionType, ManagedClusterResource } from "../../shared/api/cluster.ts";
import {
  AddOnConditionType,
  AddOnFeatureLabelPrefix,
  AddOnFeatureValue,
  ManagedClusterAddOnV1alpha1Resource,
  type ManagedClusterAddOnV1alpha1,
} from "../../shared/api/addon.ts";

// Only which cluster is the hub (shared/settings.ts); events from any other cluster are not ours.
export type Config = HubCluster;

// The root kind is ManagedCluster (a deleted one has no labels to keep), its events and ticks skipped
// while it is settled; an add-on event, its deletion too, wakes the cluster whose namespace it lives in.
export default defineFunction({
  name: "addon-cluster-label",
  config: HubClusterSchema,
  watches: (c) => [
    { cluster: c.hubCluster, resource: ManagedClusterResource, mode: "Resource", verbs: ["add", "update"], root: true },
    {
      cluster: c.hubCluster,
      resource: ManagedClusterAddOnV1alpha1Resource,
      mode: "Either",
      keys: (e) => (e.ref.namespace ? [{ cluster: e.cluster, name: e.ref.namespace }] : { skip: "ManagedClusterAddOn without namespace" }),
    },
  ],
  resyncSeconds: 60,
  // a cluster deleting, or not yet Available, has no labels to change (see reconcile); as data, so the
  // relay does not wake the function for one
  settled: [{ has: "metadata.deletionTimestamp" }, { lacksCondition: ManagedClusterConditionType.Available }],
  // The addon-cluster-label function (functions/addon-cluster-label) on the hub: reads add-ons and patches
  // the feature.open-cluster-management.io/addon-<a> labels of their ManagedCluster.
  writes: (c) => [
    { cluster: c.hubCluster, why: "the feature.open-cluster-management.io/addon-<a> labels, a merge patch", apiGroups: ["cluster.open-cluster-management.io"], resources: ["managedclusters"], verbs: ["patch"] },
  ],
  reconcile,
});

export async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const hub = io.cluster(key.cluster);
  const cluster = await liveCluster(io, key);
  if (!cluster) return done;
  // OCM waits for the cluster's first Available: before it, nothing is known about its add-ons either
  if (!findCondition(cluster.status?.conditions, ManagedClusterConditionType.Available)) {
    io.log.info({ cluster: key.name }, "skipped: cluster has no Available condition yet");
    return done;
  }
  const { items } = await hub.list<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, { namespace: key.name });
  const change = labelChange(cluster.metadata.labels ?? {}, items);
  if (!Object.keys(change).length) return done;
  // merge patch: null removes a label; the resourceVersion makes a concurrent change conflict
  await hub.patch(ManagedClusterResource, key.name, { metadata: { resourceVersion: cluster.metadata.resourceVersion, labels: change } });
  io.log.info({ cluster: key.name, labels: change }, "add-on feature labels updated");
  return done;
}

export function featureValue(addon: ManagedClusterAddOnV1alpha1): string {
  const status = findCondition(addon.status?.conditions, AddOnConditionType.Available)?.status;
  return status === "True" ? AddOnFeatureValue.Available : status === "False" ? AddOnFeatureValue.Unhealthy : AddOnFeatureValue.Unreachable;
}

// The labels to set (value) or remove (null): one per add-on not being deleted, none for add-ons gone.
export function labelChange(labels: Readonly<Record<string, string>>, addons: readonly ManagedClusterAddOnV1alpha1[]): Record<string, string | null> {
  const want = new Map(addons.filter((a) => !a.metadata.deletionTimestamp).map((a) => [`${AddOnFeatureLabelPrefix}${a.metadata.name}`, featureValue(a)]));
  const change: Record<string, string | null> = {};
  for (const [k, v] of want) if (labels[k] !== v) change[k] = v;
  for (const k of Object.keys(labels)) if (k.startsWith(AddOnFeatureLabelPrefix) && !want.has(k)) change[k] = null;
  return change;
}
