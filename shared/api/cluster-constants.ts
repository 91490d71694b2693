// The strings and API coordinates of group cluster.open-cluster-management.io, without its schemas:
// what long-lived code (the relay and its heartbeat) needs of shared/api/cluster.ts, which re-exports
// them, without loading zod.
import type { ApiResource } from "./resource.ts";

export const ClusterGroup = "cluster.open-cluster-management.io";

export const ManagedClusterResource = {
  group: ClusterGroup,
  version: "v1",
  kind: "ManagedCluster",
  plural: "managedclusters",
  namespaced: false,
} as const satisfies ApiResource;
export const ClusterClaimResource = {
  group: ClusterGroup,
  version: "v1alpha1",
  kind: "ClusterClaim",
  plural: "clusterclaims",
  namespaced: false,
} as const satisfies ApiResource;
export const ManagedClusterSetResource = {
  group: ClusterGroup,
  version: "v1beta2",
  kind: "ManagedClusterSet",
  plural: "managedclustersets",
  namespaced: false,
} as const satisfies ApiResource;
export const ManagedClusterSetBindingResource = {
  group: ClusterGroup,
  version: "v1beta2",
  kind: "ManagedClusterSetBinding",
  plural: "managedclustersetbindings",
  namespaced: true,
} as const satisfies ApiResource;
export const PlacementResource = {
  group: ClusterGroup,
  version: "v1beta1",
  kind: "Placement",
  plural: "placements",
  namespaced: true,
} as const satisfies ApiResource;
export const PlacementDecisionResource = {
  group: ClusterGroup,
  version: "v1beta1",
  kind: "PlacementDecision",
  plural: "placementdecisions",
  namespaced: true,
} as const satisfies ApiResource;

// OCM spells ManagedCluster condition types inconsistently; these are the exact strings.
export const ManagedClusterConditionType = {
  HubAccepted: "HubAcceptedManagedCluster",
  // Defined by the API but never written by current OCM.
  HubDenied: "HubDeniedManagedCluster",
  Joined: "ManagedClusterJoined",
  Available: "ManagedClusterConditionAvailable",
  ClockSynced: "ManagedClusterConditionClockSynced",
  CertificateRotated: "ClusterCertificateRotated",
  Deleting: "Deleting",
} as const;
export type ManagedClusterConditionType =
  (typeof ManagedClusterConditionType)[keyof typeof ManagedClusterConditionType];

export const ManagedClusterReason = {
  HubClusterAdminAccepted: "HubClusterAdminAccepted",
  HubClusterAdminDenied: "HubClusterAdminDenied",
  Error: "Error",
  ManagedClusterJoined: "ManagedClusterJoined",
  ManagedClusterAvailable: "ManagedClusterAvailable",
  ManagedClusterKubeAPIServerUnavailable: "ManagedClusterKubeAPIServerUnavailable",
  ManagedClusterLeaseUpdateStopped: "ManagedClusterLeaseUpdateStopped",
  ManagedClusterClockSynced: "ManagedClusterClockSynced",
  ManagedClusterClockOutOfSync: "ManagedClusterClockOutOfSync",
  ClientCertificateUpdated: "ClientCertificateUpdated",
  ClientCertificateUpdateFailed: "ClientCertificateUpdateFailed",
  ResourceRemaining: "ResourceRemaining",
  DeletingError: "DeletingError",
  NoResource: "NoResource",
  // ours, not OCM's: acceptance refused whatever hubAcceptsClient says (functions/cluster-acceptor)
  ClusterNameReserved: "ClusterNameReserved",
  ClusterNamespaceNotOwned: "ClusterNamespaceNotOwned",
} as const;
export type ManagedClusterReason = (typeof ManagedClusterReason)[keyof typeof ManagedClusterReason];

// status.managedNamespaces[].conditions
export const ManagedNamespaceConditionType = { NamespaceAvailable: "NamespaceAvailable" } as const;
export const ManagedNamespaceReason = {
  NamespaceApplied: "NamespaceApplied",
  NamespaceApplyFailed: "NamespaceApplyFailed",
} as const;

export const ManagedClusterSetConditionType = { ClusterSetEmpty: "ClusterSetEmpty" } as const;
export const ManagedClusterSetReason = { NoClusterMatched: "NoClusterMatched", ClustersSelected: "ClustersSelected" } as const;
export const ClusterSetBindingConditionType = { Bound: "Bound" } as const;
export const ClusterSetBindingReason = { ClusterSetBound: "ClusterSetBound", ClusterSetNotFound: "ClusterSetNotFound" } as const;
export const PlacementConditionType = {
  PlacementSatisfied: "PlacementSatisfied",
  PlacementMisconfigured: "PlacementMisconfigured",
} as const;

export const ClusterLabel = {
  ClusterName: "open-cluster-management.io/cluster-name",
  ClusterSet: "cluster.open-cluster-management.io/clusterset",
  Placement: "cluster.open-cluster-management.io/placement",
  DecisionGroupIndex: "cluster.open-cluster-management.io/decision-group-index",
  DecisionGroupName: "cluster.open-cluster-management.io/decision-group-name",
  // on a ClusterClaim: never synced to the hub
  SpokeOnly: "open-cluster-management.io/spoke-only",
} as const;
// Cluster-set managed namespaces carry this prefix followed by the first 63 characters of the hub hash.
export const ManagedNamespaceLabelPrefix = "clusterset.open-cluster-management.io/";
// The DefaultClusterSet webhook labels clusters with this set when the label is missing.
export const DefaultClusterSetName = "default";
// The set every cluster is in (an empty LabelSelector), kept by the hub like "default".
export const GlobalClusterSetName = "global";
// "false" on default or global: the hub leaves that set's spec to the user.
export const ClusterSetAutoUpdateAnnotation = "cluster.open-cluster-management.io/autoupdate";

export const ClusterAnnotation = {
  AutomaticallyAcceptedOn: "open-cluster-management.io/automatically-accepted-on",
  SkipClockSyncCheck: "registration.open-cluster-management.io/skip-clock-sync-check",
  CleanupPriority: "open-cluster-management.io/cleanup-priority",
} as const;
// "true" on a Placement: OCM's scheduler leaves it alone, and its decisions are written by someone else.
export const PlacementDisableAnnotation = "cluster.open-cluster-management.io/experimental-scheduling-disable";
// --cluster-annotations only passes keys with this prefix.
export const AgentAnnotationPrefix = "agent.open-cluster-management.io";
// Set by our agent in Hosted mode (an annotation of the prefix agents may set); OCM's agents set none.
export const DeployModeAnnotation = `${AgentAnnotationPrefix}/klusterlet-deploy-mode`;

export const ClusterFinalizer = {
  ApiResourceCleanup: "cluster.open-cluster-management.io/api-resource-cleanup",
  ResourceCleanup: "cluster.open-cluster-management.io/resource-cleanup",
} as const;

// Ours, stricter than OCM: names no cluster may have. A cluster's name is its namespace's name on the
// hub, and these are the namespaces of Kubernetes (default, kube-*) and of the hub itself (OCM's
// open-cluster-management*, Knative's knative-*): a cluster so named would be granted rights in them.
// The admission policy managedclustervalidators (manifests/hub/admission-policies.yaml) refuses the
// same names in CEL, the csr-approver approves no certificate for them, the cluster-acceptor accepts none.
export const ReservedClusterNames = { exact: ["default"], prefixes: ["kube-", "knative-", "open-cluster-management"] } as const;

export function isReservedClusterName(name: string): boolean {
  return (ReservedClusterNames.exact as readonly string[]).includes(name) || ReservedClusterNames.prefixes.some((p) => name.startsWith(p));
}

// Why a reserved name is refused; the admission policy's message says the same.
export const reservedClusterNameMessage = (name: string) =>
  `cluster name "${name}" is reserved: a cluster's namespace on the hub is named after it, and default, kube-*, knative-* and open-cluster-management* are the namespaces of Kubernetes and of the hub itself`;

// Lease in namespace <cluster> on the hub; holderIdentity is the same string.
export const ManagedClusterLeaseName = "managed-cluster-lease";
// OCM: 0 is treated as this everywhere.
export const DefaultLeaseDurationSeconds = 60;

export const TaintKey = {
  Unavailable: "cluster.open-cluster-management.io/unavailable",
  Unreachable: "cluster.open-cluster-management.io/unreachable",
} as const;
export const TaintEffect = {
  NoSelect: "NoSelect",
  PreferNoSelect: "PreferNoSelect",
  NoSelectIfNew: "NoSelectIfNew",
} as const;

// Always exposed in status.clusterClaims and sorted first.
export const ReservedClusterClaimNames = [
  "id.k8s.io",
  "kubeversion.open-cluster-management.io",
  "platform.open-cluster-management.io",
  "product.open-cluster-management.io",
] as const;
