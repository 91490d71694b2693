// Group cluster.open-cluster-management.io: ManagedCluster, ClusterClaim, ManagedClusterSet(Binding),
// Placement, PlacementDecision and RolloutStrategy, with the strings OCM defines for them.
import { z } from "zod";
import {
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

import { DefaultLeaseDurationSeconds } from "./cluster-constants.ts";

export * from "./cluster-constants.ts";

const taintEffect = z.enum(["NoSelect", "PreferNoSelect", "NoSelectIfNew"]);
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
