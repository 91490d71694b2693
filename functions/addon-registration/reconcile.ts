// The spoke agent's add-on registration (OCM §3.3, §5.5): for each registration in a ManagedClusterAddOn's
// status, a client certificate requested from the hub as the cluster's own identity and kept in the
// add-on's install namespace (<a>-hub-kubeconfig, or <a>-<signer>-client-cert), rotated before it
// expires, reported as ClusterCertificateRotated; secrets whose registration or add-on went away are
// removed. The root kind is ManagedClusterAddOn on the hub, in the cluster's namespace.
import { z } from "zod";
import { SpokeAgentSettingsSchema, managedClusterOf } from "../../shared/settings.ts";
import { asNumber, fromEnv } from "../../shared/env-settings.ts";
import { AddOnConditionType, AddOnLabel, ManagedClusterAddOnV1alpha1Resource, type ManagedClusterAddOnV1alpha1 } from "../../shared/api/addon.ts";
import { ClusterLabel } from "../../shared/api/cluster.ts";
import { CertificateSigningRequestResource, NamespaceResource, SecretResource } from "../../shared/api/kube.ts";
import type { CertificateSigningRequest } from "../../shared/api/certificates.ts";
import {
  CertificateRotatedReason,
  HubSecretKey,
  MaxOutstandingCsrs,
  TooManyCsrsMessage,
  rotatedMessage,
} from "../../shared/api/registration.ts";
import { createOrUpdate, patchStatusIfChanged } from "../../shared/apply.ts";
import { setCondition, type NewCondition } from "../../shared/conditions.ts";
import {
  PendingKey,
  certificateRequest,
  createCsrOnce,
  encodeSecretData,
  generatedNameSuffix,
  judgeCsr,
  newPrivateKeyPem,
  readIssuedCertificate,
  rotationDueAt,
  rotationFailedMessage,
} from "../../shared/csr-flow.ts";
import type { ObjectEvent, TickEvent } from "../../shared/events.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import { defineFunction } from "../../shared/sdk.ts";
import { withAgentHub, clientWithSecretFiles, hubEndpoint, hubKubeconfig, hubServerOf, judgeHubSecret, secretText, type HubEndpoint, type Secret } from "../../shared/hub-credentials.ts";
import type { KubeClient, KubeObject } from "../../shared/kube/client.ts";
import { isAlreadyExists } from "../../shared/kube/errors.ts";
import { labelsQuery, type LabelQuery } from "../../shared/selector-query.ts";
import { installNamespaceOf, outsideInstallRefusal, runsOutsideManagedCluster } from "../../shared/addon-install-namespace.ts";
import { additionalData, credentialsOf, judgeSecret, type Credential } from "./registrations.ts";

export const ConfigSchema = SpokeAgentSettingsSchema.extend({
  // OCM's --client-cert-expiration-seconds applies to add-on certificates too
  clientCertExpirationSeconds: fromEnv("CLIENT_CERT_EXPIRATION_SECONDS", z.number().int().min(3600).optional(), asNumber),
  // how long to wait before looking at a pending CSR (or a missing install namespace) again
  pendingRecheckMs: z.number().int().positive().default(5_000),
});
export type Config = z.infer<typeof ConfigSchema>;

type Addon = ManagedClusterAddOnV1alpha1;
// Every secret this function writes carries both labels: that is how it finds them again to remove.
const ownedSelector = (cluster: string, addon?: string) =>
  addon ? labelsQuery({ [ClusterLabel.ClusterName]: cluster, [AddOnLabel.AddonName]: addon }) : labelsQuery({ [ClusterLabel.ClusterName]: cluster }, { present: [AddOnLabel.AddonName] });
const ownedLabels = (cluster: string, addon: string) => ({ [ClusterLabel.ClusterName]: cluster, [AddOnLabel.AddonName]: addon });
// The names a secret of ours can have; other secret events are not looked at.
const CANDIDATE_SECRET = /-(hub-kubeconfig|client-cert|pending-csr)$/;

// The root kind is ManagedClusterAddOn on the hub, in the cluster's namespace, keyed by itself. The
// cluster's CSRs on the hub, the agent's secrets (Reference mode: no secret data travels) and install
// namespaces appearing on the spoke wake the add-ons they belong to. The hub is reached with the
// agent's own credentials, so a resync tick's keys come from resyncKeys, not a list through io.
export default defineFunction({
  name: "addon-registration",
  config: ConfigSchema,
  watches: (c) => [
    { cluster: c.hubCluster, resource: ManagedClusterAddOnV1alpha1Resource, namespace: c.clusterName, mode: "Resource", root: true },
    { cluster: c.hubCluster, resource: CertificateSigningRequestResource, labelSelector: `${ClusterLabel.ClusterName}=${c.clusterName}`, mode: "Resource", verbs: ["add", "update"], keys: csrKeys },
    { cluster: c.managementCluster, resource: SecretResource, namespace: c.agentNamespace, mode: "Either", keys: secretKeys },
    { cluster: managedClusterOf(c), resource: NamespaceResource, mode: "Reference", verbs: ["add"], keys: namespaceKeys },
  ],
  resyncSeconds: 60,
  resync: resyncKeys,
  // addon-registration on the spoke. Its hub access is only the cluster's own identity, which acceptance
  // grants open-cluster-management:managedcluster:registration (managedclusteraddons get/list/watch, their
  // status) and the per-cluster role (CSRs create/get/list/watch).
  //
  // Secrets in EVERY namespace, on purpose: an add-on's credentials go to its install namespace, which the
  // hub chooses (status.namespace, an AddOnDeploymentConfig's agentInstallNamespace), so no fixed list of
  // namespaces can be written here. OCM's registration agent holds the same reach. This also covers the
  // agent's own secrets in open-cluster-management-agent: the bootstrap and hub kubeconfigs it reads its
  // hub identity from, and the pending-CSR secrets it keeps there. Deletes touch only secrets labelled with
  // this cluster's name and an add-on name, which this function writes.
  //
  // Hosted mode: the add-ons run on the managed cluster, so their credentials go there. The management
  // cluster is shared by every hosted agent and holds their kubeconfigs, so there this agent gets secrets
  // in its own namespace only, never every namespace.
  writes: (c) => [
    c.managedCluster === undefined
      ? { cluster: c.managementCluster, why: "secrets in every namespace, on purpose: an add-on's credentials go to its install namespace, which the hub chooses; deletes touch only secrets labelled with this cluster's and an add-on's name", apiGroups: [""], resources: ["secrets"], verbs: ["get", "list", "watch", "create", "update", "patch", "delete"] }
      : { cluster: c.managementCluster, namespace: c.agentNamespace, why: "the pending requests, and the credentials of an add-on run outside the managed cluster, which must install into this namespace", apiGroups: [""], resources: ["secrets"], verbs: ["get", "list", "watch", "create", "update", "patch", "delete"] },
    { cluster: c.managementCluster, why: "whether an install namespace exists yet, for an add-on run outside the managed cluster", apiGroups: [""], resources: ["namespaces"], verbs: ["get"] },
    ...(c.managedCluster === undefined
      ? []
      : [
          { cluster: c.managedCluster, why: "the add-ons' credentials in their install namespaces on the managed cluster", apiGroups: [""], resources: ["secrets"], verbs: ["get", "list", "watch", "create", "update", "patch", "delete"] },
          { cluster: c.managedCluster, why: "whether an install namespace exists yet", apiGroups: [""], resources: ["namespaces"], verbs: ["get"] },
        ]),
  ],
  reconcile,
});

type Agent = { hub: KubeClient; bootstrap: HubEndpoint; agentName: string };

// The hub as the cluster's own identity, with what the add-on secrets are made from: the bootstrap
// kubeconfig (OCM templates the add-on kubeconfig from it) and the agent's name (the default CN).
async function readAgent(spoke: KubeClient, c: Config, now: Date): Promise<Agent | { reason: string }> {
  const bootstrapSecret = await spoke.get<Secret>(SecretResource, c.bootstrapSecret, c.agentNamespace);
  const hubSecret = await spoke.get<Secret>(SecretResource, c.hubSecret, c.agentNamespace);
  const bootstrapText = secretText(bootstrapSecret, HubSecretKey.Kubeconfig);
  if (!bootstrapText) return { reason: "no bootstrap kubeconfig" };
  const bootstrap = hubEndpoint(bootstrapText);
  const judged = judgeHubSecret({ hubSecret, bootstrap, clusterName: c.clusterName, now });
  if (!judged.valid) return { reason: judged.reason };
  const agentName = secretText(hubSecret, HubSecretKey.AgentName) ?? judged.cert.commonName.split(":").pop()!;
  return { hub: clientWithSecretFiles(secretText(hubSecret, HubSecretKey.Kubeconfig)!, hubSecret!), bootstrap, agentName };
}

// spoke: the management cluster (the agent's secrets, pending requests); runsOn: where the add-on's agent
// runs and its credentials go (the managed cluster, or the management one for an add-on with a hosting
// cluster: OCM's registration agent's AgentRunningOutsideManagedCluster).
type Scene = { io: Io<Config>; c: Config; now: Date; spoke: KubeClient; runsOn: KubeClient; agent: Agent; addon: string };

export async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const c = io.config;
  const now = io.clock.now();
  const spoke = io.cluster(c.managementCluster);
  const agent = await readAgent(spoke, c, now);
  if (!("hub" in agent)) {
    io.log.info({ addon: key.name, reason: agent.reason }, "skipped: not bootstrapped");
    return done;
  }
  const managed = io.cluster(managedClusterOf(c));
  try {
    const mca = await agent.hub.get<Addon>(ManagedClusterAddOnV1alpha1Resource, key.name, c.clusterName);
    const s: Scene = { io, c, now, spoke, runsOn: mca && runsOutsideManagedCluster(mca) ? spoke : managed, agent, addon: key.name };
    const owned = await ownedSecrets(io, ownedSelector(c.clusterName, key.name));
    if (!mca) {
      await removeSecrets(s, owned, "the add-on is gone");
      return done;
    }
    if (mca.metadata.deletionTimestamp) {
      io.log.info({ addon: key.name }, "skipped: the add-on is being deleted; its credentials stay for its cleanup");
      return done;
    }
    const wanted = credentialsOf(mca, { clusterName: c.clusterName, agentName: agent.agentName });
    const isWanted = ({ secret: x, on }: Owned) =>
      wanted.some((w) => (on === s.runsOn && x.metadata.namespace === w.namespace && x.metadata.name === w.secretName) || (on === spoke && x.metadata.namespace === c.agentNamespace && x.metadata.name === w.pendingName));
    await removeSecrets(s, owned.filter((x) => !isWanted(x)), "its registration is gone or changed");
    if (!wanted.length) return done;
    await recordCsrDriver(s, mca, wanted);
    let recheckInMs: number | undefined;
    for (const w of wanted) {
      const outcome = await reconcileCredential(s, w);
      if ("recheckInMs" in outcome) recheckInMs = Math.min(recheckInMs ?? Infinity, outcome.recheckInMs);
    }
    return recheckInMs === undefined ? done : { recheckInMs };
  } finally {
    agent.hub.close();
  }
}

type Owned = { secret: Secret; on: KubeClient };

// What this agent wrote (labelled so), on each cluster it writes to: the managed one in any namespace;
// in Hosted mode the management one only in the agent's namespace, all it may read there.
async function ownedSecrets(io: Io<Config>, labelSelector: LabelQuery): Promise<Owned[]> {
  const c = io.config;
  const lists = await Promise.all(
    [...new Set([c.managementCluster, managedClusterOf(c)])].map(async (cluster) => {
      const on = io.cluster(cluster);
      const namespace = c.managedCluster !== undefined && cluster === c.managementCluster ? c.agentNamespace : undefined;
      return (await on.list<Secret>(SecretResource, { labelSelector, ...(namespace ? { namespace } : {}) })).items.map((secret) => ({ secret, on }));
    }),
  );
  return lists.flat();
}

async function removeSecrets(s: Scene, secrets: readonly Owned[], why: string): Promise<void> {
  for (const { secret: x, on } of secrets) {
    await on.delete(SecretResource, x.metadata.name!, x.metadata.namespace, { uid: x.metadata.uid });
    s.io.log.info({ addon: s.addon, secret: `${x.metadata.namespace}/${x.metadata.name}`, why }, "removed an add-on credential");
  }
}

// §5.5 step 1: a kubeClient registration records the agent's driver; this agent only has the CSR one.
async function recordCsrDriver(s: Scene, mca: Addon, wanted: readonly Credential[]): Promise<void> {
  if (!wanted.some((w) => w.type === "kubeClient") || mca.status?.kubeClientDriver === "csr") return;
  await patchStatusIfChanged(s.agent.hub, ManagedClusterAddOnV1alpha1Resource, mca, { ...mca.status, kubeClientDriver: "csr" });
}

// One registration's certificate, as the cluster agent's own: collect a pending request, else keep a
// valid secret until its rotation falls due, else ask for a new one.
async function reconcileCredential(s: Scene, w: Credential): Promise<Outcome> {
  const refusal = s.runsOn === s.spoke ? outsideInstallRefusal(s.c, w.namespace) : undefined;
  if (refusal) {
    s.io.log.warn({ addon: s.addon }, `skipped: ${refusal}`);
    return done;
  }
  // Pending before the secret: an issuance writes the secret, then deletes the pending one, so in this
  // order a concurrent invocation sees one of the two and never neither.
  const pending = await s.spoke.get<Secret>(SecretResource, w.pendingName, s.c.agentNamespace);
  if (pending) return collectCertificate(s, w, pending);
  const secret = await s.runsOn.get<Secret>(SecretResource, w.secretName, w.namespace);
  const judged = judgeSecret(secret, w, dataFor(s, w), s.now);
  if (judged.valid) return { recheckInMs: Math.max(1_000, rotationDueAt(judged.cert, judged.certPem).getTime() - s.now.getTime()) };
  // A credential for another hub (the agent moved, functions/spoke-registration/hubs.ts) is not kept
  // while the new one is issued: that hub's identity goes with the move.
  const held = secretText(secret, HubSecretKey.Kubeconfig);
  if (secret && held && hubServerOf(held) !== s.agent.bootstrap.server) {
    await s.runsOn.delete(SecretResource, w.secretName, w.namespace, { uid: secret.metadata.uid });
    s.io.log.info({ addon: s.addon, secret: `${w.namespace}/${w.secretName}` }, "removed an add-on credential for another hub");
  }
  s.io.log.info({ addon: s.addon, secret: `${w.namespace}/${w.secretName}`, reason: judged.reason }, "requesting a client certificate");
  return requestCertificate(s, w);
}

const dataFor = (s: Scene, w: Credential) => additionalData(w, { clusterName: s.c.clusterName, kubeconfig: hubKubeconfig(s.agent.bootstrap) });

async function requestCertificate(s: Scene, w: Credential): Promise<Outcome> {
  const { c, agent, spoke } = s;
  // OCM halts on the CSRs its informer holds for <c>/<a>, whatever their state or signer.
  const existing = await agent.hub.list<CertificateSigningRequest>(CertificateSigningRequestResource, { labelSelector: ownedSelector(c.clusterName, s.addon) });
  if (existing.items.length >= MaxOutstandingCsrs) {
    s.io.log.warn({ addon: s.addon, count: existing.items.length }, "halted: too many CSRs for this add-on on the hub");
    await setRotatedCondition(s, { status: "False", reason: CertificateRotatedReason.UpdateFailed, message: TooManyCsrsMessage });
    return done;
  }
  const keyPem = await newPrivateKeyPem();
  // OCM lets the server pick a name from generateName "addon-<c>-<a>-"; one of the same shape is picked
  // here, so the key and the name are saved in one write before the CSR exists. Create-only: of two
  // racing invocations, the loser leaves the request to the winner.
  const csrName = `addon-${c.clusterName}-${s.addon}-${generatedNameSuffix()}`;
  try {
    await spoke.create<Secret>(SecretResource, {
      metadata: { name: w.pendingName, namespace: c.agentNamespace, labels: ownedLabels(c.clusterName, s.addon) },
      type: "Opaque",
      data: encodeSecretData({ [PendingKey.TlsKey]: keyPem, [PendingKey.CsrName]: csrName }),
    });
  } catch (err) {
    if (!isAlreadyExists(err)) throw err;
    return { recheckInMs: c.pendingRecheckMs };
  }
  await createCsr(s, w, csrName, keyPem);
  s.io.log.info({ addon: s.addon, csr: csrName, signer: w.signerName }, "requested a client certificate");
  return { recheckInMs: c.pendingRecheckMs };
}

async function createCsr(s: Scene, w: Credential, name: string, keyPem: string): Promise<void> {
  const requestPem = await certificateRequest({ subject: w.subject, dnsNames: w.dnsNames, keyPem });
  await createCsrOnce(s.agent.hub, { name, labels: ownedLabels(s.c.clusterName, s.addon), requestPem, signerName: w.signerName, expirationSeconds: s.c.clientCertExpirationSeconds });
}

async function collectCertificate(s: Scene, w: Credential, pending: Secret): Promise<Outcome> {
  const { io, c, spoke, runsOn } = s;
  const keyPem = secretText(pending, PendingKey.TlsKey)!;
  const csrName = secretText(pending, PendingKey.CsrName)!;
  const judged = judgeCsr(await s.agent.hub.get<CertificateSigningRequest>(CertificateSigningRequestResource, csrName), keyPem);
  switch (judged.state) {
    case "waiting":
      return { recheckInMs: c.pendingRecheckMs };
    case "missing":
      // We stopped between saving the key and creating the request, or someone deleted it: the same
      // request again is what we want either way.
      io.log.info({ addon: s.addon, csr: csrName }, `unable to get csr "${csrName}"; creating it again`);
      await createCsr(s, w, csrName, keyPem);
      return { recheckInMs: c.pendingRecheckMs };
    case "denied":
      io.log.warn({ addon: s.addon, csr: csrName }, "the CSR was denied; starting over");
      await spoke.delete(SecretResource, w.pendingName, c.agentNamespace);
      await setRotatedCondition(s, { status: "False", reason: CertificateRotatedReason.UpdateFailed, message: rotationFailedMessage(`csr "${csrName}" was denied`) });
      return { recheckInMs: c.pendingRecheckMs };
    case "mismatched":
      await spoke.delete(SecretResource, w.pendingName, c.agentNamespace);
      throw new Error(`the certificate of csr ${csrName} does not match the key we generated`);
    case "issued":
      break;
  }
  // OCM requests before the install namespace exists and saves once it does (its write fails until then).
  if (!(await runsOn.get(NamespaceResource, w.namespace))) {
    io.log.info({ addon: s.addon, namespace: w.namespace, csr: csrName }, "waiting: the install namespace does not exist yet");
    return { recheckInMs: c.pendingRecheckMs };
  }
  const existing = await runsOn.get<Secret>(SecretResource, w.secretName, w.namespace);
  // Saved before the condition is written, as OCM does, so a failed status write cannot cause a second CSR.
  await createOrUpdate<Secret>(runsOn, SecretResource, {
    metadata: { name: w.secretName, namespace: w.namespace, labels: ownedLabels(c.clusterName, s.addon) },
    type: "Opaque",
    // OCM writes its keys over whatever the secret already holds
    data: { ...existing?.data, ...encodeSecretData({ [HubSecretKey.TlsCert]: judged.certPem, [HubSecretKey.TlsKey]: keyPem, ...dataFor(s, w) }) },
  }, ["data"]);
  await spoke.delete(SecretResource, w.pendingName, c.agentNamespace);
  const cert = readIssuedCertificate(judged.certPem);
  io.log.info({ addon: s.addon, secret: `${w.namespace}/${w.secretName}`, csr: csrName, notAfter: cert.notAfter }, "wrote the add-on's client certificate");
  await setRotatedCondition(s, { status: "True", reason: CertificateRotatedReason.Updated, message: rotatedMessage(cert.notBefore, cert.notAfter) });
  return { recheckInMs: Math.max(1_000, rotationDueAt(cert, judged.certPem).getTime() - s.now.getTime()) };
}

// Written whole and only on change, on a fresh read (the driver may have just been recorded).
async function setRotatedCondition(s: Scene, cond: Omit<NewCondition, "type">): Promise<void> {
  const mca = await s.agent.hub.get<Addon>(ManagedClusterAddOnV1alpha1Resource, s.addon, s.c.clusterName);
  if (!mca) return;
  const conditions = setCondition(mca.status?.conditions, { type: AddOnConditionType.ClusterCertificateRotated, ...cond }, s.now);
  await patchStatusIfChanged(s.agent.hub, ManagedClusterAddOnV1alpha1Resource, mca, { ...mca.status, conditions });
}

const labelsOf = (o: KubeObject | undefined) => (o?.metadata as { labels?: Record<string, string> } | undefined)?.labels;

type Keys = Key[] | { skip: string };
const keyOf = (c: Config, addon: string): Key => ({ cluster: c.hubCluster, namespace: c.clusterName, name: addon });
const withHub = <T>(io: Io<Config>, use: (hub: KubeClient) => Promise<T>) =>
  withAgentHub<T | { skip: string }>(io.cluster(io.config.managementCluster), io.config, io.clock.now(), use, (reason) => ({ skip: `not bootstrapped: ${reason}` }));
const addons = (hub: KubeClient, c: Config) => hub.list<Addon>(ManagedClusterAddOnV1alpha1Resource, { namespace: c.clusterName }).then((l) => l.items);

// Every add-on of the cluster, and every add-on that still has secrets here (it may be gone).
async function resyncKeys(io: Io<Config>, tick: TickEvent): Promise<Keys> {
  const c = io.config;
  if (tick.cluster && tick.cluster !== c.hubCluster && tick.cluster !== c.managementCluster) return { skip: `tick for cluster ${tick.cluster}` };
  return withHub(io, async (hub) => {
    const [all, owned] = await Promise.all([addons(hub, c), ownedSecrets(io, ownedSelector(c.clusterName))]);
    const names = new Set([...all.map((a) => a.metadata.name), ...owned.map(({ secret }) => labelsOf(secret)![AddOnLabel.AddonName]!)]);
    return [...names].map((n) => keyOf(c, n));
  });
}

// The source selects on the cluster label; the add-on label names the add-on.
async function csrKeys(event: ObjectEvent, io: Io<Config>): Promise<Keys> {
  const c = io.config;
  const { name } = event.ref;
  // a Resource-mode payload carries the labels; a Reference-mode one only names the CSR
  const read = event.object ? { csr: event.object } : await withHub(io, async (hub) => ({ csr: await hub.get<CertificateSigningRequest>(CertificateSigningRequestResource, name) }));
  if ("skip" in read) return read;
  const labels = labelsOf(read.csr);
  const addon = labels?.[AddOnLabel.AddonName];
  if (labels?.[ClusterLabel.ClusterName] !== c.clusterName || !addon) return { skip: `CSR ${name} is not an add-on request of cluster ${c.clusterName}` };
  return [keyOf(c, addon)];
}

async function secretKeys(event: ObjectEvent, io: Io<Config>): Promise<Keys> {
  const c = io.config;
  const { name, namespace } = event.ref;
  if (!CANDIDATE_SECRET.test(name)) return { skip: `secret ${namespace}/${name} is not named like an add-on credential` };
  const found = event.object ?? (await io.cluster(c.managementCluster).get<Secret>(SecretResource, name, namespace));
  if (found) {
    const labels = labelsOf(found) ?? {};
    const addon = labels[AddOnLabel.AddonName];
    return labels[ClusterLabel.ClusterName] === c.clusterName && addon ? [keyOf(c, addon)] : { skip: `secret ${namespace}/${name} is not an add-on credential of cluster ${c.clusterName}` };
  }
  // Gone, and the event carried no labels (Reference mode). A pending request is only ever removed
  // once collected or let go; for a credential, the add-ons that would have it.
  if (name.endsWith("-pending-csr")) return { skip: `pending request ${namespace}/${name} is gone` };
  return withHub(io, async (hub) => {
    const keys = (await addons(hub, c)).filter((a) => credentialsOf(a, { clusterName: c.clusterName, agentName: "" }).some((w) => w.namespace === namespace && w.secretName === name)).map((a) => keyOf(c, a.metadata.name));
    return keys.length ? keys : { skip: `no add-on has a credential ${namespace}/${name}` };
  });
}

// An install namespace appearing lets a waiting certificate be saved.
async function namespaceKeys(event: ObjectEvent, io: Io<Config>): Promise<Keys> {
  const c = io.config;
  const { name } = event.ref;
  return withHub(io, async (hub) => {
    const keys = (await addons(hub, c)).filter((a) => installNamespaceOf(a) === name && a.status?.registrations?.length).map((a) => keyOf(c, a.metadata.name));
    return keys.length ? keys : { skip: `no add-on of ${c.clusterName} installs into ${name}` };
  });
}
