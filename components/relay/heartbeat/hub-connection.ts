// The hub as the cluster's own identity, for the heartbeat: hub-kubeconfig-secret is kept by a watch, and
// only when its resourceVersion moved (or the proxy the agent settings name changed) is the bootstrap
// secret read, the pair judged (OCM's IsHubKubeConfigValid, §3.5) and a new client built, with a watch
// on the ManagedCluster through it. A rotated certificate or a new proxy is picked up by the next period;
// an unchanged one costs no request at all.
import { parse, stringify } from "yaml";
import { ManagedClusterResource } from "../../../shared/api/cluster-constants.ts";
import type { ManagedCluster } from "../../../shared/api/cluster.ts";
import { SecretResource } from "../../../shared/api/kube.ts";
import { HubSecretKey } from "../../../shared/api/registration.ts";
import { clientWithSecretFiles, hubEndpoint, judgeHubSecret, secretText, type AgentSecrets, type Secret } from "../../../shared/hub-credentials.ts";
import type { KubeClient } from "../../../shared/kube/client.ts";
import type { ReflectorLog } from "../../../shared/kube/reflector.ts";
import { watchedObject, type Watched } from "./watched.ts";

// judgeHubSecret's reason for a certificate past its notAfter: the one state a restart into
// re-bootstrap fixes, so the health endpoint reports it.
export const ExpiredCertificateReason = "the client certificate has expired";

// proxyURL: the proxy renewals go through ("" when none). cluster: the ManagedCluster, watched through hub.
export type HubConnection = { hub: KubeClient; cluster: Watched<ManagedCluster>; identity: string; notAfter: Date; proxyURL: string };
export type ConnectionState = { ok: true; connection: HubConnection } | { ok: false; reason: string; certificateExpired: boolean };

export type HubConnections = {
  // Throws when the management cluster cannot be read; the caller classifies the error. proxyURL
  // overrides the hub kubeconfig's proxy-url ("" for none); undefined keeps the kubeconfig's. fresh:
  // read the hub secret with a GET rather than trust the watch (see Watched).
  current(now: Date, proxyURL?: string, fresh?: boolean): Promise<ConnectionState>;
  close(): void;
};

// log: where the watches say their failures, once each.
export function hubConnections(spoke: KubeClient, secrets: AgentSecrets, log: ReflectorLog): HubConnections {
  const hubSecret = watchedObject<Secret>(spoke, SecretResource, secrets.hubSecret, secrets.agentNamespace, log);
  let cached: { version: string; proxyURL?: string; state: ConnectionState } | undefined;
  const closeCached = () => {
    if (!cached?.state.ok) return;
    cached.state.connection.cluster.close();
    cached.state.connection.hub.close();
  };
  return {
    async current(now, proxyURL, fresh) {
      const hub = await hubSecret.get({ fresh });
      // A changed bootstrap kubeconfig makes the registration re-bootstrap, which rewrites this secret:
      // its resourceVersion alone tells when to look again.
      const version = hub?.metadata.resourceVersion ?? "";
      if (!cached || cached.version !== version || cached.proxyURL !== proxyURL) {
        const bootstrap = await spoke.get<Secret>(SecretResource, secrets.bootstrapSecret, secrets.agentNamespace);
        closeCached();
        cached = { version, proxyURL, state: judgeSecrets({ bootstrapSecret: bootstrap, hubSecret: hub, clusterName: secrets.clusterName, now, proxyURL, log }) };
      }
      return expiredBy(cached.state, now);
    },
    // Ends the watches and any request in flight to the hub. Safe to call more than once.
    close() {
      hubSecret.close();
      closeCached();
    },
  };
}

function judgeSecrets(o: { bootstrapSecret?: Secret; hubSecret?: Secret; clusterName: string; now: Date; proxyURL?: string; log: ReflectorLog }): ConnectionState {
  const { bootstrapSecret, hubSecret, clusterName, now } = o;
  const fail = (reason: string, expired = false): ConnectionState => ({ ok: false, reason, certificateExpired: expired });
  const bootstrapText = secretText(bootstrapSecret, HubSecretKey.Kubeconfig);
  if (!bootstrapText) return fail("no bootstrap kubeconfig");
  try {
    const judged = judgeHubSecret({ hubSecret, bootstrap: hubEndpoint(bootstrapText), clusterName, now });
    if (!judged.valid) return fail(judged.reason, judged.expired === true);
    // The secret stays as the registration wrote it (and judgeHubSecret compares its proxy-url with the
    // bootstrap one): the settings' proxy goes only into the client built from it.
    const hub = clientWithSecretFiles(withProxyURL(secretText(hubSecret, HubSecretKey.Kubeconfig)!, o.proxyURL), hubSecret!);
    const proxyURL = hub.cluster.proxyUrl ?? "";
    const cluster = watchedObject<ManagedCluster>(hub, ManagedClusterResource, clusterName, undefined, o.log);
    return { ok: true, connection: { hub, cluster, identity: judged.cert.commonName, notAfter: judged.cert.notAfter, proxyURL } };
  } catch (err) {
    return fail(`unusable agent secrets: ${err instanceof Error ? err.message : String(err)}`);
  }
}

type ClusterEntries = { clusters?: { name: string; cluster: Record<string, unknown> }[] };

// The kubeconfig with proxy-url set on its cluster (the hub kubeconfig names only the hub), or removed
// for "". undefined leaves it as it is.
export function withProxyURL(kubeconfigText: string, proxyURL: string | undefined): string {
  if (proxyURL === undefined) return kubeconfigText;
  const doc = parse(kubeconfigText) as ClusterEntries;
  for (const entry of doc.clusters ?? []) {
    if (proxyURL) entry.cluster["proxy-url"] = proxyURL;
    else delete entry.cluster["proxy-url"];
  }
  return stringify(doc);
}

// A certificate expires without its secret changing.
function expiredBy(state: ConnectionState, now: Date): ConnectionState {
  if (state.ok && now.getTime() >= state.connection.notAfter.getTime()) return { ok: false, reason: ExpiredCertificateReason, certificateExpired: true };
  return state;
}
