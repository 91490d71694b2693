// The control-plane and identity set-up that test files share: a hub of its own, a function's own
// identity once its RBAC is in force, CSR requesters, bootstrap identities, and a fleet's cluster once
// its agent holds its hub identity.
import { afterAll, beforeAll } from "vitest";
import type { ApiResource } from "../../shared/api/meta.ts";
import { ClusterRoleBindingResource, ClusterRoleResource } from "../../shared/api/kube.ts";
import { ManagedClusterResource, type ManagedCluster } from "../../shared/api/cluster.ts";
import { isTrue } from "../../shared/conditions.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import type { Io } from "../../shared/harness.ts";
import type { Clock } from "../../shared/clock.ts";
import { bootstrappedHubClient, type AgentSecrets } from "../../shared/hub-credentials.ts";
import { startClusters, type LocalCluster, type StartOptions } from "../../dev/control-plane/clusters.ts";
import { identityFor } from "../../dev/control-plane/identities.ts";
import type { Fleet } from "../../dev/local/fleet.ts";
import { testIo } from "./functions.ts";
import { eventually } from "./eventually.ts";

export type Hub = { cluster: LocalCluster; admin: KubeClient; stop(): Promise<void> };

// One control plane named `name`, with its admin client; without a controller manager unless
// `controllers` is true (the harness's default set) or names them.
export async function startHub(name: string, o: Omit<StartOptions, "names" | "controllers"> & { controllers?: StartOptions["controllers"] | true } = {}): Promise<Hub> {
  const { controllers = false, ...rest } = o;
  const local = await startClusters({ ...rest, names: [name], ...(controllers === true ? {} : { controllers }) });
  const admin = KubeClient.fromKubeconfig(local.get(name).adminKubeconfig);
  return {
    cluster: local.get(name),
    admin,
    stop: async () => {
      admin.close();
      await local.stop();
    },
  };
}

// A function's own identity on `cluster` (manifests/rbac/<fn>.yaml) as a kubeconfig, returned once it
// may list each of `ready`: RBAC reaches the authorizer, and a new CRD's storage serves (it answers 429
// at first), a moment after they are created.
export async function readyIdentity(cluster: LocalCluster, fn: string, ready: readonly ApiResource[]): Promise<string> {
  const kubeconfig = await identityFor(cluster, fn);
  const probe = KubeClient.fromKubeconfig(kubeconfig);
  try {
    await eventually(() => Promise.all(ready.map((r) => probe.list(r))));
  } finally {
    probe.close();
  }
  return kubeconfig;
}

// One function's test file on its own hub: started before the file's tests and stopped after them; `use`
// gets the admin client and the function's own identity once its RBAC is in force for `ready`.
export function functionHub(fn: string, ready: readonly ApiResource[], use: (h: { admin: KubeClient; kubeconfig: string }) => void, name = "hub"): void {
  let plane: Hub | undefined;
  beforeAll(async () => {
    plane = await startHub(name);
    use({ admin: plane.admin, kubeconfig: await readyIdentity(plane.cluster, fn, ready) });
  });
  afterAll(() => plane?.stop());
}

// The function's Io on `cluster` under that identity.
export async function functionIo<C>(cluster: LocalCluster, fn: string, config: C, ready: readonly ApiResource[], clock?: Clock): Promise<Io<C>> {
  return testIo({ [cluster.name]: await readyIdentity(cluster, fn, ready) }, config, clock);
}

// Members of `groups` may create and read CSRs, as OCM's bootstrap role and per-cluster role allow.
export async function allowCsrRequests(admin: KubeClient, groups: readonly string[]): Promise<void> {
  const name = "test:csr-requester";
  await admin.create(ClusterRoleResource, { metadata: { name }, rules: [{ apiGroups: ["certificates.k8s.io"], resources: ["certificatesigningrequests"], verbs: ["create", "get"] }] });
  await admin.create(ClusterRoleBindingResource, {
    metadata: { name },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name },
    subjects: groups.map((g) => ({ kind: "Group", apiGroup: "rbac.authorization.k8s.io", name: g })),
  });
}

export type Requester = { user: string; client: KubeClient };

// `n` bootstrap-token identities in `group`, each with its user name and a client.
export async function bootstrapIdentities(cluster: LocalCluster, group: string, n: number): Promise<Requester[]> {
  const tokens = await Promise.all(Array.from({ length: n }, () => cluster.createBootstrapToken([group])));
  return tokens.map((t) => ({ user: t.user, client: KubeClient.fromKubeconfig(t.kubeconfig) }));
}

// Waits until the fleet's cluster is Joined and its agent's hub identity (found as the agent finds it,
// through `io`) can do `can`, then stops the fleet's relays for the hub and that cluster: from there the
// test's own calls are the only invocations, and the fleet's functions no longer race them.
export async function joinedThenQuiet(fleet: Fleet, cluster: string, io: Io<AgentSecrets>, can: (hub: KubeClient) => Promise<unknown>): Promise<void> {
  await eventually(
    async () => {
      const mc = await fleet.hub.get<ManagedCluster & KubeObject>(ManagedClusterResource, cluster);
      if (!isTrue(mc?.status?.conditions, "ManagedClusterJoined")) throw new Error(`${cluster} is not Joined yet`);
      const got = await bootstrappedHubClient(io.cluster(cluster), io.config, new Date());
      if (!("hub" in got)) throw new Error(got.reason);
      await can(got.hub);
    },
    { timeoutMs: 60_000 },
  );
  for (const name of ["hub", cluster]) await fleet.stopRelay(name);
}
