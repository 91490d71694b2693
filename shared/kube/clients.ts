// Clients per cluster name for a function process: kubeconfig files in a directory
// (<dir>/<cluster>.kubeconfig), or the pod's in-cluster identity for the cluster it runs in.
import { statSync } from "node:fs";
import { after } from "../timers.ts";
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
// OCM_CLUSTER_NAME (default "hub") may instead use the pod's service account. A file is read again once
// it changes (a mounted Secret rotated, e.g. Hosted mode's external-managed-kubeconfig); the client it
// replaces is closed a little later, once calls already made with it have ended.
const REPLACED_CLIENT_CLOSE_MS = 60_000;
// The cluster a process runs in, whose in-cluster credentials it has.
export const homeClusterOf = (env: NodeJS.ProcessEnv) => env.OCM_CLUSTER_NAME ?? "hub";

export function clientsFromEnv(env: NodeJS.ProcessEnv = process.env): ClusterClients {
  const dir = env.OCM_KUBECONFIG_DIR;
  const home = homeClusterOf(env);
  const cache = new Map<string, { client: KubeClient; mtimeMs?: number }>();
  return (cluster) => {
    const file = dir ? join(dir, `${cluster}.kubeconfig`) : undefined;
    const mtimeMs = file ? statSync(file, { throwIfNoEntry: false })?.mtimeMs : undefined;
    const cached = cache.get(cluster);
    if (cached && cached.mtimeMs === mtimeMs) return cached.client;
    let client: KubeClient;
    if (file && mtimeMs !== undefined) client = KubeClient.fromKubeconfigFile(file);
    else if (cluster === home) client = KubeClient.inCluster();
    else throw new Error(`no credentials for cluster ${cluster} (looked for ${file ?? "OCM_KUBECONFIG_DIR"})`);
    cache.set(cluster, { client, mtimeMs });
    if (cached) after(REPLACED_CLIENT_CLOSE_MS, () => cached.client.close(), { unref: true });
    return client;
  };
}
