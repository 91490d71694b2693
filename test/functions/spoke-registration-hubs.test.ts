// spoke-registration with multiple hubs (OCM's MultipleHubs): two real hubs and a spoke. The agent joins
// the first usable hub of its list, and moves to the next when its hub stops accepting it, when its lease
// goes unrenewed past the timeout, and when the hub's API server has been down that long; a changed
// bootstrap kubeconfig re-bootstraps it. Nothing of the old hub's credentials stays behind.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parse, stringify } from "yaml";
import { startClusters, type LocalClusters } from "../../dev/control-plane/clusters.ts";
import { startApiserver, stopApiserver } from "../../dev/control-plane/restart.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { CertificateSigningRequestResource, LeaseResource, SecretResource } from "../../shared/api/kube.ts";
import { ClusterLabel, ManagedClusterLeaseName, ManagedClusterResource, type ManagedCluster } from "../../shared/api/cluster.ts";
import { applyManifests } from "../../shared/apply.ts";
import { reconcileKey } from "../../shared/harness.ts";
import { hubEndpoint, secretText, type Secret } from "../../shared/hub-credentials.ts";
import { manualClock } from "../../shared/clock.ts";
import fn, { ConfigSchema, pendingSecretName, type Config } from "../../functions/spoke-registration/reconcile.ts";
import { SelectedFromAnnotation, UnreachableSinceAnnotation } from "../../functions/spoke-registration/hubs.ts";
import acceptor from "../../functions/cluster-acceptor/reconcile.ts";
import { identityFor, reconcileAsRelay, testIo } from "../support/functions.ts";
import { eventually } from "../support/eventually.ts";

const AGENT_NS = "open-cluster-management-agent";
const HUBS = ["hub-a", "hub-b"] as const;
type Hub = (typeof HUBS)[number];
type Csr = KubeObject & { metadata: { name: string; creationTimestamp?: string }; spec: { username: string }; status?: { certificate?: string } };

let local: LocalClusters;
let spokeAdmin: KubeClient;
let fnKubeconfig: string;
const admins = new Map<Hub, KubeClient>();
const acceptorKubeconfigs = new Map<Hub, string>();

beforeAll(async () => {
  local = await startClusters({ names: [...HUBS, "spoke"] });
  spokeAdmin = KubeClient.fromKubeconfig(local.get("spoke").adminKubeconfig);
  for (const hub of HUBS) {
    const admin = KubeClient.fromKubeconfig(local.get(hub).adminKubeconfig);
    admins.set(hub, admin);
    await applyManifests(admin, readFileSync(join(import.meta.dirname, "../../manifests/hub/bootstrap-rbac.yaml"), "utf8"));
    acceptorKubeconfigs.set(hub, await identityFor(local.get(hub), "cluster-acceptor"));
  }
  fnKubeconfig = await identityFor(local.get("spoke"), "spoke-registration");
});
afterAll(async () => {
  for (const admin of admins.values()) admin.close();
  spokeAdmin?.close();
  await local?.stop();
});

const admin = (hub: Hub) => admins.get(hub)!;
const suffix = () => Math.random().toString(36).slice(2, 7);

// One agent per scenario, with a bootstrap kubeconfig Secret per hub, in the order of HUBS.
async function newAgent(o: Partial<Config> = {}) {
  const id = suffix();
  const listed = HUBS.map((hub) => `bootstrap-${id}-${hub}`);
  const config = ConfigSchema.parse({
    managementCluster: "spoke",
    clusterName: `cluster-${id}`,
    bootstrapSecret: `bootstrap-${id}`,
    hubSecret: `hub-${id}`,
    bootstrapKubeconfigSecrets: listed,
    externalServerUrls: [local.get("spoke").url],
    ...o,
  });
  for (const [i, hub] of HUBS.entries()) {
    const token = await local.get(hub).createBootstrapToken(["system:bootstrappers:managedcluster"]);
    await writeSecret(listed[i]!, token.kubeconfig);
  }
  const clock = manualClock();
  const io = testIo({ spoke: fnKubeconfig }, config, clock);
  const key = { cluster: "spoke", name: config.clusterName };
  return { config, listed, clock, reconcile: () => reconcileKey(fn.spec, io, key) };
}
type Agent = Awaited<ReturnType<typeof newAgent>>;

async function writeSecret(name: string, kubeconfig: string) {
  const data = { kubeconfig: Buffer.from(kubeconfig).toString("base64") };
  const existing = await spokeAdmin.get<Secret>(SecretResource, name, AGENT_NS);
  if (existing) await spokeAdmin.update(SecretResource, { ...existing, data });
  else await spokeAdmin.create<Secret>(SecretResource, { metadata: { name, namespace: AGENT_NS }, data });
}

const secret = (name: string) => spokeAdmin.get<Secret>(SecretResource, name, AGENT_NS);

// The hub the agent bootstraps with: the one whose URL is in bootstrap-hub-kubeconfig.
async function selectedHub(agent: Agent): Promise<Hub | undefined> {
  const text = secretText(await secret(agent.config.bootstrapSecret), "kubeconfig");
  return text ? HUBS.find((hub) => local.get(hub).url === hubEndpoint(text).server) : undefined;
}

async function csrsOn(hub: Hub, cluster: string): Promise<Csr[]> {
  const { items } = await admin(hub).list<Csr>(CertificateSigningRequestResource, { labelSelector: `${ClusterLabel.ClusterName}=${cluster}` });
  return items.sort((a, b) => (a.metadata.creationTimestamp ?? "").localeCompare(b.metadata.creationTimestamp ?? ""));
}

async function setAccepted(hub: Hub, cluster: string, accepted: boolean) {
  const mc = (await admin(hub).get<ManagedCluster & KubeObject>(ManagedClusterResource, cluster))!;
  await admin(hub).update(ManagedClusterResource, { ...mc, spec: { ...mc.spec, hubAcceptsClient: accepted } });
  const io = testIo({ [hub]: acceptorKubeconfigs.get(hub)! }, acceptor.definition.config.parse({ hubCluster: hub, autoApprovalUsers: [] }));
  await reconcileAsRelay((io, key) => reconcileKey(acceptor.spec, io, key), io, { cluster: hub, name: cluster });
}

// What the hub admin does on that hub: accept the cluster and approve its newest request; then the agent
// collects the certificate. Returns the hub secret it wrote.
async function joinOn(agent: Agent, hub: Hub): Promise<Secret> {
  const cluster = agent.config.clusterName;
  await agent.reconcile(); // registers the cluster and requests a certificate there
  const csr = (await csrsOn(hub, cluster)).filter((c) => !c.status?.certificate).at(-1);
  if (!csr) throw new Error(`no CSR for ${cluster} on ${hub}`);
  await setAccepted(hub, cluster, true);
  await admin(hub).update(CertificateSigningRequestResource, { ...csr, status: { conditions: [{ type: "Approved", status: "True", reason: "Test", message: "approved by the test" }] } }, "approval");
  await eventually(async () => expect((await admin(hub).get<Csr>(CertificateSigningRequestResource, csr.metadata.name))?.status?.certificate).toBeDefined());
  await agent.reconcile();
  const written = await secret(agent.config.hubSecret);
  expect(hubEndpoint(secretText(written, "kubeconfig")!).server).toBe(local.get(hub).url);
  return written!;
}

// After a move: the old hub's certificate and request are gone, and the next reconcile registers on the new hub.
async function movedTo(agent: Agent, hub: Hub) {
  expect(await selectedHub(agent)).toBe(hub);
  expect((await secret(agent.config.bootstrapSecret))?.metadata.annotations).toEqual({ [SelectedFromAnnotation]: agent.listed[HUBS.indexOf(hub)] });
  expect(await secret(agent.config.hubSecret)).toBeUndefined();
  expect(await secret(pendingSecretName(agent.config))).toBeUndefined();
}

describe("choosing a hub", () => {
  it("refuses a list of one bootstrap kubeconfig, as OCM's agent does", () => {
    const parsed = ConfigSchema.safeParse({ clusterName: "c1", bootstrapKubeconfigSecrets: ["only-one"] });
    expect(parsed.success).toBe(false);
    expect(parsed.error?.issues.map((i) => i.message)).toEqual(["expect at least 2 bootstrap kubeconfigs"]);
  });

  it("joins the first hub of the list that takes it, and passes over one whose bootstrap identity is refused", async () => {
    const agent = await newAgent();
    await agent.reconcile();
    expect(await selectedHub(agent)).toBe("hub-a");
    await joinOn(agent, "hub-a");
    expect(await csrsOn("hub-b", agent.config.clusterName)).toEqual([]);

    // A second agent whose first kubeconfig names a token hub A does not know.
    const other = await newAgent();
    const first = secretText(await secret(other.listed[0]!), "kubeconfig")!;
    const doc = parse(first);
    doc.users[0].user.token = "abcdef.0123456789abcdef";
    await writeSecret(other.listed[0]!, stringify(doc));
    await other.reconcile();
    expect(await selectedHub(other)).toBe("hub-b");
    await joinOn(other, "hub-b");
    expect(await admin("hub-a").get(ManagedClusterResource, other.config.clusterName)).toBeUndefined();
  });
});

describe("moving between hubs", () => {
  it("moves from hub A to hub B when A stops accepting the cluster, and back to A when B does", async () => {
    const agent = await newAgent();
    await agent.reconcile();
    await joinOn(agent, "hub-a");
    await agent.reconcile();
    expect(await selectedHub(agent)).toBe("hub-a"); // accepted and renewed: it stays

    await setAccepted("hub-a", agent.config.clusterName, false);
    await agent.reconcile();
    await movedTo(agent, "hub-b");
    await joinOn(agent, "hub-b");
    const csrOnB = (await csrsOn("hub-b", agent.config.clusterName))[0]!;
    expect(csrOnB.spec.username).toMatch(/^system:bootstrap:/); // a fresh join, with B's bootstrap identity

    await setAccepted("hub-a", agent.config.clusterName, true); // A's admin takes it back
    await setAccepted("hub-b", agent.config.clusterName, false);
    await agent.reconcile();
    await movedTo(agent, "hub-a");
    await joinOn(agent, "hub-a");
  });

  it("moves on when its lease has gone unrenewed past the timeout, and not before", async () => {
    const agent = await newAgent({ hubConnectionTimeoutSeconds: 300 });
    await agent.reconcile();
    await joinOn(agent, "hub-a");
    const lease = await admin("hub-a").get<KubeObject & { spec: { renewTime: string } }>(LeaseResource, ManagedClusterLeaseName, agent.config.clusterName);
    const renewed = Date.parse(lease!.spec.renewTime);
    agent.clock.set(new Date(renewed + 299_000));
    await agent.reconcile();
    expect(await selectedHub(agent)).toBe("hub-a");
    agent.clock.set(new Date(renewed + 301_000));
    await agent.reconcile();
    await movedTo(agent, "hub-b");
  });

  it("takes a bootstrap kubeconfig of the list that changes: a new token keeps the certificate, a renamed cluster entry re-bootstraps", async () => {
    const agent = await newAgent();
    await agent.reconcile();
    const before = await joinOn(agent, "hub-a");
    const csrs = (await csrsOn("hub-a", agent.config.clusterName)).length;
    const fresh = await local.get("hub-a").createBootstrapToken(["system:bootstrappers:managedcluster"]);
    const doc = parse(secretText(await secret(agent.listed[0]!), "kubeconfig")!);
    doc.users[0].user.token = parse(fresh.kubeconfig).users[0].user.token;
    await writeSecret(agent.listed[0]!, stringify(doc));
    await agent.reconcile();
    await agent.reconcile();
    expect(secretText(await secret(agent.config.bootstrapSecret), "kubeconfig")).toBe(stringify(doc)); // copied over
    expect(secretText(await secret(agent.config.hubSecret), "tls.crt")).toBe(secretText(before, "tls.crt"));
    expect(await csrsOn("hub-a", agent.config.clusterName)).toHaveLength(csrs);

    doc.clusters[0].name = "renamed-hub";
    doc.contexts[0].context.cluster = "renamed-hub";
    await writeSecret(agent.listed[0]!, stringify(doc));
    await agent.reconcile();
    expect(await selectedHub(agent)).toBe("hub-a");
    const after = await joinOn(agent, "hub-a");
    expect(hubEndpoint(secretText(after, "kubeconfig")!).clusterName).toBe("renamed-hub");
    expect(secretText(after, "tls.crt")).not.toBe(secretText(before, "tls.crt"));
  });

  it("stays with its hub and goes on with the registration when its lease has gone stale and no other hub in the list takes it", async () => {
    const agent = await newAgent({ hubConnectionTimeoutSeconds: 300 });
    await agent.reconcile();
    await joinOn(agent, "hub-a");
    // hub B refuses this agent's bootstrap identity; A's lease goes stale
    const doc = parse(secretText(await secret(agent.listed[1]!), "kubeconfig")!);
    doc.users[0].user.token = "abcdef.0123456789abcdef";
    await writeSecret(agent.listed[1]!, stringify(doc));
    const lease = await admin("hub-a").get<KubeObject & { spec: { renewTime: string } }>(LeaseResource, ManagedClusterLeaseName, agent.config.clusterName);
    agent.clock.set(new Date(Date.parse(lease!.spec.renewTime) + 400_000));
    const outcome = await agent.reconcile();
    expect(await selectedHub(agent)).toBe("hub-a");
    expect(await secret(agent.config.hubSecret)).toBeDefined();
    expect(outcome).not.toEqual({ recheckInMs: 60_000 }); // the registration's own answer, not the hub check's
  });

  // Last: it stops hub A's API server, and starts it again however it ends.
  it("moves from hub A to hub B once A's API server has not answered for the timeout, counting from the first failure", async () => {
    const agent = await newAgent({ hubConnectionTimeoutSeconds: 200 });
    await agent.reconcile();
    await joinOn(agent, "hub-a");
    await stopApiserver(local.get("hub-a"));
    try {
      const down = new Date();
      agent.clock.set(down);
      expect(await agent.reconcile()).toEqual({ recheckInMs: 60_000 });
      expect(((await secret(agent.config.bootstrapSecret))?.metadata.annotations as Record<string, string> | undefined)?.[UnreachableSinceAnnotation]).toBe(down.toISOString());
      agent.clock.set(new Date(down.getTime() + 170_000));
      expect(await agent.reconcile()).toEqual({ recheckInMs: 30_000 });
      expect(await selectedHub(agent)).toBe("hub-a");
      agent.clock.set(new Date(down.getTime() + 200_000));
      await agent.reconcile();
      await movedTo(agent, "hub-b");
      await joinOn(agent, "hub-b");
    } finally {
      await startApiserver(local.get("hub-a"));
    }
  });
});
