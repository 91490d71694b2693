// Health timings on a local fleet: from stopping a spoke's heartbeat sidecar to the hub's
// Available=Unknown, with OCM's grace (5 leases) and the fast setting (2 leases); and status-sync
// latency from a Node change on the spoke to the ManagedCluster's patched capacity.
import { startClusters } from "../dev/control-plane/clusters.ts";
import { startFleet, type Fleet } from "../dev/local/fleet.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { NodeResource } from "../shared/api/kube.ts";
import { ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { findCondition } from "../shared/conditions.ts";
import { percentile, ms } from "./stats.ts";
import { untilTrue } from "./until.ts";

const LEASE_SECONDS = 4;
const NODE_CHANGES = 20;

const availableOf = async (fleet: Fleet, name: string) =>
  findCondition((await fleet.hub.get<ManagedCluster & KubeObject>(ManagedClusterResource, name))?.status?.conditions, "ManagedClusterConditionAvailable")?.status;

async function stopToUnknown(multiplier: number): Promise<number> {
  const fleet = await startFleet({ spokes: [{ name: "c1", autoApprove: true }], resyncMs: 1_000, leaseDurationSeconds: LEASE_SECONDS, leaseGraceMultiplier: multiplier });
  try {
    await untilTrue(async () => (await availableOf(fleet, "c1")) === "True", "Available=True", 60_000);
    await new Promise((r) => setTimeout(r, LEASE_SECONDS * 1_000)); // a steady state: a renewal or two behind us
    await fleet.stopHeartbeat("c1");
    return await untilTrue(async () => (await availableOf(fleet, "c1")) === "Unknown", "Available=Unknown", 120_000);
  } finally {
    await fleet.stop();
  }
}

export const health = {
  name: "health",
  async run() {
    const ocm = await stopToUnknown(5);
    const fast = await stopToUnknown(2);

    const clusters = await startClusters({ names: ["hub", "c1"], log: () => {} });
    const fleet = await startFleet({ clusters, spokes: [{ name: "c1", autoApprove: true }], resyncMs: 60_000 });
    const spoke = KubeClient.fromKubeconfig(clusters.get("c1").adminKubeconfig);
    const samples: number[] = [];
    try {
      await untilTrue(async () => (await availableOf(fleet, "c1")) === "True", "Available=True", 60_000);
      for (let i = 1; i <= NODE_CHANGES; i++) {
        const pods = String(110 + i);
        await spoke.patch(NodeResource, "local-node-a", { status: { capacity: { pods } } }, { subresource: "status" });
        // Node a carries 110 + i pods and node b 110: the cluster's capacity is their sum.
        const want = String(220 + i);
        samples.push(await untilTrue(async () => (await fleet.hub.get<ManagedCluster & KubeObject>(ManagedClusterResource, "c1"))?.status?.capacity?.pods === want, "capacity", 30_000));
      }
    } finally {
      spoke.close();
      await fleet.stop();
      await clusters.stop();
    }
    return {
      "lease duration (bench)": `${LEASE_SECONDS} s`,
      "sidecar stop → Unknown, OCM grace (5 leases)": ms(ocm),
      "sidecar stop → Unknown, fast grace (2 leases)": ms(fast),
      "Node change → ManagedCluster status, p50": ms(percentile(samples, 50)),
      "Node change → ManagedCluster status, p95": ms(percentile(samples, 95)),
    };
  },
};
