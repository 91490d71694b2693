// Node objects for local spokes, where no kubelet registers any: two nodes with capacity, one of them
// cordoned, so status sync has capacity and allocatable to sum as on a real cluster.
import { NodeResource } from "../../shared/api/kube.ts";
import type { KubeClient, KubeObject } from "../../shared/kube/client.ts";
import { isAlreadyExists } from "../../shared/kube/errors.ts";

const nodes = [
  { name: "local-node-a", unschedulable: false, capacity: { cpu: "4", memory: "16Gi", pods: "110", "ephemeral-storage": "100Gi" }, allocatable: { cpu: "3800m", memory: "15Gi", pods: "110", "ephemeral-storage": "95Gi" } },
  { name: "local-node-b", unschedulable: true, capacity: { cpu: "2", memory: "8Gi", pods: "110", "ephemeral-storage": "50Gi" }, allocatable: { cpu: "1800m", memory: "7Gi", pods: "110", "ephemeral-storage": "45Gi" } },
];

export async function createNodes(admin: KubeClient): Promise<void> {
  for (const n of nodes) {
    try {
      await admin.create<KubeObject>(NodeResource, { metadata: { name: n.name, labels: { "kubernetes.io/hostname": n.name } }, spec: { unschedulable: n.unschedulable } });
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
    }
    await admin.patch(NodeResource, n.name, { status: { capacity: n.capacity, allocatable: n.allocatable } }, { subresource: "status" });
  }
}
