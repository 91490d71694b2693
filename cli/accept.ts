// `ocmf accept`: what `clusteradm accept` does: approve the cluster's bootstrap CSRs and set
// hubAcceptsClient, so a waiting spoke joins, but never a CSR planted by another bootstrap identity, nor
// one of two that the same identity made for the cluster unless the admin names it.
import { CertificateSigningRequestResource } from "../shared/api/kube.ts";
import { CsrConditionType, type CertificateSigningRequest } from "../shared/api/certificates.ts";
import { ClusterLabel, ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { rfc3339 } from "../shared/clock.ts";
import type { KubeClient, KubeObject } from "../shared/kube/client.ts";
import { recogniseAgentCsr } from "../shared/cluster-csr.ts";
import { readRequest } from "../shared/pki.ts";
import { again } from "./transient.ts";

const BOOTSTRAP_USER_PREFIX = "system:bootstrap:";
const BOOTSTRAP_GROUP = "system:bootstrappers:managedcluster";
// The account behind `clusteradm get token` (cli/render/hub.ts), exactly: clusteradm takes any username
// it starts with.
const BOOTSTRAP_ACCOUNT_USER = "system:serviceaccount:open-cluster-management:agent-registration-bootstrap";
const BOOTSTRAP_ACCOUNT_GROUP = "system:serviceaccounts:open-cluster-management";

// A request from a join identity: a bootstrap token in OCM's group, or the join-token account.
const fromBootstrapIdentity = (c: Csr) =>
  (c.spec.username?.startsWith(BOOTSTRAP_USER_PREFIX) && c.spec.groups?.includes(BOOTSTRAP_GROUP)) ||
  (c.spec.username === BOOTSTRAP_ACCOUNT_USER && c.spec.groups?.includes(BOOTSTRAP_ACCOUNT_GROUP));

type Csr = CertificateSigningRequest & KubeObject & { metadata: { name: string } };

export type CsrVerdict = { name: string; requester: string; result: "approved" | "already approved" | "already denied" | "refused"; detail: string };
export type AcceptResult = {
  csr: "approved" | "already decided" | "refused" | "none"; // the summary: what happened to the cluster's request
  csrs: CsrVerdict[];
  accepted: "set" | "already" | "not set" | "no cluster";
};

// The spoke keeps the name of the CSR its agent made (functions/spoke-registration: the pending
// request's Secret), so the spoke's admin can tell the hub admin which one is real.
const AGENT_CSR_NAME_ON_SPOKE = "kubectl -n open-cluster-management-agent get secret hub-kubeconfig-secret-pending-csr -o jsonpath='{.data.csr-name}' | base64 -d";

// requesters: the bootstrap users (spec.username) to trust. The API server sets that field from the
// caller's credentials; clusteradm's --requesters names common names instead, but a planted request can
// copy the real agent's common name, so it cannot tell the two apart.
// csrs: the CSRs to approve, by name; every other pending one is refused. The one token `ocmf install
// hub` prints serves every cluster, so whoever else holds it asks as the same user as the real agent:
// then only the name, checked on the spoke, tells the two requests apart.
export async function acceptCluster(hub: KubeClient, cluster: string, o: { requesters?: readonly string[]; csrs?: readonly string[] } = {}): Promise<AcceptResult> {
  const bootstrap = await bootstrapCsrsOf(hub, cluster);
  // As clusteradm, requests already decided count too: a new identity asking after the cluster joined is
  // as suspect as two asking at once.
  const requesters = [...new Set(bootstrap.map((c) => c.spec.username!))].sort();
  const named = o.csrs?.length ? new Set(o.csrs) : undefined;
  // A CSR the admin names is trusted whoever asked for it, unless --requesters narrows that too.
  const trusted = o.requesters?.length ? new Set(o.requesters) : named || requesters.length === 1 ? new Set(requesters) : undefined;
  const verdicts: CsrVerdict[] = [];
  for (const csr of bootstrap) verdicts.push(await judge(csr, { cluster, requesters, trusted, named }));
  // Two requests that pass every check, and nobody said which: approving either could sign the planted one.
  const candidates = verdicts.filter((v) => v.result === "approved");
  const csrs =
    candidates.length > 1 && !named
      ? verdicts.map((v): CsrVerdict =>
          v.result === "approved"
            ? { ...v, result: "refused", detail: `${candidates.length} pending CSRs for ${cluster} (${candidates.map((c) => c.name).join(", ")}) come from bootstrap identities and name the cluster's agent, so they cannot be told apart (with one join token for every cluster, a planted one asks as the same user); name the one the agent made with --csr (on the spoke: ${AGENT_CSR_NAME_ON_SPOKE})` }
            : v,
        )
      : verdicts;
  for (const v of csrs) if (v.result === "approved") await approve(hub, bootstrap.find((c) => c.metadata.name === v.name)!);
  const csr = summary(csrs);
  // Nothing approved because of a refusal: the hub admin has to say who the cluster is first.
  if (csr === "refused") return { csr, csrs, accepted: "not set" };
  const mc = await hub.get<ManagedCluster & KubeObject>(ManagedClusterResource, cluster);
  if (!mc) return { csr, csrs, accepted: "no cluster" };
  if (mc.spec?.hubAcceptsClient) return { csr, csrs, accepted: "already" };
  await hub.update(ManagedClusterResource, { ...mc, spec: { ...mc.spec, hubAcceptsClient: true } });
  return { csr, csrs, accepted: "set" };
}

async function bootstrapCsrsOf(hub: KubeClient, cluster: string): Promise<Csr[]> {
  const { items } = await again(() => hub.list<Csr>(CertificateSigningRequestResource, { labelSelector: `${ClusterLabel.ClusterName}=${cluster}` }));
  return items.filter(fromBootstrapIdentity);
}

async function judge(csr: Csr, o: { cluster: string; requesters: string[]; trusted: Set<string> | undefined; named: Set<string> | undefined }): Promise<CsrVerdict> {
  const requester = csr.spec.username!;
  const base = { name: csr.metadata.name, requester };
  const conditions = csr.status?.conditions ?? [];
  if (conditions.some((c) => c.type === CsrConditionType.Denied)) return { ...base, result: "already denied", detail: "" };
  if (conditions.some((c) => c.type === CsrConditionType.Approved)) return { ...base, result: "already approved", detail: "" };
  if (o.named && !o.named.has(csr.metadata.name)) return { ...base, result: "refused", detail: "not named by --csr" };
  if (!o.trusted) return { ...base, result: "refused", detail: `the CSRs for ${o.cluster} come from ${o.requesters.length} requesters (${o.requesters.join(", ")}); name the one to trust with --requesters` };
  if (!o.trusted.has(requester)) return { ...base, result: "refused", detail: `requester ${requester} is not in --requesters` };
  const recognised = recogniseAgentCsr(csr, await readRequest(csr.spec.request));
  if ("reason" in recognised) return { ...base, result: "refused", detail: `not a cluster agent CSR: ${recognised.reason}` };
  return { ...base, result: "approved", detail: recognised.commonName };
}

function summary(csrs: CsrVerdict[]): AcceptResult["csr"] {
  if (csrs.some((c) => c.result === "approved")) return "approved";
  if (csrs.some((c) => c.result === "refused") && !csrs.some((c) => c.result === "already approved")) return "refused";
  return csrs.length ? "already decided" : "none";
}

// PUT to the approval subresource with the resourceVersion read, so a concurrent decision conflicts.
async function approve(hub: KubeClient, csr: Csr): Promise<void> {
  const approved = { type: CsrConditionType.Approved, status: "True", reason: "ocmfApprove", message: "This CSR was approved by ocmf certificate approve.", lastUpdateTime: rfc3339(new Date()) };
  await hub.update(CertificateSigningRequestResource, { ...csr, status: { ...csr.status, conditions: [...(csr.status?.conditions ?? []), approved] } }, "approval");
}

// `ocmf accept`: each cluster in turn, a line per decision; it fails when a cluster had nothing approved.
// Every name --csr gives must be a bootstrap CSR of one of the clusters, checked before anything changes.
export async function acceptClusters(hub: KubeClient, o: { clusters: readonly string[]; requesters?: readonly string[]; csrs?: readonly string[] }, print: (line: string) => void): Promise<void> {
  if (o.csrs?.length) {
    const known = new Set<string>();
    for (const c of o.clusters) for (const csr of await bootstrapCsrsOf(hub, c)) known.add(csr.metadata.name);
    const unknown = o.csrs.filter((name) => !known.has(name));
    if (unknown.length) throw new Error(`--csr ${unknown.join(", ")}: no CSR of that name was made by a bootstrap identity for ${o.clusters.length === 1 ? "cluster" : "clusters"} ${o.clusters.join(", ")}; nothing changed`);
  }
  const failed: string[] = [];
  for (const c of o.clusters) {
    const r = await acceptCluster(hub, c, { requesters: o.requesters, csrs: o.csrs });
    for (const line of describeAccept(c, r)) print(line);
    if (r.csr === "none") failed.push(`no CSR to approve for cluster ${c}`);
    if (r.csr === "refused") failed.push(`nothing approved for cluster ${c}: its CSRs were refused`);
  }
  if (failed.length) throw new Error(failed.join("; "));
}

// One line per CSR and one for hubAcceptsClient, for the terminal.
export function describeAccept(cluster: string, r: AcceptResult): string[] {
  const lines = r.csrs.map((c) => {
    if (c.result === "approved") return `${cluster}: CSR ${c.name} approved (requested by ${c.requester} as ${c.detail})`;
    if (c.result === "refused") return `${cluster}: CSR ${c.name} refused (requested by ${c.requester}): ${c.detail}`;
    return `${cluster}: CSR ${c.name} ${c.result}`;
  });
  const accepted = { set: "set", already: "already set", "not set": "not set: nothing approved", "no cluster": "not set: no ManagedCluster" }[r.accepted];
  return [...lines, `${cluster}: hubAcceptsClient ${accepted}`];
}
