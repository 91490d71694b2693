// Where an add-on's agent runs on its cluster, as the spoke agent reads it (OCM getAddOnInstallationNamespace):
// the namespace its secrets go to and its lease is renewed in.
import { AddOnAnnotation, DefaultAddOnInstallNamespace, type ManagedClusterAddOnV1alpha1 } from "./api/addon.ts";

// status.namespace, else the install namespace a v1alpha1 spec carries (OCM reads v1beta1, where it
// arrives as the annotation; our CRDs have no conversion, so v1alpha1 clients leave it in the spec).
export function installNamespaceOf(mca: ManagedClusterAddOnV1alpha1): string {
  return mca.status?.namespace || mca.metadata.annotations?.[AddOnAnnotation.V1alpha1InstallNamespace] || mca.spec.installNamespace || DefaultAddOnInstallNamespace;
}

// OCM's AgentRunningOutsideManagedCluster: the add-on names a hosting cluster, so its agent's credentials
// and lease are on the agent's management cluster rather than the managed one.
export const runsOutsideManagedCluster = (mca: ManagedClusterAddOnV1alpha1): boolean => Boolean(mca.metadata.annotations?.[AddOnAnnotation.HostingClusterName]);

// In Hosted mode the management cluster is shared by every hosted agent, and an agent may touch secrets
// and leases there only in its own namespace: an add-on run outside the managed cluster must install
// there. The reason it cannot be served, or undefined.
export function outsideInstallRefusal(c: { managedCluster?: string; agentNamespace: string }, namespace: string): string | undefined {
  if (c.managedCluster === undefined || namespace === c.agentNamespace) return undefined;
  return `an add-on run outside a hosted cluster must install into the agent's namespace ${c.agentNamespace} on the management cluster, not ${namespace}`;
}
