// `ocmf accept`: what `clusteradm accept` does: approve the cluster's bootstrap CSR and set
// hubAcceptsClient, so a waiting spoke joins.
import { CertificateSigningRequestResource } from "../shared/api/kube.ts";
import { ClusterLabel, ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import type { KubeClient, KubeObject } from "../shared/kube/client.ts";

const BOOTSTRAP_USER_PREFIX = "system:bootstrap:";
const BOOTSTRAP_GROUP = "system:bootstrappers:managedcluster";

type Csr = KubeObject & { spec: { username?: string; groups?: string[] }; status?: { conditions?: { type: string }[] } };

export type AcceptResult = { csr: "approved" | "already decided" | "none"; accepted: "set" | "already" | "no cluster" };

export async function acceptCluster(hub: KubeClient, cluster: string): Promise<AcceptResult> {
  const { items } = await hub.list<Csr>(CertificateSigningRequestResource, { labelSelector: `${ClusterLabel.ClusterName}=${cluster}` });
  const bootstrap = items.filter((c) => c.spec.username?.startsWith(BOOTSTRAP_USER_PREFIX) && c.spec.groups?.includes(BOOTSTRAP_GROUP));
  const decided = bootstrap.find((c) => c.status?.conditions?.some((x) => x.type === "Approved" || x.type === "Denied"));
  const pending = bootstrap.find((c) => !c.status?.conditions?.length);
  let csr: AcceptResult["csr"] = decided ? "already decided" : "none";
  if (!decided && pending) {
    const conditions = [{ type: "Approved", status: "True", reason: "ocmfApprove", message: "This CSR was approved by ocmf certificate approve.", lastUpdateTime: new Date().toISOString().replace(/\.\d+Z$/, "Z") }];
    await hub.update(CertificateSigningRequestResource, { ...pending, status: { ...pending.status, conditions } }, "approval");
    csr = "approved";
  }
  const mc = await hub.get<ManagedCluster & KubeObject>(ManagedClusterResource, cluster);
  if (!mc) return { csr, accepted: "no cluster" };
  if (mc.spec?.hubAcceptsClient) return { csr, accepted: "already" };
  await hub.update(ManagedClusterResource, { ...mc, spec: { ...mc.spec, hubAcceptsClient: true } });
  return { csr, accepted: "set" };
}
