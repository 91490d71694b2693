// Group multicluster.x-k8s.io: SIG-Multicluster's Cluster Inventory API (KEP-4322), the ClusterProfile
// a cluster manager publishes for each cluster it manages, with the strings the API and OCM define for it.
import { z } from "zod";
import { type ApiResource, base64, ConditionSchema, dateTime, typeMeta } from "./meta.ts";

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
      // a plain list, as the API declares it (no list-type map)
      conditions: z.array(ConditionSchema).optional(),
      version: z.looseObject({ kubernetes: z.string().optional() }).optional(),
      properties: z.array(PropertySchema).optional(),
      // the API's older name for accessProviders, still declared
      credentialProviders: z.array(AccessProviderSchema).optional(),
      accessProviders: z.array(AccessProviderSchema).optional(),
    })
    .optional(),
});
export type ClusterProfile = z.infer<typeof ClusterProfileSchema>;
