// Built-in Kubernetes kinds the functions and the harness address (API coordinates only; bodies are
// plain JSON as the API server sends it).
import type { ApiResource } from "./meta.ts";

const core = (kind: string, plural: string, namespaced: boolean) => ({ group: "", version: "v1", kind, plural, namespaced }) as const satisfies ApiResource;
const rbac = (kind: string, plural: string, namespaced: boolean) =>
  ({ group: "rbac.authorization.k8s.io", version: "v1", kind, plural, namespaced }) as const satisfies ApiResource;

export const NamespaceResource = core("Namespace", "namespaces", false);
export const SecretResource = core("Secret", "secrets", true);
export const PodResource = core("Pod", "pods", true);
export const ConfigMapResource = core("ConfigMap", "configmaps", true);
export const ServiceAccountResource = core("ServiceAccount", "serviceaccounts", true);
export const NodeResource = core("Node", "nodes", false);
export const EventResource = core("Event", "events", true);
export const ClusterRoleResource = rbac("ClusterRole", "clusterroles", false);
export const ClusterRoleBindingResource = rbac("ClusterRoleBinding", "clusterrolebindings", false);
export const RoleResource = rbac("Role", "roles", true);
export const RoleBindingResource = rbac("RoleBinding", "rolebindings", true);
export const DeploymentResource = { group: "apps", version: "v1", kind: "Deployment", plural: "deployments", namespaced: true } as const satisfies ApiResource;
export const LeaseResource = { group: "coordination.k8s.io", version: "v1", kind: "Lease", plural: "leases", namespaced: true } as const satisfies ApiResource;
export const CertificateSigningRequestResource = {
  group: "certificates.k8s.io",
  version: "v1",
  kind: "CertificateSigningRequest",
  plural: "certificatesigningrequests",
  namespaced: false,
} as const satisfies ApiResource;
export const SubjectAccessReviewResource = {
  group: "authorization.k8s.io",
  version: "v1",
  kind: "SubjectAccessReview",
  plural: "subjectaccessreviews",
  namespaced: false,
} as const satisfies ApiResource;
export const SelfSubjectAccessReviewResource = {
  group: "authorization.k8s.io",
  version: "v1",
  kind: "SelfSubjectAccessReview",
  plural: "selfsubjectaccessreviews",
  namespaced: false,
} as const satisfies ApiResource;
export const CustomResourceDefinitionResource = {
  group: "apiextensions.k8s.io",
  version: "v1",
  kind: "CustomResourceDefinition",
  plural: "customresourcedefinitions",
  namespaced: false,
} as const satisfies ApiResource;

// Signer names and CSR usages Kubernetes defines.
export const KubeAPIServerClientSignerName = "kubernetes.io/kube-apiserver-client";

export const MutatingWebhookConfigurationResource = { group: "admissionregistration.k8s.io", version: "v1", kind: "MutatingWebhookConfiguration", plural: "mutatingwebhookconfigurations", namespaced: false } as const satisfies ApiResource;
