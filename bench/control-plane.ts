// Start-up time and memory of the local control planes (etcd + kube-apiserver + kube-controller-manager).
import { startClusters } from "../dev/control-plane/clusters.ts";
import { percentile, ms, mib, rssOf } from "./stats.ts";

const RUNS = 5;

export const controlPlane = {
  name: "control-plane",
  async run() {
    const starts: number[] = [];
    let memory = { etcd: 0, apiserver: 0, controllerManager: 0 };
    for (let i = 0; i < RUNS; i++) {
      const local = await startClusters({ names: ["solo"], log: () => {} });
      starts.push(local.startupMs);
      if (i === RUNS - 1) {
        await new Promise((r) => setTimeout(r, 5_000)); // let informers settle before reading memory
        const c = local.get("solo");
        memory = { etcd: await rssOf(local.etcd.child.pid!), apiserver: await rssOf(c.apiserver!.child.pid!), controllerManager: await rssOf(c.controllerManager!.child.pid!) };
      }
      await local.stop();
    }
    const three = await startClusters({ names: ["hub", "cluster1", "cluster2"], log: () => {} });
    await three.stop();
    return {
      "one cluster ready, with OCM CRDs (median)": ms(percentile(starts, 50)),
      "one cluster ready, with OCM CRDs (max)": ms(Math.max(...starts)),
      "hub + 2 spokes ready, with OCM CRDs": ms(three.startupMs),
      "RSS etcd": mib(memory.etcd),
      "RSS kube-apiserver": mib(memory.apiserver),
      "RSS kube-controller-manager": mib(memory.controllerManager),
      "RSS one cluster in all": mib(memory.etcd + memory.apiserver + memory.controllerManager),
    };
  },
};
