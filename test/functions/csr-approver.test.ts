// The csr-approver function against a real hub: CSRs are created by the identities that create them in
// OCM (a bootstrap token, an agent's own certificate), the function runs under its own RBAC, and
// kube-controller-manager signs what it approves.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import type { LocalCluster } from "../../dev/control-plane/clusters.ts";
import { KubeClient } from "../../shared/kube/client.ts";
import { CertificateSigningRequestResource, ClusterRoleBindingResource, ClusterRoleResource, KubeAPIServerClientSignerName, SubjectAccessReviewResource } from "../../shared/api/kube.ts";
import { CsrConditionType, KeyUsage, type CertificateSigningRequest } from "../../shared/api/certificates.ts";
import { ClusterLabel } from "../../shared/api/cluster.ts";
import { CsrApproval, HubRbacName, RegisterGroup, RegisterResource, RegisterSubresource, RegisterVerb } from "../../shared/api/register.ts";
import { CsrUsages, ManagedClustersGroup, agentUser, clusterGroup } from "../../shared/api/registration.ts";
import { resourcePath } from "../../shared/kube/client.ts";
import { createCertificateRequest, generateKeyPair, type Subject } from "../../shared/pki.ts";
import { handleEvent, serve, type Io } from "../../shared/harness.ts";
import fn, { type Config } from "../../functions/csr-approver/reconcile.ts";
import { objectEvent, postEvent, startFunctionServer, tickEvent } from "../support/functions.ts";
import { eventually } from "../support/eventually.ts";
import { allowCsrRequests, bootstrapIdentities, functionIo, startHub, type Hub, type Requester } from "../support/fixtures.ts";

const HUB = "hub";
const BOOTSTRAP_GROUP = "system:bootstrappers:managedcluster";
const suffix = () => Math.random().toString(36).slice(2, 7);

let plane: Hub;
let hub: LocalCluster;
let admin: KubeClient;
let io: Io<Config>;
let autoApprover: Requester; // a bootstrap token listed in autoApprovalUsers
let otherBootstrapper: Requester;
let edgeBootstrapper: Requester; // an auto-approval user for edge-* and exactly "lab" only

beforeAll(async () => {
  plane = await startHub(HUB, { controllers: true, crds: false });
  ({ cluster: hub, admin } = plane);
  await allowCsrRequests(admin, [BOOTSTRAP_GROUP, ManagedClustersGroup]);
  [autoApprover, otherBootstrapper, edgeBootstrapper] = (await bootstrapIdentities(hub, BOOTSTRAP_GROUP, 3)) as [Requester, Requester, Requester];
  const config = { hubCluster: HUB, autoApprovalUsers: [autoApprover.user, `${edgeBootstrapper.user}=edge-*|lab`] };
  io = await functionIo(hub, fn.spec.name, config, [CertificateSigningRequestResource]);
});

afterAll(() => plane?.stop());

// An agent of cluster c speaking with its own certificate, as after bootstrap.
async function agentOf(c: string): Promise<{ user: string; client: KubeClient }> {
  const user = agentUser(c, "agent1");
  const kubeconfig = await hub.kubeconfigFor({ user, groups: [clusterGroup(c), ManagedClustersGroup] });
  return { user, client: KubeClient.fromKubeconfig(kubeconfig) };
}

// What acceptance grants for renewals: OCM's open-cluster-management:managedcluster:<c> renew rule.
async function grantRenew(c: string, user: string): Promise<void> {
  const name = HubRbacName.cluster(c);
  await admin.create(ClusterRoleResource, {
    metadata: { name },
    rules: [{ apiGroups: [RegisterGroup], resources: [`${RegisterResource.ManagedClusters}/${RegisterSubresource.ClientCertificates}`], verbs: [RegisterVerb.Renew] }],
  });
  await admin.create(ClusterRoleBindingResource, {
    metadata: { name },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name },
    subjects: [{ kind: "Group", apiGroup: "rbac.authorization.k8s.io", name: clusterGroup(c) }],
  });
  await eventually(async () => {
    const review = await admin.request<{ status: { allowed: boolean } }>("POST", resourcePath(SubjectAccessReviewResource), {
      spec: { user, groups: [clusterGroup(c)], resourceAttributes: { group: RegisterGroup, resource: RegisterResource.ManagedClusters, subresource: RegisterSubresource.ClientCertificates, verb: RegisterVerb.Renew, name: c } },
    });
    expect(review.status.allowed).toBe(true);
  });
}

type CsrShape = { subject: Subject; label?: string; signerName?: string; usages?: string[] };

const agentCsr = (c: string): CsrShape => ({ subject: { commonName: agentUser(c, "agent1"), organizations: [clusterGroup(c), ManagedClustersGroup] }, label: c });

async function createCsr(requester: KubeClient, c: string, shape: CsrShape): Promise<CertificateSigningRequest> {
  const request = await createCertificateRequest(shape.subject, await generateKeyPair());
  const body: CertificateSigningRequest = {
    metadata: { name: `${c}-${suffix()}`, labels: shape.label === undefined ? {} : { [ClusterLabel.ClusterName]: shape.label } },
    spec: { request: Buffer.from(request).toString("base64"), signerName: shape.signerName ?? KubeAPIServerClientSignerName, usages: shape.usages ?? [...CsrUsages], expirationSeconds: 3600 },
  };
  // The requester's permission may still be on its way to the authorizer; a refused create made nothing.
  return eventually(() => requester.create(CertificateSigningRequestResource, body));
}

const readCsr = async (name: string) => (await admin.get<CertificateSigningRequest>(CertificateSigningRequestResource, name))!;
const approvals = (csr: CertificateSigningRequest) => (csr.status?.conditions ?? []).filter((c) => c.type === CsrConditionType.Approved);

type Row = {
  name: string;
  requester: "auto-approval user" | "other bootstrap user" | "agent" | "edge-only auto-approval user";
  cluster?: string; // the labelled cluster's name; default c<random>
  agentCluster?: (c: string) => string; // whose agent makes the request; default the labelled cluster
  shape?: (c: string) => CsrShape;
  renewGranted?: boolean;
  approved: boolean;
};

const rows: Row[] = [
  { name: "approves a bootstrap CSR from an auto-approval user, and kube-controller-manager signs it", requester: "auto-approval user", approved: true },
  { name: "leaves a bootstrap CSR from a user not listed for auto-approval to the admin", requester: "other bootstrap user", approved: false },
  { name: "approves a renewal when the agent may renew its cluster's client certificate", requester: "agent", renewGranted: true, approved: true },
  { name: "does not approve a renewal when the agent may not renew (cluster not accepted)", requester: "agent", renewGranted: false, approved: false },
  {
    name: "rejects a CSR whose Organization only prefix-matches the cluster name",
    requester: "auto-approval user",
    shape: (c) => ({ ...agentCsr(c), subject: { commonName: agentUser(c, "agent1"), organizations: [clusterGroup(`${c}x`), ManagedClustersGroup] } }),
    approved: false,
  },
  {
    name: "rejects a CSR whose Organization and CN agree on a cluster other than the label",
    requester: "auto-approval user",
    shape: (c) => ({ ...agentCsr(`${c}-other`), label: c }),
    approved: false,
  },
  {
    name: "rejects a renewal by another cluster's agent naming itself under this cluster's label, though it may renew",
    requester: "agent",
    agentCluster: (c) => `${c}-other`,
    renewGranted: true,
    shape: (c) => ({ ...agentCsr(`${c}-other`), label: c }),
    approved: false,
  },
  { name: "rejects a CSR with a CN of more than two parts", requester: "auto-approval user", shape: (c) => ({ ...agentCsr(c), subject: { commonName: `${agentUser(c, "agent1")}:x`, organizations: [clusterGroup(c)] } }), approved: false },
  { name: "ignores a CSR without the cluster-name label", requester: "auto-approval user", shape: (c) => ({ ...agentCsr(c), label: undefined }), approved: false },
  { name: "ignores a CSR for another signer", requester: "auto-approval user", shape: (c) => ({ ...agentCsr(c), signerName: "example.com/agents" }), approved: false },
  { name: "rejects a CSR asking for server auth", requester: "auto-approval user", shape: (c) => ({ ...agentCsr(c), usages: [KeyUsage.ClientAuth, KeyUsage.ServerAuth] }), approved: false },
  { name: "rejects a CSR without client auth", requester: "auto-approval user", shape: (c) => ({ ...agentCsr(c), usages: [KeyUsage.DigitalSignature, KeyUsage.KeyEncipherment] }), approved: false },
  // Auto-approval narrowed to cluster names: "<user>=edge-*|lab".
  { name: "approves a narrowed auto-approval user's bootstrap CSR for a cluster its pattern names", requester: "edge-only auto-approval user", cluster: `edge-${suffix()}`, approved: true },
  { name: "does not approve a narrowed auto-approval user's bootstrap CSR for any other cluster", requester: "edge-only auto-approval user", approved: false },
  { name: "does not read a narrowed pattern as a prefix (lab does not admit lab2)", requester: "edge-only auto-approval user", cluster: "lab2", approved: false },
];

describe("approving cluster agent CSRs", () => {
  it.each(rows)("$name", async (row) => {
    const c = row.cluster ?? `c${suffix()}`;
    const bootstrappers = { "auto-approval user": autoApprover, "other bootstrap user": otherBootstrapper, "edge-only auto-approval user": edgeBootstrapper };
    const requester = row.requester === "agent" ? await agentOf(row.agentCluster?.(c) ?? c) : bootstrappers[row.requester];
    if (row.renewGranted) await grantRenew(row.agentCluster?.(c) ?? c, requester.user);
    const csr = await createCsr(requester.client, c, (row.shape ?? agentCsr)(c));
    expect(csr.spec.username).toBe(requester.user);

    const reply = await handleEvent(fn.spec, io, objectEvent({ cluster: HUB, object: csr, verb: "add" }));
    expect(reply.statusCode).toBe(204);

    const after = await readCsr(csr.metadata.name);
    if (!row.approved) {
      expect(after.status?.conditions ?? []).toEqual([]);
      return;
    }
    expect(approvals(after)).toEqual([expect.objectContaining({ status: "True", reason: CsrApproval.Reason, message: CsrApproval.ClusterAgentMessage })]);
    const signed = await eventually(async () => {
      const s = await readCsr(csr.metadata.name);
      expect(s.status?.certificate).toBeTruthy();
      return s;
    });
    expect(Buffer.from(signed.status!.certificate!, "base64").toString()).toContain("BEGIN CERTIFICATE");
  });
});

describe("events", () => {
  it("approves once when the same event arrives twice, and the second delivery changes nothing", async () => {
    const c = `c${suffix()}`;
    const csr = await createCsr(autoApprover.client, c, agentCsr(c));
    const event = objectEvent({ cluster: HUB, object: csr, verb: "add" });
    expect((await handleEvent(fn.spec, io, event)).statusCode).toBe(204);
    const once = await readCsr(csr.metadata.name);
    expect((await handleEvent(fn.spec, io, event)).statusCode).toBe(204);
    const twice = await readCsr(csr.metadata.name);
    expect(approvals(twice)).toHaveLength(1);
    expect(approvals(twice)).toEqual(approvals(once));
  });

  it("finds pending agent CSRs on a resync tick, and acts on Reference-mode events alike", async () => {
    const [a, b] = [`c${suffix()}`, `c${suffix()}`];
    const byTick = await createCsr(autoApprover.client, a, agentCsr(a));
    expect((await handleEvent(fn.spec, io, tickEvent(HUB))).statusCode).toBe(204);
    expect(approvals(await readCsr(byTick.metadata.name))).toHaveLength(1);
    const byRef = await createCsr(autoApprover.client, b, agentCsr(b));
    expect((await handleEvent(fn.spec, io, objectEvent({ cluster: HUB, object: byRef, mode: "ref" }))).statusCode).toBe(204);
    expect(approvals(await readCsr(byRef.metadata.name))).toHaveLength(1);
  });

  it("answers a malformed event with 400 and changes nothing", async () => {
    const c = `c${suffix()}`;
    const csr = await createCsr(autoApprover.client, c, agentCsr(c));
    const { cluster: _dropped, ...noCluster } = objectEvent({ cluster: HUB, object: csr, verb: "add" });
    const reply = await handleEvent(fn.spec, io, noCluster);
    expect(reply.statusCode).toBe(400);
    const wrongData = { ...objectEvent({ cluster: HUB, object: csr }), data: { metadata: { name: "someone-else" } } };
    expect((await handleEvent(fn.spec, io, wrongData)).statusCode).toBe(400);
    expect((await readCsr(csr.metadata.name)).status?.conditions ?? []).toEqual([]);
    // control: the same CSR's well-formed event approves it
    expect((await handleEvent(fn.spec, io, objectEvent({ cluster: HUB, object: csr, verb: "add" }))).statusCode).toBe(204);
    expect(approvals(await readCsr(csr.metadata.name))).toHaveLength(1);
  });

  it("skips events from a cluster other than the hub", async () => {
    const c = `c${suffix()}`;
    const csr = await createCsr(autoApprover.client, c, agentCsr(c));
    expect((await handleEvent(fn.spec, io, objectEvent({ cluster: "spoke", object: csr, verb: "add" }))).statusCode).toBe(204);
    expect((await readCsr(csr.metadata.name)).status?.conditions ?? []).toEqual([]);
    // control: the same event from the hub approves it
    expect((await handleEvent(fn.spec, io, objectEvent({ cluster: HUB, object: csr, verb: "add" }))).statusCode).toBe(204);
    expect(approvals(await readCsr(csr.metadata.name))).toHaveLength(1);
  });

  it("approves through our CloudEvents HTTP server (shared/cloudevents-server.ts) and answers 204, or 400 for a malformed event", async () => {
    const server = await startFunctionServer(serve(fn.spec, () => io));
    try {
      const c = `c${suffix()}`;
      const csr = await createCsr(autoApprover.client, c, agentCsr(c));
      const { cluster: _dropped, ...noCluster } = objectEvent({ cluster: HUB, object: csr, verb: "add" });
      expect((await postEvent(server.url, noCluster)).status).toBe(400);
      expect((await readCsr(csr.metadata.name)).status?.conditions ?? []).toEqual([]);
      const reply = await postEvent(server.url, objectEvent({ cluster: HUB, object: csr, verb: "add" }));
      expect(reply.status).toBe(204);
      expect(approvals(await readCsr(csr.metadata.name))).toHaveLength(1);
    } finally {
      await server.close();
    }
  });
});
