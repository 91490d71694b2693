// Group work.open-cluster-management.io: ManifestWork and AppliedManifestWork, with the strings OCM defines
// for them.
import { z } from "zod";
import {
  type ApiResource,
  conditionList,
  dateTime,
  embeddedResource,
  int32,
  int64,
  mapList,
  typeMeta,
} from "./meta.ts";

export const WorkGroup = "work.open-cluster-management.io";

export const ManifestWorkResource = {
  group: WorkGroup,
  version: "v1",
  kind: "ManifestWork",
  plural: "manifestworks",
  namespaced: true,
} as const satisfies ApiResource;
export const AppliedManifestWorkResource = {
  group: WorkGroup,
  version: "v1",
  kind: "AppliedManifestWork",
  plural: "appliedmanifestworks",
  namespaced: false,
} as const satisfies ApiResource;

// Work-level and per-manifest condition types share names.
export const WorkConditionType = {
  Applied: "Applied",
  Available: "Available",
  Progressing: "Progressing",
  Degraded: "Degraded",
  Complete: "Complete",
  Deleting: "Deleting",
  StatusFeedbackSynced: "StatusFeedbackSynced",
} as const;
export type WorkConditionType = (typeof WorkConditionType)[keyof typeof WorkConditionType];

export const WorkReason = {
  AppliedManifestWorkComplete: "AppliedManifestWorkComplete",
  AppliedManifestWorkFailed: "AppliedManifestWorkFailed",
  ResourcesAvailable: "ResourcesAvailable",
  ResourcesNotAvailable: "ResourcesNotAvailable",
  ResourcesStatusUnknown: "ResourcesStatusUnknown",
  ConditionRulesAggregated: "ConditionRulesAggregated",
  WorkDeleting: "WorkDeleting",
  // reserved by OCM for condition-rule conditions
  Applying: "Applying",
  Completed: "Completed",
  Failed: "Failed",
  ManifestsComplete: "ManifestsComplete",
} as const;
export type WorkReason = (typeof WorkReason)[keyof typeof WorkReason];

export const ManifestReason = {
  AppliedManifestComplete: "AppliedManifestComplete",
  AppliedManifestFailed: "AppliedManifestFailed",
  AppliedManifestSSAIgnoreFieldError: "AppliedManifestSSAIgnoreFieldError",
  ResourceAvailable: "ResourceAvailable",
  ResourceNotAvailable: "ResourceNotAvailable",
  FetchingResourceFailed: "FetchingResourceFailed",
  IncompleteResourceMeta: "IncompleteResourceMeta",
  NoStatusFeedbackSynced: "NoStatusFeedbackSynced",
  StatusFeedbackSynced: "StatusFeedbackSynced",
  StatusFeedbackSyncFailed: "StatusFeedbackSyncFailed",
  ConditionRuleEvaluated: "ConditionRuleEvaluated",
  ConditionRuleInvalid: "ConditionRuleInvalid",
  ConditionRuleExpressionError: "ConditionRuleExpressionError",
  ConditionRuleInternalError: "ConditionRuleInternalError",
} as const;
export type ManifestReason = (typeof ManifestReason)[keyof typeof ManifestReason];

export const WorkFinalizer = {
  // on ManifestWork and on the work RoleBinding in the cluster namespace
  ManifestWorkCleanup: "cluster.open-cluster-management.io/manifest-work-cleanup",
  AppliedManifestWorkCleanup: "cluster.open-cluster-management.io/applied-manifest-work-cleanup",
} as const;

export const WorkAnnotation = {
  ConfigSpecHash: "open-cluster-management.io/config-spec-hash",
  ObjectHash: "open-cluster-management.io/object-hash",
} as const;

export const PropagationPolicy = {
  Foreground: "Foreground",
  Orphan: "Orphan",
  SelectivelyOrphan: "SelectivelyOrphan",
} as const;
export const UpdateStrategyType = {
  Update: "Update",
  CreateOnly: "CreateOnly",
  ServerSideApply: "ServerSideApply",
  ReadOnly: "ReadOnly",
} as const;
export const FeedbackValueType = {
  Integer: "Integer",
  String: "String",
  Boolean: "Boolean",
  JsonRaw: "JsonRaw",
} as const;

const ResourceIdentifierSchema = z.looseObject({
  group: z.string().optional(),
  resource: z.string(),
  // `*` wildcards are accepted in name and namespace
  name: z.string(),
  namespace: z.string().optional(),
});

export const DeleteOptionSchema = z.looseObject({
  propagationPolicy: z
    .enum(["Foreground", "Orphan", "SelectivelyOrphan"])
    .meta({ default: "Foreground" })
    .optional(),
  selectivelyOrphans: z
    .looseObject({ orphaningRules: z.array(ResourceIdentifierSchema).optional() })
    .optional(),
  ttlSecondsAfterFinished: int64().optional(),
});

const ConditionRuleSchema = z
  .looseObject({
    condition: z.string(),
    type: z.enum(["WellKnownConditions", "CEL"]),
    celExpressions: z.array(z.string()).optional(),
    message: z.string().optional(),
    messageExpression: z.string().optional(),
  })
  .meta({
    "x-kubernetes-validations": [
      { rule: "self.type != 'CEL' || self.condition != \"\"", message: "Condition is required for CEL rules" },
    ],
  });

export const ManifestConfigOptionSchema = z.looseObject({
  resourceIdentifier: ResourceIdentifierSchema,
  feedbackRules: z
    .array(
      z.looseObject({
        type: z.enum(["WellKnownStatus", "JSONPaths"]),
        jsonPaths: mapList(
          z.looseObject({ name: z.string(), path: z.string(), version: z.string().optional() }),
          ["name"],
        ).optional(),
      }),
    )
    .optional(),
  updateStrategy: z
    .looseObject({
      type: z.enum(["Update", "CreateOnly", "ServerSideApply", "ReadOnly"]).meta({ default: "Update" }),
      serverSideApply: z
        .looseObject({
          force: z.boolean().optional(),
          fieldManager: z.string().meta({ default: "work-agent" }).optional(),
          ignoreFields: mapList(
            z.looseObject({
              condition: z.enum(["OnSpokePresent", "OnSpokeChange"]).meta({ default: "OnSpokePresent" }),
              jsonPaths: z.array(z.string()).optional(),
              jsonPointers: z.array(z.string()).optional(),
              jqPathExpressions: z.array(z.string()).optional(),
            }),
            ["condition"],
          ).optional(),
        })
        .optional(),
    })
    .optional(),
  conditionRules: mapList(ConditionRuleSchema, ["condition"]).optional(),
  feedbackScrapeType: z.enum(["Poll", "Watch"]).meta({ default: "Poll" }).optional(),
});
export type ManifestConfigOption = z.infer<typeof ManifestConfigOptionSchema>;

export const ManifestWorkExecutorSchema = z.looseObject({
  subject: z
    .looseObject({
      type: z.enum(["ServiceAccount"]),
      serviceAccount: z.looseObject({ namespace: z.string(), name: z.string() }).optional(),
    })
    .optional(),
});

export const ManifestWorkSpecSchema = z.looseObject({
  workload: z.looseObject({ manifests: z.array(embeddedResource()).optional() }).optional(),
  deleteOption: DeleteOptionSchema.optional(),
  manifestConfigs: z.array(ManifestConfigOptionSchema).optional(),
  executor: ManifestWorkExecutorSchema.optional(),
});
export type ManifestWorkSpec = z.infer<typeof ManifestWorkSpecSchema>;

export const FieldValueSchema = z.looseObject({
  type: z.enum(["Integer", "String", "Boolean", "JsonRaw"]),
  integer: int64().optional(),
  string: z.string().optional(),
  boolean: z.boolean().optional(),
  jsonRaw: z.string().max(1024).optional(),
});

export const ManifestConditionSchema = z.looseObject({
  resourceMeta: z.looseObject({
    ordinal: int32(),
    group: z.string().optional(),
    version: z.string().optional(),
    kind: z.string().optional(),
    resource: z.string().optional(),
    name: z.string().optional(),
    namespace: z.string().optional(),
  }),
  statusFeedback: z
    .looseObject({
      values: mapList(z.looseObject({ name: z.string(), fieldValue: FieldValueSchema }), ["name"]).optional(),
    })
    .optional(),
  conditions: conditionList(),
});
export type ManifestCondition = z.infer<typeof ManifestConditionSchema>;

export const ManifestWorkStatusSchema = z.looseObject({
  conditions: conditionList().optional(),
  resourceStatus: z.looseObject({ manifests: z.array(ManifestConditionSchema).optional() }).optional(),
});

export const ManifestWorkSchema = z.looseObject({
  ...typeMeta,
  spec: ManifestWorkSpecSchema.optional(),
  status: ManifestWorkStatusSchema.optional(),
});
export type ManifestWork = z.infer<typeof ManifestWorkSchema>;

export const AppliedResourceSchema = z.looseObject({
  group: z.string().optional(),
  version: z.string(),
  resource: z.string(),
  namespace: z.string().optional(),
  name: z.string(),
  uid: z.string().optional(),
});

export const AppliedManifestWorkSchema = z.looseObject({
  ...typeMeta,
  spec: z
    .looseObject({
      // lowercase hex sha256 of the hub apiserver URL
      hubHash: z.string(),
      agentID: z.string().optional(),
      manifestWorkName: z.string(),
    })
    .optional(),
  status: z
    .looseObject({
      appliedResources: z.array(AppliedResourceSchema).optional(),
      evictionStartTime: dateTime().optional(),
    })
    .optional(),
});
export type AppliedManifestWork = z.infer<typeof AppliedManifestWorkSchema>;
