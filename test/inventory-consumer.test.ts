// A real consumer of our cluster inventory (issue 29 item 5): a Go program built from SIG-Multicluster's
// cluster-inventory-api module (tools/inventory-consumer), using that module's own access helper, lists
// the ClusterProfiles of its namespace on a live fleet's hub, builds a client for each from the profile's
// access provider and our exec plugin (components/cp-creds), and lists the spoke's Namespaces with the
// token our managed-serviceaccount add-on issued, enabled through the add-on framework like any add-on.
// Under its own identity on the hub (profiles and secrets of its namespace), it fails once its namespace
// is unbound from the set, and once the token is revoked.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startFleet, type Fleet } from "../dev/local/fleet.ts";
import { findInventoryConsumer } from "../dev/control-plane/binaries.ts";
import { KubeClient } from "../shared/kube/client.ts";
import { ClusterRoleBindingResource, ClusterRoleResource, NamespaceResource, RoleBindingResource, RoleResource, SecretResource } from "../shared/api/kube.ts";
import { applyManifests } from "../shared/apply.ts";
import { ClusterLabel, ManagedClusterResource, ManagedClusterSetBindingResource, ManagedClusterSetResource } from "../shared/api/cluster.ts";
import { ManagedClusterAddOnV1alpha1Resource } from "../shared/api/addon.ts";
import { ManagedServiceAccountResource, type ManagedServiceAccount } from "../shared/api/authentication.ts";
import { ClusterProfileResource } from "../shared/api/inventory.ts";
import { eventually } from "./support/eventually.ts";

const C = "cluster1";
const NS = "kueue-system";
const SET = "compute";
const MSA = "multikueue";
const WAIT = { timeoutMs: 90_000, intervalMs: 500 };
const root = join(import.meta.dirname, "..");

let fleet: Fleet;
let hub: KubeClient;
let spoke: KubeClient;
let dir: string;
let consumer: string;

beforeAll(async () => {
  consumer = findInventoryConsumer();
  dir = mkdtempSync(join(tmpdir(), "inventory-consumer-"));
  fleet = await startFleet({ spokes: [{ name: C, autoApprove: true }], resyncMs: 5_000 });
  hub = fleet.hub;
  spoke = KubeClient.fromKubeconfig(fleet.clusters.get(C).adminKubeconfig);
  // the add-on, enabled on the cluster as `ocmf addon enable` does
  await applyManifests(hub, readFileSync(join(root, "manifests", "addons", "managed-serviceaccount.yaml"), "utf8"));
  await eventually(async () => expect(await hub.get(ManagedClusterResource, C)).toBeDefined(), WAIT);
  await eventually(() => hub.create(ManagedClusterAddOnV1alpha1Resource, { metadata: { name: "managed-serviceaccount", namespace: C }, spec: {} }), WAIT);
  // the consumer's namespace, bound to a set holding the cluster; its own identity may read profiles and secrets there only
  await hub.create(NamespaceResource, { metadata: { name: NS } });
  await hub.create(ManagedClusterSetResource, { metadata: { name: SET }, spec: {} });
  await hub.patch(ManagedClusterResource, C, { metadata: { labels: { [ClusterLabel.ClusterSet]: SET } } });
  await bind();
  await hub.create(RoleResource, { metadata: { name: "kueue", namespace: NS }, rules: [{ apiGroups: ["multicluster.x-k8s.io"], resources: ["clusterprofiles"], verbs: ["get", "list", "watch"] }, { apiGroups: [""], resources: ["secrets"], verbs: ["get"] }] });
  await hub.create(RoleBindingResource, { metadata: { name: "kueue", namespace: NS }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "kueue" }, subjects: [{ kind: "User", apiGroup: "rbac.authorization.k8s.io", name: "kueue" }] });
  writeFileSync(join(dir, "hub.kubeconfig"), await fleet.clusters.get("hub").kubeconfigFor({ user: "kueue" }), { mode: 0o600 });
  // the token's ServiceAccount may list namespaces on the spoke (OCM leaves that grant to the admin, or its cluster-permission add-on)
  await spoke.create(ClusterRoleBindingResource, { metadata: { name: "multikueue-namespaces" }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "multikueue-namespaces" }, subjects: [{ kind: "ServiceAccount", name: MSA, namespace: "open-cluster-management-agent-addon" }] });
  await spoke.create(ClusterRoleResource, { metadata: { name: "multikueue-namespaces" }, rules: [{ apiGroups: [""], resources: ["namespaces"], verbs: ["list"] }] });
  // the consumer's provider file, as MultiKueue's credentialsProviders name OCM's plugin
  const provider = {
    providers: [
      {
        name: "open-cluster-management",
        execConfig: {
          apiVersion: "client.authentication.k8s.io/v1",
          command: process.execPath,
          args: [join(root, "components", "cp-creds", "main.ts"), `--managed-serviceaccount=${MSA}`],
          env: [{ name: "KUBECONFIG", value: join(dir, "hub.kubeconfig") }, { name: "NAMESPACE", value: NS }],
          provideClusterInfo: true,
          interactiveMode: "Never",
        },
      },
    ],
  };
  writeFileSync(join(dir, "providers.json"), JSON.stringify(provider));
}, 300_000);

afterAll(async () => {
  spoke?.close();
  await fleet?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const bind = () => hub.create(ManagedClusterSetBindingResource, { metadata: { name: SET, namespace: NS }, spec: { clusterSet: SET } });

function runConsumer(): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(consumer, ["--hub-kubeconfig", join(dir, "hub.kubeconfig"), "--namespace", NS, "--clusterprofile-provider-file", join(dir, "providers.json")], { timeout: 90_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

describe("a Go consumer built from cluster-inventory-api reaches the fleet through ClusterProfiles alone", { timeout: 300_000 }, () => {
  it("lists the spoke's namespaces through the profile's access provider and the plugin, with the managed service account's token copied to its namespace", async () => {
    await hub.create<ManagedServiceAccount>(ManagedServiceAccountResource, { metadata: { name: MSA, namespace: C, labels: { "authentication.open-cluster-management.io/sync-to-clusterprofile": "true" } }, spec: { rotation: { validity: "1h" } } });
    // the add-on registered (its hub kubeconfig on the spoke), the token reported, and copied beside the profile
    await eventually(async () => expect(await hub.get(SecretResource, `${C}-${MSA}`, NS)).toBeDefined(), WAIT);
    const reached = await eventually(async () => {
      const r = await runConsumer();
      expect(r.code, `${r.stdout}${r.stderr}`).toBe(0);
      return r;
    }, WAIT);
    const [name, count] = reached.stdout.trim().split(" ");
    expect(name).toBe(C);
    expect(Number(count)).toBeGreaterThan(3); // default, kube-system, kube-public, the agent's, the add-on's...
  });

  it("fails once its namespace is no longer bound to the set, and reaches the spoke again once it is", async () => {
    await hub.delete(ManagedClusterSetBindingResource, SET, NS);
    await eventually(async () => expect((await hub.list(ClusterProfileResource, { namespace: NS })).items).toEqual([]), WAIT);
    const unbound = await runConsumer();
    expect(unbound.code).toBe(1);
    expect(unbound.stderr).toContain(`no ClusterProfiles in ${NS}`);
    await bind();
    await eventually(async () => expect((await runConsumer()).code).toBe(0), WAIT);
  });

  it("fails once the token is revoked: the ManagedServiceAccount deleted, its ServiceAccount and the token copy go", async () => {
    await hub.delete(ManagedServiceAccountResource, MSA, C);
    await eventually(async () => {
      const r = await runConsumer();
      expect(r.code).toBe(1);
      expect(r.stdout).toMatch(new RegExp(`^${C} error: `));
    }, WAIT);
  });
});
