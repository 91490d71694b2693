// spoke-registration: a spoke joins with bootstrap credentials, gets its hub kubeconfig secret, keeps it
// while valid, and starts over when the bootstrap kubeconfig changes or the certificate expires.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parse, stringify } from "yaml";
import { startClusters, type LocalClusters } from "../../dev/control-plane/clusters.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { CertificateSigningRequestResource, SecretResource } from "../../shared/api/kube.ts";
import { ManagedClusterResource, ClusterLabel } from "../../shared/api/cluster.ts";
import { ManagedClustersGroup } from "../../shared/api/registration.ts";
import { applyManifests } from "../../shared/apply.ts";
import { handleEvent, reconcileKey, serve } from "../../shared/harness.ts";
import { bootstrappedHubClient, clientWithSecretFiles, secretText, type Secret } from "../../shared/hub-credentials.ts";
import { manualClock } from "../../shared/clock.ts";
import { parseCertificateRequest, readCertificate } from "../../shared/pki.ts";
import fn, { ConfigSchema, pendingSecretName, type Config } from "../../functions/spoke-registration/reconcile.ts";
import acceptor from "../../functions/cluster-acceptor/reconcile.ts";
import approver from "../../functions/csr-approver/reconcile.ts";
import { findCondition } from "../../shared/conditions.ts";
import { identityFor, objectEvent, postEvent, reconcileAsRelay, startFunctionServer, testIo, tickEvent } from "../support/functions.ts";
import { eventually } from "../support/eventually.ts";

const AGENT_NS = "open-cluster-management-agent";
type Csr = { metadata: { name: string; creationTimestamp?: string }; spec: { request: string; signerName: string; usages: string[]; username: string }; status?: { certificate?: string } };

let local: LocalClusters;
let hubAdmin: KubeClient;
let spokeAdmin: KubeClient;
let fnKubeconfig: string;

beforeAll(async () => {
  local = await startClusters({ names: ["hub", "spoke"] });
  hubAdmin = KubeClient.fromKubeconfig(local.get("hub").adminKubeconfig);
  spokeAdmin = KubeClient.fromKubeconfig(local.get("spoke").adminKubeconfig);
  await applyManifests(hubAdmin, readFileSync(join(import.meta.dirname, "../../manifests/hub/bootstrap-rbac.yaml"), "utf8"));
  fnKubeconfig = await identityFor(local.get("spoke"), "spoke-registration");
});
afterAll(async () => {
  hubAdmin?.close();
  spokeAdmin?.close();
  await local?.stop();
});

const suffix = () => Math.random().toString(36).slice(2, 7);

// One agent per scenario: its own cluster name and its own secret names in the agent namespace.
async function newAgent(o: Partial<Config> = {}, clusterEntryName = "hub") {
  const id = suffix();
  const token = await local.get("hub").createBootstrapToken(["system:bootstrappers:managedcluster"]);
  const config = ConfigSchema.parse({
    managementCluster: "spoke",
    clusterName: `cluster-${id}`,
    bootstrapSecret: `bootstrap-${id}`,
    hubSecret: `hub-${id}`,
    externalServerUrls: [local.get("spoke").url],
    ...o,
  });
  await writeBootstrap(config, token.kubeconfig, clusterEntryName);
  const clock = manualClock();
  const io = testIo({ spoke: fnKubeconfig }, config, clock);
  const key = { cluster: "spoke", name: config.clusterName };
  return { config, io, clock, key, token, reconcile: () => reconcileKey(fn.spec, io, key) };
}

async function writeBootstrap(config: Config, kubeconfig: string, clusterEntryName: string) {
  const doc = parse(kubeconfig);
  doc.clusters[0].name = clusterEntryName;
  doc.contexts[0].context.cluster = clusterEntryName;
  const data = { kubeconfig: Buffer.from(stringify(doc)).toString("base64") };
  const existing = await spokeAdmin.get<Secret>(SecretResource, config.bootstrapSecret, AGENT_NS);
  if (existing) await spokeAdmin.update(SecretResource, { ...existing, data });
  else await spokeAdmin.create<Secret>(SecretResource, { metadata: { name: config.bootstrapSecret, namespace: AGENT_NS }, data });
}

async function csrsOf(cluster: string): Promise<Csr[]> {
  const { items } = await hubAdmin.list<Csr & { metadata: { name: string } }>(CertificateSigningRequestResource, { labelSelector: `${ClusterLabel.ClusterName}=${cluster}` });
  return items.sort((a, b) => (a.metadata.creationTimestamp ?? "").localeCompare(b.metadata.creationTimestamp ?? ""));
}

// What a hub admin (or clusteradm accept) does: approve; kube-controller-manager then signs.
async function approveAndWaitSigned(name: string) {
  const csr = await hubAdmin.get<Csr & { metadata: { name: string }; status?: object }>(CertificateSigningRequestResource, name);
  await hubAdmin.update(CertificateSigningRequestResource, { ...csr!, status: { conditions: [{ type: "Approved", status: "True", reason: "Test", message: "approved by the test" }] } }, "approval");
  return eventually(async () => {
    const c = await hubAdmin.get<Csr & { metadata: { name: string } }>(CertificateSigningRequestResource, name);
    if (!c?.status?.certificate) throw new Error("not signed yet");
    return c;
  });
}

async function joinHub(agent: Awaited<ReturnType<typeof newAgent>>) {
  await agent.reconcile();
  const [csr] = await csrsOf(agent.config.clusterName);
  await approveAndWaitSigned(csr!.metadata.name);
  await agent.reconcile();
  return (await spokeAdmin.get<Secret>(SecretResource, agent.config.hubSecret, AGENT_NS))!;
}

describe("bootstrap", () => {
  it("creates the ManagedCluster and an OCM-shaped CSR with the bootstrap identity", async () => {
    const agent = await newAgent();
    await agent.reconcile();
    const cluster = await hubAdmin.get<{ metadata: { name: string }; spec: { hubAcceptsClient: boolean; managedClusterClientConfigs: { url: string; caBundle: string }[] } }>(ManagedClusterResource, agent.config.clusterName);
    expect(cluster?.spec.hubAcceptsClient).toBe(false);
    expect(cluster?.spec.managedClusterClientConfigs).toEqual([{ url: local.get("spoke").url, caBundle: Buffer.from(local.get("spoke").caPem).toString("base64") }]);

    const csrs = await csrsOf(agent.config.clusterName);
    expect(csrs).toHaveLength(1);
    const csr = csrs[0]!;
    expect(csr.metadata.name.startsWith(`${agent.config.clusterName}-`)).toBe(true);
    expect(csr.spec.signerName).toBe("kubernetes.io/kube-apiserver-client");
    expect([...csr.spec.usages].sort()).toEqual(["client auth", "digital signature", "key encipherment"]);
    expect(csr.spec.username).toBe(agent.token.user);
    const request = await parseCertificateRequest(Buffer.from(csr.spec.request, "base64").toString());
    expect(request.commonName).toMatch(new RegExp(`^system:open-cluster-management:${agent.config.clusterName}:[a-z0-9]{5}$`));
    expect(request.organizations.sort()).toEqual([`system:open-cluster-management:${agent.config.clusterName}`, ManagedClustersGroup].sort());
    expect(await spokeAdmin.get(SecretResource, pendingSecretName(agent.config), AGENT_NS)).toBeDefined();
  });

  it("writes hub-kubeconfig-secret in OCM's layout once the CSR is approved, through the real runtime", async () => {
    const agent = await newAgent({}, "my-hub");
    await agent.reconcile();
    const [csr] = await csrsOf(agent.config.clusterName);
    const signed = await approveAndWaitSigned(csr!.metadata.name);

    const server = await startFunctionServer(serve(fn.spec, () => agent.io));
    try {
      const reply = await postEvent(server.url, objectEvent({ cluster: "hub", object: { apiVersion: "certificates.k8s.io/v1", kind: "CertificateSigningRequest", ...signed } as never }));
      expect(reply.status).toBe(204);
    } finally {
      await server.close();
    }
    const secret = (await spokeAdmin.get<Secret>(SecretResource, agent.config.hubSecret, AGENT_NS))!;
    expect(Object.keys(secret.data!).sort()).toEqual(["agent-name", "cluster-name", "kubeconfig", "tls.crt", "tls.key"]);
    expect(secretText(secret, "cluster-name")).toBe(agent.config.clusterName);
    const kubeconfig = parse(secretText(secret, "kubeconfig")!);
    expect(kubeconfig["current-context"]).toBe("default-context");
    expect(kubeconfig.contexts).toEqual([{ name: "default-context", context: { cluster: "my-hub", user: "default-auth", namespace: "configuration" } }]);
    expect(kubeconfig.users).toEqual([{ name: "default-auth", user: { "client-certificate": "tls.crt", "client-key": "tls.key" } }]);
    expect(kubeconfig.clusters[0].name).toBe("my-hub");
    expect(kubeconfig.clusters[0].cluster.server).toBe(local.get("hub").url);
    expect(await spokeAdmin.get(SecretResource, pendingSecretName(agent.config), AGENT_NS)).toBeUndefined();

    const hub = clientWithSecretFiles(secretText(secret, "kubeconfig")!, secret);
    const review = await hub.request<{ status: { userInfo: { username: string; groups: string[] } } }>("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", { apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" });
    hub.close();
    expect(review.status.userInfo.username).toBe(`system:open-cluster-management:${agent.config.clusterName}:${secretText(secret, "agent-name")}`);
    expect(review.status.userInfo.groups).toEqual(expect.arrayContaining([`system:open-cluster-management:${agent.config.clusterName}`, ManagedClustersGroup]));
  });
});

describe("keeping and replacing the credentials", () => {
  it("reuses a valid secret after a restart without a new CSR", async () => {
    const agent = await newAgent();
    const before = await joinHub(agent);
    for (let i = 0; i < 3; i++) await agent.reconcile(); // a restart is just more invocations
    expect(await csrsOf(agent.config.clusterName)).toHaveLength(1);
    const after = await spokeAdmin.get<Secret>(SecretResource, agent.config.hubSecret, AGENT_NS);
    expect(after?.data).toEqual(before.data);
  });

  it("re-bootstraps when the bootstrap kubeconfig changes", async () => {
    const agent = await newAgent();
    await joinHub(agent);
    await writeBootstrap(agent.config, agent.token.kubeconfig, "renamed-hub"); // same server and CA, new cluster entry name
    await agent.reconcile();
    const csrs = await csrsOf(agent.config.clusterName);
    expect(csrs).toHaveLength(2);
    expect(csrs[1]!.spec.username).toBe(agent.token.user); // requested with the bootstrap identity again
  });

  it("re-bootstraps when the certificate has expired", async () => {
    const agent = await newAgent();
    const secret = await joinHub(agent);
    agent.clock.set(new Date(readCertificate(secretText(secret, "tls.crt")!).notAfter.getTime() + 1_000));
    await agent.reconcile();
    const csrs = await csrsOf(agent.config.clusterName);
    expect(csrs).toHaveLength(2);
    expect(csrs[1]!.spec.username).toBe(agent.token.user);
  });

  it("starts over when restarted under another cluster name while a request is pending", async () => {
    const agent = await newAgent();
    await agent.reconcile(); // a request for the first name is pending
    const renamed = { ...agent.config, clusterName: `${agent.config.clusterName}-b` };
    const io = testIo({ spoke: fnKubeconfig }, renamed, agent.clock);
    for (let i = 0; i < 3; i++) await reconcileKey(fn.spec, io, { cluster: "spoke", name: renamed.clusterName });
    const csrs = await csrsOf(renamed.clusterName);
    expect(csrs).toHaveLength(1);
    expect(await hubAdmin.get(ManagedClusterResource, renamed.clusterName)).toBeDefined();
  });

  it("stops creating CSRs while ten exist for the cluster", async () => {
    const agent = await newAgent();
    await agent.reconcile();
    const [first] = await csrsOf(agent.config.clusterName);
    for (let i = 0; i < 9; i++) {
      await hubAdmin.create(CertificateSigningRequestResource, { metadata: { generateName: `${agent.config.clusterName}-`, labels: { [ClusterLabel.ClusterName]: agent.config.clusterName } }, spec: { ...first!.spec, username: undefined } } as never);
    }
    await spokeAdmin.delete(SecretResource, pendingSecretName(agent.config), AGENT_NS); // as if the first request was lost
    await agent.reconcile();
    expect(await csrsOf(agent.config.clusterName)).toHaveLength(10);
  });
});

describe("the hub client spoke functions share", () => {
  it("is built once per secret version, judged again after a change, and gone with the secret or the certificate's life", async () => {
    const agent = await newAgent();
    const secret = await joinHub(agent);
    const spoke = agent.io.cluster("spoke");
    const now = agent.clock.now();
    const first = await bootstrappedHubClient(spoke, agent.config, now);
    const again = await bootstrappedHubClient(spoke, agent.config, now);
    if (!("hub" in first) || !("hub" in again)) throw new Error("not bootstrapped");
    expect(again.hub).toBe(first.hub);
    expect(await again.hub.request<{ gitVersion: string }>("GET", "/version")).toHaveProperty("gitVersion"); // it works
    // a new version of the hub secret (a rotation writes one) is judged and built afresh
    await spokeAdmin.update(SecretResource, { ...secret, metadata: { ...secret.metadata, annotations: { touched: "yes" } } });
    const afterChange = await bootstrappedHubClient(spoke, agent.config, now);
    if (!("hub" in afterChange)) throw new Error(afterChange.reason);
    expect(afterChange.hub).not.toBe(first.hub);
    // past the certificate's life the kept client is not handed out
    const expiry = readCertificate(secretText(secret, "tls.crt")!).notAfter.getTime();
    expect(await bootstrappedHubClient(spoke, agent.config, new Date(expiry + 1_000))).toEqual({ reason: "the client certificate has expired" });
    // nor once the secret is gone
    await spokeAdmin.delete(SecretResource, agent.config.hubSecret, AGENT_NS);
    expect(await bootstrappedHubClient(spoke, agent.config, now)).toEqual({ reason: "no hub kubeconfig yet" });
  });
});

describe("rotation", () => {
  it("rotates a short-lived certificate through the hub identity and reports ClusterCertificateRotated", async () => {
    const agent = await newAgent({ clientCertExpirationSeconds: 3600 });
    const first = await joinHub(agent);
    const hub = local.get("hub");
    // The hub side, each function under its own identity: accept, then approve the renewal.
    const acceptorIo = testIo({ hub: await identityFor(hub, "cluster-acceptor") }, acceptor.definition.config.parse({ hubCluster: "hub", autoApprovalUsers: [] }));
    const approverIo = testIo({ hub: await identityFor(hub, "csr-approver") }, approver.definition.config.parse({ hubCluster: "hub", autoApprovalUsers: [] }));
    const cluster = (await hubAdmin.get<{ metadata: { name: string }; spec: object }>(ManagedClusterResource, agent.config.clusterName))!;
    await hubAdmin.update(ManagedClusterResource, { ...cluster, spec: { ...cluster.spec, hubAcceptsClient: true } });
    await reconcileAsRelay((io, key) => reconcileKey(acceptor.spec, io, key), acceptorIo, { cluster: "hub", name: agent.config.clusterName });

    const cert = readCertificate(secretText(first, "tls.crt")!);
    const life = cert.notAfter.getTime() - cert.notBefore.getTime();
    expect(life).toBeLessThanOrEqual(3_600_000 + 360_000); // expirationSeconds honoured (the signer backdates 5 min)
    agent.clock.set(new Date(cert.notAfter.getTime() - 0.15 * life)); // 15 % of the life left
    const firstCsr = (await csrsOf(agent.config.clusterName))[0]!.metadata.name;
    await agent.reconcile();
    const renewal = (await csrsOf(agent.config.clusterName)).find((c) => c.metadata.name !== firstCsr)!;
    expect(renewal.spec.username).toBe(cert.commonName); // asked as the cluster itself, not the bootstrap identity
    await reconcileKey(approver.spec, approverIo, { cluster: "hub", name: renewal.metadata.name });
    await eventually(async () => {
      const c = await hubAdmin.get<Csr & { metadata: { name: string } }>(CertificateSigningRequestResource, renewal.metadata.name);
      if (!c?.status?.certificate) throw new Error("not signed yet");
    });
    agent.clock.set(new Date());
    await agent.reconcile();
    const rotated = (await spokeAdmin.get<Secret>(SecretResource, agent.config.hubSecret, AGENT_NS))!;
    expect(secretText(rotated, "tls.crt")).not.toBe(secretText(first, "tls.crt"));
    expect(secretText(rotated, "kubeconfig")).toBe(secretText(first, "kubeconfig"));
    const status = (await hubAdmin.get<KubeObject & { status?: { conditions?: never[] } }>(ManagedClusterResource, agent.config.clusterName))!.status;
    const next = readCertificate(secretText(rotated, "tls.crt")!);
    expect(findCondition(status?.conditions, "ClusterCertificateRotated")).toMatchObject({
      status: "True",
      reason: "ClientCertificateUpdated",
      message: expect.stringMatching(/^client certificate rotated starting from \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+0000 UTC to /),
    });
    expect(next.notAfter.getTime()).toBeGreaterThanOrEqual(cert.notAfter.getTime()); // issued now, maybe within the same second
    expect(next.commonName).toBe(cert.commonName);
  });
});

describe("events", () => {
  it("answers a malformed event with 400 and writes nothing", async () => {
    const agent = await newAgent();
    const reply = await handleEvent(fn.spec, agent.io, { ...tickEvent(), type: "dev.knative.apiserver.resource.update" });
    expect(reply.statusCode).toBe(400);
    expect(reply.body).toMatch(/cluster|kind|name/);
    expect(await hubAdmin.get(ManagedClusterResource, agent.config.clusterName)).toBeUndefined();
    expect(await csrsOf(agent.config.clusterName)).toHaveLength(0);
    // control: a well-formed tick starts the registration
    expect((await handleEvent(fn.spec, agent.io, tickEvent("spoke"))).statusCode).toBe(204);
    expect(await hubAdmin.get(ManagedClusterResource, agent.config.clusterName)).toBeDefined();
  });

  it("skips other agents' secrets", async () => {
    const agent = await newAgent();
    const secretEvent = (name: string) => objectEvent({ cluster: "spoke", object: { apiVersion: "v1", kind: "Secret", metadata: { name, namespace: AGENT_NS } } });
    expect((await handleEvent(fn.spec, agent.io, secretEvent("someone-else"))).statusCode).toBe(204);
    expect(await hubAdmin.get(ManagedClusterResource, agent.config.clusterName)).toBeUndefined();
    // control: its own bootstrap secret's event starts the registration
    expect((await handleEvent(fn.spec, agent.io, secretEvent(agent.config.bootstrapSecret))).statusCode).toBe(204);
    expect(await hubAdmin.get(ManagedClusterResource, agent.config.clusterName)).toBeDefined();
  });
});
