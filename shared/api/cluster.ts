// Group cluster.open-cluster-management.io: ManagedCluster, ClusterClaim, ManagedClusterSet(Binding),
// Placement, PlacementDecision and RolloutStrategy, with the strings OCM defines for them.
import { z } from "zod";
import {
  type ApiResource,
  atomicList,
  base64,
  conditionList,
  ConditionSchema,
  dateTime,
  int32,
  int64,
  intOrString,
  LabelSelectorSchema,
  mapList,
  quantity,
  typeMeta,
} from "./meta.ts";

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
const taintEffect = z.enum(["NoSelect", "PreferNoSelect", "NoSelectIfNew"]);

// Always exposed in status.clusterClaims and sorted first.
export const ReservedClusterClaimNames = [
  "id.k8s.io",
  "kubeversion.open-cluster-management.io",
  "platform.open-cluster-management.io",
  "product.open-cluster-management.io",
] as const;

export const ClientConfigSchema = z.looseObject({
  url: z.string(),
  caBundle: base64().optional(),
});
export type ClientConfig = z.infer<typeof ClientConfigSchema>;

export const TaintSchema = z.looseObject({
  key: z.string(),
  value: z.string().optional(),
  effect: taintEffect,
  // set by the mutating webhook, never by clients
  timeAdded: dateTime().nullable().optional(),
});
export type Taint = z.infer<typeof TaintSchema>;

export const ManagedClusterSpecSchema = z.looseObject({
  hubAcceptsClient: z.boolean().optional(),
  managedClusterClientConfigs: z.array(ClientConfigSchema).optional(),
  leaseDurationSeconds: int32().meta({ default: DefaultLeaseDurationSeconds }).optional(),
  taints: z.array(TaintSchema).optional(),
});

// A namespace a ManagedClusterSet has made on each of its clusters (spec.managedNamespaces): a DNS-1123
// label, as OCM's CRD holds it, so the API server refuses a name no namespace can have.
export const ManagedNamespaceConfigSchema = z.looseObject({
  name: z.string().max(63).regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/),
});
export type ManagedNamespaceConfig = z.infer<typeof ManagedNamespaceConfigSchema>;

// One entry of a cluster's status.managedNamespaces: the hub fills name and clusterSet from the sets the
// cluster belongs to, the agent the conditions (type NamespaceAvailable).
export const ManagedNamespaceSchema = ManagedNamespaceConfigSchema.extend({
  clusterSet: z.string(),
  conditions: conditionList().optional(),
});
export type ClusterSetManagedNamespace = z.infer<typeof ManagedNamespaceSchema>;

// The messages OCM's agent writes with a managed namespace's condition, and the label it keeps on one:
// the key holds the first 63 hex digits of sha256(the hub's server URL), the value is "true" while the
// namespace is managed and "false" once it has left the list (the namespace itself is kept).
export const ManagedNamespaceAppliedMessage = "Namespace successfully applied and managed";
export const managedNamespaceFailedMessage = (error: string) => `Failed to apply namespace: ${error}`;
export const HubClusterSetLabelPrefix = "clusterset.open-cluster-management.io/";

export const ManagedClusterStatusSchema = z.looseObject({
  conditions: conditionList().optional(),
  capacity: z.record(z.string(), quantity()).optional(),
  allocatable: z.record(z.string(), quantity()).optional(),
  version: z.looseObject({ kubernetes: z.string().optional() }).optional(),
  clusterClaims: z
    .array(z.looseObject({ name: z.string().optional(), value: z.string().optional() }))
    .optional(),
  managedNamespaces: mapList(ManagedNamespaceSchema, ["clusterSet", "name"]).optional(),
});

export const ManagedClusterSchema = z.looseObject({
  ...typeMeta,
  spec: ManagedClusterSpecSchema.optional(),
  status: ManagedClusterStatusSchema.optional(),
});
export type ManagedCluster = z.infer<typeof ManagedClusterSchema>;

export const ClusterClaimSchema = z.looseObject({
  ...typeMeta,
  spec: z.looseObject({ value: z.string().optional() }).optional(),
});
export type ClusterClaim = z.infer<typeof ClusterClaimSchema>;

export const ManagedClusterSetSchema = z.looseObject({
  ...typeMeta,
  spec: z
    .looseObject({
      clusterSelector: z
        .looseObject({
          selectorType: z
            .enum(["ExclusiveClusterSetLabel", "LabelSelector"])
            .meta({ default: "ExclusiveClusterSetLabel" }),
          labelSelector: LabelSelectorSchema.optional(),
        })
        .meta({ default: { selectorType: "ExclusiveClusterSetLabel" } })
        .optional(),
      managedNamespaces: mapList(ManagedNamespaceConfigSchema, ["name"]).optional(),
    })
    .meta({ default: { clusterSelector: { selectorType: "ExclusiveClusterSetLabel" } } })
    .optional(),
  status: z.looseObject({ conditions: z.array(ConditionSchema).optional() }).optional(),
});
export type ManagedClusterSet = z.infer<typeof ManagedClusterSetSchema>;

export const ManagedClusterSetBindingSchema = z.looseObject({
  ...typeMeta,
  spec: z.looseObject({ clusterSet: z.string().optional() }).optional(),
  status: z.looseObject({ conditions: z.array(ConditionSchema).optional() }).optional(),
});
export type ManagedClusterSetBinding = z.infer<typeof ManagedClusterSetBindingSchema>;

// Unlike metav1.LabelSelector, the claim selector has no matchLabels and its list is not atomic.
const ClusterClaimSelectorSchema = z.looseObject({
  matchExpressions: z
    .array(
      z.looseObject({
        key: z.string(),
        operator: z.string(),
        values: atomicList(z.string()).optional(),
      }),
    )
    .optional(),
});

const GroupClusterSelectorSchema = z.looseObject({
  labelSelector: LabelSelectorSchema.optional(),
  claimSelector: ClusterClaimSelectorSchema.optional(),
});

const ClusterSelectorSchema = z.looseObject({
  labelSelector: LabelSelectorSchema.optional(),
  claimSelector: ClusterClaimSelectorSchema.optional(),
  celSelector: z.looseObject({ celExpressions: z.array(z.string()).optional() }).optional(),
});

export const PlacementSpecSchema = z.looseObject({
  clusterSets: z.array(z.string()).optional(),
  numberOfClusters: int32().optional(),
  predicates: z
    .array(z.looseObject({ requiredClusterSelector: ClusterSelectorSchema.optional() }))
    .optional(),
  prioritizerPolicy: z
    .looseObject({
      mode: z.string().meta({ default: "Additive" }).optional(),
      configurations: z
        .array(
          z.looseObject({
            scoreCoordinate: z.looseObject({
              type: z.enum(["BuiltIn", "AddOn"]).meta({ default: "BuiltIn" }),
              builtIn: z.string().optional(),
              addOn: z
                .looseObject({ resourceName: z.string(), scoreName: z.string() })
                .optional(),
            }),
            weight: int32().min(-10).max(10).meta({ default: 1 }).optional(),
          }),
        )
        .optional(),
    })
    .optional(),
  sortBy: z.enum(["ClusterName", "Score"]).meta({ default: "ClusterName" }).optional(),
  scoreRateLimit: z.string().meta({ default: "1m" }).optional(),
  spreadPolicy: z
    .looseObject({
      spreadConstraints: z
        .array(
          z.looseObject({
            topologyKey: z.string(),
            topologyKeyType: z.enum(["Label", "Claim"]),
            maxSkew: int32().min(1).meta({ default: 1 }).optional(),
            whenUnsatisfiable: z
              .enum(["DoNotSchedule", "ScheduleAnyway"])
              .meta({ default: "ScheduleAnyway" })
              .optional(),
          }),
        )
        .max(8)
        .optional(),
    })
    .optional(),
  tolerations: z
    .array(
      z.looseObject({
        key: z.string().optional(),
        operator: z.string().meta({ default: "Equal" }).optional(),
        value: z.string().optional(),
        effect: taintEffect.optional(),
        tolerationSeconds: int64().optional(),
      }),
    )
    .optional(),
  decisionStrategy: z
    .looseObject({
      groupStrategy: z
        .looseObject({
          decisionGroups: z
            .array(
              z.looseObject({
                groupName: z.string(),
                groupClusterSelector: GroupClusterSelectorSchema,
              }),
            )
            .optional(),
          clustersPerDecisionGroup: intOrString().meta({ default: "100%" }).optional(),
        })
        .optional(),
    })
    .optional(),
});

export const PlacementStatusSchema = z.looseObject({
  numberOfSelectedClusters: int32().optional(),
  decisionGroups: z
    .array(
      z.looseObject({
        decisionGroupIndex: int32().optional(),
        decisionGroupName: z.string().optional(),
        decisions: z.array(z.string()).optional(),
        clusterCount: int32().meta({ default: 0 }).optional(),
      }),
    )
    .optional(),
  conditions: conditionList().optional(),
  lastScoreUpdateTime: dateTime().optional(),
});

export const PlacementSchema = z.looseObject({
  ...typeMeta,
  spec: PlacementSpecSchema,
  status: PlacementStatusSchema.optional(),
});
export type Placement = z.infer<typeof PlacementSchema>;

export const PlacementDecisionSchema = z.looseObject({
  ...typeMeta,
  status: z
    .looseObject({
      decisions: z.array(
        z.looseObject({ clusterName: z.string(), reason: z.string(), score: int64().optional() }),
      ),
    })
    .optional(),
});
export type PlacementDecision = z.infer<typeof PlacementDecisionSchema>;

// cluster.open-cluster-management.io/v1alpha1 RolloutStrategy, embedded by the add-on API.
const rolloutTiming = {
  minSuccessTime: z.string().meta({ default: "0" }).optional(),
  progressDeadline: z.string().meta({ default: "None" }).optional(),
  maxFailures: intOrString().meta({ default: 0 }).optional(),
};
const MandatoryDecisionGroupSchema = z.looseObject({
  groupName: z.string().optional(),
  groupIndex: int32().optional(),
});

export const RolloutStrategySchema = z
  .looseObject({
    type: z
      .enum(["All", "Progressive", "ProgressivePerGroup"])
      .meta({ default: "All" })
      .optional(),
    all: z.looseObject(rolloutTiming).optional(),
    progressive: z
      .looseObject({
        ...rolloutTiming,
        mandatoryDecisionGroups: z.array(MandatoryDecisionGroupSchema).optional(),
        maxConcurrency: intOrString().optional(),
      })
      .optional(),
    progressivePerGroup: z
      .looseObject({
        ...rolloutTiming,
        mandatoryDecisionGroups: z.array(MandatoryDecisionGroupSchema).optional(),
      })
      .optional(),
  })
  .meta({ default: { type: "All" } });
export type RolloutStrategy = z.infer<typeof RolloutStrategySchema>;
