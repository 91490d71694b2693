// The owner references OCM's add-on controllers write: a ClusterManagementAddOn controls its
// ManagedClusterAddOns, a ManagedClusterAddOn its deploy works and hub RoleBindings. OCM writes the
// owners' v1beta1 coordinates; the garbage collector resolves either served version.
import { ClusterManagementAddOnV1beta1Resource, ManagedClusterAddOnV1beta1Resource } from "./api/addon.ts";
import type { OwnerReference } from "./api/meta.ts";
import type { KubeObject } from "./kube/client.ts";

const apiVersionOf = (r: { group: string; version: string }) => `${r.group}/${r.version}`;

// metav1.NewControllerRef: controller and blockOwnerDeletion set.
export function cmaControllerReference(cma: KubeObject): OwnerReference {
  return { apiVersion: apiVersionOf(ClusterManagementAddOnV1beta1Resource), kind: ClusterManagementAddOnV1beta1Resource.kind, name: cma.metadata.name!, uid: cma.metadata.uid!, controller: true, blockOwnerDeletion: true };
}

export function mcaControllerReference(mca: KubeObject): OwnerReference {
  return { apiVersion: apiVersionOf(ManagedClusterAddOnV1beta1Resource), kind: ManagedClusterAddOnV1beta1Resource.kind, name: mca.metadata.name!, uid: mca.metadata.uid!, controller: true, blockOwnerDeletion: true };
}

// The plain reference AddOnTemplate's hub-permission RoleBindings carry.
export function mcaOwnerReference(mca: KubeObject): OwnerReference {
  return { apiVersion: apiVersionOf(ManagedClusterAddOnV1beta1Resource), kind: ManagedClusterAddOnV1beta1Resource.kind, name: mca.metadata.name!, uid: mca.metadata.uid! };
}

