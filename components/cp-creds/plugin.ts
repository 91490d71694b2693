// The ClusterProfile credentials plugin (client-go's exec credential protocol, client.authentication.k8s.io/v1),
// as OCM's managed-serviceaccount ships it (cp-creds): a consumer of the cluster inventory names it for the
// access provider "open-cluster-management" with --managed-serviceaccount=<name> and provideClusterInfo;
// it reads the cluster's name from the exec extension the ClusterProfile carries, and prints the token of
// that ManagedServiceAccount from the Secret "<cluster>-<name>" that clusterprofile-credentials copied into
// the consumer's own namespace on the hub. It reads nothing else, and needs only get on that Secret.
import { readFileSync, existsSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { parse } from "yaml";
import { KubeClient } from "../../shared/kube/client.ts";
import { SecretResource } from "../../shared/api/kube.ts";
import type { Secret } from "../../shared/hub-credentials.ts";

export const ProviderName = "open-cluster-management";
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

export type ExecInfo = { apiVersion?: string; kind?: string; spec?: { cluster?: { server?: string; config?: { clusterName?: string } } } };

// The ExecCredential a consumer's client-go reads on stdout.
export function execCredential(token: string): string {
  return JSON.stringify({ kind: "ExecCredential", apiVersion: "client.authentication.k8s.io/v1", spec: { interactive: false }, status: { token } });
}

// What was asked: the ManagedServiceAccount's name (--managed-serviceaccount) and the cluster's (from
// KUBERNETES_EXEC_INFO, which client-go sets with provideClusterInfo).
export function request(argv: readonly string[], env: NodeJS.ProcessEnv): { msa: string; cluster: string } {
  let msa = "";
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a.startsWith("--managed-serviceaccount=")) msa = a.slice("--managed-serviceaccount=".length);
    else if (a === "--managed-serviceaccount") msa = argv[++i] ?? "";
  }
  if (!msa) throw new Error("--managed-serviceaccount flag is required");
  const text = env.KUBERNETES_EXEC_INFO;
  if (!text) throw new Error("failed to read KUBERNETES_EXEC_INFO: KUBERNETES_EXEC_INFO env var is unset or empty");
  let info: ExecInfo;
  try {
    info = JSON.parse(text) as ExecInfo;
  } catch (err) {
    throw new Error(`failed to read KUBERNETES_EXEC_INFO: ${(err as Error).message}`);
  }
  if (info.apiVersion !== "client.authentication.k8s.io/v1" || info.kind !== "ExecCredential") throw new Error(`unexpected ExecCredential type (expect v1), got ${info.apiVersion ?? "none"} ${info.kind ?? ""}`.trimEnd());
  const cluster = info.spec?.cluster;
  if (!cluster?.server) throw new Error("spec.cluster.server is missing in KUBERNETES_EXEC_INFO");
  if (!cluster.config) throw new Error("missing ExecCredential.Spec.Cluster.Config");
  if (!cluster.config.clusterName) throw new Error("missing clusterName in ExecCredential.Spec.Cluster.Config");
  return { msa, cluster: cluster.config.clusterName };
}

// The hub as the consumer itself reaches it: its pod's service account, else $KUBECONFIG, else ~/.kube/config;
// and its namespace: $NAMESPACE, the pod's, the kubeconfig context's, else "default".
function hub(env: NodeJS.ProcessEnv): { client: KubeClient; namespace: string } {
  const inPod = !!env.KUBERNETES_SERVICE_HOST && existsSync(join(serviceAccountDir, "token"));
  const file = env.KUBECONFIG?.split(":")[0] || join(homedir(), ".kube", "config");
  const client = inPod ? KubeClient.inCluster() : KubeClient.fromKubeconfigFile(file);
  const fromContext = () => {
    const doc = parse(readFileSync(file, "utf8")) as { "current-context"?: string; contexts?: { name: string; context: { namespace?: string } }[] };
    return doc.contexts?.find((c) => c.name === doc["current-context"])?.context.namespace;
  };
  const namespace = env.NAMESPACE || (inPod ? readFileSync(join(serviceAccountDir, "namespace"), "utf8").trim() : fromContext()) || "default";
  return { client, namespace };
}

export async function token(argv: readonly string[], env: NodeJS.ProcessEnv): Promise<string> {
  const asked = request(argv, env);
  const { client, namespace } = hub(env);
  try {
    const name = `${asked.cluster}-${asked.msa}`;
    let secret: Secret | undefined;
    try {
      secret = await client.get<Secret>(SecretResource, name, namespace);
    } catch (err) {
      throw new Error(`failed to get synced credential secret ${namespace}/${name}: ${(err as Error).message}`);
    }
    if (!secret) throw new Error(`failed to get synced credential secret ${namespace}/${name}: not found`);
    const value = secret.data?.token ? Buffer.from(secret.data.token, "base64").toString() : "";
    if (!value) throw new Error(`secret ${namespace}/${name} missing or empty "token" key`);
    return execCredential(value);
  } finally {
    client.close();
  }
}
