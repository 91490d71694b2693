// The owner references OCM's add-on controllers write: a ClusterManagementAddOn controls its
// ManagedClusterAddOns, a ManagedClusterAddOn its deploy works and hub RoleBindings. Like OCM v1.2.0
// (addon-framework's agentdeploy, the addon-manager's owner and install controllers, templateagent), the
// owners' v1alpha1 coordinates: the only version we serve of them (shared/api/crds.ts), and the garbage
// collector resolves an owner only through a version the API server serves.
import { ClusterManagementAddOnV1alpha1Resource, ManagedClusterAddOnV1alpha1Resource } from "./api/addon.ts";
import type { OwnerReference } from "./api/meta.ts";
import type { KubeObject } from "./kube/client.ts";

const apiVersionOf = (r: { group: string; version: string }) => `${r.group}/${r.version}`;

// metav1.NewControllerRef: controller and blockOwnerDeletion set.
export function cmaControllerReference(cma: KubeObject): OwnerReference {
  return { apiVersion: apiVersionOf(ClusterManagementAddOnV1alpha1Resource), kind: ClusterManagementAddOnV1alpha1Resource.kind, name: cma.metadata.name!, uid: cma.metadata.uid!, controller: true, blockOwnerDeletion: true };
}

export function mcaControllerReference(mca: KubeObject): OwnerReference {
  return { apiVersion: apiVersionOf(ManagedClusterAddOnV1alpha1Resource), kind: ManagedClusterAddOnV1alpha1Resource.kind, name: mca.metadata.name!, uid: mca.metadata.uid!, controller: true, blockOwnerDeletion: true };
}

// The plain reference AddOnTemplate's hub-permission RoleBindings carry.
export function mcaOwnerReference(mca: KubeObject): OwnerReference {
  return { apiVersion: apiVersionOf(ManagedClusterAddOnV1alpha1Resource), kind: ManagedClusterAddOnV1alpha1Resource.kind, name: mca.metadata.name!, uid: mca.metadata.uid! };
}

