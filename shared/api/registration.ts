// The registration protocol's fixed strings (OCM §3): CSR subjects, agent secrets and their keys, and
// the spoke-side condition reasons and messages, spelled exactly as OCM spells them.
export const AgentNamespaceDefault = "open-cluster-management-agent";
export const BootstrapSecretName = "bootstrap-hub-kubeconfig";
export const HubKubeconfigSecretName = "hub-kubeconfig-secret";

export const HubSecretKey = {
  Kubeconfig: "kubeconfig",
  TlsCert: "tls.crt",
  TlsKey: "tls.key",
  ClusterName: "cluster-name",
  AgentName: "agent-name",
} as const;

// The hub kubeconfig OCM writes: these names, and cert files relative to the secret's directory.
export const HubKubeconfigLayout = { context: "default-context", user: "default-auth", namespace: "configuration" } as const;

export const SubjectPrefix = "system:open-cluster-management:";
export const ManagedClustersGroup = "system:open-cluster-management:managed-clusters";
export const clusterGroup = (cluster: string) => `${SubjectPrefix}${cluster}`;
export const agentUser = (cluster: string, agent: string) => `${SubjectPrefix}${cluster}:${agent}`;

export const CsrUsages = ["digital signature", "key encipherment", "client auth"] as const;
// The agent stops creating CSRs while this many for its cluster exist on the hub.
export const MaxOutstandingCsrs = 10;
// Label marking an add-on's CSRs (the cluster agent's own CSRs never carry it).
export const AddonNameLabel = "open-cluster-management.io/addon-name";

export const JoinedCondition = { type: "ManagedClusterJoined", status: "True", reason: "ManagedClusterJoined", message: "Managed cluster joined" } as const;

export const CertificateRotatedReason = { Updated: "ClientCertificateUpdated", UpdateFailed: "ClientCertificateUpdateFailed" } as const;
export const rotatedMessage = (notBefore: Date, notAfter: Date) => `client certificate rotated starting from ${goTime(notBefore)} to ${goTime(notAfter)}`;
export const TooManyCsrsMessage = "Stop creating csr since there are too many csr created already on hub";

// Go's time.Time String() in UTC, which OCM's message prints: "2026-11-22 01:41:13 +0000 UTC".
function goTime(d: Date): string {
  return `${d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "")} +0000 UTC`;
}
