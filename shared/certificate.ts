// Reading certificates with Node's own X.509 support. Apart from ./pki.ts, which creates keys, certificates
// and requests with @peculiar/x509: a process that only reads certificates (the heartbeat sidecar) then
// loads none of that library, its ASN.1 schemas or its dependency injection.
import { X509Certificate, createPrivateKey, createPublicKey } from "node:crypto";

export type CertificateInfo = { commonName: string; organizations: string[]; notBefore: Date; notAfter: Date; issuer: string };

// Node prints a name one attribute a line ("CN=a\nO=b"), values escaped as RFC 4514 says (a comma as
// "\,", a control character as "\0A"), so a value never holds a line break.
function nameFields(name: string): { key: string; value: string }[] {
  const unescape = (v: string) => v.replace(/\\([0-9A-Fa-f]{2}|.)/g, (_, e: string) => (e.length === 2 ? String.fromCharCode(parseInt(e, 16)) : e));
  return name
    .split("\n")
    .filter((line) => line.includes("="))
    .map((line) => ({ key: line.slice(0, line.indexOf("=")), value: unescape(line.slice(line.indexOf("=") + 1)) }));
}

export function readCertificate(pem: string): CertificateInfo {
  const cert = new X509Certificate(pem);
  const subject = nameFields(cert.subject);
  return {
    commonName: subject.find((f) => f.key === "CN")?.value ?? "",
    organizations: subject.filter((f) => f.key === "O").map((f) => f.value),
    notBefore: cert.validFromDate,
    notAfter: cert.validToDate,
    issuer: nameFields(cert.issuer)
      .map((f) => `${f.key}=${f.value}`)
      .join(", "),
  };
}

// True when certPem was signed by caPem (Node's own verifier, independent of ./pki.ts's generator).
export function isIssuedBy(certPem: string, caPem: string): boolean {
  const cert = new X509Certificate(certPem);
  const ca = new X509Certificate(caPem);
  return cert.checkIssued(ca) && cert.verify(ca.publicKey);
}

// True when the certificate carries the public half of this private key (an issued CSR is ours).
export function certificateMatchesKey(certPem: string, keyPem: string): boolean {
  const fromCert = new X509Certificate(certPem).publicKey.export({ type: "spki", format: "der" });
  const fromKey = createPublicKey(createPrivateKey(keyPem)).export({ type: "spki", format: "der" });
  return Buffer.compare(fromCert, fromKey) === 0;
}
