// Multiple hubs (OCM's MultipleHubs gate: --bootstrap-kubeconfigs, --hub-connection-timeout-seconds): an
// ordered list of bootstrap kubeconfigs, one Secret each in the agent namespace. The agent bootstraps with
// the one copied into bootstrap-hub-kubeconfig, and moves to the first usable hub of the list when its hub
// stops accepting it (hubAcceptsClient false) or its lease goes unrenewed past the timeout.
//
// OCM's agent exits for a move and chooses at its next start. A function has no process to restart: it
// copies the chosen kubeconfig over bootstrap-hub-kubeconfig, which re-bootstraps every part of the agent
// that judges its credentials against it (the relay, the heartbeat, every spoke function). Stricter than
// OCM, the old hub's certificate and any pending request go at once, not when the new hub issues one.
import { ManagedClusterLeaseName, ManagedClusterResource, type ManagedCluster } from "../../shared/api/cluster.ts";
import { LeaseResource, SecretResource, SelfSubjectAccessReviewResource } from "../../shared/api/kube.ts";
import { HubSecretKey } from "../../shared/api/registration.ts";
import type { Io, Outcome } from "../../shared/harness.ts";
import { clientWithSecretFiles, hubEndpoint, hubServerOf, judgeHubSecret, secretText, type Secret } from "../../shared/hub-credentials.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { classifyError } from "../../shared/kube/errors.ts";

// On bootstrap-hub-kubeconfig: which Secret of the list it was copied from, and since when the hub has
// not answered (written once when the failures begin, removed when it answers again).
export const SelectedFromAnnotation = "registration.ocm-functions.io/bootstrap-kubeconfig-secret";
export const UnreachableSinceAnnotation = "registration.ocm-functions.io/hub-unreachable-since";

// OCM's words for the two reasons to move, and for a list with no usable hub.
export const NotAcceptedReason = "hub does not accept client";
export const noHubAvailable = (names: readonly string[], cluster: string) => `no bootstrap kubeconfig in [${names.join(" ")}] is available for managed cluster ${cluster}`;

export type HubsConfig = {
  clusterName: string;
  agentNamespace: string;
  bootstrapSecret: string;
  hubSecret: string;
  bootstrapKubeconfigSecrets: string[];
  hubConnectionTimeoutSeconds: number;
  hubCheckMs: number; // how soon to look again while the hub does not answer (OCM's controller: every minute)
};

type Candidate = { index: number; name: string; text: string; server: string };
type Lease = KubeObject & { spec?: { renewTime?: string } };
type Trouble = { reason: string } | { waitMs: number } | undefined;

// The agent's own secrets, as the registration read them: bootstrap-hub-kubeconfig (active), the hub
// secret, and the name of the pending request's.
export type AgentState = { active?: Secret; hubSecret?: Secret; pendingSecret: string };

// undefined: keep the hub in bootstrap-hub-kubeconfig and go on with the registration. An outcome: this
// reconcile is over (it moved, or waits for a hub to answer or to become usable).
export async function keepOrMoveHub(io: Io<HubsConfig>, spoke: KubeClient, now: Date, { active, hubSecret, pendingSecret }: AgentState): Promise<Outcome | undefined> {
  const c = io.config;
  const listed = await Promise.all(c.bootstrapKubeconfigSecrets.map((name) => spoke.get<Secret>(SecretResource, name, c.agentNamespace)));
  const candidates = listed.flatMap((s, index): Candidate[] => {
    const name = c.bootstrapKubeconfigSecrets[index]!;
    const text = secretText(s, HubSecretKey.Kubeconfig);
    const server = text && hubServerOf(text);
    if (!text || !server) {
      if (s) io.log.warn({ secret: name }, "passed over: no readable kubeconfig in this bootstrap kubeconfig secret");
      return [];
    }
    return [{ index, name, text, server }];
  });
  const activeText = secretText(active, HubSecretKey.Kubeconfig);
  const activeServer = activeText && hubServerOf(activeText);
  // As OCM, the hub in use is the listed kubeconfig whose server is the one bootstrapped with.
  const current = candidates.find((k) => k.server === activeServer);
  // The first usable hub of the list but the one that failed. OCM's agent, restarted, would take the
  // hub it failed with again when it still looks usable; this one stays there only when no other is,
  // and then goes on with it (rotation, a pending request) as if nothing had failed.
  const move = async (reason: string): Promise<Outcome | undefined> => {
    for (const k of candidates) {
      if (k === current) continue;
      const refusal = await refusalOf(k, c.clusterName);
      if (!refusal) return select({ io, spoke, active, hubSecret, pendingSecret }, k, reason);
      io.log.info({ index: k.index, secret: k.name, refusal }, "failed to check bootstrap kubeconfig");
    }
    io.log.warn({ reason }, noHubAvailable(c.bootstrapKubeconfigSecrets, c.clusterName));
    return current ? undefined : { recheckInMs: c.hubCheckMs };
  };
  if (!current) return move(activeText ? "the hub bootstrapped with is in none of the bootstrap kubeconfigs" : "no hub selected yet");
  // A listed kubeconfig that changed is copied over; as after OCM's restart for it, the hub secret is
  // judged against it (a new token keeps the certificate; a new CA or cluster entry re-bootstraps).
  if (current.text !== activeText) return select({ io, spoke, active, hubSecret, pendingSecret, sameHub: true }, current, "the bootstrap kubeconfig changes");
  const trouble = await troubleWith({ io, spoke, now, active: active!, hubSecret, current });
  if (trouble === undefined) return undefined;
  if ("waitMs" in trouble) return { recheckInMs: trouble.waitMs };
  io.log.warn({ reason: trouble.reason }, "failed to connect to hub, reselecting a bootstrap kubeconfig");
  return move(trouble.reason);
}

const annotationsOf = (s: Secret | undefined) => (s?.metadata.annotations ?? {}) as Record<string, string>;

// The unreachable mark on bootstrap-hub-kubeconfig, set (a time) or cleared (null), on the version judged.
async function markUnreachable(o: { io: Io<HubsConfig>; spoke: KubeClient; active: Secret }, since: string | null): Promise<void> {
  const c = o.io.config;
  await o.spoke.patch(SecretResource, c.bootstrapSecret, { metadata: { resourceVersion: o.active.metadata.resourceVersion, annotations: { [UnreachableSinceAnnotation]: since } } }, { namespace: c.agentNamespace });
}

// Whether the hub bootstrapped with still takes this agent: it accepts the cluster, and the cluster's lease
// was renewed within the timeout. While the hub does not answer, the time since it stopped counts instead.
async function troubleWith(o: { io: Io<HubsConfig>; spoke: KubeClient; now: Date; active: Secret; hubSecret?: Secret; current: Candidate }): Promise<Trouble> {
  const c = o.io.config;
  const timeoutMs = c.hubConnectionTimeoutSeconds * 1000;
  const judged = judgeHubSecret({ hubSecret: o.hubSecret, bootstrap: hubEndpoint(o.current.text), clusterName: c.clusterName, now: o.now });
  const bootstrap = KubeClient.fromKubeconfig(o.current.text);
  const hub = judged.valid ? clientWithSecretFiles(secretText(o.hubSecret, HubSecretKey.Kubeconfig)!, o.hubSecret!) : undefined;
  try {
    let trouble: Trouble;
    try {
      // a lease is only judged from the moment this certificate was written: before, an old renewal of
      // an earlier join (or a cluster accepted long before its CSR was approved) is not this agent's
      const since = Date.parse(String(o.hubSecret?.metadata.creationTimestamp ?? "")) || 0;
      trouble = hub ? await acceptedAndRenewed(hub, bootstrap, c.clusterName, o.now, timeoutMs, since) : await reachable(bootstrap, c.clusterName);
    } catch (err) {
      const kind = classifyError(err);
      if (kind !== "transient" && kind !== "unauthorized" && kind !== "forbidden") throw err;
      return await unanswered(o, timeoutMs, (err as Error).message);
    }
    // cleared only with nothing else to do: a move rewrites the secret from what was read, without it
    if (trouble === undefined && annotationsOf(o.active)[UnreachableSinceAnnotation]) {
      await markUnreachable(o, null);
      o.io.log.info({}, "the hub answers again");
    }
    return trouble;
  } finally {
    bootstrap.close();
    hub?.close();
  }
}

// Bootstrapped. The ManagedCluster is read as the cluster's identity, or as the bootstrap one once the hub
// has taken the cluster's permissions away (it does so when it stops accepting the cluster).
async function acceptedAndRenewed(hub: KubeClient, bootstrap: KubeClient, cluster: string, now: Date, timeoutMs: number, sinceMs: number): Promise<Trouble> {
  let mc: ManagedCluster | undefined;
  try {
    mc = await hub.get<ManagedCluster & KubeObject>(ManagedClusterResource, cluster);
  } catch (err) {
    const kind = classifyError(err);
    if (kind !== "forbidden" && kind !== "unauthorized") throw err;
    mc = await bootstrap.get<ManagedCluster & KubeObject>(ManagedClusterResource, cluster);
  }
  if (mc?.spec?.hubAcceptsClient === false) return { reason: NotAcceptedReason };
  const renewTime = (await hub.get<Lease>(LeaseResource, ManagedClusterLeaseName, cluster))?.spec?.renewTime;
  if (renewTime && now.getTime() - Math.max(Date.parse(renewTime), sinceMs) > timeoutMs) return { reason: `lease out-of-date: last renewed at ${renewTime}` };
  return undefined;
}

// Not yet bootstrapped: a ManagedCluster that does not accept the client yet is the usual wait, so only
// whether the hub answers the bootstrap identity counts.
async function reachable(bootstrap: KubeClient, cluster: string): Promise<Trouble> {
  await bootstrap.get(ManagedClusterResource, cluster);
  return undefined;
}

async function unanswered(o: { io: Io<HubsConfig>; spoke: KubeClient; now: Date; active: Secret }, timeoutMs: number, error: string): Promise<Trouble> {
  const c = o.io.config;
  const since = annotationsOf(o.active)[UnreachableSinceAnnotation];
  if (!since) {
    await markUnreachable(o, o.now.toISOString());
    o.io.log.warn({ error, timeoutSeconds: c.hubConnectionTimeoutSeconds }, "failed to reach the hub: counting toward the hub connection timeout");
    return { waitMs: Math.min(c.hubCheckMs, timeoutMs) };
  }
  const left = Date.parse(since) + timeoutMs - o.now.getTime();
  if (left <= 0) return { reason: `hub unreachable since ${since}: ${error}` };
  o.io.log.info({ error, since, leftMs: left }, "the hub still does not answer");
  return { waitMs: Math.min(c.hubCheckMs, left) };
}

// OCM's check of a bootstrap kubeconfig: the hub answers its identity, lets it register the cluster and
// request a certificate (SelfSubjectAccessReviews), and does not refuse the cluster. undefined: usable.
const BootstrapAccess = [
  ...["create", "get"].map((verb) => ({ group: ManagedClusterResource.group, resource: ManagedClusterResource.plural, verb })),
  ...["create", "get", "list", "watch"].map((verb) => ({ group: "certificates.k8s.io", resource: "certificatesigningrequests", verb })),
];

async function refusalOf(k: Candidate, cluster: string): Promise<string | undefined> {
  const client = KubeClient.fromKubeconfig(k.text);
  try {
    const reviews = await Promise.all(
      BootstrapAccess.map((a) => client.create<KubeObject & { status?: { allowed?: boolean } }>(SelfSubjectAccessReviewResource, { metadata: {}, spec: { resourceAttributes: a } } as KubeObject)),
    );
    const denied = BootstrapAccess.filter((_, i) => reviews[i]?.status?.allowed !== true);
    if (denied.length > 0) return `the bootstrap identity may not ${denied.map((a) => `${a.verb} ${a.resource}`).join(", ")}`;
    const mc = await client.get<ManagedCluster & KubeObject>(ManagedClusterResource, cluster);
    if (mc?.spec?.hubAcceptsClient === false) return NotAcceptedReason;
    return undefined;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  } finally {
    client.close();
  }
}

// bootstrap-hub-kubeconfig becomes the chosen kubeconfig; the old hub's certificate and any request still
// pending there are deleted, so the next reconcile bootstraps against the new hub from nothing.
async function select(o: { io: Io<HubsConfig>; spoke: KubeClient; active?: Secret; hubSecret?: Secret; pendingSecret: string; sameHub?: boolean }, k: Candidate, reason: string): Promise<Outcome> {
  const c = o.io.config;
  const data = { [HubSecretKey.Kubeconfig]: Buffer.from(k.text).toString("base64") };
  const annotations: Record<string, string> = { ...annotationsOf(o.active), [SelectedFromAnnotation]: k.name };
  delete annotations[UnreachableSinceAnnotation];
  if (o.active) await o.spoke.update<Secret>(SecretResource, { ...o.active, metadata: { ...o.active.metadata, annotations }, data });
  else await o.spoke.create<Secret>(SecretResource, { metadata: { name: c.bootstrapSecret, namespace: c.agentNamespace, annotations }, type: "Opaque", data });
  if (!o.sameHub) {
    if (o.hubSecret) await o.spoke.delete(SecretResource, c.hubSecret, c.agentNamespace, { uid: o.hubSecret.metadata.uid });
    await o.spoke.delete(SecretResource, o.pendingSecret, c.agentNamespace);
  }
  o.io.log.info({ index: k.index, secret: k.name, server: k.server, reason }, `Select bootstrap kubeconfig with index ${k.index} and secret ${k.name}`);
  return { recheckInMs: 0 };
}
