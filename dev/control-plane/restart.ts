// Stopping and starting one local cluster's kube-apiserver while its etcd data stays, as a hub outage
// looks to its agents: same URL, same certificates, connections refused in between.
import { dirname } from "node:path";
import { request } from "node:https";
import type { LocalCluster } from "./clusters.ts";
import { startProcess, stopProcess, logTail } from "./processes.ts";

export async function stopApiserver(cluster: LocalCluster): Promise<void> {
  if (cluster.apiserver) await stopProcess(cluster.apiserver);
}

// Starts it again with the arguments it was first started with, and waits for /readyz. The new process
// is cluster.apiserver from then on, and LocalClusters.stop() stops it with the rest.
export async function startApiserver(cluster: LocalCluster, timeoutMs = 60_000): Promise<void> {
  const previous = cluster.apiserver;
  if (!previous) throw new Error(`${cluster.name} has no apiserver to start again`);
  if (previous.child.exitCode === null && previous.child.signalCode === null) return;
  const [binary, ...args] = previous.child.spawnargs;
  cluster.apiserver = startProcess(dirname(cluster.dir), previous.name, binary ?? previous.child.spawnfile, args);
  const deadline = Date.now() + timeoutMs;
  for (let delay = 20; !(await isReady(cluster)); delay = Math.min(delay * 1.5, 250)) {
    if (cluster.apiserver.child.exitCode !== null) throw new Error(`kube-apiserver ${cluster.name} exited on restart:\n${logTail(cluster.apiserver)}`);
    if (Date.now() > deadline) throw new Error(`kube-apiserver ${cluster.name}: not ready ${timeoutMs} ms after a restart`);
    await new Promise((r) => setTimeout(r, delay));
  }
}

function isReady(cluster: LocalCluster): Promise<boolean> {
  return new Promise((resolve) => {
    const req = request(`${cluster.url}/readyz`, { ca: cluster.caPem, timeout: 2_000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on("error", () => resolve(false));
    req.on("timeout", () => req.destroy());
    req.end();
  });
}
