// Group register.open-cluster-management.io (virtual: it exists only in RBAC rules and access reviews)
// and the hub side of registration: the CSR approval condition and the per-cluster RBAC names.
// Agent subjects (SubjectPrefix, clusterGroup, ...) live in registration.ts.

export const RegisterGroup = "register.open-cluster-management.io";
// SubjectAccessReview attributes OCM checks on this group.
export const RegisterResource = { ManagedClusters: "managedclusters" } as const;
export const RegisterSubresource = { ClientCertificates: "clientcertificates", Accept: "accept" } as const;
export const RegisterVerb = { Renew: "renew" } as const;

// Hub RBAC binds this group as well as clusterGroup(<c>) (for identities that are not certificates).
export const clusterBindingGroup = (cluster: string) => `open-cluster-management:${cluster}`;

// The condition the hub CSR approvers append.
export const CsrApproval = {
  Reason: "AutoApprovedByHubCSRApprovingController",
  ClusterAgentMessage: "Auto approving Managed cluster agent certificate after SubjectAccessReview.",
  AddonAgentMessage: "Auto approving addon agent certificate.",
} as const;

// RBAC the hub applies per accepted cluster (all labelled open-cluster-management.io/cluster-name).
export const HubRbacName = {
  // ClusterRole and ClusterRoleBinding of one cluster
  cluster: (cluster: string) => `open-cluster-management:managedcluster:${cluster}`,
  // RoleBindings in namespace <cluster>
  registrationRoleBinding: (cluster: string) => `open-cluster-management:managedcluster:${cluster}:registration`,
  workRoleBinding: (cluster: string) => `open-cluster-management:managedcluster:${cluster}:work`,
  // ClusterRoles shared by every cluster, bound by the RoleBindings above
  RegistrationClusterRole: "open-cluster-management:managedcluster:registration",
  WorkClusterRole: "open-cluster-management:managedcluster:work",
} as const;
