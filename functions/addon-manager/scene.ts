// What the add-on manager's steps share: its settings, the objects read once per reconcile, and the
// desired AddOnTemplate and AddOnDeploymentConfig once the configured step has named them.
import type { HubCluster } from "../../shared/settings.ts";
import type { Io } from "../../shared/harness.ts";
import type { KubeClient } from "../../shared/kube/client.ts";
import type { ManagedCluster } from "../../shared/api/cluster.ts";
import {
  AddOnDeploymentConfigV1alpha1Resource,
  AddOnGroup,
  AddOnTemplateResource,
  type AddOnDeploymentConfig,
  type AddOnTemplate,
  type ClusterManagementAddOnV1alpha1,
  type ManagedClusterAddOnV1alpha1,
} from "../../shared/api/addon.ts";
import { AddOnConfigResource, AddOnMessage } from "../../shared/api/addon-strings.ts";

// Only which cluster is the hub (shared/settings.ts); events from any other cluster are not ours.
export type Config = HubCluster;

export type AddOnStatus = NonNullable<ManagedClusterAddOnV1alpha1["status"]>;

// What the steps share: the objects read once at the start, and the desired configs once read.
export type Scene = {
  io: Io<Config>;
  hub: KubeClient;
  mca: ManagedClusterAddOnV1alpha1;
  cluster?: ManagedCluster;
  cma?: ClusterManagementAddOnV1alpha1;
  now: Date;
  // OCM's controllers go on after a failed step and report every error; so do the steps here
  errors: unknown[];
  // exactly one of template and problem is set once the configured step has run
  configs: { template?: AddOnTemplate; problem?: string; adc?: AddOnDeploymentConfig };
};

export type Step = (s: Scene, status: AddOnStatus) => Promise<void>;

// The desired AddOnTemplate (by status.configReferences, which the configured step just wrote) and
// the AddOnDeploymentConfig, read once for the steps after it.
export async function readDesiredConfigs(s: Scene, status: AddOnStatus): Promise<Scene["configs"]> {
  const refs = status.configReferences ?? [];
  const ofResource = (resource: string) => refs.find((r) => (r.group ?? "") === AddOnGroup && r.resource === resource);
  const templateRef = ofResource(AddOnConfigResource.AddOnTemplates);
  const adcRef = ofResource(AddOnConfigResource.AddOnDeploymentConfigs);
  const cluster = s.mca.metadata.namespace!;
  const adc = adcRef?.desiredConfig
    ? await s.hub.get<AddOnDeploymentConfig>(AddOnDeploymentConfigV1alpha1Resource, adcRef.desiredConfig.name, adcRef.desiredConfig.namespace)
    : undefined;
  if (!templateRef?.desiredConfig) return { problem: AddOnMessage.templateNotFound(cluster, s.mca.metadata.name), adc };
  if (!templateRef.desiredConfig.specHash) return { problem: AddOnMessage.templateHashEmpty(s.mca.metadata.name), adc };
  const template = await s.hub.get<AddOnTemplate>(AddOnTemplateResource, templateRef.desiredConfig.name);
  return template ? { template, adc } : { problem: `addontemplate ${templateRef.desiredConfig.name} not found`, adc };
}

