// Available while the add-on's cluster is Unknown (OCM hub add-on health-check controller, §4.5): the
// spoke agent that reports add-on health has gone quiet, so every add-on of the cluster takes the
// cluster's Available status, reason and message. Otherwise Available is the spoke's lease controller's
// (healthCheck mode Lease) or, for a template add-on (mode Customized), the health step's.
import { findCondition, setCondition } from "../../../shared/conditions.ts";
import { ManagedClusterConditionType } from "../../../shared/api/cluster.ts";
import { AddOnConditionType } from "../../../shared/api/addon.ts";
import type { AddOnStatus, Scene } from "../scene.ts";

export async function clusterHealth(s: Scene, status: AddOnStatus): Promise<void> {
  const available = findCondition(s.cluster?.status?.conditions, ManagedClusterConditionType.Available);
  if (available?.status !== "Unknown") return;
  status.conditions = setCondition(status.conditions, { type: AddOnConditionType.Available, status: "Unknown", reason: available.reason, message: available.message }, s.now);
}
