// Approves OCM cluster agents' CSRs on the hub (ocm-protocol §3.2): a renewal once the agent may renew
// (granted at acceptance), a bootstrap request from a configured auto-approval user. The root kind is
// CertificateSigningRequest; kube-controller-manager signs what this approves.
import { HubSettingsSchema, type HubSettings } from "../../shared/settings.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import type { ObjectEvent, TickEvent } from "../../shared/events.ts";
import { defineFunction, type KeysOrSkip } from "../../shared/sdk.ts";
import type { KubeClient } from "../../shared/kube/client.ts";
import { CertificateSigningRequestResource, KubeAPIServerClientSignerName } from "../../shared/api/kube.ts";
import { mayAccess } from "../../shared/kube/access-review.ts";
import { CsrConditionType, type CertificateSigningRequest } from "../../shared/api/certificates.ts";
import { ClusterLabel } from "../../shared/api/cluster.ts";
import { CsrApproval, RegisterGroup, RegisterResource, RegisterSubresource, RegisterVerb } from "../../shared/api/register.ts";
import { bootstrapApprovable, isTerminal, recogniseAgentCsr } from "../../shared/cluster-csr.ts";
import { readRequest } from "../../shared/pki.ts";
import { rfc3339 } from "../../shared/clock.ts";

// Both hub functions read the same settings (shared/settings.ts).
export type Config = HubSettings;

// The root kind is CertificateSigningRequest; a deleted CSR needs no decision.
export default defineFunction({
  name: "csr-approver",
  config: HubSettingsSchema,
  watches: (c) => [{ cluster: c.hubCluster, resource: CertificateSigningRequestResource, mode: "Either", verbs: ["add", "update"], root: true, keys: keysOfCsr }],
  resyncSeconds: 60,
  resync: pendingAgentCsrs,
  // The csr-approver function (functions/csr-approver) on the hub: reads CSRs, asks the API server
  // whether an agent may renew, and approves through the approval subresource. Signing stays with
  // kube-controller-manager, so no "sign" permission.
  writes: (c) => [
    { cluster: c.hubCluster, why: "approval; signing stays with kube-controller-manager, so no sign", apiGroups: ["certificates.k8s.io"], resources: ["certificatesigningrequests/approval"], verbs: ["update"] },
    { cluster: c.hubCluster, why: "The API server also checks approve on the signer named in the CSR; only the client signer.", apiGroups: ["certificates.k8s.io"], resources: ["signers"], resourceNames: ["kubernetes.io/kube-apiserver-client"], verbs: ["approve"] },
    { cluster: c.hubCluster, why: "The renewal check: may the requesting agent renew its cluster's client certificate?", apiGroups: ["authorization.k8s.io"], resources: ["subjectaccessreviews"], verbs: ["create"] },
  ],
  reconcile,
});

// The signer of a CSR is immutable, so the payload's may be trusted for this one filter.
function keysOfCsr(event: ObjectEvent): KeysOrSkip {
  const signer = (event.object as CertificateSigningRequest | undefined)?.spec?.signerName;
  if (signer !== undefined && signer !== KubeAPIServerClientSignerName) return { skip: `signer ${signer}` };
  return [{ cluster: event.cluster, name: event.ref.name }];
}

// The resync: every cluster-agent CSR that is still waiting for a decision, not every CSR.
async function pendingAgentCsrs(io: Io<Config>, tick: TickEvent): Promise<KeysOrSkip> {
  const hub = io.config.hubCluster;
  if (tick.cluster && tick.cluster !== hub) return { skip: `tick for cluster ${tick.cluster}, not the hub` };
  const { items } = await io.cluster(hub).list<CertificateSigningRequest>(CertificateSigningRequestResource, {
    labelSelector: ClusterLabel.ClusterName,
    fieldSelector: `spec.signerName=${KubeAPIServerClientSignerName}`,
  });
  return items.filter((csr) => !isTerminal(csr)).map((csr) => ({ cluster: hub, name: csr.metadata.name }));
}

export async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const hub = io.cluster(key.cluster);
  const csr = await hub.get<CertificateSigningRequest>(CertificateSigningRequestResource, key.name);
  if (!csr) {
    io.log.info({ csr: key.name }, "skipped: CSR is gone");
    return done;
  }
  const decision = await decide(csr, io.config, (c) => mayRenew(hub, c));
  if ("skip" in decision) {
    io.log.info({ csr: key.name, reason: decision.skip }, "skipped");
    return done;
  }
  await approveCsr(hub, csr, io.clock.now());
  io.log.info({ csr: key.name, cluster: decision.cluster, as: decision.approve }, "approved");
  return done;
}

export type Decision = { approve: "renewal" | "bootstrap"; cluster: string } | { skip: string };

// OCM's order: the renewal check first; a recognised request that is not a renewal may still be a
// bootstrap request. A renewal the hub does not authorise stops there (it is not retried as bootstrap).
export async function decide(csr: CertificateSigningRequest, config: Config, renewAllowed: (csr: CertificateSigningRequest) => Promise<boolean>): Promise<Decision> {
  if (isTerminal(csr)) return { skip: "already approved or denied" };
  const request = await readRequest(csr.spec.request);
  const recognised = recogniseAgentCsr(csr, request);
  if ("reason" in recognised) return { skip: `not a cluster agent CSR: ${recognised.reason}` };
  const { cluster, commonName } = recognised;
  if (csr.spec.username === commonName) {
    return (await renewAllowed(csr)) ? { approve: "renewal", cluster } : { skip: `renewal by ${commonName} not authorised (cluster not accepted)` };
  }
  const bootstrap = bootstrapApprovable(csr, request, config.autoApprovalUsers);
  if ("reason" in bootstrap) return { skip: `requested by ${csr.spec.username ?? "nobody"}: neither the agent itself nor an auto-approval user for cluster ${cluster}` };
  return { approve: "bootstrap", cluster };
}

// May the requester renew its cluster certificate? Granted by the cluster ClusterRole once accepted.
async function mayRenew(hub: KubeClient, csr: CertificateSigningRequest): Promise<boolean> {
  const cluster = csr.metadata.labels![ClusterLabel.ClusterName]!;
  return mayAccess(hub, {
    user: csr.spec.username,
    uid: csr.spec.uid,
    groups: csr.spec.groups,
    extra: csr.spec.extra,
    // OCM leaves the name out; naming the cluster also honours roles restricted by resourceNames.
    resourceAttributes: {
      group: RegisterGroup,
      resource: RegisterResource.ManagedClusters,
      subresource: RegisterSubresource.ClientCertificates,
      verb: RegisterVerb.Renew,
      name: cluster,
    },
  });
}

// PUT to the approval subresource with the resourceVersion read, so a concurrent decision conflicts.
async function approveCsr(hub: KubeClient, csr: CertificateSigningRequest, now: Date): Promise<void> {
  const approved = {
    type: CsrConditionType.Approved,
    status: "True",
    reason: CsrApproval.Reason,
    message: CsrApproval.ClusterAgentMessage,
    lastUpdateTime: rfc3339(now),
  };
  await hub.update(CertificateSigningRequestResource, { ...csr, status: { ...csr.status, conditions: [...(csr.status?.conditions ?? []), approved] } }, "approval");
}
