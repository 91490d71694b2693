// The CustomResourceDefinitions this project serves, one per OCM kind and one per kind of our own
// (AgentConfig), generated from the zod schemas, and the YAML files scripts/gen-crds.ts writes for them.
import { stringify } from "yaml";
import { AgentConfigConditionType, AgentConfigGroup, AgentConfigResource, AgentConfigSchema } from "./agent-config.ts";
import {
  AddOnDeploymentConfigSchema,
  AddOnDeploymentConfigV1alpha1Resource,
  AddOnTemplateResource,
  ClusterManagementAddOnV1alpha1Resource,
  ManagedClusterAddOnV1alpha1Resource,
  AddOnGroup,
  AddOnTemplateSchema,
  ClusterManagementAddOnV1alpha1Schema,
  ClusterManagementAddOnV1beta1Schema,
  ManagedClusterAddOnV1alpha1Schema,
  ManagedClusterAddOnV1beta1Schema,
} from "./addon.ts";
import {
  ClusterClaimResource,
  ClusterClaimSchema,
  ManagedClusterResource,
  ManagedClusterSetBindingResource,
  ManagedClusterSetResource,
  PlacementDecisionResource,
  PlacementResource,
  ClusterGroup,
  ManagedClusterConditionType,
  ManagedClusterSchema,
  ManagedClusterSetBindingSchema,
  ManagedClusterSetConditionType,
  ManagedClusterSetSchema,
  PlacementConditionType,
  PlacementDecisionSchema,
  PlacementSchema,
} from "./cluster.ts";
import { AuthenticationGroup, ManagedServiceAccountResource, ManagedServiceAccountSchema } from "./authentication.ts";
import { ClusterProfileResource, ClusterProfileSchema, InventoryGroup, SigPlacementDecisionResource, SigPlacementDecisionSchema } from "./inventory.ts";
import { type CustomResourceDefinition, type KindDescription, type PrinterColumn, toCrd } from "./crd.ts";
import {
  AppliedManifestWorkResource,
  AppliedManifestWorkSchema,
  ManifestWorkResource,
  ManifestWorkSchema,
  WorkGroup,
} from "./work.ts";

const status = { status: {} } as const;
const age: PrinterColumn = { name: "Age", type: "date", jsonPath: ".metadata.creationTimestamp" };
const conditionColumn = (name: string, type: string, field = "status"): PrinterColumn => ({
  name,
  type: "string",
  jsonPath: `.status.conditions[?(@.type=="${type}")].${field}`,
});
const addOnHealthColumns = [
  conditionColumn("Available", "Available"),
  conditionColumn("Degraded", "Degraded"),
  conditionColumn("Progressing", "Progressing"),
];
const displayNameColumn: PrinterColumn = { name: "DISPLAY NAME", type: "string", jsonPath: ".spec.addOnMeta.displayName" };

// Names, versions and printer columns follow OCM's published CRDs and, for ClusterProfile, the Cluster
// Inventory API's (checked by test/api/crd-conformance.test.ts); the kinds of our own group come last.
//
// One difference from OCM: OCM serves v1beta1 of ClusterManagementAddOn and ManagedClusterAddOn through its
// conversion webhook; we have none, so the API server would hand out the stored v1alpha1 object pruned to
// v1beta1's schema (registrations as [{}], supportedConfigs and installNamespace gone) and a client that
// saves it back would erase those fields. Those versions stay declared, unserved (issue 24). OCM v1.2.0's
// own programs and clusteradm v1.3.1 read and write v1alpha1 only. AddOnDeploymentConfig's versions have
// the same schema, so serving both loses nothing, and OCM serves both without conversion too.
export const unconvertible: readonly { kind: string; version: string }[] = [
  { kind: ClusterManagementAddOnV1alpha1Resource.kind, version: "v1beta1" },
  { kind: ManagedClusterAddOnV1alpha1Resource.kind, version: "v1beta1" },
];
export const kinds: readonly KindDescription[] = [
  {
    group: ClusterGroup,
    kind: ManagedClusterResource.kind,
    plural: ManagedClusterResource.plural,
    singular: "managedcluster",
    shortNames: ["mcl", "mcls"],
    scope: "Cluster",
    versions: [
      {
        name: "v1",
        served: true,
        storage: true,
        schema: ManagedClusterSchema,
        subresources: status,
        printerColumns: [
          { name: "Hub Accepted", type: "boolean", jsonPath: ".spec.hubAcceptsClient" },
          { name: "Managed Cluster URLs", type: "string", jsonPath: ".spec.managedClusterClientConfigs[*].url" },
          conditionColumn("Joined", ManagedClusterConditionType.Joined),
          conditionColumn("Available", ManagedClusterConditionType.Available),
          age,
        ],
      },
    ],
  },
  {
    group: ClusterGroup,
    kind: ClusterClaimResource.kind,
    plural: ClusterClaimResource.plural,
    singular: "clusterclaim",
    scope: "Cluster",
    versions: [{ name: "v1alpha1", served: true, storage: true, schema: ClusterClaimSchema }],
  },
  {
    group: ClusterGroup,
    kind: ManagedClusterSetResource.kind,
    plural: ManagedClusterSetResource.plural,
    singular: "managedclusterset",
    shortNames: ["mclset", "mclsets"],
    scope: "Cluster",
    versions: [
      {
        name: "v1beta2",
        served: true,
        storage: true,
        schema: ManagedClusterSetSchema,
        subresources: status,
        printerColumns: [conditionColumn("Empty", ManagedClusterSetConditionType.ClusterSetEmpty), age],
      },
    ],
  },
  {
    group: ClusterGroup,
    kind: ManagedClusterSetBindingResource.kind,
    plural: ManagedClusterSetBindingResource.plural,
    singular: "managedclustersetbinding",
    shortNames: ["mclsetbinding", "mclsetbindings"],
    scope: "Namespaced",
    versions: [
      { name: "v1beta2", served: true, storage: true, schema: ManagedClusterSetBindingSchema, subresources: status },
    ],
  },
  {
    group: ClusterGroup,
    kind: PlacementResource.kind,
    plural: PlacementResource.plural,
    singular: "placement",
    scope: "Namespaced",
    versions: [
      {
        name: "v1beta1",
        served: true,
        storage: true,
        schema: PlacementSchema,
        subresources: status,
        printerColumns: [
          conditionColumn("Succeeded", PlacementConditionType.PlacementSatisfied),
          conditionColumn("Reason", PlacementConditionType.PlacementSatisfied, "reason"),
          { name: "SelectedClusters", type: "integer", jsonPath: ".status.numberOfSelectedClusters" },
        ],
      },
    ],
  },
  {
    group: ClusterGroup,
    kind: PlacementDecisionResource.kind,
    plural: PlacementDecisionResource.plural,
    singular: "placementdecision",
    scope: "Namespaced",
    versions: [
      { name: "v1beta1", served: true, storage: true, schema: PlacementDecisionSchema, subresources: status },
    ],
  },
  {
    group: AddOnGroup,
    kind: ClusterManagementAddOnV1alpha1Resource.kind,
    plural: ClusterManagementAddOnV1alpha1Resource.plural,
    singular: "clustermanagementaddon",
    shortNames: ["cma", "cmas"],
    scope: "Cluster",
    versions: [
      {
        name: "v1alpha1",
        served: true,
        storage: true,
        schema: ClusterManagementAddOnV1alpha1Schema,
        subresources: status,
        printerColumns: [
          displayNameColumn,
          { name: "CRD NAME", type: "string", jsonPath: ".spec.addOnConfiguration.crdName" },
        ],
      },
      {
        name: "v1beta1",
        served: false, // not served: see `unconvertible`
        storage: false,
        schema: ClusterManagementAddOnV1beta1Schema,
        subresources: status,
        printerColumns: [displayNameColumn],
      },
    ],
  },
  {
    group: AddOnGroup,
    kind: ManagedClusterAddOnV1alpha1Resource.kind,
    plural: ManagedClusterAddOnV1alpha1Resource.plural,
    singular: "managedclusteraddon",
    shortNames: ["mca", "mcas"],
    scope: "Namespaced",
    versions: [
      {
        name: "v1alpha1",
        served: true,
        storage: true,
        schema: ManagedClusterAddOnV1alpha1Schema,
        subresources: status,
        printerColumns: addOnHealthColumns,
      },
      {
        name: "v1beta1",
        served: false, // not served: see `unconvertible`
        storage: false,
        schema: ManagedClusterAddOnV1beta1Schema,
        subresources: status,
        printerColumns: addOnHealthColumns,
      },
    ],
  },
  {
    group: AddOnGroup,
    kind: AddOnDeploymentConfigV1alpha1Resource.kind,
    plural: AddOnDeploymentConfigV1alpha1Resource.plural,
    singular: "addondeploymentconfig",
    scope: "Namespaced",
    versions: [
      { name: "v1alpha1", served: true, storage: true, schema: AddOnDeploymentConfigSchema },
      { name: "v1beta1", served: true, storage: false, schema: AddOnDeploymentConfigSchema },
    ],
  },
  {
    group: AddOnGroup,
    kind: AddOnTemplateResource.kind,
    plural: AddOnTemplateResource.plural,
    singular: "addontemplate",
    scope: "Cluster",
    versions: [
      {
        name: "v1alpha1",
        served: true,
        storage: true,
        schema: AddOnTemplateSchema,
        // OCM declares an empty subresources block: AddOnTemplate has no status.
        subresources: {},
        printerColumns: [{ name: "ADDON NAME", type: "string", jsonPath: ".spec.addonName" }],
      },
    ],
  },
  {
    group: WorkGroup,
    kind: ManifestWorkResource.kind,
    plural: ManifestWorkResource.plural,
    singular: "manifestwork",
    scope: "Namespaced",
    versions: [{ name: "v1", served: true, storage: true, schema: ManifestWorkSchema, subresources: status }],
  },
  {
    group: WorkGroup,
    kind: AppliedManifestWorkResource.kind,
    plural: AppliedManifestWorkResource.plural,
    singular: "appliedmanifestwork",
    scope: "Cluster",
    versions: [
      { name: "v1", served: true, storage: true, schema: AppliedManifestWorkSchema, subresources: status },
    ],
  },
  {
    group: AuthenticationGroup,
    kind: ManagedServiceAccountResource.kind,
    plural: ManagedServiceAccountResource.plural,
    singular: "managedserviceaccount",
    scope: "Namespaced",
    versions: [
      {
        name: "v1alpha1",
        served: true,
        storage: false,
        schema: ManagedServiceAccountSchema,
        subresources: status,
        deprecationWarning: "authentication.open-cluster-management.io/v1alpha1 ManagedServiceAccount is deprecated; use authentication.open-cluster-management.io/v1beta1 ManagedServiceAccount; version v1alpha1 will be removed in the next release",
      },
      { name: "v1beta1", served: true, storage: true, schema: ManagedServiceAccountSchema, subresources: status },
    ],
  },
  {
    group: InventoryGroup,
    kind: ClusterProfileResource.kind,
    plural: ClusterProfileResource.plural,
    singular: "clusterprofile",
    scope: "Namespaced",
    versions: [{ name: "v1alpha1", served: true, storage: true, schema: ClusterProfileSchema, subresources: status }],
  },
  {
    group: InventoryGroup,
    kind: SigPlacementDecisionResource.kind,
    plural: SigPlacementDecisionResource.plural,
    singular: "placementdecision",
    scope: "Namespaced",
    versions: [{ name: "v1alpha1", served: true, storage: true, schema: SigPlacementDecisionSchema }],
  },
  {
    group: AgentConfigGroup,
    kind: AgentConfigResource.kind,
    plural: AgentConfigResource.plural,
    singular: "agentconfig",
    scope: "Namespaced",
    versions: [
      {
        name: "v1alpha1",
        served: true,
        storage: true,
        schema: AgentConfigSchema,
        subresources: status,
        printerColumns: [
          { name: "Assigned", type: "string", jsonPath: ".status.assigned.hash" },
          { name: "Active", type: "string", jsonPath: ".status.active.hash" },
          conditionColumn("OK", AgentConfigConditionType.AgentConfigOK),
          conditionColumn("Reason", AgentConfigConditionType.AgentConfigOK, "reason"),
          age,
        ],
      },
    ],
  },
];

export const crds: readonly CustomResourceDefinition[] = kinds.map(toCrd);

export const crdManifestDir = "manifests/crds";

// File names follow OCM's `<group>_<plural>.crd.yaml`, without its ordering prefix.
export function crdManifests(): { file: string; yaml: string }[] {
  return crds.map((crd) => ({
    file: `${crd.spec.group}_${crd.spec.names.plural}.crd.yaml`,
    yaml: `# Generated from shared/api by scripts/gen-crds.ts; do not edit.\n${stringify(crd, { lineWidth: 0 })}`,
  }));
}
