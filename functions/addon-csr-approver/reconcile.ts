// Approves and signs AddOnTemplate add-on agents' CSRs on the hub (ocm-protocol §3.3, addon-framework's
// CSR approving and signing controllers with ocm's template checks): a kube-apiserver-client CSR when
// its subject is the add-on's default one and the cluster's own agent asked; a custom-signer CSR of a
// signer the template registers, which this function then signs with the template's signingCA. The
// root kind is CertificateSigningRequest; only CSRs labelled with both a cluster and an add-on are ours.
import { HubClusterSchema, type HubCluster } from "../../shared/settings.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import type { ObjectEvent, TickEvent } from "../../shared/events.ts";
import { defineFunction, type KeysOrSkip } from "../../shared/sdk.ts";
import type { KubeClient } from "../../shared/kube/client.ts";
import { rfc3339 } from "../../shared/clock.ts";
import { CertificateSigningRequestResource, KubeAPIServerClientSignerName, SecretResource } from "../../shared/api/kube.ts";
import { CsrConditionType, type CertificateSigningRequest } from "../../shared/api/certificates.ts";
import { ClusterLabel, ManagedClusterResource, type ManagedCluster } from "../../shared/api/cluster.ts";
import { CsrApproval } from "../../shared/api/register.ts";
import {
  AddOnAnnotation,
  AddOnGroup,
  AddOnLabel,
  AddOnLifecycle,
  AddOnTemplateResource,
  ClusterManagementAddOnV1alpha1Resource,
  ManagedClusterAddOnV1alpha1Resource,
  type AddOnTemplate,
  type ClusterManagementAddOnV1alpha1,
  type ManagedClusterAddOnV1alpha1,
} from "../../shared/api/addon.ts";
import { AddOnConfigResource, AddonManagerNamespaceDefault, CustomSignerCertificateDurationMs, addonAgentUser } from "../../shared/api/addon-strings.ts";
import { clusterGroup } from "../../shared/api/registration.ts";
import { registrationsOf } from "../../shared/addon-registrations.ts";
import { parseAgentUser } from "../../shared/cluster-csr.ts";
import { signRequest } from "./signing.ts";
import { readRequest, type RequestInfo } from "../../shared/pki.ts";

// Only which cluster is the hub (shared/settings.ts); events from any other cluster are not ours.
export type Config = HubCluster;

// CSRs labelled with an add-on, in either mode: a Resource-mode payload's labels are only a hint.
export default defineFunction({
  name: "addon-csr-approver",
  config: HubClusterSchema,
  watches: (c) => [
    { cluster: c.hubCluster, resource: CertificateSigningRequestResource, labelSelector: AddOnLabel.AddonName, mode: "Either", verbs: ["add", "update"], root: true, keys: csrKeys },
  ],
  resyncSeconds: 60,
  resync,
  // The addon-csr-approver function (functions/addon-csr-approver) on the hub: approves add-on agents'
  // CSRs and signs the custom-signer ones with the AddOnTemplate's signing CA.
  //
  // Signers: templates name their custom signers, so approve and sign cannot be narrowed by resourceNames;
  // the function approves only kube-apiserver-client CSRs that pass the add-on subject checks and signs
  // only signers its template registers (kube-controller-manager signs kube-apiserver-client).
  writes: (c) => [
    { cluster: c.hubCluster, why: "approval, and the certificate of a custom signer's CSR", apiGroups: ["certificates.k8s.io"], resources: ["certificatesigningrequests/approval", "certificatesigningrequests/status"], verbs: ["update"] },
    { cluster: c.hubCluster, why: "templates name their custom signers, so approve and sign cannot be narrowed by name", apiGroups: ["certificates.k8s.io"], resources: ["signers"], verbs: ["approve", "sign"] },
    { cluster: c.hubCluster, why: "is the cluster there, is the add-on enabled and whose, which template registers what", apiGroups: ["cluster.open-cluster-management.io"], resources: ["managedclusters"], verbs: ["get"] },
    { cluster: c.hubCluster, why: "the add-on's registrations and its template's signer", apiGroups: ["addon.open-cluster-management.io"], resources: ["managedclusteraddons", "clustermanagementaddons", "addontemplates"], verbs: ["get"] },
    { cluster: c.hubCluster, namespace: "open-cluster-management-hub", why: "signing CAs named by templates without a namespace live in the add-on manager's namespace; a template naming a CA secret elsewhere needs the same Role there", apiGroups: [""], resources: ["secrets"], verbs: ["get"] },
  ],
  reconcile,
});

const addonCsrSelector = `${ClusterLabel.ClusterName},${AddOnLabel.AddonName}`;

// Only the CSRs that still wait for an approval or a signature: a resync of every one would read the
// add-on objects of each again.
async function resync(io: Io<Config>, tick: TickEvent): Promise<KeysOrSkip> {
  const hub = io.config.hubCluster;
  if (tick.cluster && tick.cluster !== hub) return { skip: `tick for cluster ${tick.cluster}, not the hub` };
  const { items } = await io.cluster(hub).list<CertificateSigningRequest>(CertificateSigningRequestResource, { labelSelector: addonCsrSelector });
  return items.filter((csr) => !isDenied(csr) && (!isApproved(csr) || awaitsCustomSignature(csr))).map((csr) => ({ cluster: hub, name: csr.metadata.name }));
}

// Labels in a Resource-mode payload are only a hint; the reconcile reads them again.
function csrKeys(event: ObjectEvent): KeysOrSkip {
  const labels = (event.object?.metadata as { labels?: Record<string, string> } | undefined)?.labels;
  if (labels && !(labels[ClusterLabel.ClusterName] && labels[AddOnLabel.AddonName])) return { skip: "not an add-on CSR" };
  return [{ cluster: event.cluster, name: event.ref.name }];
}

export async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const hub = io.cluster(key.cluster);
  let csr = await hub.get<CertificateSigningRequest>(CertificateSigningRequestResource, key.name);
  if (!csr) return done;
  const found = await findAddon(hub, csr);
  if ("skip" in found) {
    io.log.info({ csr: key.name, reason: found.skip }, "skipped");
    return done;
  }
  if (!isApproved(csr) && !isDenied(csr)) {
    const decision = decideApproval(csr, found, await readRequest(csr.spec.request));
    if ("skip" in decision) {
      io.log.info({ csr: key.name, reason: decision.skip }, "not approved");
      return done;
    }
    csr = await approve(hub, csr, io.clock.now());
    io.log.info({ csr: key.name, cluster: found.cluster, addon: found.addon, as: decision.approve }, "approved");
  }
  if (isApproved(csr) && awaitsCustomSignature(csr)) {
    const registration = customSignerOf(found.template, csr.spec.signerName);
    if (!registration) {
      io.log.info({ csr: key.name, signer: csr.spec.signerName }, "not signed: the template registers no such signer");
      return done;
    }
    const ca = registration.signingCA;
    const secret = await hub.get<{ metadata: { name: string }; data?: Record<string, string> }>(SecretResource, ca.name, ca.namespace || AddonManagerNamespaceDefault);
    if (!secret) throw new Error(`get custom signer ca ${ca.namespace || AddonManagerNamespaceDefault}/${ca.name} failed: not found`);
    const certificate = await signRequest(csr.spec.request, {
      certPem: Buffer.from(secret.data?.["tls.crt"] ?? "", "base64").toString(),
      keyPem: Buffer.from(secret.data?.["tls.key"] ?? "", "base64").toString(),
      now: io.clock.now(),
      durationMs: CustomSignerCertificateDurationMs,
    });
    // PUT to the status subresource with the resourceVersion read: a concurrent signer conflicts
    await hub.update(CertificateSigningRequestResource, { ...csr, status: { ...csr.status, certificate: Buffer.from(certificate).toString("base64") } }, "status");
    io.log.info({ csr: key.name, signer: csr.spec.signerName }, "signed with the template's signing CA");
  }
  return done;
}

type Found = { cluster: string; addon: string; template: AddOnTemplate };

// The framework's filters: an add-on CSR (name addon-…, both labels) of a template add-on managed by
// the addon-manager, whose cluster and ManagedClusterAddOn exist.
async function findAddon(hub: KubeClient, csr: CertificateSigningRequest): Promise<Found | { skip: string }> {
  const cluster = csr.metadata.labels?.[ClusterLabel.ClusterName];
  const addon = csr.metadata.labels?.[AddOnLabel.AddonName];
  if (!cluster || !addon) return { skip: "not an add-on CSR" };
  if (!csr.metadata.name.startsWith("addon")) return { skip: "add-on CSR names start with addon" };
  const [mc, mca, cma] = await Promise.all([
    hub.get<ManagedCluster>(ManagedClusterResource, cluster),
    hub.get<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, addon, cluster),
    hub.get<ClusterManagementAddOnV1alpha1>(ClusterManagementAddOnV1alpha1Resource, addon),
  ]);
  if (!mc) return { skip: `cluster ${cluster} does not exist` };
  if (!mca) return { skip: `add-on ${addon} is not enabled on ${cluster}` };
  if (!cma) return { skip: `no ClusterManagementAddOn ${addon}` };
  if (cma.metadata.annotations?.[AddOnAnnotation.Lifecycle] === AddOnLifecycle.Self) return { skip: "the add-on approves its own CSRs" };
  const ref = (mca.status?.configReferences ?? []).find((r) => (r.group ?? "") === AddOnGroup && r.resource === AddOnConfigResource.AddOnTemplates);
  if (!ref?.desiredConfig?.specHash) return { skip: "the add-on has no desired AddOnTemplate yet" };
  const template = await hub.get<AddOnTemplate>(AddOnTemplateResource, ref.desiredConfig.name);
  if (!template) return { skip: `addontemplate ${ref.desiredConfig.name} not found` };
  return { cluster, addon, template };
}

export type Approval = { approve: "kube-client" | "custom-signer" } | { skip: string };

// ocm's template approve check, made exact. The registration of the CSR's signer decides, and the
// subject it may ask for is derived from the template (never from status.registrations, which the
// cluster's agent may patch):
// - kubeClient (addon-framework's DefaultCSRApprover): OCM asks for three organizations of which two
//   are the defaults; here the organizations must be exactly the three defaults, so no extra group
//   (another cluster's, system:masters, the bootstrappers') can ride along. CN is the default user.
// - customSigner: OCM approves any subject from anyone; here CN and organizations must be the
//   registration's subject.
// The requester must be the cluster's own agent: system:open-cluster-management:<c>:<agent> in the
// group system:open-cluster-management:<c> (OCM's bare prefix check would let c1 ask for c10's add-ons).
export function decideApproval(csr: CertificateSigningRequest, found: Found, request: RequestInfo): Approval {
  const { cluster, addon, template } = found;
  const signer = csr.spec.signerName;
  const requester = csr.spec.username ?? "";
  const registration = registrationsOf(template, cluster, addon).find((r) => r.signerName === signer);
  if (!registration) return { skip: signer === KubeAPIServerClientSignerName ? "the template registers no kubeClient" : `the template registers no signer ${signer}` };
  if ("unreadable" in request) return { skip: `unreadable request: ${request.unreadable}` };
  if (request.blockType !== "CERTIFICATE REQUEST") return { skip: `PEM block ${request.blockType}` };
  const subject = registration.subject ?? {};
  const userPrefix = addonAgentUser(cluster, addon, "");
  if (subject.user ? request.commonName !== subject.user : !request.commonName.startsWith(userPrefix)) {
    return { skip: `common name ${request.commonName} is not ${subject.user ?? `${userPrefix}<agent>`}` };
  }
  const want = new Set(subject.groups ?? []);
  const orgs = new Set(request.organizations);
  if (orgs.size !== want.size || [...want].some((g) => !orgs.has(g))) {
    return { skip: `organizations ${request.organizations.join(", ") || "(none)"} are not exactly ${[...want].join(", ") || "(none)"}` };
  }
  if (parseAgentUser(requester)?.cluster !== cluster || !(csr.spec.groups ?? []).includes(clusterGroup(cluster))) {
    return { skip: `illegal requester ${requester}: not an agent of cluster ${cluster}` };
  }
  return { approve: signer === KubeAPIServerClientSignerName ? "kube-client" : "custom-signer" };
}

function customSignerOf(template: AddOnTemplate, signer: string) {
  return (template.spec.registration ?? []).find((r) => r.type === "CustomSigner" && r.customSigner?.signerName === signer)?.customSigner;
}

const conditionsOf = (csr: CertificateSigningRequest) => csr.status?.conditions ?? [];
// OCM: Denied wins over Approved.
export const isDenied = (csr: CertificateSigningRequest) => conditionsOf(csr).some((c) => c.type === CsrConditionType.Denied);
export const isApproved = (csr: CertificateSigningRequest) => !isDenied(csr) && conditionsOf(csr).some((c) => c.type === CsrConditionType.Approved);
// kube-controller-manager signs the kube-apiserver-client signer; every other one is the template's.
export const awaitsCustomSignature = (csr: CertificateSigningRequest) => !csr.status?.certificate && csr.spec.signerName !== KubeAPIServerClientSignerName;

async function approve(hub: KubeClient, csr: CertificateSigningRequest, now: Date): Promise<CertificateSigningRequest> {
  const approved = { type: CsrConditionType.Approved, status: "True", reason: CsrApproval.Reason, message: CsrApproval.AddonAgentMessage, lastUpdateTime: rfc3339(now) };
  return hub.update<CertificateSigningRequest>(CertificateSigningRequestResource, { ...csr, status: { ...csr.status, conditions: [...conditionsOf(csr), approved] } }, "approval");
}
