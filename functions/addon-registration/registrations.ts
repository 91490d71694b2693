// What an add-on's registrations ask of this cluster (OCM §3.3, §5.5): per registration, the secret that
// holds its credentials and where, the subject its certificate must carry, and the pending secret a
// request for it waits in; and whether a secret already there still serves. Pure: values in, values out.
import { createHash } from "node:crypto";
import { KubeApiServerClientSigner, type ManagedClusterAddOnV1alpha1 } from "../../shared/api/addon.ts";
import { installNamespaceOf } from "../../shared/addon-install-namespace.ts";
import { addonAgentUser, addonGroups, customSignedSecretName, hubKubeconfigSecretName } from "../../shared/api/addon-strings.ts";
import { HubSecretKey } from "../../shared/api/registration.ts";
import { matchesSubject, readIssuedCertificate, type CertificateSubject, type IssuedCertificate } from "../../shared/csr-flow.ts";
import { secretText, shouldRotate, type Secret } from "../../shared/hub-credentials.ts";
import { readCertificate } from "../../shared/pki.ts";

export type Credential = {
  type: "kubeClient" | "customSigner";
  signerName: string;
  secretName: string;
  namespace: string; // the add-on's install namespace
  subject: CertificateSubject;
  dnsNames: string[];
  // sha256 over what the request is made of: a pending request for another hash is abandoned
  hash: string;
  pendingName: string; // in the agent namespace
};

export const secretNameOf = (addon: string, signerName: string) => (signerName === KubeApiServerClientSigner ? hubKubeconfigSecretName(addon) : customSignedSecretName(addon, signerName));

// The key and request name of a registration's pending request live here until the hub decides.
export const pendingSecretName = (addon: string, hash: string) => `addon-${addon}-${hash.slice(0, 12)}-pending-csr`;

// One credential per registration with a signer (OCM: a customSigner needs a signerName). The subject
// defaults as OCM's agent defaults it: CN ...:addon:<a>:agent:<the cluster agent's name>, and for a
// kubeClient O system:open-cluster-management:cluster:<c>:addon:<a>. Two registrations of one signer
// would write one secret; the first wins.
export function credentialsOf(mca: ManagedClusterAddOnV1alpha1, o: { clusterName: string; agentName: string }): Credential[] {
  const addon = mca.metadata.name;
  const namespace = installNamespaceOf(mca);
  const seen = new Set<string>();
  const out: Credential[] = [];
  for (const r of mca.status?.registrations ?? []) {
    if (!r.signerName) continue;
    const type = r.signerName === KubeApiServerClientSigner ? "kubeClient" : "customSigner";
    const secretName = secretNameOf(addon, r.signerName);
    if (seen.has(secretName)) continue;
    seen.add(secretName);
    const subject: CertificateSubject = {
      commonName: r.subject?.user || addonAgentUser(o.clusterName, addon, o.agentName),
      organizations: r.subject?.groups?.length ? r.subject.groups : type === "kubeClient" ? [addonGroups(o.clusterName, addon)[0]!] : [],
      organizationalUnits: r.subject?.organizationUnit ?? [],
    };
    const hash = createHash("sha256").update(JSON.stringify([o.clusterName, addon, r.signerName, subject, namespace])).digest("hex");
    out.push({ type, signerName: r.signerName, secretName, namespace, subject, dnsNames: [`${addon}.addon.open-cluster-management.io`], hash, pendingName: pendingSecretName(addon, hash) });
  }
  return out;
}

// The keys OCM adds next to tls.crt and tls.key: cluster-name, and for a kubeClient the kubeconfig.
export function additionalData(c: Credential, o: { clusterName: string; kubeconfig: string }): Record<string, string> {
  return { [HubSecretKey.ClusterName]: o.clusterName, ...(c.type === "kubeClient" ? { [HubSecretKey.Kubeconfig]: o.kubeconfig } : {}) };
}

export type SecretJudgement = { valid: true; cert: IssuedCertificate; certPem: string } | { valid: false; reason: string };

// OCM's shouldCreateCSR: a valid certificate for the subject, the additional data as it should be, and
// more than the certificate's own 20-25 % of its life left.
export function judgeSecret(secret: Secret | undefined, c: Credential, additional: Record<string, string>, now: Date): SecretJudgement {
  if (!secret) return { valid: false, reason: "no secret yet" };
  if (!secretText(secret, HubSecretKey.TlsKey)) return { valid: false, reason: "no tls.key" };
  const certPem = secretText(secret, HubSecretKey.TlsCert);
  if (!certPem) return { valid: false, reason: "no tls.crt" };
  let cert: IssuedCertificate;
  try {
    cert = readIssuedCertificate(certPem);
  } catch (err) {
    return { valid: false, reason: `tls.crt unreadable: ${(err as Error).message}` };
  }
  if (now.getTime() >= cert.notAfter.getTime()) return { valid: false, reason: "the certificate has expired" };
  if (!matchesSubject(cert, c.subject)) return { valid: false, reason: `the certificate is for ${cert.commonName}, not the registration's subject` };
  for (const [k, v] of Object.entries(additional)) if (secretText(secret, k) !== v) return { valid: false, reason: `${k} differs` };
  if (shouldRotate(readCertificate(certPem), now, certPem)) return { valid: false, reason: "the certificate is due for rotation" };
  return { valid: true, cert, certPem };
}
