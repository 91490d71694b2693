// A spoke joins the hub with every part real: control planes, relays, and the four registration
// functions behind our CloudEvents server (shared/cloudevents-server.ts) under their own identities.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { startFleet, type Fleet } from "../dev/local/fleet.ts";
import { acceptCluster } from "../cli/accept.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { KubeError } from "../shared/kube/errors.ts";
import { SecretResource, CertificateSigningRequestResource } from "../shared/api/kube.ts";
import { ManagedClusterResource, ClusterLabel, type ManagedCluster } from "../shared/api/cluster.ts";
import { AgentNamespaceDefault, HubKubeconfigSecretName } from "../shared/api/registration.ts";
import { clientWithSecretFiles, secretText, type Secret } from "../shared/hub-credentials.ts";
import { findCondition } from "../shared/conditions.ts";
import { eventually } from "./support/eventually.ts";

// Own timeouts, not the runner's defaults: starting the fleet (control planes, functions, relays) and
// joining take up to a minute or two on a loaded 2-core machine; each test waits for joins and revocations
// through relays: up to 45 s, twice.
const FLEET_START_MS = 240_000;
const FLEET_TEST_MS = 120_000;

let fleet: Fleet;
beforeAll(async () => {
  fleet = await startFleet({
    spokes: [
      { name: "auto", autoApprove: true },
      { name: "manual", autoApprove: false },
      { name: "interrupted", autoApprove: false },
    ],
    resyncMs: 2_000,
  });
}, FLEET_START_MS);
afterAll(async () => {
  await fleet?.stop();
});

type Cluster = ManagedCluster & KubeObject;
const cluster = (name: string) => fleet.hub.get<Cluster>(ManagedClusterResource, name);
const conditionOf = async (name: string, type: string) => findCondition((await cluster(name))?.status?.conditions, type);

async function joined(name: string) {
  return eventually(async () => {
    const c = await conditionOf(name, "ManagedClusterJoined");
    expect(c?.status).toBe("True");
    return c;
  }, { timeoutMs: 45_000 });
}

async function hubSecretOf(name: string): Promise<Secret | undefined> {
  const spoke = KubeClient.fromKubeconfig(fleet.clusters.get(name).adminKubeconfig);
  try {
    return await spoke.get<Secret>(SecretResource, HubKubeconfigSecretName, AgentNamespaceDefault);
  } finally {
    spoke.close();
  }
}

describe("joining", { timeout: FLEET_TEST_MS }, () => {
  it("joins by auto-approval: accepted, certificate issued, secret written, Joined", async () => {
    await joined("auto");
    const c = (await cluster("auto"))!;
    expect(c.spec?.hubAcceptsClient).toBe(true);
    expect(findCondition(c.status?.conditions, "HubAcceptedManagedCluster")).toMatchObject({ status: "True", reason: "HubClusterAdminAccepted" });
    expect(c.metadata.annotations?.["open-cluster-management.io/automatically-accepted-on"]).toBeDefined();
    const secret = await hubSecretOf("auto");
    expect(secretText(secret, "cluster-name")).toBe("auto");
  });

  it("waits for a manual accept, then joins", async () => {
    await eventually(async () => expect(await cluster("manual")).toBeDefined(), { timeoutMs: 30_000 });
    await joined("auto"); // by then the other cluster has long joined; this one must still wait
    const waiting = (await cluster("manual"))!;
    expect(waiting.spec?.hubAcceptsClient).toBe(false);
    expect(await hubSecretOf("manual")).toBeUndefined();

    const { items } = await fleet.hub.list<KubeObject & { status?: { conditions?: unknown[] } }>(CertificateSigningRequestResource, { labelSelector: `${ClusterLabel.ClusterName}=manual` });
    expect(items.length).toBe(1);
    expect(items[0]!.status?.conditions ?? []).toEqual([]);

    await eventually(async () => expect((await acceptCluster(fleet.hub, "manual")).csr).not.toBe("none"));
    await joined("manual");
    expect(await hubSecretOf("manual")).toBeDefined();
  });

  it("completes a join whose relay was killed mid-way and started again", async () => {
    // The spoke has created its cluster and CSR and waits for the hub; its relay dies, and the hub
    // admin accepts while nobody listens on the spoke side.
    await eventually(async () => {
      const { items } = await fleet.hub.list<KubeObject>(CertificateSigningRequestResource, { labelSelector: `${ClusterLabel.ClusterName}=interrupted` });
      expect(items).toHaveLength(1);
    }, { timeoutMs: 30_000 });
    await fleet.stopRelay("interrupted");
    expect((await acceptCluster(fleet.hub, "interrupted")).csr).toBe("approved");
    await eventually(async () => {
      const { items } = await fleet.hub.list<KubeObject & { status?: { certificate?: string } }>(CertificateSigningRequestResource, { labelSelector: `${ClusterLabel.ClusterName}=interrupted` });
      expect(items.some((c) => c.status?.certificate)).toBe(true);
    }, { timeoutMs: 30_000 });
    expect(await hubSecretOf("interrupted")).toBeUndefined();
    await fleet.startRelay("interrupted");
    await joined("interrupted");
  });
});

describe("denying", { timeout: FLEET_TEST_MS }, () => {
  it("revokes an accepted cluster's access when the hub admin sets hubAcceptsClient to false", async () => {
    await joined("auto");
    const secret = (await hubSecretOf("auto"))!;
    const agent = clientWithSecretFiles(secretText(secret, "kubeconfig")!, secret);
    try {
      const before = (await agent.get<Cluster>(ManagedClusterResource, "auto"))!;
      await agent.patch(ManagedClusterResource, "auto", { status: { conditions: before.status?.conditions } }, { subresource: "status" }); // allowed while accepted

      const c = (await cluster("auto"))!;
      await fleet.hub.update(ManagedClusterResource, { ...c, spec: { ...c.spec!, hubAcceptsClient: false } });
      await eventually(async () => expect(await conditionOf("auto", "HubAcceptedManagedCluster")).toMatchObject({ status: "False", reason: "HubClusterAdminDenied", message: "Denied by hub cluster admin" }), { timeoutMs: 30_000 });
      await eventually(async () => {
        const denied = await agent.patch(ManagedClusterResource, "auto", { status: { conditions: before.status?.conditions } }, { subresource: "status" }).then(() => undefined, (e: unknown) => e);
        expect(denied).toBeInstanceOf(KubeError);
        expect((denied as KubeError).code).toBe(403);
      });
      expect((await cluster("auto"))!.spec?.hubAcceptsClient).toBe(false); // it sticks: auto-acceptance happens once
    } finally {
      agent.close();
    }
  });
});
