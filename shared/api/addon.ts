// Group addon.open-cluster-management.io: ClusterManagementAddOn, ManagedClusterAddOn and
// AddOnDeploymentConfig (v1alpha1 storage; v1beta1 declared, served only for AddOnDeploymentConfig: see
// shared/api/crds.ts), AddOnTemplate (v1alpha1), and OCM's add-on strings.
import { z } from "zod";
import { RolloutStrategySchema } from "./cluster.ts";
import { ResourceRequirementsSchema, TolerationSchema } from "./core.ts";
import { type ApiResource, base64, conditionList, int64, mapList, stringMap, typeMeta } from "./meta.ts";
import { ManifestWorkSpecSchema } from "./work.ts";

export const AddOnGroup = "addon.open-cluster-management.io";

// v1alpha1 is the storage version, and the one OCM v1.2.0's controllers and agents and clusteradm v1.3.1
// read and write (only OCM's conversion webhook uses v1beta1).
export const ClusterManagementAddOnV1alpha1Resource = {
  group: AddOnGroup,
  version: "v1alpha1",
  kind: "ClusterManagementAddOn",
  plural: "clustermanagementaddons",
  namespaced: false,
} as const satisfies ApiResource;
export const ManagedClusterAddOnV1alpha1Resource = {
  group: AddOnGroup,
  version: "v1alpha1",
  kind: "ManagedClusterAddOn",
  plural: "managedclusteraddons",
  namespaced: true,
} as const satisfies ApiResource;
export const AddOnDeploymentConfigV1alpha1Resource = {
  group: AddOnGroup,
  version: "v1alpha1",
  kind: "AddOnDeploymentConfig",
  plural: "addondeploymentconfigs",
  namespaced: true,
} as const satisfies ApiResource;
export const AddOnDeploymentConfigV1beta1Resource = {
  group: AddOnGroup,
  version: "v1beta1",
  kind: "AddOnDeploymentConfig",
  plural: "addondeploymentconfigs",
  namespaced: true,
} as const satisfies ApiResource;
export const AddOnTemplateResource = {
  group: AddOnGroup,
  version: "v1alpha1",
  kind: "AddOnTemplate",
  plural: "addontemplates",
  namespaced: false,
} as const satisfies ApiResource;

export const AddOnConditionType = {
  RegistrationApplied: "RegistrationApplied",
  ManifestApplied: "ManifestApplied",
  HostingManifestApplied: "HostingManifestApplied",
  HookManifestCompleted: "HookManifestCompleted",
  Available: "Available",
  Degraded: "Degraded",
  Configured: "Configured",
  Progressing: "Progressing",
  ClusterCertificateRotated: "ClusterCertificateRotated",
  TokenInfrastructureReady: "TokenInfrastructureReady",
  HostingClusterValidity: "HostingClusterValidity",
  WaitingForCanary: "WaitingForCanary",
} as const;
export type AddOnConditionType = (typeof AddOnConditionType)[keyof typeof AddOnConditionType];

export const AddOnReason = {
  NilRegistration: "NilRegistration",
  SetPermissionApplied: "SetPermissionApplied",
  SetPermissionFailed: "SetPermissionFailed",
  PermissionConfigPending: "PermissionConfigPending",
  AddonManifestApplied: "AddonManifestApplied",
  AddonManifestAppliedFailed: "AddonManifestAppliedFailed",
  ManifestWorkApplyFailed: "ManifestWorkApplyFailed",
  HookManifestIsCompleted: "HookManifestIsCompleted",
  HookManifestIsNotCompleted: "HookManifestIsNotCompleted",
  ManagedClusterAddOnLeaseUpdated: "ManagedClusterAddOnLeaseUpdated",
  ManagedClusterAddOnLeaseUpdateStopped: "ManagedClusterAddOnLeaseUpdateStopped",
  ManagedClusterAddOnLeaseNotFound: "ManagedClusterAddOnLeaseNotFound",
  WorkApplied: "WorkApplied",
  WorkNotFound: "WorkNotFound",
  WorkNotApplied: "WorkNotApplied",
  NoProbeResult: "NoProbeResult",
  ProbeUnavailable: "ProbeUnavailable",
  ProbeAvailable: "ProbeAvailable",
  ConfigurationsConfigured: "ConfigurationsConfigured",
  ConfigurationsNotConfigured: "ConfigurationsNotConfigured",
  ConfigurationUnsupported: "ConfigurationUnsupported",
  WaitingForManifestApplied: "WaitingForManifestApplied",
  WaitingForHostingManifestApplied: "WaitingForHostingManifestApplied",
  Progressing: "Progressing",
  Completed: "Completed",
  Failed: "Failed",
  ClientCertificateUpdated: "ClientCertificateUpdated",
  ClientCertificateUpdateFailed: "ClientCertificateUpdateFailed",
  HostingClusterValid: "HostingClusterValid",
  HostingClusterInvalid: "HostingClusterInvalid",
} as const;
export type AddOnReason = (typeof AddOnReason)[keyof typeof AddOnReason];

export const AddOnLabel = {
  AddonName: "open-cluster-management.io/addon-name",
  AddonNamespace: "open-cluster-management.io/addon-namespace",
  TokenInfrastructure: "addon.open-cluster-management.io/token-infrastructure",
} as const;
// ManagedCluster label `feature.open-cluster-management.io/addon-<name>`, valued by AddOnFeatureValue.
export const AddOnFeatureLabelPrefix = "feature.open-cluster-management.io/addon-";
export const AddOnFeatureValue = {
  Available: "available",
  Unhealthy: "unhealthy",
  Unreachable: "unreachable",
} as const;

export const AddOnAnnotation = {
  HostingClusterName: "addon.open-cluster-management.io/hosting-cluster-name",
  HostedManifestLocation: "addon.open-cluster-management.io/hosted-manifest-location",
  DeletionOrphan: "addon.open-cluster-management.io/deletion-orphan",
  // also accepted as a label on Jobs/Pods
  AddonPreDelete: "addon.open-cluster-management.io/addon-pre-delete",
  DisableAutomaticInstallation: "addon.open-cluster-management.io/disable-automatic-installation",
  // where a v1alpha1 spec.installNamespace survives a round-trip through v1beta1
  V1alpha1InstallNamespace: "addon.open-cluster-management.io/v1alpha1-install-namespace",
  Lifecycle: "addon.open-cluster-management.io/lifecycle",
} as const;
// ManagedCluster annotations with this prefix are copied onto its add-ons.
export const AddOnAnnotationPrefix = "addon.open-cluster-management.io";
export const HostedManifestLocation = { Managed: "managed", Hosting: "hosting", None: "none" } as const;
// Absent means addon-manager.
export const AddOnLifecycle = { AddonManager: "addon-manager", Self: "self" } as const;

export const AddOnFinalizer = {
  AddonPreDelete: "addon.open-cluster-management.io/addon-pre-delete",
  HostingAddonPreDelete: "addon.open-cluster-management.io/hosting-addon-pre-delete",
  HostingManifestsCleanup: "addon.open-cluster-management.io/hosting-manifests-cleanup",
} as const;
// Older OCM wrote these; the framework strips them whenever it edits finalizers.
export const DeprecatedAddOnFinalizers = [
  "cluster.open-cluster-management.io/addon-pre-delete",
  "cluster.open-cluster-management.io/hosting-addon-pre-delete",
  "cluster.open-cluster-management.io/hosting-manifests-cleanup",
] as const;

export const DefaultAddOnInstallNamespace = "open-cluster-management-agent-addon";
export const HealthCheckMode = { Lease: "Lease", Customized: "Customized" } as const;
// v1alpha1 registrations with this signer are v1beta1 `type: kubeClient`; every other signer is customSigner.
export const KubeApiServerClientSigner = "kubernetes.io/kube-apiserver-client";

const ConfigGroupResourceSchema = z.looseObject({
  group: z.string().meta({ default: "" }).optional(),
  resource: z.string(),
});

const AddOnConfigSchema = z.looseObject({
  group: z.string().meta({ default: "" }).optional(),
  resource: z.string(),
  namespace: z.string().optional(),
  name: z.string(),
});
export type AddOnConfig = z.infer<typeof AddOnConfigSchema>;

const ConfigSpecHashSchema = z.looseObject({
  namespace: z.string().optional(),
  name: z.string(),
  specHash: z.string().optional(),
});

const AddOnMetaSchema = z.looseObject({
  displayName: z.string().optional(),
  description: z.string().optional(),
});

// Deprecated since v1alpha1 and gone in v1beta1.
const AddOnConfigurationSchema = z.looseObject({
  crdName: z.string().optional(),
  crName: z.string().optional(),
  lastObservedGeneration: int64().optional(),
});

const installStrategy = (configs: z.ZodType) =>
  z
    .looseObject({
      type: z.enum(["Manual", "Placements"]).meta({ default: "Manual" }).optional(),
      placements: mapList(
        z.looseObject({
          namespace: z.string(),
          name: z.string(),
          configs: configs.optional(),
          rolloutStrategy: RolloutStrategySchema.optional(),
        }),
        ["namespace", "name"],
      ).optional(),
    })
    .meta({ default: { type: "Manual" } });

const InstallProgressionSchema = z.looseObject({
  namespace: z.string(),
  name: z.string(),
  configReferences: z
    .array(
      z.looseObject({
        ...ConfigGroupResourceSchema.shape,
        desiredConfig: ConfigSpecHashSchema.optional(),
        lastAppliedConfig: ConfigSpecHashSchema.optional(),
        lastKnownGoodConfig: ConfigSpecHashSchema.optional(),
      }),
    )
    .optional(),
  conditions: conditionList().optional(),
});

const DefaultConfigReferenceSchema = z.looseObject({
  ...ConfigGroupResourceSchema.shape,
  desiredConfig: ConfigSpecHashSchema.optional(),
});

export const ClusterManagementAddOnV1alpha1Schema = z.looseObject({
  ...typeMeta,
  spec: z.looseObject({
    addOnMeta: AddOnMetaSchema.optional(),
    addOnConfiguration: AddOnConfigurationSchema.optional(),
    supportedConfigs: mapList(
      z.looseObject({
        ...ConfigGroupResourceSchema.shape,
        defaultConfig: z.looseObject({ namespace: z.string().optional(), name: z.string() }).optional(),
      }),
      ["group", "resource"],
    ).optional(),
    installStrategy: installStrategy(z.array(AddOnConfigSchema)).optional(),
  }),
  status: z
    .looseObject({
      // OCM's v1alpha1 JSON key really is lower-case "c".
      defaultconfigReferences: z.array(DefaultConfigReferenceSchema).optional(),
      installProgressions: z.array(InstallProgressionSchema).optional(),
    })
    .optional(),
});
export type ClusterManagementAddOnV1alpha1 = z.infer<typeof ClusterManagementAddOnV1alpha1Schema>;

export const ClusterManagementAddOnV1beta1Schema = z.looseObject({
  ...typeMeta,
  spec: z.looseObject({
    addOnMeta: AddOnMetaSchema.optional(),
    defaultConfigs: mapList(AddOnConfigSchema, ["group", "resource"]).optional(),
    installStrategy: installStrategy(z.array(AddOnConfigSchema)).optional(),
  }),
  status: z
    .looseObject({
      defaultConfigReferences: z.array(DefaultConfigReferenceSchema).optional(),
      installProgressions: z.array(InstallProgressionSchema).optional(),
    })
    .optional(),
});
export type ClusterManagementAddOnV1beta1 = z.infer<typeof ClusterManagementAddOnV1beta1Schema>;

const addOnStatusCommon = {
  conditions: conditionList().optional(),
  relatedObjects: z
    .array(
      z.looseObject({
        group: z.string(),
        resource: z.string(),
        namespace: z.string().optional(),
        name: z.string(),
      }),
    )
    .optional(),
  addOnMeta: AddOnMetaSchema.optional(),
  supportedConfigs: mapList(ConfigGroupResourceSchema, ["group", "resource"]).optional(),
  // the namespace the agent is installed in
  namespace: z.string().optional(),
  healthCheck: z
    .looseObject({ mode: z.enum(["Lease", "Customized"]).meta({ default: "Lease" }).optional() })
    .optional(),
};

const configReferenceCommon = {
  ...ConfigGroupResourceSchema.shape,
  lastObservedGeneration: int64().optional(),
  desiredConfig: ConfigSpecHashSchema.optional(),
  lastAppliedConfig: ConfigSpecHashSchema.optional(),
};

const addOnSpecConfigs = z.array(AddOnConfigSchema).optional();

export const ManagedClusterAddOnV1alpha1Schema = z.looseObject({
  ...typeMeta,
  spec: z.looseObject({
    installNamespace: z.string().meta({ default: DefaultAddOnInstallNamespace }).optional(),
    configs: addOnSpecConfigs,
  }),
  status: z
    .looseObject({
      ...addOnStatusCommon,
      addOnConfiguration: AddOnConfigurationSchema.optional(),
      configReferences: z
        .array(z.looseObject({ ...configReferenceCommon, namespace: z.string().optional(), name: z.string() }))
        .optional(),
      registrations: z
        .array(
          z.looseObject({
            signerName: z.string(),
            subject: z
              .looseObject({
                user: z.string().optional(),
                groups: z.array(z.string()).optional(),
                // singular in v1alpha1's JSON
                organizationUnit: z.array(z.string()).optional(),
              })
              .optional(),
          }),
        )
        .optional(),
      kubeClientDriver: z.enum(["csr", "token"]).optional(),
    })
    .optional(),
});
export type ManagedClusterAddOnV1alpha1 = z.infer<typeof ManagedClusterAddOnV1alpha1Schema>;

export const ManagedClusterAddOnV1beta1Schema = z.looseObject({
  ...typeMeta,
  spec: z.looseObject({ configs: addOnSpecConfigs }),
  status: z
    .looseObject({
      ...addOnStatusCommon,
      configReferences: z.array(z.looseObject(configReferenceCommon)).optional(),
      registrations: z
        .array(
          z.looseObject({
            type: z.enum(["kubeClient", "customSigner"]),
            kubeClient: z
              .looseObject({
                subject: z
                  .looseObject({ user: z.string().optional(), groups: z.array(z.string()).optional() })
                  .optional(),
                driver: z.enum(["csr", "token"]).optional(),
              })
              .optional(),
            customSigner: z
              .looseObject({
                signerName: z.string(),
                subject: z
                  .looseObject({
                    user: z.string().optional(),
                    groups: z.array(z.string()).optional(),
                    organizationUnits: z.array(z.string()).optional(),
                  })
                  .optional(),
              })
              .optional(),
          }),
        )
        .optional(),
    })
    .optional(),
});
export type ManagedClusterAddOnV1beta1 = z.infer<typeof ManagedClusterAddOnV1beta1Schema>;

// v1alpha1 and v1beta1 share this schema: OCM made no change between them.
export const AddOnDeploymentConfigSchema = z.looseObject({
  ...typeMeta,
  spec: z.looseObject({
    customizedVariables: mapList(
      z.looseObject({ name: z.string(), value: z.string().optional() }),
      ["name"],
    ).optional(),
    nodePlacement: z
      .looseObject({
        nodeSelector: stringMap().optional(),
        tolerations: z.array(TolerationSchema).optional(),
      })
      .optional(),
    registries: z.array(z.looseObject({ mirror: z.string(), source: z.string().optional() })).optional(),
    proxyConfig: z
      .looseObject({
        httpProxy: z.string().optional(),
        httpsProxy: z.string().optional(),
        caBundle: base64().optional(),
        noProxy: z.string().optional(),
      })
      .optional(),
    agentInstallNamespace: z.string().meta({ default: DefaultAddOnInstallNamespace }).optional(),
    resourceRequirements: mapList(
      z.looseObject({ containerID: z.string(), resources: ResourceRequirementsSchema }),
      ["containerID"],
    ).optional(),
  }),
});
export type AddOnDeploymentConfig = z.infer<typeof AddOnDeploymentConfigSchema>;

const HubPermissionSchema = z.looseObject({
  type: z.enum(["CurrentCluster", "SingleNamespace"]),
  currentCluster: z.looseObject({ clusterRoleName: z.string() }).optional(),
  singleNamespace: z
    .looseObject({
      namespace: z.string(),
      roleRef: z
        .looseObject({ apiGroup: z.string(), kind: z.string(), name: z.string() })
        .meta({ "x-kubernetes-map-type": "atomic" }),
    })
    .optional(),
});

export const AddOnTemplateSchema = z.looseObject({
  ...typeMeta,
  spec: z.looseObject({
    addonName: z.string(),
    agentSpec: ManifestWorkSpecSchema,
    registration: z
      .array(
        z.looseObject({
          type: z.enum(["KubeClient", "CustomSigner"]),
          kubeClient: z.looseObject({ hubPermissions: z.array(HubPermissionSchema).optional() }).optional(),
          customSigner: z
            .looseObject({
              signerName: z.string(),
              subject: z
                .looseObject({
                  user: z.string().optional(),
                  groups: z.array(z.string()).optional(),
                  organizationUnit: z.array(z.string()).optional(),
                })
                .optional(),
              signingCA: z.looseObject({ name: z.string(), namespace: z.string().optional() }),
            })
            .optional(),
        }),
      )
      .optional(),
  }),
});
export type AddOnTemplate = z.infer<typeof AddOnTemplateSchema>;
