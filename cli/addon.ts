// `ocmf addon enable`: what `clusteradm addon enable --names <a> --clusters <c>` does: a
// ManagedClusterAddOn named after the add-on in each cluster's namespace on the hub (v1alpha1, whose
// spec.installNamespace clusteradm still sets).
import { ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { DefaultAddOnInstallNamespace, ManagedClusterAddOnV1alpha1Resource, type ManagedClusterAddOnV1alpha1 } from "../shared/api/addon.ts";
import type { KubeClient } from "../shared/kube/client.ts";
import { isAlreadyExists } from "../shared/kube/errors.ts";

export type EnableAddonOptions = {
  addon: string;
  clusters: readonly string[];
  // the agent's install namespace on the spoke; default open-cluster-management-agent-addon
  namespace?: string;
};

export type EnableAddonResult = { cluster: string; result: "created" | "updated" | "unchanged" | "no cluster" };

export async function enableAddon(hub: KubeClient, o: EnableAddonOptions): Promise<EnableAddonResult[]> {
  const installNamespace = o.namespace || DefaultAddOnInstallNamespace;
  const results: EnableAddonResult[] = [];
  for (const cluster of o.clusters) {
    // clusteradm refuses clusters the hub does not know: the namespace would not exist either
    if (!(await hub.get<ManagedCluster>(ManagedClusterResource, cluster))) {
      results.push({ cluster, result: "no cluster" });
      continue;
    }
    results.push({ cluster, result: await enableOne(hub, o.addon, cluster, installNamespace) });
  }
  return results;
}

async function enableOne(hub: KubeClient, addon: string, cluster: string, installNamespace: string): Promise<EnableAddonResult["result"]> {
  const existing = await hub.get<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, addon, cluster);
  if (!existing) {
    try {
      await hub.create<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, { metadata: { name: addon, namespace: cluster }, spec: { installNamespace } });
      return "created";
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
      return enableOne(hub, addon, cluster, installNamespace); // someone else created it meanwhile
    }
  }
  if (existing.spec.installNamespace === installNamespace) return "unchanged";
  await hub.update(ManagedClusterAddOnV1alpha1Resource, { ...existing, spec: { ...existing.spec, installNamespace } });
  return "updated";
}
