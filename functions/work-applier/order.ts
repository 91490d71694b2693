// The order OCM's work agent applies a work's manifests in (§7.2 step 3): foundations before what
// depends on them; same-rank manifests keep their order in the spec.

// OCM's resourceApplyOrder: 0 cluster-scoped foundations, 1 RBAC, 2 namespace policies and identity,
// 3 config and storage, 4 networking, 5 workloads, 6 webhooks and API aggregation that may need a
// running workload. Any other kind is 1000; a manifest that cannot be parsed goes last (1001).
const rankOfKind: Readonly<Record<string, number>> = {
  PriorityClass: 0,
  Namespace: 0,
  CustomResourceDefinition: 0,
  StorageClass: 0,
  PersistentVolume: 0,
  PodSecurityPolicy: 0,
  ClusterRole: 1,
  ClusterRoleBinding: 1,
  Role: 1,
  RoleBinding: 1,
  NetworkPolicy: 2,
  ResourceQuota: 2,
  LimitRange: 2,
  PodDisruptionBudget: 2,
  ServiceAccount: 2,
  Secret: 3,
  ConfigMap: 3,
  PersistentVolumeClaim: 3,
  Service: 4,
  DaemonSet: 5,
  Pod: 5,
  ReplicationController: 5,
  ReplicaSet: 5,
  Deployment: 5,
  HorizontalPodAutoscaler: 5,
  StatefulSet: 5,
  Job: 5,
  CronJob: 5,
  APIService: 6,
  MutatingWebhookConfiguration: 6,
  ValidatingWebhookConfiguration: 6,
  ValidatingAdmissionPolicy: 6,
  ValidatingAdmissionPolicyBinding: 6,
};

export const UNLISTED_RANK = 1000;
export const UNPARSABLE_RANK = 1001;

export function applyRank(kind: string | undefined): number {
  if (kind === undefined) return UNPARSABLE_RANK;
  return rankOfKind[kind] ?? UNLISTED_RANK;
}

// Spec indexes in apply order. Array.prototype.sort is stable, as OCM's sort.SliceStable.
export function applyOrder(kinds: readonly (string | undefined)[]): number[] {
  return kinds.map((_, i) => i).sort((a, b) => applyRank(kinds[a]) - applyRank(kinds[b]));
}
