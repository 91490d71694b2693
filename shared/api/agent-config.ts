// Group config.ocm-functions.io (ours, not OCM's): AgentConfig, the tunables the hub assigns to a
// cluster's agent, with its condition strings (docs/agent-config.md). The schema is the source of truth
// for the CRD and for the agent's own validation of an assigned config.
import { z } from "zod";
import { RolloutStrategySchema } from "./cluster.ts";
import { type ApiResource, conditionList, int32, intOrString, mapList, typeMeta } from "./meta.ts";
import { AgentSettingsSchema, SettingBounds } from "./agent-settings.ts";

export const AgentConfigGroup = "config.ocm-functions.io";

export const AgentConfigResource = {
  group: AgentConfigGroup,
  version: "v1alpha1",
  kind: "AgentConfig",
  plural: "agentconfigs",
  namespaced: true,
} as const satisfies ApiResource;

// The one a cluster's agent reads: namespace <cluster> on the hub, this name.
export const AgentConfigName = "agent";
// docs/agent-config.md: how long an assigned config must run healthy when spec.trialSeconds is absent.
export const DefaultTrialSeconds = 120;
// A fleet-level config halts its rollout past this share of rolled-back clusters when it says nothing.
export const DefaultMaxRolledBack = "10%";

export { AgentSettingsSchema, FeatureGateNamePattern, LogLevels, SettingBounds, type AgentSettings, type LogLevel } from "./agent-settings.ts";

// No CRD defaults on the spec: a per-cluster object would carry the fleet-level fields' defaults, and
// the agent applies its own default trial (its install-time setting).
export const AgentConfigSpecSchema = z.looseObject({
  settings: z.optional(AgentSettingsSchema),
  // how long the assigned config must run healthy before it becomes last-known-good
  trialSeconds: int32().min(SettingBounds.trialSeconds.min).max(SettingBounds.trialSeconds.max).optional(),
  // fleet-level only: the Placement (in the AgentConfig's namespace) whose clusters get the config
  placementRef: z.looseObject({ name: z.string().min(1) }).optional(),
  // fleet-level only: OCM's rollout strategy (All, Progressive, ProgressivePerGroup)
  rolloutStrategy: RolloutStrategySchema.meta({ default: undefined }).optional(),
  // fleet-level only: an int or a percentage of the placement's clusters (default "10%")
  maxRolledBack: intOrString().optional(),
});
export type AgentConfigSpec = z.infer<typeof AgentConfigSpecSchema>;

const HashRefSchema = z.looseObject({ hash: z.string() });

export const RolloutPhase = { Progressing: "Progressing", Halted: "Halted", Succeeded: "Succeeded" } as const;
export type RolloutPhase = (typeof RolloutPhase)[keyof typeof RolloutPhase];

export const AgentConfigStatusSchema = z.looseObject({
  assigned: HashRefSchema.optional(),
  // what the agent runs now: assigned, or last-known-good after a rollback
  active: HashRefSchema.optional(),
  lastKnownGood: HashRefSchema.optional(),
  // why the assigned config is refused or was rolled back ("" when none)
  lastError: z.string().optional(),
  conditions: conditionList().optional(),
  // fleet-level only, written by the hub's rollout
  rollout: z
    .looseObject({
      phase: z.enum([RolloutPhase.Progressing, RolloutPhase.Halted, RolloutPhase.Succeeded]).optional(),
      updated: z.array(z.string()).optional(),
      rolledBack: z.array(z.string()).optional(),
      // decided clusters the rollout does not write, and why (RolloutReason); at most
      // ExcludedListLimit of them, the ClustersExcluded condition counting them all
      excluded: mapList(z.looseObject({ cluster: z.string(), reason: z.string() }), ["cluster"]).optional(),
    })
    .optional(),
});
export type AgentConfigStatus = z.infer<typeof AgentConfigStatusSchema>;

export const AgentConfigSchema = z.looseObject({
  ...typeMeta,
  spec: AgentConfigSpecSchema.optional(),
  status: AgentConfigStatusSchema.optional(),
});
export type AgentConfig = z.infer<typeof AgentConfigSchema>;

// Modelled on the kubelet's ConfigOK; also mirrored on the ManagedCluster's status.conditions.
export const AgentConfigConditionType = { AgentConfigOK: "AgentConfigOK" } as const;

export const AgentConfigReason = {
  ConfigActive: "ConfigActive",
  ConfigOnTrial: "ConfigOnTrial",
  ConfigRolledBack: "ConfigRolledBack",
  ConfigInvalid: "ConfigInvalid",
  ConfigNotAllowed: "ConfigNotAllowed",
  ConfigNotAssigned: "ConfigNotAssigned",
} as const;
export type AgentConfigReason = (typeof AgentConfigReason)[keyof typeof AgentConfigReason];

// A fleet-level config's conditions, written by the hub's rollout (docs/agent-config.md, "Whom the
// rollout acts for"). PlacementDecisionsTrusted: whether the decisions it read are the scheduler's.
// ClustersExcluded: True when decided clusters are left unwritten (status.rollout.excluded says which).
export const RolloutConditionType = { DecisionsTrusted: "PlacementDecisionsTrusted", ClustersExcluded: "ClustersExcluded" } as const;

export const RolloutReason = {
  DecisionsFromScheduler: "DecisionsFromScheduler",
  PlacementNotFound: "PlacementNotFound",
  SchedulingDisabled: "SchedulingDisabled",
  DecisionsNotOwned: "DecisionsNotOwned",
  NoneExcluded: "NoneExcluded",
  // also the reasons of status.rollout.excluded, in this order of precedence for the condition
  NotInBoundClusterSet: "NotInBoundClusterSet",
  ConfigOwnedElsewhere: "ConfigOwnedElsewhere",
} as const;
export type ExclusionReason = typeof RolloutReason.NotInBoundClusterSet | typeof RolloutReason.ConfigOwnedElsewhere;
export const ExcludedListLimit = 100;

export const AgentConfigMessage = {
  active: (hash: string) => `using assigned config ${hash}, last-known-good`,
  onTrial: (hash: string, until: string) => `trying assigned config ${hash} until ${until}`,
  rolledBack: (o: { lastKnownGood: string; assigned: string; why: string }) => `using last-known-good ${o.lastKnownGood}: assigned config ${o.assigned} failed its trial: ${o.why}`,
  invalid: (error: string) => `assigned config refused: ${error}`,
  notAllowed: (path: string) => `assigned config refused: field ${path} may not be changed remotely on this cluster`,
  notAssigned: "no AgentConfig assigned: using the install-time settings",
} as const;
