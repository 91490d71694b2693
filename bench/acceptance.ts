// Acceptance latency beside OCM's, in one run (`npm run bench -- acceptance`, no root): an accepted
// ManagedCluster created until HubAccepted=True, one after another, on two hubs of this machine:
//   - ours: the hub functions in local mode, fed by the hub relay, each under its own identity;
//   - OCM v1.2.0's registration controller (DefaultClusterSet on, as ours), first under OCM's own
//     ClusterRole for it, as its operator installs it, then as system:masters, as the hub-cost bench
//     runs it (the API server then skips its RBAC escalation checks for the roles and bindings it writes).
// Then the RBAC writes of one acceptance alone (rbacWaves), under cluster-acceptor's identity and as
// system:masters: a role or binding written by an identity without `escalate` and `bind` is checked
// against the writer's own rules, which the API server reads by consistent lists from its watch cache.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { startClusters, type LocalCluster } from "../dev/control-plane/clusters.ts";
import { identityFor } from "../dev/control-plane/identities.ts";
import { findOcm } from "../dev/control-plane/binaries.ts";
import { stopProcess, type Managed } from "../dev/control-plane/processes.ts";
import { startFleet } from "../dev/local/fleet.ts";
import { ocmHubControllerRules, ocmOwnCrds, startOcmHubProgram } from "../test/support/ocm-programs.ts";
import { KubeClient } from "../shared/kube/client.ts";
import { applyManifests } from "../shared/apply.ts";
import { ClusterRoleBindingResource, ClusterRoleResource, NamespaceResource, RoleBindingResource } from "../shared/api/kube.ts";
import { clusterNamespace, clusterRole, clusterRoleBinding, roleBinding } from "../functions/cluster-acceptor/rbac.ts";
import { percentile, ms } from "./stats.ts";
import { createdToAccepted } from "./accepted.ts";

const SAMPLES = Number(process.env.ACCEPTANCE_SAMPLES || 20);
// Between samples, so that one acceptance's follow-up writes are done before the next begins.
const GAP_MS = 500;
const HUB_NAMESPACE = "open-cluster-management-hub";
const OCM_USER = "ocm-registration-controller";

const pause = (msToWait: number) => new Promise((resolve) => setTimeout(resolve, msToWait));

async function samplesOf(admin: KubeClient, prefix: string): Promise<number[]> {
  const took: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    const t = await createdToAccepted(admin, `${prefix}-${i}`, 30_000);
    if (t === undefined) throw new Error(`${prefix}-${i} was not accepted within 30 s`);
    took.push(t);
    await pause(GAP_MS);
  }
  return took;
}

async function ocmSamples(plane: LocalCluster, admin: KubeClient, binary: string, kubeconfig: string, prefix: string): Promise<number[]> {
  const controller: Managed = await startOcmHubProgram({ planeDir: plane.dir, name: `ocm-registration-${prefix}`, binary, command: "controller", kubeconfig, namespace: HUB_NAMESPACE, args: ["--feature-gates=DefaultClusterSet=true"] });
  try {
    await pause(3_000); // its informers before the first cluster (the hub-cost bench waits as long)
    return await samplesOf(admin, prefix);
  } finally {
    await stopProcess(controller);
  }
}

// Acceptance's RBAC writes alone, for fresh cluster names, GAP_MS apart, in the acceptor's two waves:
// the namespace and the per-cluster ClusterRole at once, then its ClusterRoleBinding and the two
// RoleBindings in the namespace at once. Each wave's time.
async function rbacWaves(client: KubeClient, prefix: string): Promise<{ roles: number[]; bindings: number[] }> {
  const roles: number[] = [];
  const bindings: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    const c = `${prefix}-${i}`;
    let t = performance.now();
    await Promise.all([client.create(NamespaceResource, clusterNamespace(c)), client.create(ClusterRoleResource, clusterRole(c, true))]);
    roles.push(performance.now() - t);
    t = performance.now();
    await Promise.all([
      client.create(ClusterRoleBindingResource, clusterRoleBinding(c)),
      client.create(RoleBindingResource, roleBinding(c, "registration")),
      client.create(RoleBindingResource, roleBinding(c, "work")),
    ]);
    bindings.push(performance.now() - t);
    await pause(GAP_MS);
  }
  return { roles, bindings };
}

const p50p95 = (s: readonly number[]) => `p50 ${ms(percentile(s, 50))}, p95 ${ms(percentile(s, 95))}`;

export const acceptance = {
  name: "acceptance",
  async run() {
    const { registration } = findOcm(["registration"]);
    const figures: Record<string, string> = {};

    const ours = await startClusters({ names: ["hub"], log: () => {} });
    try {
      const fleet = await startFleet({ clusters: ours, spokes: [], resyncMs: 600_000 });
      try {
        await pause(3_000);
        figures["ours: created → HubAccepted"] = p50p95(await samplesOf(fleet.hub, "ours"));
      } finally {
        await fleet.stop();
      }
      const hub = ours.get("hub");
      const admin = KubeClient.fromKubeconfig(hub.adminKubeconfig);
      const acceptor = KubeClient.fromKubeconfig(await identityFor(hub, "cluster-acceptor", "-bench"));
      try {
        const asAcceptor = await rbacWaves(acceptor, "rbac-acceptor");
        const asMasters = await rbacWaves(admin, "rbac-masters");
        figures["RBAC as cluster-acceptor: namespace and role"] = p50p95(asAcceptor.roles);
        figures["RBAC as cluster-acceptor: then the 3 bindings"] = p50p95(asAcceptor.bindings);
        figures["RBAC as system:masters: namespace and role"] = p50p95(asMasters.roles);
        figures["RBAC as system:masters: then the 3 bindings"] = p50p95(asMasters.bindings);
      } finally {
        acceptor.close();
        admin.close();
      }
    } finally {
      await ours.stop();
    }

    const ocmPlanes = await startClusters({ names: ["ocm"], crds: ocmOwnCrds(), admission: false, log: () => {} });
    try {
      const plane = ocmPlanes.get("ocm");
      const admin = KubeClient.fromKubeconfig(plane.adminKubeconfig);
      try {
        await applyManifests(admin, readFileSync(join(import.meta.dirname, "..", "manifests", "hub", "bootstrap-rbac.yaml"), "utf8"));
        await admin.create(NamespaceResource, { metadata: { name: HUB_NAMESPACE } });
        const role = "open-cluster-management:cluster-manager-registration:controller";
        await admin.create(ClusterRoleResource, { metadata: { name: role }, rules: ocmHubControllerRules("registration") });
        await admin.create(ClusterRoleBindingResource, {
          metadata: { name: role },
          roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: role },
          subjects: [{ kind: "User", apiGroup: "rbac.authorization.k8s.io", name: OCM_USER }],
        });
        const ownKubeconfig = join(plane.dir, `${OCM_USER}.kubeconfig`);
        writeFileSync(ownKubeconfig, await plane.kubeconfigFor({ user: OCM_USER }), { mode: 0o600 });
        figures["OCM, its own ClusterRole: created → HubAccepted"] = p50p95(await ocmSamples(plane, admin, registration, ownKubeconfig, "ocm-own"));
        figures["OCM, system:masters: created → HubAccepted"] = p50p95(await ocmSamples(plane, admin, registration, join(plane.dir, "admin.kubeconfig"), "ocm-masters"));
      } finally {
        admin.close();
      }
    } finally {
      await ocmPlanes.stop();
    }
    figures.samples = String(SAMPLES);
    figures.OCM = "open-cluster-management.io/ocm v1.2.0 `registration controller`";
    return figures;
  },
};
