// Where each cluster's client comes from: a static kubeconfig (text, file, in-cluster), or a Secret on
// another cluster that is watched, with a fallback Secret used while the first is missing or invalid.
// When the chosen credentials change, subscribers (the cluster's sources) restart their watches.
import { createHash, createPrivateKey, X509Certificate } from "node:crypto";
import { SecretResource } from "../../shared/api/kube.ts";
import type { Clock } from "../../shared/clock.ts";
import type { Log } from "../../shared/harness.ts";
import { KubeClient } from "../../shared/kube/client.ts";
import { clientWithSecretFiles, secretText, type Secret } from "../../shared/hub-credentials.ts";
import type { CredentialsConfig, SecretRef, WatchConfig } from "./config.ts";
import type { Connection, CredentialProvider } from "./connection.ts";
import { startSource, type Source } from "./source.ts";
import { fieldSelectorOf } from "../../shared/selector-query.ts";
import { after } from "../../shared/timers.ts";

export type { Connection, CredentialProvider, CredentialStatus } from "./connection.ts";

type Resolved = { ok: true; client: KubeClient; user: string; fingerprint: string; notAfter?: Date } | { ok: false; reason: string };

export function staticCredentials(client: KubeClient, origin: string): CredentialProvider {
  return fixed({ client, origin, user: userOf(client) });
}

export function inClusterCredentials(): CredentialProvider {
  return fixed({ client: KubeClient.inCluster(), origin: "in-cluster service account", user: "serviceaccount" });
}

function fixed(conn: Connection): CredentialProvider {
  return {
    current: () => conn,
    subscribe: () => () => {},
    status: () => ({ origin: conn.origin, user: conn.user, problems: [] }),
    async stop() {
      conn.client.close();
    },
  };
}

export type SecretCredentialsOptions = {
  cluster: string; // whose credentials these are, for logs
  secret: SecretRef;
  fallback?: SecretRef;
  readerFor(cluster: string): CredentialProvider; // credentials for the cluster a secret lives on
  watch: WatchConfig;
  clock: Clock;
  log: Log;
};

export function secretCredentials(o: SecretCredentialsOptions): CredentialProvider {
  const listeners = new Set<() => void>();
  let current: (Connection & { fingerprint: string }) | undefined;
  let problems: string[] = [];
  let expiryTimer: NodeJS.Timeout | undefined;
  let stopped = false;

  const watchSecret = (ref: SecretRef): Source =>
    startSource({
      name: `credentials for ${o.cluster}: ${ref.cluster}/${ref.namespace}/${ref.name}`,
      cluster: ref.cluster,
      resource: SecretResource,
      namespace: ref.namespace,
      fieldSelector: fieldSelectorOf({ "metadata.name": ref.name }),
      credentials: o.readerFor(ref.cluster),
      watch: o.watch,
      log: o.log,
      onChange: () => choose(),
    });

  const refs = [o.secret, ...(o.fallback ? [o.fallback] : [])];
  const sources = refs.map(watchSecret);
  // Secrets that do not exist yet produce no change; judge once both have been listed.
  void Promise.all(sources.map((s) => s.ready)).then(choose);

  // The first secret that resolves wins; a change of the chosen credentials restarts the watches.
  function choose(): void {
    if (stopped) return;
    const results = refs.map((ref, i) => ({ ref, result: resolveSecretKubeconfig(sources[i]!.objects()[0], ref, o.clock.now()) }));
    problems = results.flatMap(({ result }) => (result.ok ? [] : [result.reason]));
    const chosen = results.find((r) => r.result.ok);
    const ok = chosen?.result.ok ? chosen.result : undefined;
    for (const { result } of results) if (result.ok && result !== ok) result.client.close();
    scheduleExpiryCheck(ok?.notAfter);
    if ((ok?.fingerprint ?? "") === (current?.fingerprint ?? "")) {
      ok?.client.close();
      return;
    }
    const previous = current;
    current = ok && chosen ? { client: ok.client, origin: `secret ${chosen.ref.cluster}/${chosen.ref.namespace}/${chosen.ref.name}`, user: ok.user, fingerprint: ok.fingerprint } : undefined;
    if (current) o.log.info({ cluster: o.cluster, origin: current.origin, user: current.user, passedOver: problems }, "credentials loaded: restarting this cluster's watches");
    else o.log.warn({ cluster: o.cluster, problems }, "no usable credentials: this cluster's watches wait");
    for (const l of listeners) l();
    previous?.client.close();
  }

  // A certificate can expire without its secret changing: look again just after it does.
  function scheduleExpiryCheck(notAfter: Date | undefined): void {
    clearTimeout(expiryTimer);
    if (!notAfter) return;
    expiryTimer = after(notAfter.getTime() - o.clock.now().getTime() + 1_000, choose, { floorMs: 1_000, unref: true });
  }

  return {
    current: () => current,
    subscribe(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    status: () => ({ origin: current?.origin, user: current?.user, problems }),
    async stop() {
      stopped = true;
      clearTimeout(expiryTimer);
      await Promise.all(sources.map((s) => s.stop()));
      current?.client.close();
      listeners.clear();
    },
  };
}

// OCM's hub kubeconfig names tls.crt/tls.key as files of the directory the secret is mounted as; they
// are read from the secret's own data (shared/hub-credentials.ts). Beyond parsing, the certificate must
// be unexpired and match its key, so a half-written rotation falls back instead of failing every call.
export function resolveSecretKubeconfig(secret: Secret | undefined, ref: SecretRef, now: Date): Resolved {
  const where = `secret ${ref.namespace}/${ref.name} on ${ref.cluster}`;
  if (!secret) return { ok: false, reason: `${where} does not exist` };
  const text = secretText(secret, ref.key);
  if (!text) return { ok: false, reason: `${where} has no key ${ref.key}` };
  let client: KubeClient;
  try {
    client = clientWithSecretFiles(text, secret);
  } catch (err) {
    return { ok: false, reason: `${where}: ${err instanceof Error ? err.message : String(err)}` };
  }
  const fail = (reason: string): Resolved => {
    client.close();
    return { ok: false, reason: `${where}: ${reason}` };
  };
  const user = client.user;
  const fingerprint = createHash("sha256").update(JSON.stringify([client.cluster, user])).digest("hex");
  if (!user.certPem) return { ok: true, client, user: user.name, fingerprint };
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(user.certPem);
  } catch (err) {
    return fail(`unreadable client certificate: ${err instanceof Error ? err.message : String(err)}`);
  }
  const notAfter = new Date(cert.validTo);
  if (notAfter <= now) return fail(`the client certificate expired at ${notAfter.toISOString()}`);
  try {
    if (user.keyPem && !cert.checkPrivateKey(createPrivateKey(user.keyPem))) return fail("the client certificate and key do not match (a rotation half written?)");
  } catch (err) {
    return fail(`unreadable client key: ${err instanceof Error ? err.message : String(err)}`);
  }
  return { ok: true, client, user: commonName(cert) ?? user.name, notAfter, fingerprint };
}

const commonName = (cert: X509Certificate) => /(?:^|\n)CN=([^\n]*)/.exec(cert.subject)?.[1];

// For logs and status: the client certificate's CN when there is one, else the kubeconfig's user name.
function userOf(client: KubeClient): string {
  const user = client.user;
  if (user.certPem) {
    try {
      return commonName(new X509Certificate(user.certPem)) ?? user.name;
    } catch {
      // not a certificate we can read: the entry's name will do for a log line
    }
  }
  return user.name || "unknown";
}

export type ProviderDeps = { watch: WatchConfig; clock: Clock; log: Log };

// Builds every cluster's provider: static ones first, since secret-backed ones read through them.
export function credentialProviders(clusters: Readonly<Record<string, CredentialsConfig>>, deps: ProviderDeps): Map<string, CredentialProvider> {
  const providers = new Map<string, CredentialProvider>();
  for (const [cluster, c] of Object.entries(clusters)) {
    if ("kubeconfig" in c) providers.set(cluster, staticCredentials(KubeClient.fromKubeconfig(c.kubeconfig), `kubeconfig for ${cluster}`));
    else if ("kubeconfigFile" in c) providers.set(cluster, staticCredentials(KubeClient.fromKubeconfigFile(c.kubeconfigFile), `file ${c.kubeconfigFile}`));
    else if ("inCluster" in c) providers.set(cluster, inClusterCredentials());
  }
  for (const [cluster, c] of Object.entries(clusters)) {
    if (!("secret" in c)) continue;
    const readerFor = (from: string) => {
      const reader = providers.get(from);
      if (!reader || from === cluster) throw new Error(`cluster ${cluster}: its secrets are on ${from}, which has no static credentials`);
      return reader;
    };
    providers.set(cluster, secretCredentials({ cluster, secret: c.secret, fallback: c.fallback, readerFor, ...deps }));
  }
  return providers;
}
