// Where an add-on's agent runs on its cluster, as the spoke agent reads it (OCM getAddOnInstallationNamespace):
// the namespace its secrets go to and its lease is renewed in.
import { AddOnAnnotation, DefaultAddOnInstallNamespace, type ManagedClusterAddOnV1alpha1 } from "./api/addon.ts";

// status.namespace, else the install namespace a v1alpha1 spec carries (OCM reads v1beta1, where it
// arrives as the annotation; our CRDs have no conversion, so v1alpha1 clients leave it in the spec).
export function installNamespaceOf(mca: ManagedClusterAddOnV1alpha1): string {
  return mca.status?.namespace || mca.metadata.annotations?.[AddOnAnnotation.V1alpha1InstallNamespace] || mca.spec.installNamespace || DefaultAddOnInstallNamespace;
}
