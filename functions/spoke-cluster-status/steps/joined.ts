// ManagedClusterJoined: set once the hub has accepted the cluster; nothing else runs before that.
import { ManagedClusterConditionType } from "../../../shared/api/cluster.ts";
import { JoinedCondition } from "../../../shared/api/registration.ts";
import { isTrue, setCondition } from "../../../shared/conditions.ts";
import type { Step } from "../step.ts";

export const joined: Step = (draft, { now }) => {
  if (!isTrue(draft.conditions, ManagedClusterConditionType.HubAccepted)) return "stop";
  draft.conditions = setCondition(draft.conditions, JoinedCondition, now);
  return "continue";
};
