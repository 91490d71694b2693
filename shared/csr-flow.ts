// The client-certificate request flow OCM's agents share (its CSR driver, §3.1, §3.3): a request name of
// generateName's shape chosen before the request exists, the private key kept in a create-only "pending"
// secret while the hub decides, the request's state read back as one judgement, and when to rotate.
import { createHash, randomBytes } from "node:crypto";
import "reflect-metadata"; // @peculiar/x509 resolves its algorithms through tsyringe, which needs it
import * as x509 from "@peculiar/x509";
import { CertificateSigningRequestResource } from "./api/kube.ts";
import { CsrConditionType, type CertificateSigningRequest } from "./api/certificates.ts";
import { CsrUsages } from "./api/registration.ts";
import type { KubeClient } from "./kube/client.ts";
import { isAlreadyExists } from "./kube/errors.ts";
import { certificateMatchesKey, generateKeyPair, keyPairFromPem, privateKeyToPem } from "./pki.ts"; // pki.ts also installs @peculiar/x509's crypto provider

// What a pending secret holds besides whatever its agent adds.
export const PendingKey = { TlsKey: "tls.key", CsrName: "csr-name" } as const;

// The API server's generateName suffix: same alphabet, same length.
export const generatedNameSuffix = () => Array.from(randomBytes(5), (b) => "bcdfghjklmnpqrstvwxz2456789"[b % 27]).join("");

export const encodeSecretData = (d: Readonly<Record<string, string>>) => Object.fromEntries(Object.entries(d).map(([k, v]) => [k, Buffer.from(v).toString("base64")]));

export const newPrivateKeyPem = async () => privateKeyToPem((await generateKeyPair()).privateKey);

// pkix.Name as OCM's agents fill it: CN, O and OU.
export type CertificateSubject = { commonName: string; organizations: readonly string[]; organizationalUnits: readonly string[] };

// RFC 4514: commas and a few other characters are escaped in values.
function distinguishedName(s: CertificateSubject): string {
  const escape = (v: string) => v.replace(/([,+"\\<>;=#])/g, "\\$1");
  return [`CN=${escape(s.commonName)}`, ...s.organizations.map((o) => `O=${escape(o)}`), ...s.organizationalUnits.map((u) => `OU=${escape(u)}`)].join(", ");
}

// client-go's certutil.MakeCSR: the subject and DNS names, signed with the key; PEM text.
export async function certificateRequest(o: { subject: CertificateSubject; dnsNames?: readonly string[]; keyPem: string }): Promise<string> {
  const extensions = o.dnsNames?.length ? [new x509.SubjectAlternativeNameExtension(o.dnsNames.map((value) => ({ type: "dns" as const, value })))] : [];
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({ name: distinguishedName(o.subject), keys: await keyPairFromPem(o.keyPem), signingAlgorithm: { name: "ECDSA", hash: "SHA-256" }, extensions });
  return csr.toString("pem");
}

export type IssuedCertificate = CertificateSubject & { notBefore: Date; notAfter: Date };

export function readIssuedCertificate(pem: string): IssuedCertificate {
  const cert = new x509.X509Certificate(pem);
  const field = (f: string) => cert.subjectName.getField(f);
  return { commonName: field("CN")[0] ?? "", organizations: field("O"), organizationalUnits: field("OU"), notBefore: cert.notBefore, notAfter: cert.notAfter };
}

// OCM's certMatchSubject: CN exact, O and OU as sets.
export function matchesSubject(cert: CertificateSubject, want: CertificateSubject): boolean {
  const sameSet = (a: readonly string[], b: readonly string[]) => new Set(a).size === new Set(b).size && a.every((x) => b.includes(x));
  return cert.commonName === want.commonName && sameSet(cert.organizations, want.organizations) && sameSet(cert.organizationalUnits, want.organizationalUnits);
}

// When the certificate falls due for rotation: the same per-certificate draw in [20 %, 25 %) of the life
// remaining as shouldRotate (hub-credentials.ts), so a recheck lands on the exact moment.
export function rotationDueAt(cert: { notBefore: Date; notAfter: Date }, certPem: string): Date {
  const total = cert.notAfter.getTime() - cert.notBefore.getTime();
  const spread = createHash("sha256").update(certPem).digest().readUInt16BE(0) / 0x10000;
  return new Date(cert.notAfter.getTime() - total * (0.2 + 0.05 * spread));
}

export type CsrJudgement =
  | { state: "missing" }
  | { state: "denied" }
  | { state: "waiting" } // not yet approved, or approved and not yet signed
  | { state: "mismatched" } // issued for another key than the one we hold
  | { state: "issued"; certPem: string };

// OCM reads Denied (or Failed) before Approved, and takes a certificate only once approved.
export function judgeCsr(csr: CertificateSigningRequest | undefined, keyPem: string): CsrJudgement {
  if (!csr) return { state: "missing" };
  const conditions = csr.status?.conditions ?? [];
  if (conditions.some((c) => c.type === CsrConditionType.Denied || c.type === CsrConditionType.Failed)) return { state: "denied" };
  const approved = conditions.some((c) => c.type === CsrConditionType.Approved && c.status === "True");
  if (!approved || !csr.status?.certificate) return { state: "waiting" };
  const certPem = Buffer.from(csr.status.certificate, "base64").toString();
  return certificateMatchesKey(certPem, keyPem) ? { state: "issued", certPem } : { state: "mismatched" };
}

export type CsrRequest = { name: string; labels: Record<string, string>; requestPem: string; signerName: string; expirationSeconds?: number };

// Idempotent: the name is ours, so finding it already there means an earlier invocation created it.
export async function createCsrOnce(hub: KubeClient, r: CsrRequest): Promise<void> {
  try {
    await hub.create<CertificateSigningRequest>(CertificateSigningRequestResource, {
      metadata: { name: r.name, labels: r.labels },
      spec: {
        request: Buffer.from(r.requestPem).toString("base64"),
        signerName: r.signerName,
        usages: [...CsrUsages],
        ...(r.expirationSeconds ? { expirationSeconds: r.expirationSeconds } : {}),
      },
    });
  } catch (err) {
    if (!isAlreadyExists(err)) throw err;
  }
}

// OCM's condition message when a rotation fails ("rotated" is OCM's spelling).
export const rotationFailedMessage = (why: string) => `Failed to rotated client certificate ${why}`;
