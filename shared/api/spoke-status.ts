// Strings and defaults of OCM's spoke status controller (ocm-protocol §2.1, §5.3): the Available
// condition it writes, the event notes it emits, and its flag defaults, spelled exactly as OCM does.
import { ManagedClusterConditionType, ManagedClusterReason } from "./cluster.ts";

export const AvailableCondition = {
  type: ManagedClusterConditionType.Available,
  status: "True",
  reason: ManagedClusterReason.ManagedClusterAvailable,
  message: "Managed cluster is available",
} as const;

export const kubeAPIServerUnavailableCondition = (statusCode: number, detail: string) =>
  ({
    type: ManagedClusterConditionType.Available,
    status: "False",
    reason: ManagedClusterReason.ManagedClusterKubeAPIServerUnavailable,
    message: `The kube-apiserver is not ok, status code: ${statusCode}, ${detail}`,
  }) as const;

// Available transitions use ClusterEventReason (api/health.ts) with the notes below.
export const SpokeStatusEventReason = {
  CustomClusterClaimsTruncated: "CustomClusterClaimsTruncated",
  ClockOutOfSync: "ClockOutOfSync",
} as const;

// "apieserver" is OCM's spelling.
export const availableEventMessage = (cluster: string) => `The ${cluster} is successfully imported, and it is managed by the hub cluster. Its apieserver is available`;
export const unavailableEventMessage = (cluster: string) => `The ${cluster} is successfully imported. However, its Kube API server is unavailable`;
export const customClaimsTruncatedMessage = (found: number, max: number) =>
  `${found} cluster claims are found. It exceeds the max number of custom cluster claims (${max}). ${found - max} custom cluster claims are not exposed.`;
export const ClockOutOfSyncMessage = "The managed cluster's clock is out of sync, the agent will not be able to update the status of managed cluster.";

// --max-custom-cluster-claims
export const MaxCustomClusterClaimsDefault = 20;
