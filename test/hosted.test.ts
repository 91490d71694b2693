// Hosted mode, the agent's side (docs/agent-modes.md): three control planes. The hub; a management cluster
// where every part of the agent runs (its functions, relay and heartbeat, their identities, the agent's
// secrets); a managed cluster reached only through its kubeconfig (OCM's external-managed-kubeconfig).
// The cluster joins, reports the managed cluster's capacity, claims and CA, applies a ManifestWork there,
// turns Unknown when its heartbeat stops and Available when it returns, and the managed cluster's API
// server holds nothing of the agent's but the records of what the ManifestWork put there.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { startFleet, type Fleet } from "../dev/local/fleet.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ConfigMapResource, NamespaceResource, SecretResource, ServiceAccountResource } from "../shared/api/kube.ts";
import { DefaultAddOnInstallNamespace, ManagedClusterAddOnV1alpha1Resource, type ManagedClusterAddOnV1alpha1 } from "../shared/api/addon.ts";
import { applyManifests } from "../shared/apply.ts";
import { enableAddon } from "../cli/addon.ts";
import { ClusterClaimResource, ManagedClusterConditionType, ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { AppliedManifestWorkResource } from "../shared/api/work.ts";
import { AgentNamespaceDefault, HubKubeconfigSecretName } from "../shared/api/registration.ts";
import { findCondition, isTrue } from "../shared/conditions.ts";
import { manifestWorkApplied } from "./support/joined-spoke.ts";
import { eventually } from "./support/eventually.ts";

const CLUSTER = "edge";
const MANAGEMENT = "mgmt";
const START_MS = 240_000;
const STEP_MS = 120_000;

let fleet: Fleet;
let managed: KubeClient;
let management: KubeClient;
// What the managed cluster held before the agent started: control-plane defaults, the test's Nodes, CRDs.
let before: Map<string, Set<string>>;

type Cluster = ManagedCluster & KubeObject;
const cluster = () => fleet.hub.get<Cluster>(ManagedClusterResource, CLUSTER);

// Namespaced kinds an agent would leave behind, by "<namespace>/<name>", and the namespaces.
const kinds = [NamespaceResource, SecretResource, ConfigMapResource, ServiceAccountResource] as const;
async function inventory(c: KubeClient): Promise<Map<string, Set<string>>> {
  const out = new Map<string, Set<string>>();
  for (const r of kinds) out.set(r.plural, new Set((await c.list(r)).items.map((o) => `${o.metadata.namespace ?? ""}/${o.metadata.name}`)));
  return out;
}

beforeAll(async () => {
  // the helloworld add-on's agent on the managed cluster, where its Deployment would run
  fleet = await startFleet({ spokes: [{ name: CLUSTER, autoApprove: true, controlPlane: MANAGEMENT, managedPlane: CLUSTER }], resyncMs: 2_000, leaseDurationSeconds: 5, relays: false, addonAgents: true });
  managed = KubeClient.fromKubeconfig(fleet.clusters.get(CLUSTER).adminKubeconfig);
  management = KubeClient.fromKubeconfig(fleet.clusters.get(MANAGEMENT).adminKubeconfig);
  before = await inventory(managed);
  await fleet.startRelay("hub");
  await fleet.startRelay(CLUSTER);
}, START_MS);
afterAll(async () => {
  managed?.close();
  management?.close();
  await fleet?.stop();
});

describe("a hosted agent", () => {
  it("joins with its secrets on the management cluster and reports the managed cluster: its CA, capacity and claims", async () => {
    await eventually(async () => expect(isTrue((await cluster())?.status?.conditions, ManagedClusterConditionType.Joined)).toBe(true), { timeoutMs: STEP_MS, intervalMs: 500 });
    expect(await management.get(SecretResource, HubKubeconfigSecretName, AgentNamespaceDefault)).toBeDefined();
    expect(await managed.get(SecretResource, HubKubeconfigSecretName, AgentNamespaceDefault)).toBeUndefined();
    const mc = (await cluster())!;
    expect(mc.spec?.managedClusterClientConfigs).toEqual([{ url: fleet.clusters.get(CLUSTER).url, caBundle: Buffer.from(fleet.clusters.get(CLUSTER).caPem).toString("base64") }]);
    // Only the managed cluster has Nodes: capacity can come from nowhere else.
    await eventually(async () => expect(Object.keys((await cluster())?.status?.capacity ?? {})).toContain("cpu"), { timeoutMs: STEP_MS, intervalMs: 500 });
    await managed.create(ClusterClaimResource, { metadata: { name: "region.open-cluster-management.io" }, spec: { value: "edge-west" } });
    await management.create(ClusterClaimResource, { metadata: { name: "decoy.example.com" }, spec: { value: "management" } });
    await eventually(async () => expect((await cluster())?.status?.clusterClaims).toEqual([{ name: "region.open-cluster-management.io", value: "edge-west" }]), { timeoutMs: STEP_MS, intervalMs: 500 });
  }, STEP_MS * 2);

  it("applies a ManifestWork to the managed cluster and not to the management one", async () => {
    await manifestWorkApplied(fleet.hub, managed, CLUSTER);
    expect(await management.get(ConfigMapResource, "hello-from-hub", "default")).toBeUndefined();
    expect((await managed.list(AppliedManifestWorkResource)).items.map((a) => a.metadata.name)).toEqual([expect.stringMatching(/-hello$/)]);
  }, STEP_MS);

  it("turns Unknown while its heartbeat on the management cluster is stopped and Available once it runs again", async () => {
    const available = async () => findCondition((await cluster())?.status?.conditions, ManagedClusterConditionType.Available)?.status;
    await eventually(async () => expect(await available()).toBe("True"), { timeoutMs: STEP_MS, intervalMs: 500 });
    await fleet.stopHeartbeat(CLUSTER);
    await eventually(async () => expect(await available()).toBe("Unknown"), { timeoutMs: STEP_MS, intervalMs: 500 });
    await fleet.startHeartbeat(CLUSTER);
    await eventually(async () => expect(await available()).toBe("True"), { timeoutMs: STEP_MS, intervalMs: 500 });
  }, STEP_MS * 3);

  it("leaves on the managed cluster nothing of the agent's but what the ManifestWork put there and its record of it", async () => {
    const after = await inventory(managed);
    const added = Object.fromEntries([...after].map(([kind, names]) => [kind, [...names].filter((n) => !before.get(kind)!.has(n)).sort()]));
    expect(added).toEqual({ namespaces: [], secrets: [], configmaps: ["default/hello-from-hub"], serviceaccounts: [] });
    expect((await managed.list(AppliedManifestWorkResource)).items).toHaveLength(1);
  });

  // Last: the add-on puts its own objects on the managed cluster.
  it("runs an add-on there: its credentials are written on the managed cluster, where its agent runs, and work there as the add-on's hub identity", async () => {
    await applyManifests(fleet.hub, readFileSync(join(import.meta.dirname, "..", "manifests", "addons", "helloworld.yaml"), "utf8"));
    await enableAddon(fleet.hub, { addon: "helloworld", clusters: [CLUSTER] });
    const addon = () => fleet.hub.get<ManagedClusterAddOnV1alpha1 & KubeObject>(ManagedClusterAddOnV1alpha1Resource, "helloworld", CLUSTER);
    await eventually(async () => expect(findCondition((await addon())?.status?.conditions, "ClusterCertificateRotated")?.status).toBe("True"), { timeoutMs: STEP_MS, intervalMs: 500 });
    expect(await managed.get(SecretResource, "helloworld-hub-kubeconfig", DefaultAddOnInstallNamespace)).toBeDefined();
    expect(await management.get(SecretResource, "helloworld-hub-kubeconfig", DefaultAddOnInstallNamespace)).toBeUndefined();
    // the add-on's agent (local mode's stand-in for its Deployment) copies its cluster's ConfigMaps from the hub with them
    await fleet.hub.create(ConfigMapResource, { metadata: { name: "for-the-addon", namespace: CLUSTER }, data: { hello: "edge" } });
    await eventually(async () => expect((await managed.get<KubeObject & { data?: Record<string, string> }>(ConfigMapResource, "for-the-addon", DefaultAddOnInstallNamespace))?.data).toEqual({ hello: "edge" }), { timeoutMs: STEP_MS, intervalMs: 500 });
  }, STEP_MS * 2);

  it("moves an add-on's credentials off the managed cluster once it names a hosting cluster, and writes none outside the agent's own namespace on the shared management cluster", async () => {
    await fleet.hub.patch(ManagedClusterAddOnV1alpha1Resource, "helloworld", { metadata: { annotations: { "addon.open-cluster-management.io/hosting-cluster-name": MANAGEMENT } } }, { namespace: CLUSTER });
    await eventually(async () => expect(await managed.get(SecretResource, "helloworld-hub-kubeconfig", DefaultAddOnInstallNamespace)).toBeUndefined(), { timeoutMs: STEP_MS, intervalMs: 500 });
    expect(await management.get(SecretResource, "helloworld-hub-kubeconfig", DefaultAddOnInstallNamespace)).toBeUndefined();
  }, STEP_MS);
});
