// An AddOnTemplate add-on whose health OCM probes through its works (a Deployment of one replica, one of
// none, which is not probed, a DaemonSet and a ConfigMap), and what a work agent reports for its deploy
// work: the work's Applied and Available and each manifest's status, with the WellKnownStatus feedback
// of the Deployment and the DaemonSet read from the status the test gives each. Shared by test/functions/addon-manager.test.ts and
// test/addon-health-conformance.test.ts, so both hubs get the same input.
import type { KubeClient, KubeObject } from "../../shared/kube/client.ts";
import { setCondition } from "../../shared/conditions.ts";
import { ManifestWorkResource, ManifestReason, WorkConditionType, WorkReason, type ManifestWork } from "../../shared/api/work.ts";
import { AddOnGroup, AddOnTemplateResource, ClusterManagementAddOnV1alpha1Resource, ManagedClusterAddOnV1alpha1Resource } from "../../shared/api/addon.ts";

export const PROBED_NAMESPACE = "probed-agents";
export const PROBED_DEPLOYMENT = "agent";
export const PROBED_DAEMONSET = "node-agent";

const deployment = (name: string, replicas: number): KubeObject => ({
  apiVersion: "apps/v1",
  kind: "Deployment",
  metadata: { name, namespace: PROBED_NAMESPACE },
  spec: { replicas, selector: { matchLabels: { app: name } }, template: { metadata: { labels: { app: name } }, spec: { containers: [{ name: "main", image: "example.invalid/agent:v1" }] } } },
});

// The CMA, its default AddOnTemplate and the add-on on `cluster`, as an admin creates them.
export async function createProbedAddon(admin: KubeClient, addon: string, cluster: string): Promise<void> {
  await admin.create(ClusterManagementAddOnV1alpha1Resource, {
    metadata: { name: addon },
    spec: { supportedConfigs: [{ group: AddOnGroup, resource: "addontemplates", defaultConfig: { name: addon } }], installStrategy: { type: "Manual" } },
  });
  await admin.create(AddOnTemplateResource, {
    metadata: { name: addon },
    spec: {
      addonName: addon,
      agentSpec: {
        workload: {
          manifests: [
            { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "settings", namespace: PROBED_NAMESPACE }, data: { a: "1" } },
            deployment(PROBED_DEPLOYMENT, 1),
            deployment("standby", 0),
            {
              apiVersion: "apps/v1",
              kind: "DaemonSet",
              metadata: { name: PROBED_DAEMONSET, namespace: PROBED_NAMESPACE },
              spec: { selector: { matchLabels: { app: PROBED_DAEMONSET } }, template: { metadata: { labels: { app: PROBED_DAEMONSET } }, spec: { containers: [{ name: "main", image: "example.invalid/node-agent:v1" }] } } },
            },
          ],
        },
      },
    },
  });
  await admin.create(ManagedClusterAddOnV1alpha1Resource, { metadata: { name: addon, namespace: cluster }, spec: {} });
}

// The statuses the test gives the workloads; one left out has no feedback yet.
export type DeploymentStatus = { replicas: number; readyReplicas: number; availableReplicas: number };
export type DaemonSetStatus = { desiredNumberScheduled: number; numberReady: number; numberAvailable: number };
export type WorkReport = { available?: boolean; status?: DeploymentStatus; daemonSet?: DaemonSetStatus };

// Writes the work's status as a work agent that applied every manifest would: Applied, Available (True,
// or False when `available` says so), and the WellKnownStatus values of `status` for the probed
// Deployment and of `daemonSet` for the DaemonSet, in the work agent's order.
export async function reportWork(admin: KubeClient, cluster: string, name: string, o: WorkReport): Promise<void> {
  const w = (await admin.get<ManifestWork>(ManifestWorkResource, name, cluster))!;
  const now = new Date();
  const gen = w.metadata.generation;
  const available = o.available ?? true;
  let conditions = setCondition(w.status?.conditions, { type: WorkConditionType.Applied, status: "True", reason: WorkReason.AppliedManifestWorkComplete, message: "Apply manifest work complete", observedGeneration: gen }, now);
  conditions = setCondition(conditions, { type: WorkConditionType.Available, status: available ? "True" : "False", reason: available ? WorkReason.ResourcesAvailable : WorkReason.ResourcesNotAvailable, message: available ? "All resources are available" : "1 of 4 resources are not available", observedGeneration: gen }, now);
  const manifests = ((w.spec?.workload?.manifests ?? []) as KubeObject[]).map((m, ordinal) => {
    const [group, version] = m.apiVersion!.includes("/") ? m.apiVersion!.split("/") : ["", m.apiVersion!];
    const resource = `${m.kind!.toLowerCase()}s`;
    const int = (n: string, integer: number) => ({ name: n, fieldValue: { type: "Integer", integer } });
    const d = m.kind === "Deployment" && m.metadata.name === PROBED_DEPLOYMENT ? o.status : undefined;
    const ds = m.kind === "DaemonSet" ? o.daemonSet : undefined;
    const values = [
      ...(d ? [int("ReadyReplicas", d.readyReplicas), int("Replicas", d.replicas), int("AvailableReplicas", d.availableReplicas)] : []),
      ...(ds ? [int("NumberReady", ds.numberReady), int("DesiredNumberScheduled", ds.desiredNumberScheduled), int("NumberAvailable", ds.numberAvailable)] : []),
    ];
    return {
      resourceMeta: { ordinal, group, version, kind: m.kind, resource, name: m.metadata.name, namespace: m.metadata.namespace ?? "" },
      statusFeedback: values.length ? { values } : {},
      conditions: [
        { type: "Applied", status: "True", reason: ManifestReason.AppliedManifestComplete, message: "Apply manifest complete", lastTransitionTime: now.toISOString().replace(/\.\d+Z$/, "Z") },
        { type: "Available", status: "True", reason: ManifestReason.ResourceAvailable, message: "Resource is available", lastTransitionTime: now.toISOString().replace(/\.\d+Z$/, "Z") },
      ],
    };
  });
  await admin.patch(ManifestWorkResource, name, { status: { conditions, resourceStatus: { manifests } } }, { namespace: cluster, subresource: "status" });
}
