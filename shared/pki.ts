// Keys, certificate authorities, certificates and PKCS#10 requests, all EC P-256 as OCM's agents use.
// Reading a certificate needs none of @peculiar/x509 and lives in ./certificate.ts (re-exported here), so
// what only reads one does not load this library.
import { webcrypto, createPrivateKey, createPublicKey } from "node:crypto";
import "reflect-metadata"; // @peculiar/x509 resolves its algorithms through tsyringe, which needs it
import * as x509 from "@peculiar/x509";

export { certificateMatchesKey, isIssuedBy, readCertificate, type CertificateInfo } from "./certificate.ts";

type CryptoKey = webcrypto.CryptoKey;
const crypto = webcrypto;
x509.cryptoProvider.set(crypto);

const EC_KEY = { name: "ECDSA", namedCurve: "P-256" } as const;
const EC_SIGNING = { name: "ECDSA", hash: "SHA-256" } as const;

export type KeyPair = { privateKey: CryptoKey; publicKey: CryptoKey };
export type CertificateAuthority = { certPem: string; keyPem: string; key: CryptoKey; cert: x509.X509Certificate };
export type IssuedCertificate = { certPem: string; keyPem: string };
export type Subject = { commonName: string; organizations?: readonly string[] };

export async function generateKeyPair(): Promise<KeyPair> {
  return (await crypto.subtle.generateKey(EC_KEY, true, ["sign", "verify"])) as KeyPair;
}

export async function privateKeyToPem(key: CryptoKey): Promise<string> {
  return x509.PemConverter.encode(await crypto.subtle.exportKey("pkcs8", key), "PRIVATE KEY");
}

// The whole pair back from a saved private key (a CSR needs both halves).
export async function keyPairFromPem(pem: string): Promise<KeyPair> {
  const spki = createPublicKey(createPrivateKey(pem)).export({ type: "spki", format: "der" });
  return { privateKey: await privateKeyFromPem(pem), publicKey: await crypto.subtle.importKey("spki", spki, EC_KEY, true, ["verify"]) };
}

export async function publicKeyToPem(key: CryptoKey): Promise<string> {
  return x509.PemConverter.encode(await crypto.subtle.exportKey("spki", key), "PUBLIC KEY");
}

// Accepts PKCS#8 ("PRIVATE KEY") and SEC1 ("EC PRIVATE KEY", what Go's keyutil writes).
export async function privateKeyFromPem(pem: string): Promise<CryptoKey> {
  const pkcs8 = createPrivateKey(pem).export({ format: "der", type: "pkcs8" });
  return crypto.subtle.importKey("pkcs8", pkcs8, EC_KEY, true, ["sign"]);
}

// "CN=a,O=b,O=c": RFC 4514 wants commas and a few other characters escaped in values.
function distinguishedName({ commonName, organizations = [] }: Subject): string {
  const escape = (v: string) => v.replace(/([,+"\\<>;=#])/g, "\\$1");
  return [`CN=${escape(commonName)}`, ...organizations.map((o) => `O=${escape(o)}`)].join(", ");
}

function serialNumber(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[0] = bytes[0]! & 0x7f; // positive
  return Buffer.from(bytes).toString("hex");
}

export async function createCertificateAuthority(commonName: string, now = new Date()): Promise<CertificateAuthority> {
  const keys = await generateKeyPair();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serialNumber(),
    name: distinguishedName({ commonName }),
    notBefore: new Date(now.getTime() - 60_000),
    notAfter: new Date(now.getTime() + 10 * 365 * 86_400_000),
    signingAlgorithm: EC_SIGNING,
    keys,
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign | x509.KeyUsageFlags.digitalSignature, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { cert, certPem: cert.toString("pem"), key: keys.privateKey, keyPem: await privateKeyToPem(keys.privateKey) };
}

export type IssueOptions = {
  subject: Subject;
  usage: "client" | "server";
  hosts?: readonly string[]; // server certificates: DNS names and IP addresses
  notBefore?: Date;
  notAfter?: Date;
  publicKey?: CryptoKey; // sign a key we do not hold (a CSR's); otherwise a fresh pair is made
};

export async function issueCertificate(ca: CertificateAuthority, o: IssueOptions): Promise<IssuedCertificate & { cert: x509.X509Certificate }> {
  const keys = o.publicKey ? undefined : await generateKeyPair();
  const notBefore = o.notBefore ?? new Date(Date.now() - 60_000);
  const extensions: x509.Extension[] = [
    new x509.BasicConstraintsExtension(false, undefined, true),
    new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
    new x509.ExtendedKeyUsageExtension([o.usage === "client" ? x509.ExtendedKeyUsage.clientAuth : x509.ExtendedKeyUsage.serverAuth]),
    await x509.AuthorityKeyIdentifierExtension.create(ca.cert),
  ];
  if (o.hosts?.length) {
    const isIp = (h: string) => /^[\d.]+$/.test(h) || h.includes(":");
    extensions.push(new x509.SubjectAlternativeNameExtension(o.hosts.map((h) => ({ type: isIp(h) ? "ip" : "dns", value: h }))));
  }
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serialNumber(),
    subject: distinguishedName(o.subject),
    issuer: ca.cert.subject,
    notBefore,
    notAfter: o.notAfter ?? new Date(notBefore.getTime() + 365 * 86_400_000),
    signingAlgorithm: EC_SIGNING,
    publicKey: o.publicKey ?? keys!.publicKey,
    signingKey: ca.key,
    extensions,
  });
  return { cert, certPem: cert.toString("pem"), keyPem: keys ? await privateKeyToPem(keys.privateKey) : "" };
}

export async function createCertificateRequest(subject: Subject, keys: KeyPair): Promise<string> {
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({ name: distinguishedName(subject), keys, signingAlgorithm: EC_SIGNING });
  return csr.toString("pem");
}

export type ParsedRequest = { commonName: string; organizations: string[]; publicKey: CryptoKey; signatureValid: boolean };

// Reads a PKCS#10 request as Kubernetes' CSR API carries it (PEM text).
export async function parseCertificateRequest(pem: string): Promise<ParsedRequest> {
  const csr = new x509.Pkcs10CertificateRequest(pem);
  const values = (oid: string) => csr.subjectName.getField(oid);
  return {
    commonName: values("CN")[0] ?? "",
    organizations: values("O"),
    publicKey: await csr.publicKey.export(crypto),
    signatureValid: await csr.verify(crypto),
  };
}

// The first PEM block of a CSR's spec.request (base64 of PEM text), as Go's pem.Decode finds it: only
// that block counts, whatever follows.
export function firstPemBlock(base64Pem: string): { type: string; pem: string } | undefined {
  const text = Buffer.from(base64Pem, "base64").toString("utf8");
  const block = /-----BEGIN ([^-\r\n]+)-----\r?\n[\s\S]*?-----END \1-----/.exec(text);
  return block ? { type: block[1]!, pem: block[0] } : undefined;
}

export type RequestInfo = { blockType: string; commonName: string; organizations: string[]; signatureValid: boolean } | { unreadable: string };

// What an approver judges in a CSR's request: its first block's type and, when that is a request, its
// subject and whether its signature holds.
export async function readRequest(base64Pem: string): Promise<RequestInfo> {
  const block = firstPemBlock(base64Pem);
  if (!block) return { unreadable: "no PEM block" };
  if (block.type !== "CERTIFICATE REQUEST") return { blockType: block.type, commonName: "", organizations: [], signatureValid: false };
  try {
    const parsed = await parseCertificateRequest(block.pem);
    return { blockType: block.type, commonName: parsed.commonName, organizations: parsed.organizations, signatureValid: parsed.signatureValid };
  } catch (err) {
    return { unreadable: err instanceof Error ? err.message : String(err) };
  }
}
