// The addon-csr-approver function against a real hub, under its own RBAC: add-on CSRs are created by the
// cluster agents that create them in OCM (their own certificates), approved only when the subject is
// the add-on's and the cluster's agent asked, and custom-signer CSRs are signed with the template's CA.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import type { LocalCluster } from "../../dev/control-plane/clusters.ts";
import { KubeClient } from "../../shared/kube/client.ts";
import { CertificateSigningRequestResource, KubeAPIServerClientSignerName, NamespaceResource, SecretResource } from "../../shared/api/kube.ts";
import { CsrConditionType, type CertificateSigningRequest } from "../../shared/api/certificates.ts";
import { ClusterLabel, ManagedClusterResource } from "../../shared/api/cluster.ts";
import { CsrApproval } from "../../shared/api/register.ts";
import { CsrUsages, ManagedClustersGroup, agentUser, clusterGroup } from "../../shared/api/registration.ts";
import {
  AddOnGroup,
  AddOnLabel,
  AddOnTemplateResource,
  ClusterManagementAddOnV1alpha1Resource,
  ManagedClusterAddOnV1alpha1Resource,
  type AddOnTemplate,
  type ManagedClusterAddOnV1alpha1,
} from "../../shared/api/addon.ts";
import { AddonManagerNamespaceDefault, addonAgentUser, addonGroups, templateAgentName } from "../../shared/api/addon-strings.ts";
import { createCertificateAuthority, createCertificateRequest, generateKeyPair, isIssuedBy, readCertificate, type Subject } from "../../shared/pki.ts";
import { handleEvent, serve, type Io } from "../../shared/harness.ts";
import fn, { decideApproval, type Config } from "../../functions/addon-csr-approver/reconcile.ts";
import { readRequest } from "../../shared/pki.ts";
import { specHash } from "../../functions/addon-manager/spec-hash.ts";
import { objectEvent, postEvent, startFunctionServer, tickEvent } from "../support/functions.ts";
import { eventually } from "../support/eventually.ts";
import { allowCsrRequests, functionIo, startHub, type Hub } from "../support/fixtures.ts";

const HUB = "hub";
const SIGNER = "example.com/addon-signer";
const CA_SECRET = "addon-signer-ca";
const suffix = () => Math.random().toString(36).slice(2, 7);

let plane: Hub;
let hub: LocalCluster;
let admin: KubeClient;
let io: Io<Config>;
let caPem: string;

beforeAll(async () => {
  plane = await startHub(HUB);
  ({ cluster: hub, admin } = plane);
  await allowCsrRequests(admin, [ManagedClustersGroup]);
  io = await functionIo(hub, fn.spec.name, { hubCluster: HUB }, [CertificateSigningRequestResource]);
  // the template's signing CA, in the add-on manager's namespace (identityFor made it for the Role)
  const ca = await createCertificateAuthority("addon-signer");
  caPem = ca.certPem;
  await admin.create(SecretResource, {
    metadata: { name: CA_SECRET, namespace: AddonManagerNamespaceDefault },
    type: "kubernetes.io/tls",
    data: { "tls.crt": Buffer.from(ca.certPem).toString("base64"), "tls.key": Buffer.from(ca.keyPem).toString("base64") },
  });
  await eventually(() => io.cluster(HUB).get(SecretResource, CA_SECRET, AddonManagerNamespaceDefault));
});

afterAll(() => plane?.stop());

// An AddOnTemplate add-on registering a kubeClient and a custom signer, enabled on the given clusters
// with the desired template recorded in status as the addon-manager records it.
async function templateAddon(clusters: string[]): Promise<string> {
  const addon = `hello-${suffix()}`;
  const template = await admin.create<AddOnTemplate>(AddOnTemplateResource, {
    metadata: { name: addon },
    spec: {
      addonName: addon,
      agentSpec: { workload: { manifests: [{ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "x", namespace: "default" } }] } },
      registration: [{ type: "KubeClient" }, { type: "CustomSigner", customSigner: { signerName: SIGNER, signingCA: { name: CA_SECRET } } }],
    },
  });
  await admin.create(ClusterManagementAddOnV1alpha1Resource, { metadata: { name: addon }, spec: { supportedConfigs: [{ group: AddOnGroup, resource: "addontemplates", defaultConfig: { name: addon } }] } });
  for (const c of clusters) {
    await admin.create<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, { metadata: { name: addon, namespace: c }, spec: {} });
    const desiredConfig = { name: addon, specHash: specHash(template) };
    await admin.patch(ManagedClusterAddOnV1alpha1Resource, addon, { status: { configReferences: [{ group: AddOnGroup, resource: "addontemplates", name: addon, desiredConfig }] } }, { namespace: c, subresource: "status" });
  }
  return addon;
}

async function newCluster(name = `c${suffix()}`): Promise<string> {
  await admin.create(ManagedClusterResource, { metadata: { name }, spec: { hubAcceptsClient: true } });
  await admin.create(NamespaceResource, { metadata: { name } });
  return name;
}

// A cluster's agent speaking with its own certificate, as the spoke's add-on registration does.
async function agentOf(c: string): Promise<KubeClient> {
  return KubeClient.fromKubeconfig(await hub.kubeconfigFor({ user: agentUser(c, "agent1"), groups: [clusterGroup(c), ManagedClustersGroup] }));
}

// An add-on's agent with its issued identity (and, for the test, leave to create CSRs).
async function addonAgentOf(c: string, addon: string): Promise<KubeClient> {
  return KubeClient.fromKubeconfig(await hub.kubeconfigFor({ user: addonAgentUser(c, addon, templateAgentName(addon)), groups: [...addonGroups(c, addon).slice(0, 2), ManagedClustersGroup] }));
}

type CsrShape = { labelCluster: string; addon: string; subject: Subject; signerName?: string };
const addonSubject = (c: string, addon: string): Subject => ({ commonName: addonAgentUser(c, addon, templateAgentName(addon)), organizations: addonGroups(c, addon) });

async function createCsr(requester: KubeClient, shape: CsrShape): Promise<CertificateSigningRequest> {
  const request = await createCertificateRequest(shape.subject, await generateKeyPair());
  const body: CertificateSigningRequest = {
    metadata: { name: `addon-${shape.labelCluster}-${shape.addon}-${suffix()}`, labels: { [ClusterLabel.ClusterName]: shape.labelCluster, [AddOnLabel.AddonName]: shape.addon } },
    spec: { request: Buffer.from(request).toString("base64"), signerName: shape.signerName ?? KubeAPIServerClientSignerName, usages: [...CsrUsages], expirationSeconds: 3600 },
  };
  return eventually(() => requester.create(CertificateSigningRequestResource, body));
}

const readCsr = async (name: string) => (await admin.get<CertificateSigningRequest>(CertificateSigningRequestResource, name))!;
const approvals = (csr: CertificateSigningRequest) => (csr.status?.conditions ?? []).filter((c) => c.type === CsrConditionType.Approved);

type Row = {
  name: string;
  // the add-on is enabled on clusters "mine" and "theirs"; the agent of `requester` asks
  requester: "mine" | "theirs" | "mine-prefixed" | "mine-addon-agent";
  shape: (k: { mine: string; theirs: string; addon: string }) => CsrShape;
  approved: boolean;
  signed?: boolean;
};
const rows: Row[] = [
  { name: "approves a cluster's agent asking for its own add-on's client certificate", requester: "mine", shape: ({ mine, addon }) => ({ labelCluster: mine, addon, subject: addonSubject(mine, addon) }), approved: true },
  { name: "does not approve a cluster's agent asking for another cluster's add-on identity", requester: "mine", shape: ({ theirs, addon }) => ({ labelCluster: theirs, addon, subject: addonSubject(theirs, addon) }), approved: false },
  { name: "does not approve another cluster's add-on user under this cluster's label", requester: "mine", shape: ({ mine, theirs, addon }) => ({ labelCluster: mine, addon, subject: { ...addonSubject(theirs, addon), organizations: addonGroups(mine, addon) } }), approved: false },
  {
    name: "does not approve an agent whose cluster name only extends the cluster's (OCM's bare prefix would)",
    requester: "mine-prefixed",
    shape: ({ mine, addon }) => ({ labelCluster: mine, addon, subject: addonSubject(mine, addon) }),
    approved: false,
  },
  // One extra organization would be a group of the attacker's choosing in the issued certificate.
  ...[
    { extra: "another cluster's group", group: ({ theirs }: { theirs: string }) => clusterGroup(theirs) },
    { extra: "the cluster bootstrappers' group", group: () => "system:bootstrappers:managedcluster" },
    { extra: "another cluster's add-on group", group: ({ theirs, addon }: { theirs: string; addon: string }) => addonGroups(theirs, addon)[0]! },
  ].map(({ extra, group }): Row => ({
    name: `does not approve the two default add-on groups plus ${extra} instead of system:authenticated`,
    requester: "mine",
    shape: (k) => ({ labelCluster: k.mine, addon: k.addon, subject: { ...addonSubject(k.mine, k.addon), organizations: [...addonGroups(k.mine, k.addon).slice(0, 2), group(k)] } }),
    approved: false,
  })),
  {
    name: "does not approve the three default groups plus one more",
    requester: "mine",
    shape: ({ mine, theirs, addon }) => ({ labelCluster: mine, addon, subject: { ...addonSubject(mine, addon), organizations: [...addonGroups(mine, addon), clusterGroup(theirs)] } }),
    approved: false,
  },
  {
    name: "does not approve only the two named default groups (addon-framework asks for three)",
    requester: "mine",
    shape: ({ mine, addon }) => ({ labelCluster: mine, addon, subject: { ...addonSubject(mine, addon), organizations: addonGroups(mine, addon).slice(0, 2) } }),
    approved: false,
  },
  { name: "does not approve a request from the add-on's own agent rather than the cluster's agent", requester: "mine-addon-agent", shape: ({ mine, addon }) => ({ labelCluster: mine, addon, subject: addonSubject(mine, addon) }), approved: false },
  { name: "does not approve a subject with only one of the default groups", requester: "mine", shape: ({ mine, addon }) => ({ labelCluster: mine, addon, subject: { ...addonSubject(mine, addon), organizations: addonGroups(mine, addon).slice(0, 1) } }), approved: false },
  { name: "does not approve a CN other than the template agent's default user", requester: "mine", shape: ({ mine, addon }) => ({ labelCluster: mine, addon, subject: { ...addonSubject(mine, addon), commonName: addonAgentUser(mine, addon, addon) } }), approved: false },
  { name: "does not approve a CSR for an add-on that is not enabled on the cluster", requester: "mine", shape: ({ mine }) => ({ labelCluster: mine, addon: "not-enabled", subject: addonSubject(mine, "not-enabled") }), approved: false },
  { name: "approves a custom-signer CSR of the template's signer and signs it with the template's CA", requester: "mine", shape: ({ mine, addon }) => ({ labelCluster: mine, addon, subject: addonSubject(mine, addon), signerName: SIGNER }), approved: true, signed: true },
  {
    name: "does not approve a custom-signer CSR for another cluster's add-on identity",
    requester: "mine",
    shape: ({ mine, theirs, addon }) => ({ labelCluster: mine, addon, subject: addonSubject(theirs, addon), signerName: SIGNER }),
    approved: false,
  },
  {
    name: "does not approve a custom-signer CSR with an organization its registration does not name",
    requester: "mine",
    shape: ({ mine, theirs, addon }) => ({ labelCluster: mine, addon, subject: { ...addonSubject(mine, addon), organizations: [...addonGroups(mine, addon), clusterGroup(theirs)] }, signerName: SIGNER }),
    approved: false,
  },
  { name: "leaves a CSR of a signer the template does not register", requester: "mine", shape: ({ mine, addon }) => ({ labelCluster: mine, addon, subject: addonSubject(mine, addon), signerName: "example.com/other" }), approved: false },
];

describe("approving and signing add-on CSRs", () => {
  it.each(rows)("$name", async (row) => {
    const mine = await newCluster();
    const theirs = await newCluster();
    const addon = await templateAddon([mine, theirs]);
    const requester =
      row.requester === "mine-addon-agent"
        ? await addonAgentOf(mine, addon)
        : await agentOf(row.requester === "theirs" ? theirs : row.requester === "mine-prefixed" ? `${mine}0` : mine);
    try {
      const csr = await createCsr(requester, row.shape({ mine, theirs, addon }));
      expect((await handleEvent(fn.spec, io, objectEvent({ cluster: HUB, object: csr, verb: "add" }))).statusCode).toBe(204);
      const after = await readCsr(csr.metadata.name);
      if (!row.approved) {
        expect(after.status?.conditions ?? []).toEqual([]);
        return;
      }
      expect(approvals(after)).toEqual([expect.objectContaining({ status: "True", reason: CsrApproval.Reason, message: CsrApproval.AddonAgentMessage })]);
      if (!row.signed) return expect(after.status?.certificate).toBeUndefined();
      const pem = Buffer.from(after.status!.certificate!, "base64").toString();
      expect(isIssuedBy(pem, caPem)).toBe(true);
      const cert = readCertificate(pem);
      expect(cert.commonName).toBe(addonAgentUser(mine, addon, templateAgentName(addon)));
      expect(cert.organizations.sort()).toEqual([...addonGroups(mine, addon)].sort());
      expect(cert.notAfter.getTime() - cert.notBefore.getTime()).toBe(24 * 3600_000);
    } finally {
      requester.close();
    }
  });
});

// kube-apiserver itself refuses any kube-apiserver-client CSR naming system:masters, so that attack
// never reaches the function; the function's own rule refuses it too.
describe("system:masters in an add-on CSR", () => {
  it("is refused by kube-apiserver at create, and by the approver's rule", async () => {
    const [mine, theirs] = [await newCluster(), await newCluster()];
    const addon = await templateAddon([mine, theirs]);
    const agent = await agentOf(mine);
    try {
      const subject = { ...addonSubject(mine, addon), organizations: [...addonGroups(mine, addon).slice(0, 2), "system:masters"] };
      const request = await createCertificateRequest(subject, await generateKeyPair());
      const body: CertificateSigningRequest = {
        metadata: { name: `addon-${mine}-${addon}-${suffix()}`, labels: { [ClusterLabel.ClusterName]: mine, [AddOnLabel.AddonName]: addon } },
        spec: { request: Buffer.from(request).toString("base64"), signerName: KubeAPIServerClientSignerName, usages: [...CsrUsages] },
      };
      await expect(agent.create(CertificateSigningRequestResource, body)).rejects.toMatchObject({ code: 403, message: expect.stringContaining("system:masters") });
      const template = (await admin.get<AddOnTemplate>(AddOnTemplateResource, addon))!;
      const asFiled = { ...body, spec: { ...body.spec, username: agentUser(mine, "agent1"), groups: [clusterGroup(mine), ManagedClustersGroup] } };
      expect(decideApproval(asFiled, { cluster: mine, addon, template }, await readRequest(body.spec.request))).toEqual({ skip: expect.stringContaining("system:masters") });
      // control: the same call approves the default subject
      const good = await createCertificateRequest(addonSubject(mine, addon), await generateKeyPair());
      const goodFiled = { ...asFiled, spec: { ...asFiled.spec, request: Buffer.from(good).toString("base64") } };
      expect(decideApproval(goodFiled, { cluster: mine, addon, template }, await readRequest(goodFiled.spec.request))).toEqual({ approve: "kube-client" });
    } finally {
      agent.close();
    }
  });
});

describe("events", () => {
  it("approves once when an event arrives twice, and signs a pending custom-signer CSR on a resync tick", async () => {
    const c = await newCluster();
    const addon = await templateAddon([c]);
    const agent = await agentOf(c);
    try {
      const csr = await createCsr(agent, { labelCluster: c, addon, subject: addonSubject(c, addon) });
      const event = objectEvent({ cluster: HUB, object: csr, verb: "add" });
      expect((await handleEvent(fn.spec, io, event)).statusCode).toBe(204);
      expect((await handleEvent(fn.spec, io, event)).statusCode).toBe(204);
      expect(approvals(await readCsr(csr.metadata.name))).toHaveLength(1);
      const custom = await createCsr(agent, { labelCluster: c, addon, subject: addonSubject(c, addon), signerName: SIGNER });
      expect((await handleEvent(fn.spec, io, tickEvent(HUB))).statusCode).toBe(204);
      expect((await readCsr(custom.metadata.name)).status?.certificate).toBeTruthy();
    } finally {
      agent.close();
    }
  });

  it("approves through our CloudEvents HTTP server (shared/cloudevents-server.ts) and answers 400 to a malformed event", async () => {
    const c = await newCluster();
    const addon = await templateAddon([c]);
    const agent = await agentOf(c);
    const server = await startFunctionServer(serve(fn.spec, () => io));
    try {
      const csr = await createCsr(agent, { labelCluster: c, addon, subject: addonSubject(c, addon) });
      const { cluster: _dropped, ...noCluster } = objectEvent({ cluster: HUB, object: csr, verb: "add" });
      expect((await postEvent(server.url, noCluster)).status).toBe(400);
      expect((await readCsr(csr.metadata.name)).status?.conditions ?? []).toEqual([]);
      expect((await postEvent(server.url, objectEvent({ cluster: HUB, object: csr, verb: "add" }))).status).toBe(204);
      expect(approvals(await readCsr(csr.metadata.name))).toHaveLength(1);
    } finally {
      agent.close();
      await server.close();
    }
  });
});
