// The spoke agent's registration (OCM §3.1, §3.4, §3.5, §5.1): with the bootstrap kubeconfig, create
// the ManagedCluster and request a client certificate; on issuance write hub-kubeconfig-secret; later
// rotate through the hub identity; start over when the bootstrap kubeconfig changes or the cert expires.
import { randomBytes } from "node:crypto";
import { z } from "zod";
import { SpokeAgentSettingsSchema, managedClusterOf } from "../../shared/settings.ts";
import { asKeyValues, asList, asNumber, fromEnv } from "../../shared/env-settings.ts";
import { ManagedClusterResource, ManagedClusterConditionType, ClusterLabel, AgentAnnotationPrefix, type ManagedCluster } from "../../shared/api/cluster.ts";
import { CertificateSigningRequestResource, SecretResource, KubeAPIServerClientSignerName } from "../../shared/api/kube.ts";
import {
  HubSecretKey,
  AddonNameLabel,
  CertificateRotatedReason,
  ManagedClustersGroup,
  MaxOutstandingCsrs,
  TooManyCsrsMessage,
  agentUser,
  clusterGroup,
  rotatedMessage,
} from "../../shared/api/registration.ts";
import { createOrUpdate, patchStatusIfChanged } from "../../shared/apply.ts";
import { PendingKey, certificateRequest, createCsrOnce, encodeSecretData, generatedNameSuffix, judgeCsr, newPrivateKeyPem, rotationDueAt, rotationFailedMessage } from "../../shared/csr-flow.ts";
import type { CertificateSigningRequest } from "../../shared/api/certificates.ts";
import { setCondition, type NewCondition } from "../../shared/conditions.ts";
import type { ObjectEvent } from "../../shared/events.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import { defineFunction } from "../../shared/sdk.ts";
import { clientWithSecretFiles, hubEndpoint, hubKubeconfig, judgeHubSecret, secretText, shouldRotate, type HubEndpoint, type Secret } from "../../shared/hub-credentials.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { classifyError, isAlreadyExists } from "../../shared/kube/errors.ts";
import { readCertificate } from "../../shared/pki.ts";
import { labelsQuery } from "../../shared/selector-query.ts";
import { keepOrMoveHub } from "./hubs.ts";

// Holds the private key (and the name of the CSR it went into) while the hub decides: a function
// remembers nothing, and OCM's secret layout must not change, so it has a secret of its own.
export const pendingSecretName = (c: { hubSecret: string }) => `${c.hubSecret}-pending-csr`;

export const ConfigSchema = SpokeAgentSettingsSchema.extend({
  agentName: fromEnv("AGENT_ID", z.string().min(1).optional()),
  externalServerUrls: fromEnv("SPOKE_EXTERNAL_SERVER_URLS", z.array(z.url()).default([]), asList),
  clusterAnnotations: fromEnv("CLUSTER_ANNOTATIONS", z.record(z.string(), z.string()).default({}), asKeyValues),
  clientCertExpirationSeconds: fromEnv("CLIENT_CERT_EXPIRATION_SECONDS", z.number().int().min(3600).optional(), asNumber),
  // spec.leaseDurationSeconds of the ManagedCluster it creates (OCM's CRD default is 60)
  leaseDurationSeconds: fromEnv("CLUSTER_LEASE_DURATION_SECONDS", z.number().int().nonnegative().default(60), asNumber),
  // how long to wait before looking at a pending CSR again when no event arrives
  pendingRecheckMs: z.number().int().positive().default(5_000),
  // Multiple hubs (./hubs.ts): the Secrets in the agent namespace holding the bootstrap kubeconfigs, in
  // the order they are tried; none, or at least two, as OCM's --bootstrap-kubeconfigs
  bootstrapKubeconfigSecrets: fromEnv("BOOTSTRAP_KUBECONFIG_SECRETS", z.array(z.string().min(1)).default([]), asList),
  // how long the hub may leave the cluster's lease unrenewed, or not answer, before the agent moves on
  hubConnectionTimeoutSeconds: fromEnv("HUB_CONNECTION_TIMEOUT_SECONDS", z.number().int().positive().default(600), asNumber),
  hubCheckMs: z.number().int().positive().default(60_000),
}).superRefine((c, ctx) => {
  const path = ["bootstrapKubeconfigSecrets"];
  if (c.bootstrapKubeconfigSecrets.length === 1) ctx.addIssue({ code: "custom", path, message: "expect at least 2 bootstrap kubeconfigs" });
  for (const own of [c.bootstrapSecret, c.hubSecret, pendingSecretName(c)]) {
    if (c.bootstrapKubeconfigSecrets.includes(own)) ctx.addIssue({ code: "custom", path, message: `${own} is one of the agent's own secrets, not a bootstrap kubeconfig of the list` });
  }
});
export type Config = z.infer<typeof ConfigSchema>;


// One key per agent: its cluster. The agent's own secrets (Reference mode: no secret data travels) and
// the CSRs of this cluster on the hub, whose issuance is an update, wake it; so does every resync tick.
export default defineFunction({
  name: "spoke-registration",
  config: ConfigSchema,
  watches: (c) => [
    { cluster: c.managementCluster, resource: SecretResource, namespace: c.agentNamespace, mode: "Reference", keys: (e) => (ownSecrets(c).includes(e.ref.name) ? [agentKey(c)] : { skip: `not this agent's secret: ${e.ref.name}` }) },
    { cluster: c.hubCluster, resource: CertificateSigningRequestResource, labelSelector: `${ClusterLabel.ClusterName}=${c.clusterName}`, verbs: ["update"], keys: (e) => csrKeys(c, e) },
  ],
  resyncSeconds: 60,
  // the agent's key whatever cluster the tick names: it is the only thing this function reconciles
  // one tick per interval: the relay ticks once for each cluster it watches (the hub, the management
  // cluster, in Hosted mode the managed one too), and this key is the same whichever it names
  resync: (io, tick) => (tick.cluster && tick.cluster !== io.config.managementCluster ? { skip: `tick for cluster ${tick.cluster}` } : [agentKey(io.config)]),
  // spoke-registration on the spoke: the agent's secrets in its namespace, nothing else. Its hub access
  // is only what the hub grants the bootstrap identity and, after acceptance, the cluster's own identity.
  writes: (c) => [
    { cluster: c.managementCluster, namespace: c.agentNamespace, why: "the agent's secrets: pending CSR, hub kubeconfig", apiGroups: [""], resources: ["secrets"], verbs: ["create", "update", "patch", "delete"] },
  ],
  reconcile,
});

const agentKey = (c: Config): Key => ({ cluster: c.managementCluster, name: c.clusterName });
const ownSecrets = (c: Config) => [c.bootstrapSecret, c.hubSecret, pendingSecretName(c), ...c.bootstrapKubeconfigSecrets];

// The label selector is the source's; the add-on label is not, so add-on CSRs are skipped here.
function csrKeys(c: Config, e: ObjectEvent): Key[] | { skip: string } {
  const labels = (e.object?.metadata as { labels?: Record<string, string> } | undefined)?.labels;
  if (!e.object || (labels?.[ClusterLabel.ClusterName] === c.clusterName && !labels[AddonNameLabel])) return [agentKey(c)];
  return { skip: `not this agent's CSR: ${e.ref.name}` };
}

export async function reconcile(io: Io<Config>, _key: Key): Promise<Outcome> {
  const c = io.config;
  const now = io.clock.now();
  const spoke = io.cluster(c.managementCluster);
  const bootstrapSecret = await spoke.get<Secret>(SecretResource, c.bootstrapSecret, c.agentNamespace);
  // Pending before the hub secret: an issuance writes the hub secret, then deletes the pending one, so
  // in this order a concurrent invocation sees one of the two and never neither.
  const pending = await spoke.get<Secret>(SecretResource, pendingSecretName(c), c.agentNamespace);
  const hubSecret = await spoke.get<Secret>(SecretResource, c.hubSecret, c.agentNamespace);
  if (c.bootstrapKubeconfigSecrets.length > 0) {
    const moved = await keepOrMoveHub(io, spoke, now, { active: bootstrapSecret, hubSecret, pendingSecret: pendingSecretName(c) });
    if (moved) return moved;
  }
  const bootstrapText = secretText(bootstrapSecret, HubSecretKey.Kubeconfig);
  if (!bootstrapText) {
    io.log.info({ secret: c.bootstrapSecret }, "waiting: no bootstrap kubeconfig");
    return done;
  }
  const bootstrap = hubEndpoint(bootstrapText);
  const pendingAgentName = secretText(pending, HubSecretKey.AgentName);
  const agentName = c.agentName ?? secretText(hubSecret, HubSecretKey.AgentName) ?? pendingAgentName ?? randomBytes(3).toString("hex").slice(0, 5);
  const judged = judgeHubSecret({ hubSecret, bootstrap, clusterName: c.clusterName, agentName, now });

  // Bootstrapped: talk to the hub as the cluster's own identity. Otherwise with the bootstrap one.
  const hub = judged.valid ? clientWithSecretFiles(secretText(hubSecret, HubSecretKey.Kubeconfig)!, hubSecret!) : KubeClient.fromKubeconfig(bootstrapText);
  const r: Registration = { io, c, now, spoke, hub, bootstrap, agentName, bootstrapped: judged.valid };
  try {
    if (!judged.valid) {
      io.log.info({ reason: judged.reason }, "bootstrapping");
      await ensureManagedCluster(r);
    }
    if (pending) {
      // A request is only ever made under the agent name it saves with its key. An invocation that read
      // "no hub secret, no pending request" and wrote after another had finished the join made one
      // under a fresh random name: collecting it under the hub secret's name wrote a certificate for one
      // agent with another's name, which the next invocation judged invalid and replaced with a third
      // CSR (the recorded join of 74c5531: CSRs for agents e5f91, 6b99a, e5f91). While the hub secret is
      // good, such a request is stale and dropped; otherwise its certificate is stored under its own name.
      if (judged.valid && pendingAgentName && pendingAgentName !== agentName) {
        io.log.info({ csr: secretText(pending, PendingKey.CsrName), agentName: pendingAgentName }, "dropped a stale request made under another agent name: already bootstrapped");
        await spoke.delete(SecretResource, pendingSecretName(c), c.agentNamespace, { uid: pending.metadata.uid });
        return { recheckInMs: 0 };
      }
      return await collectCertificate({ ...r, agentName: pendingAgentName ?? agentName }, pending);
    }
    if (judged.valid) {
      const certPem = secretText(hubSecret, HubSecretKey.TlsCert)!;
      const dataChanged = secretText(hubSecret, HubSecretKey.ClusterName) !== c.clusterName || secretText(hubSecret, HubSecretKey.AgentName) !== agentName || secretText(hubSecret, HubSecretKey.Kubeconfig) !== hubKubeconfig(bootstrap);
      if (!dataChanged && !shouldRotate(judged.cert, now, certPem)) return { recheckInMs: rotationDueInMs(judged.cert, certPem, now) };
      io.log.info({ notAfter: judged.cert.notAfter, dataChanged }, "rotating the client certificate");
    }
    return await requestCertificate(r);
  } finally {
    hub.close();
  }
}

type Registration = { io: Io<Config>; c: Config; now: Date; spoke: KubeClient; hub: KubeClient; bootstrap: HubEndpoint; agentName: string; bootstrapped: boolean };

// When to look again: the moment this certificate's rotation falls due (shouldRotate's own threshold).
function rotationDueInMs(cert: { notBefore: Date; notAfter: Date }, certPem: string, now: Date): number {
  return Math.max(1_000, rotationDueAt(cert, certPem).getTime() - now.getTime());
}

// OCM's creating controller: create the cluster if missing; only the client configs are kept up to date.
// 401/403 are expected here (the bootstrap identity may be expired or narrow) and are not errors.
async function ensureManagedCluster({ io, c, hub }: Registration): Promise<void> {
  const caBundle = spokeCaBundle(io.cluster(managedClusterOf(c))); // the CA of the cluster registered
  const clientConfigs = c.externalServerUrls.map((url) => ({ url, caBundle }));
  try {
    const existing = await hub.get<ManagedCluster & KubeObject>(ManagedClusterResource, c.clusterName);
    if (!existing) {
      const annotations = Object.fromEntries(Object.entries(c.clusterAnnotations).filter(([k]) => k.startsWith(AgentAnnotationPrefix)));
      await hub.create(ManagedClusterResource, { metadata: { name: c.clusterName, annotations }, spec: { hubAcceptsClient: false, managedClusterClientConfigs: clientConfigs, leaseDurationSeconds: c.leaseDurationSeconds } });
      io.log.info({ cluster: c.clusterName }, "created the ManagedCluster");
    } else if ((existing.spec?.managedClusterClientConfigs?.length ?? 0) !== clientConfigs.length) {
      await hub.update(ManagedClusterResource, { ...existing, spec: { hubAcceptsClient: false, ...existing.spec, managedClusterClientConfigs: clientConfigs } });
    }
  } catch (err) {
    const kind = classifyError(err);
    // refused by RBAC or by admission (both 403 Forbidden): the bootstrap identity's limits either way
    if (kind !== "forbidden" && kind !== "denied" && kind !== "unauthorized" && kind !== "already-exists") throw err;
    io.log.info({ error: (err as Error).message }, "cannot create or update the ManagedCluster with the bootstrap identity; going on");
  }
}

function spokeCaBundle(spoke: KubeClient): string | undefined {
  const caPem = spoke.cluster.caPem;
  return caPem === undefined ? undefined : Buffer.from(caPem).toString("base64");
}

async function requestCertificate(r: Registration): Promise<Outcome> {
  const { io, c, hub, spoke } = r;
  const existing = await hub.list<CertificateSigningRequest>(CertificateSigningRequestResource, { labelSelector: labelsQuery({ [ClusterLabel.ClusterName]: c.clusterName }, { absent: [AddonNameLabel] }) });
  if (existing.items.length >= MaxOutstandingCsrs) {
    io.log.warn({ count: existing.items.length }, "halted: too many CSRs for this cluster on the hub");
    await setRotatedCondition(r, { status: "False", reason: CertificateRotatedReason.UpdateFailed, message: TooManyCsrsMessage });
    return done;
  }
  const keyPem = await newPrivateKeyPem();
  // OCM lets the server pick a name from generateName "<cluster>-"; we pick one of the same shape first,
  // so the key and the request's name are saved in one write before the CSR exists. Create-only: when
  // two invocations race, the loser leaves the request to the winner.
  const csrName = `${c.clusterName}-${generatedNameSuffix()}`;
  try {
    const data = encodeSecretData({ [HubSecretKey.TlsKey]: keyPem, [HubSecretKey.AgentName]: r.agentName, [HubSecretKey.ClusterName]: c.clusterName, [PendingKey.CsrName]: csrName });
    await spoke.create<Secret>(SecretResource, { metadata: { name: pendingSecretName(c), namespace: c.agentNamespace }, type: "Opaque", data });
  } catch (err) {
    if (!isAlreadyExists(err)) throw err;
    return { recheckInMs: c.pendingRecheckMs };
  }
  await createCsr(r, csrName, keyPem);
  io.log.info({ csr: csrName, bootstrapped: r.bootstrapped }, "requested a client certificate");
  return { recheckInMs: c.pendingRecheckMs };
}

async function createCsr({ c, hub, agentName }: Registration, name: string, keyPem: string): Promise<void> {
  const subject = { commonName: agentUser(c.clusterName, agentName), organizations: [clusterGroup(c.clusterName), ManagedClustersGroup], organizationalUnits: [] };
  await createCsrOnce(hub, {
    name,
    labels: { [ClusterLabel.ClusterName]: c.clusterName },
    requestPem: await certificateRequest({ subject, keyPem }),
    signerName: KubeAPIServerClientSignerName,
    expirationSeconds: c.clientCertExpirationSeconds,
  });
}

async function collectCertificate(r: Registration, pending: Secret): Promise<Outcome> {
  const { io, c, hub, spoke, bootstrap } = r;
  const keyPem = secretText(pending, HubSecretKey.TlsKey)!;
  const csrName = secretText(pending, PendingKey.CsrName)!;
  if (secretText(pending, HubSecretKey.ClusterName) !== c.clusterName) {
    // Left by this agent under another cluster name (a restart with a new --spoke-cluster-name):
    // that request is someone else's now.
    io.log.info({ csr: csrName }, "a pending request for another cluster name; starting over");
    await spoke.delete(SecretResource, pendingSecretName(c), c.agentNamespace);
    return { recheckInMs: 0 };
  }
  const judged = judgeCsr(await hub.get<CertificateSigningRequest>(CertificateSigningRequestResource, csrName), keyPem);
  switch (judged.state) {
    case "missing":
      // We stopped between saving the key and creating the request, or someone deleted it. Either
      // way the same request again is what we want.
      io.log.info({ csr: csrName }, `unable to get csr "${csrName}"; creating it again`);
      await createCsr(r, csrName, keyPem);
      return { recheckInMs: c.pendingRecheckMs };
    case "waiting":
      return { recheckInMs: c.pendingRecheckMs };
    case "denied":
    case "mismatched": {
      // Not usable: start over with a new key and request, as OCM resets its state.
      const why = judged.state === "denied" ? `csr "${csrName}" was denied` : `the certificate of csr ${csrName} does not match the key`;
      io.log.warn({ csr: csrName }, `${why}; starting over`);
      await spoke.delete(SecretResource, pendingSecretName(c), c.agentNamespace);
      await setRotatedCondition(r, { status: "False", reason: CertificateRotatedReason.UpdateFailed, message: rotationFailedMessage(why) });
      return { recheckInMs: c.pendingRecheckMs };
    }
  }
  const certPem = judged.certPem;
  // The secret is saved before the condition is written, as OCM does, so a failure cannot cause a second CSR.
  await createOrUpdate<Secret>(spoke, SecretResource, {
    metadata: { name: c.hubSecret, namespace: c.agentNamespace },
    type: "Opaque",
    data: encodeSecretData({
      [HubSecretKey.TlsCert]: certPem,
      [HubSecretKey.TlsKey]: keyPem,
      [HubSecretKey.Kubeconfig]: hubKubeconfig(bootstrap),
      [HubSecretKey.ClusterName]: c.clusterName,
      [HubSecretKey.AgentName]: r.agentName,
    }),
  }, ["data"]);
  await spoke.delete(SecretResource, pendingSecretName(c), c.agentNamespace);
  const cert = readCertificate(certPem);
  io.log.info({ csr: csrName, notAfter: cert.notAfter }, "wrote the hub kubeconfig secret");
  await setRotatedCondition(r, { status: "True", reason: CertificateRotatedReason.Updated, message: rotatedMessage(cert.notBefore, cert.notAfter) });
  return done;
}

// OCM writes no status while bootstrapping (its status updater is a no-op until the hub kubeconfig is valid).
async function setRotatedCondition(r: Registration, c: Omit<NewCondition, "type">): Promise<void> {
  if (!r.bootstrapped) return;
  const cluster = await r.hub.get<ManagedCluster & KubeObject>(ManagedClusterResource, r.c.clusterName);
  if (!cluster) return;
  const conditions = setCondition(cluster.status?.conditions, { type: ManagedClusterConditionType.CertificateRotated, ...c }, r.now);
  await patchStatusIfChanged(r.hub, ManagedClusterResource, cluster, { ...cluster.status, conditions });
}
