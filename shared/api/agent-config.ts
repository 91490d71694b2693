// Group config.ocm-functions.io (ours, not OCM's): AgentConfig, the tunables the hub assigns to a
// cluster's agent, with its condition strings (docs/agent-config.md). The schema is the source of truth
// for the CRD and for the agent's own validation of an assigned config.
import { z } from "zod";
import { RolloutStrategySchema } from "./cluster.ts";
import { type ApiResource, conditionList, int32, intOrString, mapList, typeMeta } from "./meta.ts";
import { parseProxyURL } from "../kube/proxy.ts";

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

export const LogLevels = ["error", "warn", "info", "debug"] as const;
export type LogLevel = (typeof LogLevels)[number];

// Issue 23: every setting a remote party can assign is bounded, so that no value the schema accepts can
// harm the agent, and the CRD says the same wherever OpenAPI can express it (the agent's own check is
// the one that counts: an agent may meet an AgentConfig written under an older CRD).
// - the intervals: at least a second (OCM's own tests tick that fast), at most a day: a day is 60 times
//   the slowest of OCM's own resyncs (the 60 min of ManagedClusterCreatingController) and far below the
//   2^31-1 ms a Node timer can hold; relayResyncSeconds 2147484 used to become a tick every millisecond.
// - clusterClaimLimit: OCM's --max-custom-cluster-claims has no upper bound; 1,000 claims of OCM's
//   largest (a 253-character name, a 1,024-character value) stay under etcd's 1.5 MiB object limit.
// - trialSeconds: at least a second, at most a day, as the intervals.
// - proxyURL: at most 2,048 characters, percent escapes well formed (the CRD's pattern), and usable as
//   the agent reads it (its credentials decode, SOCKS5 ones fit RFC 1929): shared/kube/proxy.ts.
// - features: at most 64 gates, each named as Kubernetes and OCM name theirs (a letter, then letters
//   and digits, at most 63): a dot in a name would make `features.a.b` ambiguous to the allow-list.
export const SettingBounds = {
  statusSyncIntervalSeconds: { min: 1, max: 86_400 },
  clusterClaimLimit: { min: 0, max: 1_000 },
  relayResyncSeconds: { min: 1, max: 86_400 },
  trialSeconds: { min: 1, max: 86_400 },
  proxyURLMaxLength: 2_048,
  featureGates: 64,
  featureGateNameMaxLength: 63,
} as const;

const bounded = (b: { min: number; max: number }) => int32().min(b.min).max(b.max);

// http, https or socks5 (client-go's proxy-url schemes), no whitespace, every % the start of an escape.
const ProxyURLPattern = "^((https?|socks5)://([^\\s%]|%[0-9A-Fa-f]{2})+)?$";
const ProxyURLSchema = z
  .string()
  .max(SettingBounds.proxyURLMaxLength)
  .regex(new RegExp(ProxyURLPattern), { message: 'must be an http, https or socks5 URL with well-formed % escapes, or "" for none', abort: true })
  .superRefine((text, ctx) => {
    if (text === "") return;
    try {
      parseProxyURL(text);
    } catch (err) {
      ctx.addIssue({ code: "custom", message: (err as Error).message });
    }
  });

export const FeatureGateNamePattern = "^[A-Za-z][A-Za-z0-9]*$";
const FeatureGateName = z
  .string()
  .max(SettingBounds.featureGateNameMaxLength)
  .regex(new RegExp(FeatureGateNamePattern), { message: "a feature gate is named by a letter, then letters and digits" });

// What an assigned config may set; every field optional, absent meaning the install-time value.
// Strict: a key the agent does not know is refused (ConfigInvalid), never silently ignored. The CRD keeps
// unknown keys (preserve-unknown-fields) so that an agent newer than the hub's CRD still sees them, and
// an agent older than it refuses them itself, as the kubelet refuses a KubeletConfiguration it cannot read.
export const AgentSettingsSchema = z
  .strictObject({
    // spoke-cluster-status: how often status is synced without an event
    statusSyncIntervalSeconds: bounded(SettingBounds.statusSyncIntervalSeconds).optional(),
    // spoke-cluster-status: custom ClusterClaims synced (OCM's --max-custom-cluster-claims)
    clusterClaimLimit: bounded(SettingBounds.clusterClaimLimit).optional(),
    // the spoke relay's resync tick
    relayResyncSeconds: bounded(SettingBounds.relayResyncSeconds).optional(),
    heartbeat: z
      .strictObject({
        // the proxy the sidecar reaches the hub through; "" = none
        proxyURL: ProxyURLSchema.optional(),
      })
      .meta({ "x-kubernetes-preserve-unknown-fields": true })
      .optional(),
    logLevel: z.enum(LogLevels).optional(),
    // feature switches
    features: z
      .record(FeatureGateName, z.boolean())
      .refine((gates) => Object.keys(gates).length <= SettingBounds.featureGates, { message: `at most ${SettingBounds.featureGates} feature gates` })
      .meta({ maxProperties: SettingBounds.featureGates })
      .optional(),
  })
  .meta({ "x-kubernetes-preserve-unknown-fields": true });
export type AgentSettings = z.infer<typeof AgentSettingsSchema>;

// No CRD defaults on the spec: a per-cluster object would carry the fleet-level fields' defaults, and
// the agent applies its own default trial (its install-time setting).
export const AgentConfigSpecSchema = z.looseObject({
  settings: AgentSettingsSchema.optional(),
  // how long the assigned config must run healthy before it becomes last-known-good
  trialSeconds: bounded(SettingBounds.trialSeconds).optional(),
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
