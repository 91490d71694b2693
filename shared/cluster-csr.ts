// How the hub judges a cluster agent's CSR (ocm-protocol §3.2): "recognised" as OCM's validateCSR has
// it, and approvable as a bootstrap request from an auto-approval user. The csr-approver approves by
// these rules and the cluster-acceptor counts only what they accept, so the two never disagree.
import { CsrConditionType, KeyUsage, type CertificateSigningRequest } from "./api/certificates.ts";
import { KubeAPIServerClientSignerName } from "./api/kube.ts";
import { ClusterLabel, isReservedClusterName, reservedClusterNameMessage } from "./api/cluster.ts";
import { CsrUsages, ManagedClustersGroup, SubjectPrefix, clusterGroup } from "./api/registration.ts";
import { mayAutoApprove } from "./auto-approval.ts";
import type { RequestInfo } from "./pki.ts";

export function isTerminal(csr: CertificateSigningRequest): boolean {
  return (csr.status?.conditions ?? []).some((c) => c.type === CsrConditionType.Approved || c.type === CsrConditionType.Denied);
}

// system:open-cluster-management:<cluster>:<agent>, both parts non-empty and without colons.
export function parseAgentUser(user: string): { cluster: string; agent: string } | undefined {
  if (!user.startsWith(SubjectPrefix)) return undefined;
  const parts = user.slice(SubjectPrefix.length).split(":");
  if (parts.length !== 2 || !parts[0] || !parts[1]) return undefined;
  return { cluster: parts[0], agent: parts[1] };
}

const agentUsages: ReadonlySet<string> = new Set(CsrUsages);

export type Recognised = { cluster: string; agent: string; commonName: string };

// "Recognised" as OCM's validateCSR has it, plus two checks OCM leaves to the signer: the usages of a
// client certificate, and a valid self-signature (kube-controller-manager refuses to sign without one).
// Stricter than OCM, a reserved cluster name is never recognised (shared/api/cluster.ts): no cluster
// may have one, so no certificate is issued for one, not even to an auto-approval user allowed any name.
export function recogniseAgentCsr(csr: CertificateSigningRequest, request: RequestInfo): Recognised | { reason: string } {
  const cluster = csr.metadata.labels?.[ClusterLabel.ClusterName];
  if (!cluster) return { reason: `no ${ClusterLabel.ClusterName} label` };
  if (isReservedClusterName(cluster)) return { reason: reservedClusterNameMessage(cluster) };
  if (csr.spec.signerName !== KubeAPIServerClientSignerName) return { reason: `signer ${csr.spec.signerName}` };
  const usages = csr.spec.usages ?? [];
  if (!usages.includes(KeyUsage.ClientAuth) || usages.some((u) => !agentUsages.has(u))) return { reason: `usages ${usages.join(", ")}` };
  if ("unreadable" in request) return { reason: `unreadable request: ${request.unreadable}` };
  if (request.blockType !== "CERTIFICATE REQUEST") return { reason: `PEM block ${request.blockType}` };
  if (!request.signatureValid) return { reason: "request signature does not verify" };

  // Organizations: exactly the cluster's group, plus optionally the all-clusters group.
  const orgs = new Set(request.organizations);
  orgs.delete(ManagedClustersGroup);
  if (orgs.size !== 1 || !orgs.has(clusterGroup(cluster))) return { reason: `organizations ${request.organizations.join(", ")} do not name cluster ${cluster}` };

  // CN: system:open-cluster-management:<cluster>:<agent>, cluster as labelled.
  const { commonName } = request;
  const agent = parseAgentUser(commonName);
  if (!agent) return { reason: `common name ${commonName}` };
  if (agent.cluster !== cluster) return { reason: `common name ${commonName} names another cluster than ${cluster}` };
  return { cluster, agent: agent.agent, commonName };
}

// A bootstrap request the hub approves without an admin: recognised, not a renewal, and from a user
// the auto-approval entries let register this cluster.
export function bootstrapApprovable(csr: CertificateSigningRequest, request: RequestInfo, autoApproval: readonly string[]): Recognised | { reason: string } {
  const recognised = recogniseAgentCsr(csr, request);
  if ("reason" in recognised) return { reason: `not a cluster agent CSR: ${recognised.reason}` };
  const user = csr.spec.username ?? "";
  if (user === recognised.commonName) return { reason: "a renewal, not a bootstrap request" };
  if (!mayAutoApprove(autoApproval, user, recognised.cluster)) return { reason: `requested by ${user || "nobody"}: not an auto-approval user for cluster ${recognised.cluster}` };
  return recognised;
}
