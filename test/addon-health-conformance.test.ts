// A template add-on's health, ours beside OCM's (issue 24 item 4). OCM's own add-on manager
// (open-cluster-management.io/ocm v1.2.0 cmd/addon, built by `scripts/build-tools.sh ocm`) runs as a
// process on one hub under the ClusterRole OCM ships for it (read from the ocm module's
// manifests/cluster-manager/hub/addon-manager/clusterrole.yaml in the Go module cache), not as admin;
// our addon-manager's reconcile runs on the other under its own identity (manifests/rbac/addon-manager.yaml).
// Both get the same input: the same ClusterManagementAddOn, AddOnTemplate and ManagedClusterAddOn, then,
// step by step, the same deploy-work status a work agent would report (the work's Available, and the
// Deployment's WellKnownStatus feedback of the status the step gives it). After each step both add-ons
// must show the same healthCheck mode and the same Available condition (type, status, reason, message),
// and the works the same feedback rules.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { findOcm } from "../dev/control-plane/binaries.ts";
import { startClusters, type LocalClusters } from "../dev/control-plane/clusters.ts";
import { logTail, stopProcess, type Managed } from "../dev/control-plane/processes.ts";
import { ocmHubControllerRules, startOcmHubProgram } from "./support/ocm-programs.ts";
import { KubeClient } from "../shared/kube/client.ts";
import { findCondition } from "../shared/conditions.ts";
import { ClusterRoleBindingResource, ClusterRoleResource, NamespaceResource } from "../shared/api/kube.ts";
import { ManagedClusterResource } from "../shared/api/cluster.ts";
import { ManifestWorkResource, type ManifestWork } from "../shared/api/work.ts";
import { AddOnConditionType, AddOnDeploymentConfigV1alpha1Resource, ManagedClusterAddOnV1alpha1Resource, type ManagedClusterAddOnV1alpha1 } from "../shared/api/addon.ts";
import { deployWorkName } from "../shared/api/addon-strings.ts";
import type { Io } from "../shared/harness.ts";
import fn, { type Config } from "../functions/addon-manager/reconcile.ts";
import { testIo } from "./support/functions.ts";
import { readyIdentity } from "./support/fixtures.ts";
import { eventually } from "./support/eventually.ts";
import { PROBED_DAEMONSET, PROBED_DEPLOYMENT, PROBED_NAMESPACE, createProbedAddon, reportWork, type WorkReport } from "./support/probed-addon.ts";

const OCM = "ocm";
const OURS = "ours";
const CLUSTER = "cluster1";
const ADDON = "probed";
const OCM_USER = "ocm-addon-manager";
const HUB_NAMESPACE = "open-cluster-management-hub";
const SETTLE_MS = 60_000;

let planes: LocalClusters | undefined;
let ocm: KubeClient | undefined;
let ours: KubeClient | undefined;
let manager: Managed | undefined;
let io: Io<Config>;

beforeAll(async () => {
  const programs = findOcm(["addon"]);
  const rules = ocmHubControllerRules("addon-manager");
  planes = await startClusters({ names: [OCM, OURS] });
  const ocmPlane = planes.get(OCM);
  ocm = KubeClient.fromKubeconfig(ocmPlane.adminKubeconfig);
  ours = KubeClient.fromKubeconfig(planes.get(OURS).adminKubeconfig);

  // OCM's manager under OCM's ClusterRole for it, bound to a user of its own.
  const role = "open-cluster-management:cluster-manager-addon-manager:controller";
  await ocm.create(ClusterRoleResource, { metadata: { name: role }, rules });
  await ocm.create(ClusterRoleBindingResource, { metadata: { name: role }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: role }, subjects: [{ kind: "User", apiGroup: "rbac.authorization.k8s.io", name: OCM_USER }] });
  await ocm.create(NamespaceResource, { metadata: { name: HUB_NAMESPACE } });
  const kubeconfig = join(ocmPlane.dir, `${OCM_USER}.kubeconfig`);
  writeFileSync(kubeconfig, await ocmPlane.kubeconfigFor({ user: OCM_USER }), { mode: 0o600 });
  const probe = KubeClient.fromKubeconfig(readFileSync(kubeconfig, "utf8"));
  try {
    await eventually(() => Promise.all([probe.list(ManagedClusterAddOnV1alpha1Resource), probe.list(ManifestWorkResource), probe.list(AddOnDeploymentConfigV1alpha1Resource)]));
  } finally {
    probe.close();
  }
  // In the control plane's run directory: its guard reaps the process too if this one dies.
  manager = await startOcmHubProgram({ planeDir: ocmPlane.dir, name: "ocm-addon-manager", binary: programs.addon, command: "manager", kubeconfig, namespace: HUB_NAMESPACE });

  io = testIo({ [OURS]: await readyIdentity(planes.get(OURS), fn.spec.name, [ManagedClusterAddOnV1alpha1Resource, ManifestWorkResource, AddOnDeploymentConfigV1alpha1Resource]) }, { hubCluster: OURS });

  for (const admin of [ocm, ours]) {
    await admin.create(ManagedClusterResource, { metadata: { name: CLUSTER }, spec: { hubAcceptsClient: true } });
    await admin.create(NamespaceResource, { metadata: { name: CLUSTER } });
    await createProbedAddon(admin, ADDON, CLUSTER);
  }
}, 240_000);

afterAll(async () => {
  if (manager) await stopProcess(manager);
  ocm?.close();
  ours?.close();
  await planes?.stop();
});

function managerAlive(): void {
  if (manager && manager.child.exitCode !== null) throw new Error(`OCM's add-on manager exited with ${manager.child.exitCode}:\n${logTail(manager)}`);
}

type View = { mode?: string; available?: { type: string; status: string; reason?: string; message?: string } };
async function view(admin: KubeClient): Promise<View> {
  const a = await admin.get<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, ADDON, CLUSTER);
  const c = findCondition(a?.status?.conditions, AddOnConditionType.Available);
  return { mode: a?.status?.healthCheck?.mode, available: c && { type: c.type, status: c.status, reason: c.reason, message: c.message } };
}
const WORK = deployWorkName(ADDON, 0);
const feedbackRules = async (admin: KubeClient) =>
  ((await admin.get<ManifestWork>(ManifestWorkResource, WORK, CLUSTER))?.spec?.manifestConfigs ?? [])
    .map((m) => ({ id: m.resourceIdentifier, rules: m.feedbackRules }))
    .sort((a, b) => (a.id.name < b.id.name ? -1 : 1));

// What each step reports, and the Available both managers must then show (OCM's is awaited; ours
// follows one reconcile).
const steps: { name: string; report: WorkReport; available: View["available"] }[] = [
  { name: "the work is not available", report: { available: false }, available: { type: "Available", status: "False", reason: "WorkNotApplied", message: "1 of 4 resources are not available" } },
  { name: "the work is available, no feedback yet", report: {}, available: { type: "Available", status: "Unknown", reason: "NoProbeResult", message: "Probe results are not returned" } },
  { name: "the Deployment has a ready replica", report: { status: { replicas: 1, readyReplicas: 1, availableReplicas: 1 } }, available: { type: "Available", status: "True", reason: "ProbeAvailable", message: `${ADDON} add-on is available.` } },
  {
    name: "the Deployment has none",
    report: { status: { replicas: 1, readyReplicas: 0, availableReplicas: 0 } },
    available: { type: "Available", status: "False", reason: "ProbeUnavailable", message: `Probe addon unavailable with err desiredNumberReplicas is 1 but readyReplica is 0 for deployments ${PROBED_NAMESPACE}/${PROBED_DEPLOYMENT}` },
  },
  {
    name: "the Deployment is ready again, the DaemonSet has one of two pods ready",
    report: { status: { replicas: 1, readyReplicas: 1, availableReplicas: 1 }, daemonSet: { desiredNumberScheduled: 2, numberReady: 1, numberAvailable: 1 } },
    available: { type: "Available", status: "False", reason: "ProbeUnavailable", message: `Probe addon unavailable with err desiredNumberReplicas is 2 but readyReplica is 1 for daemonsets ${PROBED_NAMESPACE}/${PROBED_DAEMONSET}` },
  },
  {
    name: "both are ready",
    report: { status: { replicas: 1, readyReplicas: 1, availableReplicas: 1 }, daemonSet: { desiredNumberScheduled: 2, numberReady: 2, numberAvailable: 2 } },
    available: { type: "Available", status: "True", reason: "ProbeAvailable", message: `${ADDON} add-on is available.` },
  },
];

describe("a template add-on's health beside OCM v1.2.0's add-on manager", () => {
  it("gives the same healthCheck mode Customized, the same work feedback rules, and the same Available (type, status, reason, message) as OCM for each work status: WorkNotApplied, NoProbeResult, ProbeAvailable, ProbeUnavailable for a Deployment and for a DaemonSet", { timeout: 300_000 }, async () => {
    // deployed: OCM's manager writes the work and the mode on its own; ours in one reconcile
    await fn.spec.reconcile(io, { cluster: OURS, namespace: CLUSTER, name: ADDON });
    await eventually(
      async () => {
        managerAlive();
        expect(await ocm!.get(ManifestWorkResource, WORK, CLUSTER)).toBeDefined();
        expect((await view(ocm!)).mode).toBe("Customized");
      },
      { timeoutMs: SETTLE_MS },
    );
    expect(await view(ours!)).toEqual(await view(ocm!));
    expect(await view(ours!)).toEqual({ mode: "Customized", available: undefined });
    expect(await feedbackRules(ours!)).toEqual(await feedbackRules(ocm!));

    for (const step of steps) {
      await reportWork(ocm!, CLUSTER, WORK, step.report);
      await reportWork(ours!, CLUSTER, WORK, step.report);
      await fn.spec.reconcile(io, { cluster: OURS, namespace: CLUSTER, name: ADDON });
      await eventually(
        async () => {
          managerAlive();
          expect({ step: step.name, ...(await view(ocm!)) }).toEqual({ step: step.name, mode: "Customized", available: step.available });
        },
        { timeoutMs: SETTLE_MS },
      );
      expect({ step: step.name, ...(await view(ours!)) }).toEqual({ step: step.name, ...(await view(ocm!)) });
    }
  });
});
