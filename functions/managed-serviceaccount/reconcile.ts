// The agent of OCM's managed-serviceaccount add-on: for each ManagedServiceAccount in the cluster's
// namespace on the hub, a ServiceAccount of that name in the add-on's namespace on this cluster, a token
// for it from the TokenRequest API valid as long as spec.rotation.validity says, reported to the hub as
// the Secret of that name beside the ManagedServiceAccount (token, ca.crt) and in its status; a new token
// past four fifths of the old one's life; the ServiceAccount deleted with the ManagedServiceAccount. It
// reads the ManagedServiceAccounts as the cluster's identity, and writes on the hub only as the add-on's
// own (its registration's hub kubeconfig, with the hub permissions its template grants in the cluster's
// namespace once the add-on is enabled there). The root kind is ManagedServiceAccount on the hub.
import { z } from "zod";
import { SpokeAgentSettingsSchema, managedClusterOf } from "../../shared/settings.ts";
import { after } from "../../shared/timers.ts";
import { fromEnv } from "../../shared/env-settings.ts";
import { asAgent } from "../../shared/agent-hub.ts";
import { clientWithSecretFiles, secretText, withAgentHub, type Secret } from "../../shared/hub-credentials.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import type { TickEvent } from "../../shared/events.ts";
import { defineFunction, type KeysOrSkip } from "../../shared/sdk.ts";
import { resourcePath, type KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { isNotFound } from "../../shared/kube/errors.ts";
import { patchStatusIfChanged } from "../../shared/apply.ts";
import { setCondition } from "../../shared/conditions.ts";
import { rfc3339 } from "../../shared/clock.ts";
import { SecretResource, ServiceAccountResource } from "../../shared/api/kube.ts";
import { DefaultAddOnInstallNamespace, ManagedClusterAddOnV1alpha1Resource } from "../../shared/api/addon.ts";
import { HubSecretKey } from "../../shared/api/registration.ts";
import {
  DefaultTokenValidity,
  ManagedServiceAccountResource,
  MsaAddOnName,
  MsaConditionType,
  MsaLabel,
  MsaReason,
  MsaSecretKey,
  durationMs,
  type ManagedServiceAccount,
} from "../../shared/api/authentication.ts";

export const ConfigSchema = SpokeAgentSettingsSchema.extend({
  // where the ServiceAccounts are made: the add-on's install namespace, as OCM's agent runs in it
  msaNamespace: fromEnv("MSA_NAMESPACE", z.string().min(1).default(DefaultAddOnInstallNamespace)),
});
export type Config = z.infer<typeof ConfigSchema>;

// The add-on registration's secret in the install namespace (shared/addon-registrations, OCM's layout).
export const addOnHubSecretName = `${MsaAddOnName}-hub-kubeconfig`;
const ours = `${MsaLabel.IsManagedServiceAccount}=true`;
type Labelled = KubeObject & { metadata: { labels?: Record<string, string>; uid?: string } };
const madeHere = (o: Labelled) => o.metadata.labels?.[MsaLabel.IsManagedServiceAccount] === "true";

export default defineFunction({
  name: "managed-serviceaccount",
  config: ConfigSchema,
  watches: (c) => [
    { cluster: c.hubCluster, resource: ManagedServiceAccountResource, namespace: c.clusterName, root: true, changes: ["spec", "metadata.deletionTimestamp"] },
    // one of ours deleted by hand is made again, with a new token
    { cluster: managedClusterOf(c), resource: ServiceAccountResource, namespace: c.msaNamespace, labelSelector: ours, verbs: ["delete"], keys: (e) => [keyOf(c, e.ref.name)] },
    // the add-on enabled here, its registration done: every ManagedServiceAccount is reported now (its
    // hub kubeconfig is not watched itself: a second namespace of secrets would widen the relay's watch
    // of them to the whole cluster)
    { cluster: c.hubCluster, resource: ManagedClusterAddOnV1alpha1Resource, namespace: c.clusterName, verbs: ["add", "update"], keys: (e, io) => (e.ref.name === MsaAddOnName ? everyMsa(e, io) : { skip: `add-on ${e.ref.name}, not ${MsaAddOnName}` }), changes: ["status.conditions", "status.registrations"] },
  ],
  resyncSeconds: 60,
  resync: (io, tick) => everyMsa(tick, io),
  // managed-serviceaccount on the spoke: its ServiceAccounts and their tokens in the add-on's namespace,
  // the add-on's hub kubeconfig there, and the agent's secrets for the cluster's identity. On the hub it acts as the add-on's identity only.
  writes: (c) => [
    { cluster: managedClusterOf(c), namespace: c.msaNamespace, why: "the ServiceAccounts of the hub's ManagedServiceAccounts", apiGroups: [""], resources: ["serviceaccounts"], verbs: ["create", "delete"] },
    { cluster: managedClusterOf(c), namespace: c.msaNamespace, why: "their tokens (TokenRequest)", apiGroups: [""], resources: ["serviceaccounts/token"], verbs: ["create"] },
    { cluster: managedClusterOf(c), namespace: c.msaNamespace, why: "the add-on's hub kubeconfig", apiGroups: [""], resources: ["secrets"], resourceNames: [addOnHubSecretName], verbs: ["get"] },
    { cluster: c.managementCluster, namespace: c.agentNamespace, why: "the bootstrap and hub kubeconfigs the cluster's identity comes from", apiGroups: [""], resources: ["secrets"], verbs: ["get"] },
  ],
  reconcile,
});

const keyOf = (c: Config, name: string): Key => ({ cluster: c.hubCluster, namespace: c.clusterName, name });

export async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const c = io.config;
  return asAgent(
    io,
    // the accounts, their tokens and the add-on's hub kubeconfig are on the managed cluster
    async ({ hub, managed: spoke, now }) => {
      const msa = await hub.get<ManagedServiceAccount>(ManagedServiceAccountResource, key.name, c.clusterName);
      if (!msa || msa.metadata.deletionTimestamp) return removeServiceAccount(io, spoke, key.name);
      const addOnHub = await addOnHubClient(spoke, c);
      if (!addOnHub) {
        io.log.info({ msa: key.name, secret: `${c.msaNamespace}/${addOnHubSecretName}` }, "skipped: the add-on has no hub kubeconfig here yet (is managed-serviceaccount enabled on this cluster?)");
        return done;
      }
      return await report(io, { hub: addOnHub, spoke, now }, msa);
    },
    { msa: key.name },
  );
}

// The add-on's hub identity, one client per version of its secret: a kubeconfig and certificate parsed
// and a TLS handshake made on every reconcile would cost more than the reconcile. A new version (a
// rotation) replaces it; the replaced client is closed once calls already made with it have ended.
const addOnHubs = new WeakMap<KubeClient, { version: string; hub: KubeClient }>();
const REPLACED_CLIENT_CLOSE_MS = 60_000;

export async function addOnHubClient(spoke: KubeClient, c: Config): Promise<KubeClient | undefined> {
  const secret = await spoke.get<Secret>(SecretResource, addOnHubSecretName, c.msaNamespace);
  const kubeconfig = secretText(secret, HubSecretKey.Kubeconfig);
  if (!secret || !kubeconfig) return undefined;
  const version = `${secret.metadata.uid ?? ""}@${secret.metadata.resourceVersion ?? ""}`;
  const cached = addOnHubs.get(spoke);
  if (cached?.version === version) return cached.hub;
  const hub = clientWithSecretFiles(kubeconfig, secret);
  addOnHubs.set(spoke, { version, hub });
  if (cached) after(REPLACED_CLIENT_CLOSE_MS, () => cached.hub.close(), { unref: true });
  return hub;
}

type Token = { token: string; expiresAt: Date };

async function report(io: Io<Config>, a: { hub: KubeClient; spoke: KubeClient; now: Date }, msa: ManagedServiceAccount): Promise<Outcome> {
  const c = io.config;
  const name = msa.metadata.name;
  const validityText = msa.spec?.rotation?.validity ?? DefaultTokenValidity;
  const validityMs = durationMs(validityText);
  if (!validityMs || validityMs < 600_000) return failed(io, a, msa, `spec.rotation.validity ${JSON.stringify(validityText)} is not a duration of at least 10m (the TokenRequest API's least)`);

  let sa = await a.spoke.get<Labelled>(ServiceAccountResource, name, c.msaNamespace);
  if (sa && !madeHere(sa))
    return failed(io, a, msa, `ServiceAccount ${c.msaNamespace}/${name} exists and is not one this add-on made: no token is issued for it`);
  if (!sa) {
    sa = await a.spoke.create<Labelled>(ServiceAccountResource, { metadata: { name, namespace: c.msaNamespace, labels: { [MsaLabel.IsManagedServiceAccount]: "true" } } });
    io.log.info({ msa: name, serviceAccount: `${c.msaNamespace}/${name}` }, "service account created");
  }

  const secret = await a.hub.get<Secret>(SecretResource, name, c.clusterName);
  const refreshAt = refreshTime(msa);
  const held = secretText(secret, MsaSecretKey.Token);
  const heldFor = held ? tokenSubject(held) : undefined;
  const current = !!refreshAt && a.now < refreshAt && heldFor?.user === `system:serviceaccount:${c.msaNamespace}:${name}` && heldFor.uid === sa.metadata.uid;
  if (current) return recheckAt(refreshAt!, a.now);

  const token = await requestToken(a.spoke, c.msaNamespace, name, Math.floor(validityMs / 1000));
  // the CA this function reaches its own cluster's API server by, as OCM's agent sends its rest config's
  const data = { [MsaSecretKey.Token]: b64(token.token), [MsaSecretKey.CaCert]: b64(a.spoke.cluster.caPem ?? "") };
  const body: Secret = {
    metadata: {
      name,
      namespace: c.clusterName,
      labels: { ...(secret?.metadata.labels as Record<string, string> | undefined), [MsaLabel.IsManagedServiceAccount]: "true" },
      ownerReferences: [{ apiVersion: `${ManagedServiceAccountResource.group}/${ManagedServiceAccountResource.version}`, kind: ManagedServiceAccountResource.kind, name, uid: msa.metadata.uid ?? "" }],
      ...(secret ? { resourceVersion: secret.metadata.resourceVersion } : {}),
    },
    type: "Opaque",
    data,
  };
  // a create that loses a race answers AlreadyExists, an update on a changed one 409: the retry judges again
  if (secret) await a.hub.update<Secret>(SecretResource, body);
  else await a.hub.create<Secret>(SecretResource, body);
  const now = rfc3339(a.now);
  let conditions = setCondition(msa.status?.conditions, { type: MsaConditionType.SecretCreated, status: "True", reason: MsaReason.SecretCreated, message: "" }, a.now);
  conditions = setCondition(conditions, { type: MsaConditionType.TokenReported, status: "True", reason: MsaReason.TokenReported, message: "" }, a.now);
  await patchStatusIfChanged(a.hub, ManagedServiceAccountResource, msa, { ...msa.status, conditions, expirationTimestamp: rfc3339(token.expiresAt), tokenSecretRef: { name, lastRefreshTimestamp: now } });
  io.log.info({ msa: name, expires: rfc3339(token.expiresAt) }, "token reported to the hub");
  return recheckAt(refreshAt4of5(a.now, token.expiresAt), a.now);
}

// OCM: a token is renewed once four fifths of the time from its last refresh to its expiry have passed.
const refreshAt4of5 = (from: Date, expiresAt: Date) => new Date(from.getTime() + ((expiresAt.getTime() - from.getTime()) / 5) * 4);
function refreshTime(msa: ManagedServiceAccount): Date | undefined {
  const last = Date.parse(msa.status?.tokenSecretRef?.lastRefreshTimestamp ?? "");
  const expires = Date.parse(msa.status?.expirationTimestamp ?? "");
  return Number.isNaN(last) || Number.isNaN(expires) ? undefined : refreshAt4of5(new Date(last), new Date(expires));
}
// just after it is due, as OCM requeues 5 s past the threshold
const recheckAt = (at: Date, now: Date): Outcome => ({ recheckInMs: Math.max(0, at.getTime() - now.getTime()) + 5_000 });

async function requestToken(spoke: KubeClient, namespace: string, name: string, expirationSeconds: number): Promise<Token> {
  const path = resourcePath(ServiceAccountResource, { name, namespace, subresource: "token" });
  const answer = await spoke.request<{ status: { token: string; expirationTimestamp: string } }>("POST", path, { apiVersion: "authentication.k8s.io/v1", kind: "TokenRequest", spec: { expirationSeconds } });
  return { token: answer.status.token, expiresAt: new Date(answer.status.expirationTimestamp) };
}

// Whom a service account token names (its JWT claims, not verified here: the spoke issued it and the
// hub only holds it), so a token of another account, or of a deleted and recreated one, is replaced.
export function tokenSubject(token: string): { user?: string; uid?: string } | undefined {
  const payload = token.split(".")[1];
  if (!payload) return undefined;
  try {
    const claims = JSON.parse(Buffer.from(payload, "base64url").toString()) as { sub?: string; "kubernetes.io"?: { serviceaccount?: { uid?: string } } };
    return { user: claims.sub, uid: claims["kubernetes.io"]?.serviceaccount?.uid };
  } catch {
    return undefined;
  }
}

const b64 = (text: string) => Buffer.from(text).toString("base64");

// TokenReported=False with why, and nothing else written; judged again at the next change or resync.
async function failed(io: Io<Config>, a: { hub: KubeClient; now: Date }, msa: ManagedServiceAccount, message: string): Promise<Outcome> {
  const conditions = setCondition(msa.status?.conditions, { type: MsaConditionType.TokenReported, status: "False", reason: MsaReason.TokenReportFailed, message }, a.now);
  if (await patchStatusIfChanged(a.hub, ManagedServiceAccountResource, msa, { ...msa.status, conditions })) io.log.warn({ msa: msa.metadata.name, reason: message }, "token not reported");
  return done;
}

// The ServiceAccount of a ManagedServiceAccount that is gone, if this add-on made it.
async function removeServiceAccount(io: Io<Config>, spoke: KubeClient, name: string): Promise<Outcome> {
  const ns = io.config.msaNamespace;
  const sa = await spoke.get<Labelled>(ServiceAccountResource, name, ns);
  if (!sa || !madeHere(sa)) return done;
  try {
    if (await spoke.delete(ServiceAccountResource, name, ns, { uid: sa.metadata.uid })) io.log.info({ msa: name, serviceAccount: `${ns}/${name}` }, "service account deleted with its ManagedServiceAccount");
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
  return done;
}

// Every ManagedServiceAccount of this cluster, read as its identity.
async function everyMsa(event: { cluster?: string }, io: Io<Config>): Promise<KeysOrSkip> {
  const c = io.config;
  if ((event as TickEvent).type === "tick" && event.cluster && event.cluster !== c.hubCluster && event.cluster !== c.managementCluster) return { skip: `tick for cluster ${event.cluster}` };
  return withAgentHub<KeysOrSkip>(
    io.cluster(c.managementCluster),
    c,
    io.clock.now(),
    async (hub) => {
      try {
        return (await hub.list<ManagedServiceAccount>(ManagedServiceAccountResource, { namespace: c.clusterName })).items.map((m) => keyOf(c, m.metadata.name));
      } catch (err) {
        // a hub that does not serve the kind (OCM's own, without the add-on): nothing to report there
        if (isNotFound(err)) return { skip: "the hub serves no ManagedServiceAccounts" };
        throw err;
      }
    },
    (reason) => ({ skip: `not bootstrapped: ${reason}` }),
  );
}
