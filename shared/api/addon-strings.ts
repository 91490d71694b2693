// OCM add-on strings that shared/api/addon.ts does not carry: condition messages, subjects, the names the
// add-on framework derives (works, RoleBindings, secrets, mounts) and AddOnTemplate's variables, spelled
// as ocm, addon-framework and sdk-go spell them.
import { AddOnGroup } from "./addon.ts";

// RBAC never binds this group for an add-on agent.
export const AuthenticatedGroup = "system:authenticated";
// status.registrations subjects (addon-framework agent.DefaultUser / DefaultGroups): the cluster's
// add-on group, the add-on's group, and system:authenticated, in this order.
export const addonAgentUser = (cluster: string, addon: string, agent: string) => `system:open-cluster-management:cluster:${cluster}:addon:${addon}:agent:${agent}`;
export const addonGroups = (cluster: string, addon: string) => [`system:open-cluster-management:cluster:${cluster}:addon:${addon}`, `system:open-cluster-management:addon:${addon}`, AuthenticatedGroup];
// An AddOnTemplate add-on's agent is named <addon>-agent (ocm templateagent).
export const templateAgentName = (addon: string) => `${addon}-agent`;

export const AddOnMessage = {
  RegistrationApplied: "Registration of the addon agent is configured",
  setPermissionFailed: (err: string) => `Failed to set permission for hub agent: ${err}`,
  ManifestsApplied: "manifests of addon are applied successfully",
  NoManifest: "no manifest need to apply",
  ManifestsApplyFailed: "failed to apply the manifests of addon",
  workApplyFailed: (err: string) => `failed to apply manifestWork: ${err}`,
  manifestsFailed: (err: string) => `failed to get manifest from agent interface: ${err}`,
  buildWorkFailed: (err: string) => `failed to build manifestwork: ${err}`,
  Configured: "Configurations configured",
  NotConfigured: "Configurations updated and not configured yet",
  configurationUnsupported: (group: string, resource: string) => `Configuration with gvr ${group}/${resource} is not supported for this addon`,
  WaitingForManifestApplied: "Waiting for ManagedClusterAddOn ManifestApplied condition",
  progressing: (why: "no addon works" | "mca and work configs mismatch" | "work is not ready") => `progressing... ${why}`,
  Completed: "completed with no errors.",
  templateNotFound: (cluster: string, addon: string) => `addon ${cluster}/${addon} template not found in status`,
  templateHashEmpty: (addon: string) => `addon ${addon} template desired spec hash is empty`,
  // Available of an add-on probed through its works (addon-framework health check)
  WorkNotFound: "Addon manifestWork is not found",
  WorkNotAppliedYet: "Addon manifestWork is not applied yet",
  NoProbeResult: "Probe results are not returned",
  probeUnavailable: (err: string) => `Probe addon unavailable with err ${err}`,
  probeAvailable: (addon: string) => `${addon} add-on is available.`,
} as const;

// Progressing reasons that AddOnReason spells for other conditions too.
export const ProgressingReason = { WaitingForManifestApplied: "WaitingForManifestApplied", ConfigurationUnsupported: "ConfigurationUnsupported" } as const;

// The config kinds every template add-on supports (addon-framework utils.BuiltInAddOnConfigGVRs).
export const AddOnConfigResource = { AddOnDeploymentConfigs: "addondeploymentconfigs", AddOnTemplates: "addontemplates" } as const;
export const BuiltInAddOnConfigs = [
  { group: AddOnGroup, resource: AddOnConfigResource.AddOnDeploymentConfigs },
  { group: AddOnGroup, resource: AddOnConfigResource.AddOnTemplates },
] as const;
// A CMA default config with this name means "no default" (api addon/v1beta1 conversion).
export const ReservedNoDefaultConfigName = "__reserved_no_default__";

// ManifestWorks of an add-on in the cluster namespace.
export const deployWorkName = (addon: string, index: number) => `addon-${addon}-deploy-${index}`;
export const deployWorkPrefix = (addon: string) => `addon-${addon}-deploy-`;
export const preDeleteHookWorkName = (addon: string) => `addon-${addon}-pre-delete`;
// addon-framework's work builder: 500 KiB per work, of which sdk-go fills 80 %.
export const AddOnManifestLimitBytes = 500 * 1024;
export const ManifestLimitThreshold = 0.8;

// AddOnTemplate hub permissions (ocm templateagent).
export const AddonTemplateLabel = "open-cluster-management.io/addon-template-name";
export const hubPermissionBindingName = (addon: string, roleKind: string) => `open-cluster-management:${addon}:${roleKind.toLowerCase()}:agent`;
// Where signingCA secrets live when the template names no namespace (the addon-manager's namespace).
export const AddonManagerNamespaceDefault = "open-cluster-management-hub";
// Custom-signed certificates are valid this long (capped at the CA's own expiry).
export const CustomSignerCertificateDurationMs = 24 * 3600_000;

// AddOnTemplate rendering: built-in and default variables, secrets and mounts.
export const TemplateVariable = { ClusterName: "CLUSTER_NAME", InstallNamespace: "INSTALL_NAMESPACE", HubKubeconfig: "HUB_KUBECONFIG" } as const;
export const HubKubeconfigMountDir = "/managed/hub-kubeconfig";
export const DefaultHubKubeconfigPath = `${HubKubeconfigMountDir}/kubeconfig`;
export const HubKubeconfigVolumeName = "hub-kubeconfig";
export const hubKubeconfigSecretName = (addon: string) => `${addon}-hub-kubeconfig`;
export const customSignedSecretName = (addon: string, signer: string) => `${addon}-${signer.replaceAll("/", "-")}-client-cert`;
export const customSignedMountDir = (signer: string) => `/managed/${signer.replaceAll("/", "-")}`;
export const customSignedVolumeName = (signer: string) => `cert-${signer.replaceAll("/", "-").replaceAll(".", "-")}`;
export const ProxyCaMountDir = "/managed/proxy-ca";
export const ProxyCaBundleKey = "ca-bundle.crt";
export const proxyCaConfigMapName = (addon: string) => `${addon}-proxy-ca`;

// ManagedCluster annotation of image mirrors, lower precedence than an AddOnDeploymentConfig's registries.
export const ClusterImageRegistriesAnnotation = "open-cluster-management.io/image-registries";
