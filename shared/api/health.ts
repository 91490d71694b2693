// Strings OCM writes about cluster health on the hub (ocm-protocol §2.1, §4.3): the messages of the
// Available=Unknown and ClockSynced conditions, and the events recorded in a cluster's namespace.

export const ManagedClusterMessage = {
  HubClusterAdminAccepted: "Accepted by hub cluster admin",
  HubClusterAdminDenied: "Denied by hub cluster admin",
  LeaseUpdateStopped: "Registration agent stopped updating its lease.",
  ClockSynced: "The clock of the managed cluster is synced with the hub.",
  ClockOutOfSync: "The clock of hub and agent is out of sync. This may cause the Unknown status and affect agent functionalities.",
} as const;

// OCM: a lease is expired once it is this many lease durations old; the clock check uses the same span.
export const LeaseDurationTimes = 5;

// Reasons of the events recorded in namespace <cluster> when its availability changes.
export const ClusterEventReason = {
  Available: "Available",
  Unavailable: "Unavailable",
  AvailableUnknown: "AvailableUnknown",
} as const;

// The hub lease controller's note on AvailableUnknown (a Warning event).
export const availableUnknownEventMessage = (cluster: string) =>
  `The ${cluster} is successfully imported. However, the connection check from the managed cluster to the hub cluster has failed`;
