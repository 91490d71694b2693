// Clients per cluster name for a function process: kubeconfig files in a directory
// (<dir>/<cluster>.kubeconfig), or the pod's in-cluster identity for the cluster it runs in.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { KubeClient } from "./client.ts";

export type ClusterClients = (cluster: string) => KubeClient;

// Kubeconfig text per cluster, e.g. what the local harness minted for each function's identity.
export function clientsFromKubeconfigs(kubeconfigs: Readonly<Record<string, string>>): ClusterClients {
  const cache = new Map<string, KubeClient>();
  return (cluster) => {
    let c = cache.get(cluster);
    if (!c) {
      const text = kubeconfigs[cluster];
      if (!text) throw new Error(`no credentials for cluster ${cluster}`);
      c = KubeClient.fromKubeconfig(text);
      cache.set(cluster, c);
    }
    return c;
  };
}

// Production wiring: OCM_KUBECONFIG_DIR holds <cluster>.kubeconfig files; the cluster named by
// OCM_CLUSTER_NAME (default "hub") may instead use the pod's service account.
export function clientsFromEnv(env: NodeJS.ProcessEnv = process.env): ClusterClients {
  const dir = env.OCM_KUBECONFIG_DIR;
  const home = env.OCM_CLUSTER_NAME ?? "hub";
  const cache = new Map<string, KubeClient>();
  return (cluster) => {
    let c = cache.get(cluster);
    if (!c) {
      const file = dir ? join(dir, `${cluster}.kubeconfig`) : undefined;
      if (file && existsSync(file)) c = KubeClient.fromKubeconfigFile(file);
      else if (cluster === home) c = KubeClient.inCluster();
      else throw new Error(`no credentials for cluster ${cluster} (looked for ${file ?? "OCM_KUBECONFIG_DIR"})`);
      cache.set(cluster, c);
    }
    return c;
  };
}
