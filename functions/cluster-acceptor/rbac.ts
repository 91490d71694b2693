// The RBAC objects acceptance writes for a cluster (ocm-protocol §4.2): the per-cluster ClusterRole and
// its binding, the registration and work RoleBindings in the cluster namespace, and the two shared
// ClusterRoles every cluster's bindings name (the registration one also grants our AgentConfig).
import { ManagedServiceAccountResource } from "../../shared/api/authentication.ts";
import type { KubeObject } from "../../shared/kube/client.ts";
import { CertificateSigningRequestResource, ClusterRoleResource, LeaseResource } from "../../shared/api/kube.ts";
import { ClusterLabel, ManagedClusterResource } from "../../shared/api/cluster.ts";
import { ManifestWorkResource, WorkFinalizer, WorkGroup } from "../../shared/api/work.ts";
import { clusterGroup } from "../../shared/api/registration.ts";
import { HubRbacName, RegisterGroup, RegisterResource, RegisterSubresource, RegisterVerb, clusterBindingGroup } from "../../shared/api/register.ts";
import { AddOnGroup } from "../../shared/api/addon.ts";
import { AgentConfigResource } from "../../shared/api/agent-config.ts";

type PolicyRule = { apiGroups: string[]; resources: string[]; verbs: string[]; resourceNames?: string[] };
type ClusterRole = KubeObject & { metadata: { labels?: Record<string, string> }; rules?: PolicyRule[] };
type Subject = { kind: "Group"; apiGroup: string; name: string };

const RbacGroup = "rbac.authorization.k8s.io";
const clusterLabels = (cluster: string) => ({ [ClusterLabel.ClusterName]: cluster });
const agentSubjects = (cluster: string): Subject[] => [clusterGroup(cluster), clusterBindingGroup(cluster)].map((name) => ({ kind: "Group", apiGroup: RbacGroup, name }));

export const clusterNamespace = (cluster: string): KubeObject => ({ metadata: { name: cluster, labels: clusterLabels(cluster) } });

// The per-cluster role: everything the agent does on its own cluster once accepted; after a deny only
// reading its ManagedCluster, so it can see the verdict.
export function clusterRole(cluster: string, accepted: boolean): ClusterRole {
  const own = { apiGroups: [ManagedClusterResource.group], resources: [ManagedClusterResource.plural], resourceNames: [cluster] };
  const rules: PolicyRule[] = accepted
    ? [
        { apiGroups: [CertificateSigningRequestResource.group], resources: [CertificateSigningRequestResource.plural], verbs: ["create", "get", "list", "watch"] },
        { apiGroups: [RegisterGroup], resources: [`${RegisterResource.ManagedClusters}/${RegisterSubresource.ClientCertificates}`], verbs: [RegisterVerb.Renew] },
        { ...own, verbs: ["get", "list", "update", "watch"] },
        { ...own, resources: [`${ManagedClusterResource.plural}/status`], verbs: ["patch", "update"] },
      ]
    : [{ ...own, verbs: ["get", "list", "watch"] }];
  return { metadata: { name: HubRbacName.cluster(cluster), labels: clusterLabels(cluster) }, rules };
}

export const clusterRoleBinding = (cluster: string): KubeObject => ({
  metadata: { name: HubRbacName.cluster(cluster), labels: clusterLabels(cluster) },
  roleRef: { apiGroup: RbacGroup, kind: ClusterRoleResource.kind, name: HubRbacName.cluster(cluster) },
  subjects: agentSubjects(cluster),
});

export function roleBinding(cluster: string, agent: "registration" | "work"): KubeObject {
  const registration = agent === "registration";
  return {
    metadata: {
      name: registration ? HubRbacName.registrationRoleBinding(cluster) : HubRbacName.workRoleBinding(cluster),
      namespace: cluster,
      labels: clusterLabels(cluster),
      ...(registration ? {} : { finalizers: [WorkFinalizer.ManifestWorkCleanup] }),
    },
    roleRef: { apiGroup: RbacGroup, kind: ClusterRoleResource.kind, name: registration ? HubRbacName.RegistrationClusterRole : HubRbacName.WorkClusterRole },
    subjects: agentSubjects(cluster),
  };
}

// Shared by every cluster; labelled with an empty cluster name as OCM labels them.
export const registrationClusterRole: ClusterRole = {
  metadata: { name: HubRbacName.RegistrationClusterRole, labels: { [ClusterLabel.ClusterName]: "" } },
  rules: [
    // not restricted to managed-cluster-lease: OCM keeps it open for old Kubernetes versions
    { apiGroups: [LeaseResource.group], resources: [LeaseResource.plural], verbs: ["get", "list", "watch", "update"] },
    { apiGroups: [AddOnGroup], resources: ["managedclusteraddons"], verbs: ["get", "list", "watch"] },
    { apiGroups: [AddOnGroup], resources: ["managedclusteraddons/status"], verbs: ["patch", "update"] },
    { apiGroups: ["events.k8s.io"], resources: ["events"], verbs: ["create"] },
    // ours, not OCM's (docs/agent-config.md): the AgentConfig assigned to the cluster, and its status.
    // Bound only in the cluster's namespace, so no cluster reads or reports another's.
    { apiGroups: [AgentConfigResource.group], resources: [AgentConfigResource.plural], verbs: ["get", "list", "watch"] },
    { apiGroups: [AgentConfigResource.group], resources: [`${AgentConfigResource.plural}/status`], verbs: ["patch"] },
    // ours, not OCM's: the cluster's ManagedServiceAccounts, read only, so the spoke's relay and
    // managed-serviceaccount see them; their tokens and status are written as the add-on's own identity,
    // bound only once the add-on is enabled (manifests/addons/managed-serviceaccount.yaml).
    { apiGroups: [ManagedServiceAccountResource.group], resources: [ManagedServiceAccountResource.plural], verbs: ["get", "list", "watch"] },
  ],
};

export const workClusterRole: ClusterRole = {
  metadata: { name: HubRbacName.WorkClusterRole, labels: { [ClusterLabel.ClusterName]: "" } },
  rules: [
    { apiGroups: ["", "events.k8s.io"], resources: ["events"], verbs: ["create", "patch", "update"] },
    { apiGroups: [WorkGroup], resources: [ManifestWorkResource.plural], verbs: ["get", "list", "watch", "update", "patch"] },
    { apiGroups: [WorkGroup], resources: [`${ManifestWorkResource.plural}/status`], verbs: ["patch", "update"] },
  ],
};
