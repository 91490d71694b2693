// status.clusterClaims from the spoke's ClusterClaims, as OCM's claim reconcile exposes them: every
// claim without the spoke-only label, reserved names first, custom ones cut to the configured maximum.
import { isDeepStrictEqual } from "node:util";
import { ClusterClaimResource, ClusterLabel, ManagedClusterConditionType, ReservedClusterClaimNames, type ClusterClaim } from "../../../shared/api/cluster.ts";
import { customClaimsTruncatedMessage, SpokeStatusEventReason } from "../../../shared/api/spoke-status.ts";
import { isTrue } from "../../../shared/conditions.ts";
import type { Step, StepResult } from "../step.ts";

export type ExposedClaim = { name: string; value?: string };

export const claims: Step = async (draft, { managed, io, notices, settings }): Promise<StepResult> => {
  if (!isTrue(draft.conditions, ManagedClusterConditionType.Joined)) {
    io.log.info({ cluster: io.config.clusterName }, "claims skipped: the cluster has not joined the hub yet");
    return "continue";
  }
  const { items } = await managed.list<ClusterClaim>(ClusterClaimResource, { labelSelector: `!${ClusterLabel.SpokeOnly}` });
  const max = settings.maxCustomClusterClaims; // the agent settings' clusterClaimLimit, else OCM's flag
  const exposed = exposeClaims(items, { maxCustom: max, reservedSuffixes: io.config.reservedClaimSuffixes });
  if (exposed.customFound > max) {
    const message = customClaimsTruncatedMessage(exposed.customFound, max);
    io.log.info({ cluster: io.config.clusterName, found: exposed.customFound, max }, `custom claims truncated: ${message}`);
    // OCM says so on every sync; an event only when the exposed claims change keeps a steady,
    // truncated set from filling the hub with copies of it.
    if (!isDeepStrictEqual(draft.clusterClaims ?? [], exposed.claims)) notices.push({ type: "Normal", reason: SpokeStatusEventReason.CustomClusterClaimsTruncated, message });
  }
  draft.clusterClaims = exposed.claims.length > 0 ? exposed.claims : undefined;
  return "continue";
};

// Reserved claims always show; custom ones up to maxCustom, each group sorted by name.
export function exposeClaims(claims: readonly ClusterClaim[], o: { maxCustom: number; reservedSuffixes: readonly string[] }): { claims: ExposedClaim[]; customFound: number } {
  const reservedNames: readonly string[] = ReservedClusterClaimNames;
  const isReserved = (name: string) => reservedNames.includes(name) || o.reservedSuffixes.some((s) => name.endsWith(s));
  // Go omits an empty value (omitempty); so do we, or the hub's copy would never compare equal.
  const exposed = claims.map((c): ExposedClaim => (c.spec?.value ? { name: c.metadata.name, value: c.spec.value } : { name: c.metadata.name })).sort(byName);
  const reserved = exposed.filter((c) => isReserved(c.name));
  const custom = exposed.filter((c) => !isReserved(c.name));
  return { claims: [...reserved, ...custom.slice(0, o.maxCustom)], customFound: custom.length };
}

// Go compares strings byte by byte; claim names are ASCII, where code units order the same way.
const byName = (a: ExposedClaim, b: ExposedClaim) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
