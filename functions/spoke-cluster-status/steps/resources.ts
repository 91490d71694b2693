// Version, capacity and allocatable of the spoke, as OCM's resource reconcile writes them: the API
// server's gitVersion, node capacity summed over every node, allocatable over the schedulable ones.
import { NodeResource } from "../../../shared/api/kube.ts";
import type { KubeObject } from "../../../shared/kube/client.ts";
import { sumResourceLists } from "../../../shared/quantity.ts";
import type { Step, StepResult } from "../step.ts";

type ResourceList = Record<string, string>;
export type Node = KubeObject & { spec?: { unschedulable?: boolean }; status?: { capacity?: ResourceList; allocatable?: ResourceList } };

export const resources: Step = async (draft, { managed }): Promise<StepResult> => {
  const version = await managed.request<{ gitVersion?: string }>("GET", "/version");
  const { items } = await managed.list<Node>(NodeResource);
  const summed = sumNodeResources(items);
  // OCM lets other components add capacity entries: an entry no node reports is kept as it is.
  const capacity = { ...draft.capacity, ...summed.capacity };
  draft.capacity = nonEmpty(capacity);
  draft.allocatable = nonEmpty(summed.allocatable);
  draft.version = { kubernetes: version.gitVersion };
  return "continue";
};

// In list order, as OCM adds one node after another: the first node's format is the sum's format.
export function sumNodeResources(nodes: readonly Node[]): { capacity: ResourceList; allocatable: ResourceList } {
  return {
    capacity: sumResourceLists(nodes.map((n) => n.status?.capacity ?? {})),
    // an unschedulable (cordoned) node takes no new work, so what it could take does not count
    allocatable: sumResourceLists(nodes.filter((n) => n.spec?.unschedulable !== true).map((n) => n.status?.allocatable ?? {})),
  };
}

// Go's omitempty: an empty list of resources is not written at all.
const nonEmpty = <T extends object>(o: T): T | undefined => (Object.keys(o).length > 0 ? o : undefined);
