// The spoke's credentials for the hub: the bootstrap kubeconfig, the hub kubeconfig secret OCM's agents
// write (§3.4), whether that secret is still good (OCM's IsHubKubeConfigValid, §3.5), and clients from them.
import { createHash } from "node:crypto";
import { parse, stringify } from "yaml";
import { HubKubeconfigLayout, HubSecretKey, SubjectPrefix, agentUser } from "./api/registration.ts";
import { KubeClient, type KubeObject } from "./kube/client.ts";
import { classifyError, missingPermission } from "./kube/errors.ts";
import { SecretResource } from "./api/kube.ts";
import { readCertificate, type CertificateInfo } from "./certificate.ts"; // not ./pki.ts: the heartbeat bundles this file

export type Secret = KubeObject & { type?: string; data?: Record<string, string> };
import { after } from "./timers.ts";

type KubeconfigDoc = {
  clusters?: { name: string; cluster: Record<string, unknown> }[];
  users?: { name: string; user: Record<string, unknown> }[];
  contexts?: { name: string; context: { cluster: string; user: string; namespace?: string } }[];
  "current-context"?: string;
};

// The part of a kubeconfig's current context that identifies the hub (what §3.5 compares).
export type HubEndpoint = { clusterName: string; server: string; caData?: string; caFile?: string; proxyUrl?: string };

export const secretText = (s: Secret | undefined, key: string): string | undefined => {
  const v = s?.data?.[key];
  return v === undefined ? undefined : Buffer.from(v, "base64").toString();
};

export function hubEndpoint(kubeconfigText: string): HubEndpoint {
  const doc = parse(kubeconfigText) as KubeconfigDoc;
  const ctx = doc.contexts?.find((c) => c.name === doc["current-context"]) ?? doc.contexts?.[0];
  const entry = doc.clusters?.find((c) => c.name === (ctx?.context.cluster ?? doc.clusters?.[0]?.name));
  if (!entry || typeof entry.cluster.server !== "string") throw new Error("kubeconfig has no current cluster with a server");
  const c = entry.cluster;
  return {
    clusterName: entry.name,
    server: c.server as string,
    caData: c["certificate-authority-data"] as string | undefined,
    caFile: c["certificate-authority"] as string | undefined,
    proxyUrl: c["proxy-url"] as string | undefined,
  };
}

// The server a kubeconfig's current context names; undefined for one that is not readable.
export function hubServerOf(kubeconfigText: string): string | undefined {
  try {
    return hubEndpoint(kubeconfigText).server;
  } catch {
    return undefined;
  }
}

// The hub kubeconfig of §3.4: the bootstrap cluster entry kept as it is, cert auth from tls.crt/tls.key.
export function hubKubeconfig(bootstrap: HubEndpoint): string {
  const cluster: Record<string, unknown> = { server: bootstrap.server, "insecure-skip-tls-verify": false };
  if (bootstrap.caData) cluster["certificate-authority-data"] = bootstrap.caData;
  if (bootstrap.caFile) cluster["certificate-authority"] = bootstrap.caFile;
  if (bootstrap.proxyUrl) cluster["proxy-url"] = bootstrap.proxyUrl;
  const { context, user, namespace } = HubKubeconfigLayout;
  return stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: bootstrap.clusterName, cluster }],
    contexts: [{ name: context, context: { cluster: bootstrap.clusterName, user, namespace } }],
    "current-context": context,
    users: [{ name: user, user: { "client-certificate": HubSecretKey.TlsCert, "client-key": HubSecretKey.TlsKey } }],
  });
}

// A client from a kubeconfig whose file references (tls.crt, tls.key, a CA file) are keys of a secret.
export function clientWithSecretFiles(kubeconfigText: string, files: Secret): KubeClient {
  const doc = parse(kubeconfigText) as KubeconfigDoc;
  const inline = (o: Record<string, unknown>, fileKey: string, dataKey: string) => {
    const ref = o[fileKey];
    if (typeof ref !== "string") return;
    const text = secretText(files, ref.split("/").pop()!);
    if (text === undefined) throw new Error(`kubeconfig refers to ${ref}, which the secret does not hold`);
    o[dataKey] = Buffer.from(text).toString("base64");
    delete o[fileKey];
  };
  for (const u of doc.users ?? []) {
    inline(u.user, "client-certificate", "client-certificate-data");
    inline(u.user, "client-key", "client-key-data");
  }
  for (const c of doc.clusters ?? []) if (typeof c.cluster["certificate-authority"] === "string" && !c.cluster["certificate-authority-data"]) inline(c.cluster, "certificate-authority", "certificate-authority-data");
  return KubeClient.fromKubeconfig(stringify(doc));
}

export type HubSecretJudgement = { valid: true; cert: CertificateInfo } | { valid: false; reason: string; expired?: true };

// OCM's IsHubKubeConfigValid: the secret's kubeconfig points at the same hub as the bootstrap one
// (server, proxy, CA and the cluster entry's name), and its certificate is ours and unexpired.
export function judgeHubSecret(o: { hubSecret?: Secret; bootstrap: HubEndpoint; clusterName: string; agentName?: string; now: Date }): HubSecretJudgement {
  const kubeconfig = secretText(o.hubSecret, HubSecretKey.Kubeconfig);
  if (!kubeconfig) return { valid: false, reason: "no hub kubeconfig yet" };
  let hub: HubEndpoint;
  try {
    hub = hubEndpoint(kubeconfig);
  } catch (err) {
    return { valid: false, reason: `hub kubeconfig unreadable: ${(err as Error).message}` };
  }
  for (const field of ["clusterName", "server", "proxyUrl", "caFile", "caData"] as const) {
    if ((hub[field] ?? "") !== (o.bootstrap[field] ?? "")) return { valid: false, reason: `hub kubeconfig ${field} differs from the bootstrap kubeconfig` };
  }
  if (!secretText(o.hubSecret, HubSecretKey.TlsKey)) return { valid: false, reason: "no tls.key" };
  const certPem = secretText(o.hubSecret, HubSecretKey.TlsCert);
  if (!certPem) return { valid: false, reason: "no tls.crt" };
  let cert: CertificateInfo;
  try {
    cert = readCertificate(certPem);
  } catch (err) {
    return { valid: false, reason: `tls.crt unreadable: ${(err as Error).message}` };
  }
  const agentName = o.agentName ?? secretText(o.hubSecret, HubSecretKey.AgentName);
  if (agentName && cert.commonName !== agentUser(o.clusterName, agentName)) return { valid: false, reason: `certificate is for ${cert.commonName}` };
  if (!agentName && !cert.commonName.startsWith(agentUser(o.clusterName, ""))) return { valid: false, reason: `certificate is for ${cert.commonName}` };
  if (o.now.getTime() >= cert.notAfter.getTime()) return { valid: false, reason: "the client certificate has expired", expired: true };
  return { valid: true, cert };
}

// OCM rotates when the remaining life falls to a random 20-25 % of the whole. A function has no memory
// for a random draw, so the fraction comes from the certificate itself: stable per certificate,
// spread across a fleet.
export function shouldRotate(cert: CertificateInfo, now: Date, certPem: string): boolean {
  const total = cert.notAfter.getTime() - cert.notBefore.getTime();
  const remaining = cert.notAfter.getTime() - now.getTime();
  const spread = createHash("sha256").update(certPem).digest().readUInt16BE(0) / 0x10000;
  return remaining <= total * (0.2 + 0.05 * spread);
}

export type AgentSecrets = { agentNamespace: string; bootstrapSecret: string; hubSecret: string; clusterName: string };

// The hub as the cluster's own identity, for spoke functions that run after bootstrap. `reason` says
// why there is none yet (no bootstrap kubeconfig, not bootstrapped, expired certificate...). The client
// is shared and stays open: callers never close it.
export async function bootstrappedHubClient(spoke: KubeClient, s: AgentSecrets, now: Date): Promise<{ hub: KubeClient } | { reason: string }> {
  const [bootstrapSecret, hubSecret] = await Promise.all([
    spoke.get<Secret>(SecretResource, s.bootstrapSecret, s.agentNamespace),
    spoke.get<Secret>(SecretResource, s.hubSecret, s.agentNamespace),
  ]);
  const cached = hubClients.get(spoke)?.get(cacheKey(s));
  const versions = versionsOf(bootstrapSecret, hubSecret);
  if (cached && cached.versions === versions && now.getTime() < cached.notAfter) return { hub: cached.hub };
  const bootstrapText = secretText(bootstrapSecret, HubSecretKey.Kubeconfig);
  if (!bootstrapText) return { reason: "no bootstrap kubeconfig" };
  const judged = judgeHubSecret({ hubSecret, bootstrap: hubEndpoint(bootstrapText), clusterName: s.clusterName, now });
  if (!judged.valid) return { reason: judged.reason };
  const hub = clientWithSecretFiles(secretText(hubSecret, HubSecretKey.Kubeconfig)!, hubSecret!);
  remember(spoke, s, { versions, hub, notAfter: judged.cert.notAfter.getTime() });
  return { hub };
}

// One client per agent identity, kept while both secrets are the versions it was judged and built from:
// parsing a kubeconfig and a certificate, and a TLS handshake on every reconcile, would cost more than
// the reconcile. A new secret version (rotation, re-bootstrap) is judged afresh; the replaced client is
// closed a little later, once the calls already made with it have ended.
type CachedHub = { versions: string; hub: KubeClient; notAfter: number };
const hubClients = new WeakMap<KubeClient, Map<string, CachedHub>>();
const REPLACED_CLIENT_CLOSE_MS = 60_000;
const cacheKey = (s: AgentSecrets) => JSON.stringify([s.agentNamespace, s.bootstrapSecret, s.hubSecret, s.clusterName]);
const versionsOf = (...secrets: (Secret | undefined)[]) => secrets.map((x) => `${x?.metadata.uid ?? ""}@${x?.metadata.resourceVersion ?? ""}`).join(",");

function remember(spoke: KubeClient, s: AgentSecrets, entry: CachedHub): void {
  let byIdentity = hubClients.get(spoke);
  if (!byIdentity) hubClients.set(spoke, (byIdentity = new Map()));
  const replaced = byIdentity.get(cacheKey(s));
  byIdentity.set(cacheKey(s), entry);
  if (replaced) after(REPLACED_CLIENT_CLOSE_MS, () => replaced.hub.close(), { unref: true });
}

// The hub as the cluster's own identity for one use. Until the agent is bootstrapped a spoke function
// has nothing to do as that identity: `notYet` answers instead, with the reason. So too while the hub
// refuses that identity what the function needs (acceptance's grants not landed yet, or narrowed by a
// deny): no wait and no retry on the 403. What wakes the function again is the relay's watch under the
// same identity: once the grant lands its watches list, and the ManagedCluster's HubAccepted=True,
// written only once the authorizer grants the agents everything acceptance bound, reaches it.
export async function withAgentHub<T>(spoke: KubeClient, s: AgentSecrets, now: Date, use: (hub: KubeClient) => Promise<T>, notYet: (reason: string) => T): Promise<T> {
  const got = await bootstrappedHubClient(spoke, s, now);
  if (!("hub" in got)) return notYet(got.reason);
  try {
    return await use(got.hub);
  } catch (err) {
    const refused = agentRefusal(err);
    if (refused === undefined) throw err;
    return notYet(refused);
  }
}

// Why the hub refused the cluster's own identity, when every failure in `err` is such a refusal (a 403
// from the authorizer for one of OCM's cluster users); undefined for anything else, which the caller
// throws as it is (a function's own identity refused on the spoke is an RBAC defect, never a wait).
export function agentRefusal(err: unknown): string | undefined {
  const members = err instanceof AggregateError ? err.errors : [err];
  const refusals = members.map((e) => (classifyError(e) === "forbidden" ? missingPermission(e) : undefined));
  if (refusals.length === 0 || refusals.some((m) => !m?.user?.startsWith(SubjectPrefix))) return undefined;
  return `the hub does not grant ${refusals[0]!.user} ${refusals.map((m) => `${m!.verb} ${m!.resource}${m!.namespace ? ` in ${m!.namespace}` : ""}`).join(", ")} (yet)`;
}
