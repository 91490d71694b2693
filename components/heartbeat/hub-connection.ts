// The hub as the cluster's own identity, for the heartbeat: hub-kubeconfig-secret is read every period,
// and only when its resourceVersion moved is the bootstrap secret read, the pair judged (OCM's
// IsHubKubeConfigValid, §3.5) and a new client built. A rotated certificate is picked up within a
// period; an unchanged one costs one small GET.
import { SecretResource } from "../../shared/api/kube.ts";
import { HubSecretKey } from "../../shared/api/registration.ts";
import { clientWithSecretFiles, hubEndpoint, judgeHubSecret, secretText, type AgentSecrets, type Secret } from "../../shared/hub-credentials.ts";
import type { KubeClient } from "../../shared/kube/client.ts";

// judgeHubSecret's reason for a certificate past its notAfter: the one state a restart into
// re-bootstrap fixes, so the health endpoint reports it.
export const ExpiredCertificateReason = "the client certificate has expired";

export type HubConnection = { hub: KubeClient; identity: string; notAfter: Date };
export type ConnectionState = { ok: true; connection: HubConnection } | { ok: false; reason: string; certificateExpired: boolean };

export type HubConnections = {
  // Throws when the management cluster cannot be read; the caller classifies the error.
  current(now: Date): Promise<ConnectionState>;
  close(): void;
};

export function hubConnections(spoke: KubeClient, secrets: AgentSecrets): HubConnections {
  let cached: { version: string; state: ConnectionState } | undefined;
  const closeCached = () => {
    if (cached?.state.ok) cached.state.connection.hub.close();
  };
  return {
    async current(now) {
      const hub = await spoke.get<Secret>(SecretResource, secrets.hubSecret, secrets.agentNamespace);
      // A changed bootstrap kubeconfig makes the registration re-bootstrap, which rewrites this secret:
      // its resourceVersion alone tells when to look again.
      const version = hub?.metadata.resourceVersion ?? "";
      if (!cached || cached.version !== version) {
        const bootstrap = await spoke.get<Secret>(SecretResource, secrets.bootstrapSecret, secrets.agentNamespace);
        closeCached();
        cached = { version, state: judgeSecrets(bootstrap, hub, secrets.clusterName, now) };
      }
      return expiredBy(cached.state, now);
    },
    close: closeCached,
  };
}

function judgeSecrets(bootstrapSecret: Secret | undefined, hubSecret: Secret | undefined, clusterName: string, now: Date): ConnectionState {
  const fail = (reason: string, expired = false): ConnectionState => ({ ok: false, reason, certificateExpired: expired });
  const bootstrapText = secretText(bootstrapSecret, HubSecretKey.Kubeconfig);
  if (!bootstrapText) return fail("no bootstrap kubeconfig");
  try {
    const judged = judgeHubSecret({ hubSecret, bootstrap: hubEndpoint(bootstrapText), clusterName, now });
    if (!judged.valid) return fail(judged.reason, judged.expired === true);
    const hub = clientWithSecretFiles(secretText(hubSecret, HubSecretKey.Kubeconfig)!, hubSecret!);
    return { ok: true, connection: { hub, identity: judged.cert.commonName, notAfter: judged.cert.notAfter } };
  } catch (err) {
    return fail(`unusable agent secrets: ${err instanceof Error ? err.message : String(err)}`);
  }
}

// A certificate expires without its secret changing.
function expiredBy(state: ConnectionState, now: Date): ConnectionState {
  if (state.ok && now.getTime() >= state.connection.notAfter.getTime()) return { ok: false, reason: ExpiredCertificateReason, certificateExpired: true };
  return state;
}
