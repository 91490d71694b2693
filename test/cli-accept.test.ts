// `ocmf accept` against a real hub, run as the hub admin runs it (the CLI as a process): it approves a
// cluster's bootstrap CSR, but not when another bootstrap identity has planted one for the same name,
// and never a CSR whose subject is not the cluster's agent.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { allowCsrRequests, startHub, type Hub } from "./support/fixtures.ts";
import { KubeClient } from "../shared/kube/client.ts";
import { applyManifests } from "../shared/apply.ts";
import { CertificateSigningRequestResource, KubeAPIServerClientSignerName } from "../shared/api/kube.ts";
import { ClusterLabel, ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import type { CertificateSigningRequest } from "../shared/api/certificates.ts";
import { CsrUsages, ManagedClustersGroup, agentUser, clusterGroup } from "../shared/api/registration.ts";
import { certificateRequest, generatedNameSuffix, newPrivateKeyPem } from "../shared/csr-flow.ts";

const root = join(import.meta.dirname, "..");
const suffix = () => Math.random().toString(36).slice(2, 7);

let plane: Hub;
let admin: KubeClient;
let dir: string;
const identities: KubeClient[] = [];

beforeAll(async () => {
  plane = await startHub("hub");
  admin = plane.admin;
  await applyManifests(admin, readFileSync(join(root, "manifests/hub/bootstrap-rbac.yaml"), "utf8"));
  dir = mkdtempSync(join(tmpdir(), "cli-accept-"));
  writeFileSync(join(dir, "hub.kubeconfig"), plane.cluster.adminKubeconfig);
});
afterAll(async () => {
  for (const c of identities) c.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
  await plane?.stop();
});

type Identity = { user: string; hub: KubeClient };

// A bootstrap identity as `clusteradm join` gets one: a token in OCM's bootstrap group.
async function bootstrapIdentity(): Promise<Identity> {
  const token = await plane.cluster.createBootstrapToken(["system:bootstrappers:managedcluster"]);
  const hub = KubeClient.fromKubeconfig(token.kubeconfig);
  identities.push(hub);
  return { user: token.user, hub };
}

// What spoke-registration creates (shared/csr-flow.ts): the agent's subject, OCM's label, signer and usages.
async function requestAs(who: Identity, cluster: string, commonName: string): Promise<string> {
  const requestPem = await certificateRequest({ subject: { commonName, organizations: [clusterGroup(cluster), ManagedClustersGroup], organizationalUnits: [] }, keyPem: await newPrivateKeyPem() });
  const name = `${cluster}-${generatedNameSuffix()}`;
  await who.hub.create<CertificateSigningRequest>(CertificateSigningRequestResource, {
    metadata: { name, labels: { [ClusterLabel.ClusterName]: cluster } },
    spec: { request: Buffer.from(requestPem).toString("base64"), signerName: KubeAPIServerClientSignerName, usages: [...CsrUsages] },
  });
  return name;
}

async function newCluster(): Promise<{ cluster: string; agent: Identity; agentCn: string }> {
  const cluster = `cluster-${suffix()}`;
  const agent = await bootstrapIdentity();
  await agent.hub.create<ManagedCluster>(ManagedClusterResource, { metadata: { name: cluster }, spec: { hubAcceptsClient: false } });
  return { cluster, agent, agentCn: agentUser(cluster, suffix()) };
}

function ocmfAccept(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [join(root, "cli/ocmf.ts"), "accept", "--kubeconfig", join(dir, "hub.kubeconfig"), ...args], (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

async function approvedCsrs(cluster: string): Promise<string[]> {
  const { items } = await admin.list<CertificateSigningRequest & { metadata: { name: string } }>(CertificateSigningRequestResource, { labelSelector: `${ClusterLabel.ClusterName}=${cluster}` });
  return items.filter((c) => c.status?.conditions?.some((x) => x.type === "Approved")).map((c) => c.metadata.name).sort();
}

const hubAcceptsClient = async (cluster: string) => (await admin.get<ManagedCluster>(ManagedClusterResource, cluster))?.spec?.hubAcceptsClient;
const lineFor = (stdout: string, csr: string) => stdout.split("\n").find((l) => l.includes(`CSR ${csr} `)) ?? "";

// The attacker either makes up an agent name or copies the real agent's common name from its CSR
// (a bootstrap identity may list CSRs); either way the request comes from another user.
const attacks = [
  { name: "an agent name of its own", attackerCn: (cluster: string) => agentUser(cluster, "evil1") },
  { name: "the real agent's common name", attackerCn: (_cluster: string, agentCn: string) => agentCn },
];

describe("a CSR planted by another bootstrap identity for the same cluster", () => {
  it.each(attacks)("with $name: accept refuses both, approves nothing and leaves hubAcceptsClient unset", async ({ attackerCn }) => {
    const { cluster, agent, agentCn } = await newCluster();
    const attacker = await bootstrapIdentity();
    const planted = await requestAs(attacker, cluster, attackerCn(cluster, agentCn));
    const real = await requestAs(agent, cluster, agentCn);

    const r = await ocmfAccept(["--clusters", cluster]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain(`nothing approved for cluster ${cluster}`);
    for (const csr of [planted, real]) expect(lineFor(r.stdout, csr)).toContain("refused");
    expect(lineFor(r.stdout, real)).toContain(`come from 2 requesters`);
    expect(lineFor(r.stdout, real)).toContain(attacker.user);
    expect(await approvedCsrs(cluster)).toEqual([]);
    expect(await hubAcceptsClient(cluster)).toBe(false);
  });

  it.each(attacks)("with $name: accept --requesters <the real agent's user> approves only the real agent's CSR", async ({ attackerCn }) => {
    const { cluster, agent, agentCn } = await newCluster();
    const attacker = await bootstrapIdentity();
    const planted = await requestAs(attacker, cluster, attackerCn(cluster, agentCn));
    const real = await requestAs(agent, cluster, agentCn);

    const r = await ocmfAccept(["--clusters", cluster, "--requesters", agent.user]);
    expect(r.code).toBe(0);
    expect(lineFor(r.stdout, real)).toBe(`${cluster}: CSR ${real} approved (requested by ${agent.user} as ${agentCn})`);
    expect(lineFor(r.stdout, planted)).toBe(`${cluster}: CSR ${planted} refused (requested by ${attacker.user}): requester ${attacker.user} is not in --requesters`);
    expect(await approvedCsrs(cluster)).toEqual([real]);
    expect(await hubAcceptsClient(cluster)).toBe(true);
  });
});

// Every cluster joins with the one token `ocmf install hub` prints, so whoever else holds it is, to the
// API server, the same user as the real agent: the requester cannot tell the two CSRs apart.
describe("a CSR planted by a second holder of the same bootstrap token", () => {
  async function sharedToken(): Promise<{ agent: Identity; attacker: Identity }> {
    const token = await plane.cluster.createBootstrapToken(["system:bootstrappers:managedcluster"]);
    const [a, b] = [KubeClient.fromKubeconfig(token.kubeconfig), KubeClient.fromKubeconfig(token.kubeconfig)];
    identities.push(a, b);
    return { agent: { user: token.user, hub: a }, attacker: { user: token.user, hub: b } };
  }
  async function plantedBeside(attackerCn: (cluster: string, agentCn: string) => string) {
    const cluster = `edge-${suffix()}`;
    const { agent, attacker } = await sharedToken();
    const agentCn = agentUser(cluster, suffix());
    await agent.hub.create<ManagedCluster>(ManagedClusterResource, { metadata: { name: cluster }, spec: { hubAcceptsClient: false } });
    const planted = await requestAs(attacker, cluster, attackerCn(cluster, agentCn));
    const real = await requestAs(agent, cluster, agentCn);
    return { cluster, agent, agentCn, planted, real };
  }

  it.each(attacks)("with $name: accept approves neither, says they cannot be told apart, and leaves hubAcceptsClient unset", async ({ attackerCn }) => {
    const { cluster, planted, real } = await plantedBeside(attackerCn);
    const r = await ocmfAccept(["--clusters", cluster]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain(`nothing approved for cluster ${cluster}`);
    for (const csr of [planted, real]) {
      expect(lineFor(r.stdout, csr)).toContain("refused");
      expect(lineFor(r.stdout, csr)).toContain(`2 pending CSRs for ${cluster}`);
      expect(lineFor(r.stdout, csr)).toContain("--csr");
    }
    expect(await approvedCsrs(cluster)).toEqual([]);
    expect(await hubAcceptsClient(cluster)).toBe(false);
  });

  it.each(attacks)("with $name: accept --csr <the agent's CSR> approves only the agent's CSR", async ({ attackerCn }) => {
    const { cluster, agent, agentCn, planted, real } = await plantedBeside(attackerCn);
    const r = await ocmfAccept(["--clusters", cluster, "--csr", real]);
    expect(r.code).toBe(0);
    expect(lineFor(r.stdout, real)).toBe(`${cluster}: CSR ${real} approved (requested by ${agent.user} as ${agentCn})`);
    expect(lineFor(r.stdout, planted)).toBe(`${cluster}: CSR ${planted} refused (requested by ${agent.user}): not named by --csr`);
    expect(await approvedCsrs(cluster)).toEqual([real]);
    expect(await hubAcceptsClient(cluster)).toBe(true);
  });

  it("refuses a --csr naming no CSR of the clusters accepted, and changes nothing", async () => {
    const { cluster, agent, agentCn } = await newCluster();
    await requestAs(agent, cluster, agentCn); // alone, accept would approve it
    const other = await newCluster();
    const elsewhere = await requestAs(other.agent, other.cluster, other.agentCn);
    for (const named of ["no-such-csr", elsewhere]) {
      const r = await ocmfAccept(["--clusters", cluster, "--csr", named]);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`--csr ${named}`);
      expect(r.stdout).toBe("");
    }
    expect(await approvedCsrs(cluster)).toEqual([]);
    expect(await approvedCsrs(other.cluster)).toEqual([]);
    expect(await hubAcceptsClient(cluster)).toBe(false);
  });
});

describe("the subject of a CSR from the trusted requester", () => {
  const wrongSubjects = [
    { name: "a common name naming another cluster", cn: () => agentUser("cluster-other", "agent1"), reason: "names another cluster than" },
    { name: "a nonsense common name", cn: () => "nonsense", reason: "common name nonsense" },
    { name: "a common name without the agent part", cn: (cluster: string) => `system:open-cluster-management:${cluster}`, reason: "common name system:open-cluster-management:" },
  ];
  it.each(wrongSubjects)("refuses $name with the reason and approves the agent's own CSR", async ({ cn, reason }) => {
    const { cluster, agent, agentCn } = await newCluster();
    const wrong = await requestAs(agent, cluster, cn(cluster));
    const real = await requestAs(agent, cluster, agentCn);

    const r = await ocmfAccept(["--clusters", cluster, "--requesters", agent.user]);
    expect(r.code).toBe(0);
    expect(lineFor(r.stdout, wrong)).toMatch(new RegExp(`^${cluster}: CSR ${wrong} refused \\(requested by ${agent.user}\\): not a cluster agent CSR: .*`));
    expect(lineFor(r.stdout, wrong)).toContain(reason);
    expect(await approvedCsrs(cluster)).toEqual([real]);
  });

  it("exits non-zero and leaves hubAcceptsClient unset when the only CSR has a wrong subject", async () => {
    const { cluster, agent } = await newCluster();
    const wrong = await requestAs(agent, cluster, "nonsense");
    const r = await ocmfAccept(["--clusters", cluster]);
    expect(r.code).not.toBe(0);
    expect(lineFor(r.stdout, wrong)).toContain("refused");
    expect(await approvedCsrs(cluster)).toEqual([]);
    expect(await hubAcceptsClient(cluster)).toBe(false);
  });
});

describe("the join-token account of `clusteradm get token`", () => {
  const accountIdentity = async (user: string, group: string): Promise<Identity> => {
    const hub = KubeClient.fromKubeconfig(await plane.cluster.kubeconfigFor({ user, groups: [group, "system:serviceaccounts"] }));
    identities.push(hub);
    return { user, hub };
  };

  it("approves the CSR the account requested for the cluster, as clusteradm accept does", async () => {
    const cluster = `cluster-${suffix()}`;
    const agent = await accountIdentity("system:serviceaccount:open-cluster-management:agent-registration-bootstrap", "system:serviceaccounts:open-cluster-management");
    await agent.hub.create<ManagedCluster>(ManagedClusterResource, { metadata: { name: cluster }, spec: { hubAcceptsClient: false } });
    const real = await requestAs(agent, cluster, agentUser(cluster, suffix()));
    const r = await ocmfAccept(["--clusters", cluster]);
    expect(r.code).toBe(0);
    expect(await approvedCsrs(cluster)).toEqual([real]);
    expect(await hubAcceptsClient(cluster)).toBe(true);
  });

  it("ignores a request from another account whose name only starts like it (clusteradm matches the prefix)", async () => {
    const cluster = `cluster-${suffix()}`;
    const group = "system:serviceaccounts:open-cluster-management";
    const lookalike = await accountIdentity("system:serviceaccount:open-cluster-management:agent-registration-bootstrap-2", group);
    await allowCsrRequests(admin, [group]);
    await admin.create<ManagedCluster>(ManagedClusterResource, { metadata: { name: cluster }, spec: { hubAcceptsClient: false } });
    const planted = await requestAs(lookalike, cluster, agentUser(cluster, suffix()));
    const r = await ocmfAccept(["--clusters", cluster]);
    expect(r.stdout).not.toContain(planted);
    expect(await approvedCsrs(cluster)).toEqual([]);
  });
});

describe("one bootstrap identity (the control row)", () => {
  it("approves the agent's CSR and sets hubAcceptsClient without --requesters", async () => {
    const { cluster, agent, agentCn } = await newCluster();
    const real = await requestAs(agent, cluster, agentCn);
    const r = await ocmfAccept(["--clusters", cluster]);
    expect(r.code).toBe(0);
    expect(await approvedCsrs(cluster)).toEqual([real]);
    expect(await hubAcceptsClient(cluster)).toBe(true);
    expect((await ocmfAccept(["--clusters", cluster])).code).toBe(0); // again: nothing left to do is no failure
  });

  it("prints one line per CSR and one for hubAcceptsClient", async () => {
    const { cluster, agent, agentCn } = await newCluster();
    const real = await requestAs(agent, cluster, agentCn);
    const r = await ocmfAccept(["--clusters", cluster]);
    expect(r.stdout.trim().split("\n")).toEqual([`${cluster}: CSR ${real} approved (requested by ${agent.user} as ${agentCn})`, `${cluster}: hubAcceptsClient set`]);
    const again = await ocmfAccept(["--clusters", cluster]);
    expect(again.stdout.trim().split("\n")).toEqual([`${cluster}: CSR ${real} already approved`, `${cluster}: hubAcceptsClient already set`]);
  });
});
