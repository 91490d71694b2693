// Group multicluster.x-k8s.io: SIG-Multicluster's Cluster Inventory API (KEP-4322), the ClusterProfile
// a cluster manager publishes for each cluster it manages, with the strings the API and OCM define for it.
import { z } from "zod";
import { type ApiResource, base64, ConditionSchema, dateTime, mapList, typeMeta } from "./meta.ts";

export const InventoryGroup = "multicluster.x-k8s.io";

export const ClusterProfileResource = {
  group: InventoryGroup,
  version: "v1alpha1",
  kind: "ClusterProfile",
  plural: "clusterprofiles",
  namespaced: true,
} as const satisfies ApiResource;

export const InventoryLabel = {
  // which cluster manager publishes a profile (the API's LabelClusterManagerKey)
  ClusterManager: "x-k8s.io/cluster-manager",
  // the cluster's exclusive set (the API's LabelClusterSetKey)
  ClusterSet: "multicluster.x-k8s.io/clusterset",
} as const;

// The name OCM publishes under, in the label and in spec.clusterManager.name; its consumers' access
// provider settings name it too. We publish under the same name, so a consumer set up for OCM works as is.
export const ClusterManagerName = "open-cluster-management";

export const ClusterProfileConditionType = {
  ControlPlaneHealthy: "ControlPlaneHealthy",
  // not the API's; OCM adds it from the ManagedCluster's own
  Joined: "Joined",
} as const;

// client-go's exec credential plugins read this extension of a kubeconfig cluster (with
// provideClusterInfo) as per-cluster configuration.
export const ExecExtensionName = "client.authentication.k8s.io/exec";

// clientcmd's v1 Cluster, as an access provider carries it
const KubeconfigClusterSchema = z.looseObject({
  server: z.string(),
  "tls-server-name": z.string().optional(),
  "insecure-skip-tls-verify": z.boolean().optional(),
  "certificate-authority": z.string().optional(),
  "certificate-authority-data": base64().optional(),
  "proxy-url": z.string().optional(),
  "disable-compression": z.boolean().optional(),
  extensions: z.array(z.looseObject({ name: z.string(), extension: z.looseObject({}).meta({ "x-kubernetes-preserve-unknown-fields": true }) })).optional(),
});

export const AccessProviderSchema = z.looseObject({ name: z.string(), cluster: KubeconfigClusterSchema.optional() });
export type AccessProvider = z.infer<typeof AccessProviderSchema>;

export const PropertySchema = z.looseObject({
  name: z.string().min(1).max(253),
  value: z.string().min(1).max(1024),
  lastObservedTime: dateTime().optional(),
});
export type Property = z.infer<typeof PropertySchema>;

export const ClusterProfileSchema = z.looseObject({
  ...typeMeta,
  spec: z.looseObject({
    displayName: z.string().optional(),
    clusterManager: z
      .looseObject({ name: z.string() })
      .meta({ "x-kubernetes-validations": [{ rule: "self == oldSelf", message: "ClusterManager is immutable" }] }),
  }),
  status: z
    .looseObject({
      conditions: mapList(ConditionSchema, ["type"]).optional(),
      version: z.looseObject({ kubernetes: z.string().optional() }).optional(),
      properties: mapList(PropertySchema, ["name"]).optional(),
      // the API's older name for accessProviders, still declared
      credentialProviders: mapList(AccessProviderSchema, ["name"]).optional(),
      accessProviders: mapList(AccessProviderSchema, ["name"]).optional(),
    })
    .optional(),
});
export type ClusterProfile = z.infer<typeof ClusterProfileSchema>;

// KEP-5313's PlacementDecision, a scheduler's answer in the inventory's terms: up to 100 ClusterProfiles
// per object, the decisions at the top level (no spec or status).
export const SigPlacementDecisionResource = {
  group: InventoryGroup,
  version: "v1alpha1",
  kind: "PlacementDecision",
  plural: "placementdecisions",
  namespaced: true,
} as const satisfies ApiResource;

export const SigDecisionLabel = {
  // the same on every slice of one decision
  DecisionKey: "multicluster.x-k8s.io/decision-key",
  // the slice's place among them, from 0
  DecisionIndex: "multicluster.x-k8s.io/decision-index",
  // the placement a consumer looks its decisions up by
  PlacementKey: "multicluster.x-k8s.io/placement-key",
} as const;

export const SigMaxDecisionsPerObject = 100;

export const SigPlacementDecisionSchema = z.looseObject({
  ...typeMeta,
  decisions: z
    .array(
      z.looseObject({
        // no namespace: the decision's own
        clusterProfileRef: z.looseObject({ name: z.string(), namespace: z.string().optional() }),
        reason: z.string().optional(),
      }),
    )
    .min(0)
    .max(SigMaxDecisionsPerObject),
  schedulerName: z.string().optional(),
});
export type SigPlacementDecision = z.infer<typeof SigPlacementDecisionSchema>;
