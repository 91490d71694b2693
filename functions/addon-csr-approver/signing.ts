// Signing an add-on CSR's PKCS#10 request with a custom signer's CA as addon-framework's
// signer does: the request's subject and SANs, digital signature and key encipherment, server and
// client auth, valid from now for the given duration but never past the CA. The CA key may be EC (as
// this project's PKI makes them) or RSA (what OCM's signer accepts, PKCS#1).
import { createPrivateKey, webcrypto } from "node:crypto";
// First: shared/pki.ts loads reflect-metadata, which @peculiar/x509 needs before it loads, and installs
// the crypto provider it uses.
import { firstPemBlock } from "../../shared/pki.ts";
import * as x509 from "@peculiar/x509";

export type SigningCa = { certPem: string; keyPem: string; now: Date; durationMs: number };

const curves: Record<string, string> = { prime256v1: "P-256", secp384r1: "P-384", secp521r1: "P-521" };

// Returns the issued certificate as PEM.
export async function signRequest(base64Pem: string, ca: SigningCa): Promise<string> {
  const block = firstPemBlock(base64Pem);
  if (block?.type !== "CERTIFICATE REQUEST") throw new Error("PEM block type must be CERTIFICATE REQUEST");
  const request = new x509.Pkcs10CertificateRequest(block.pem);
  const caCert = new x509.X509Certificate(ca.certPem);
  if (caCert.notAfter.getTime() <= ca.now.getTime()) throw new Error(`signer has expired, expired time: ${caCert.notAfter.toISOString()}`);
  const notAfter = new Date(Math.min(ca.now.getTime() + ca.durationMs, caCert.notAfter.getTime()));
  const { key, algorithm } = await importSigningKey(ca.keyPem);
  const san = request.extensions.find((e) => e.type === "2.5.29.17" /* subjectAltName */);
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serialNumber(),
    subject: request.subjectName,
    issuer: caCert.subjectName,
    notBefore: ca.now,
    notAfter,
    publicKey: request.publicKey,
    signingKey: key,
    signingAlgorithm: algorithm,
    extensions: [
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth]),
      await x509.AuthorityKeyIdentifierExtension.create(caCert),
      ...(san ? [san] : []),
    ],
  });
  return cert.toString("pem");
}

async function importSigningKey(pem: string): Promise<{ key: webcrypto.CryptoKey; algorithm: webcrypto.Algorithm | webcrypto.EcdsaParams }> {
  const key = createPrivateKey(pem);
  const pkcs8 = key.export({ format: "der", type: "pkcs8" });
  if (key.asymmetricKeyType === "ec") {
    const namedCurve = curves[key.asymmetricKeyDetails?.namedCurve ?? ""];
    if (!namedCurve) throw new Error(`unsupported CA key curve ${key.asymmetricKeyDetails?.namedCurve}`);
    return { key: await webcrypto.subtle.importKey("pkcs8", pkcs8, { name: "ECDSA", namedCurve }, false, ["sign"]), algorithm: { name: "ECDSA", hash: "SHA-256" } as webcrypto.EcdsaParams };
  }
  if (key.asymmetricKeyType === "rsa") {
    return { key: await webcrypto.subtle.importKey("pkcs8", pkcs8, { name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" }, false, ["sign"]), algorithm: { name: "RSASSA-PKCS1-v1_5" } };
  }
  throw new Error(`unsupported CA key type ${key.asymmetricKeyType}`);
}

function serialNumber(): string {
  const bytes = webcrypto.getRandomValues(new Uint8Array(16));
  bytes[0] = bytes[0]! & 0x7f; // positive
  return Buffer.from(bytes).toString("hex");
}
