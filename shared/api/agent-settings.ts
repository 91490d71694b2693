// What an assigned AgentConfig may set on an agent (docs/agent-config.md), with its bounds. In zod/mini,
// not zod's full API: the relay and its heartbeat check the settings they run with, and a long-lived
// process should not hold zod's full API for that (about 9 MiB more private memory, measured by
// `npm run bench -- heartbeat`). shared/api/agent-config.ts embeds it in the AgentConfig CRD's schema.
import * as z from "zod/mini";
import { parseProxyURL } from "../kube/proxy.ts";

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

// The CRD's extensions and formats, as shared/api/meta.ts's builders set them on zod's full API.
const withMeta = <T extends z.ZodMiniType>(schema: T, meta: z.core.GlobalMeta): T => {
  z.globalRegistry.add(schema, meta);
  return schema;
};

const bounded = (b: { min: number; max: number }) => withMeta(z.int32().check(z.minimum(b.min), z.maximum(b.max)), { format: "int32" });

// http, https or socks5 (client-go's proxy-url schemes), no whitespace, every % the start of an escape.
const ProxyURLPattern = "^((https?|socks5)://([^\\s%]|%[0-9A-Fa-f]{2})+)?$";
const ProxyURLSchema = z.string().check(
  z.maxLength(SettingBounds.proxyURLMaxLength),
  z.regex(new RegExp(ProxyURLPattern), { message: 'must be an http, https or socks5 URL with well-formed % escapes, or "" for none', abort: true }),
  z.superRefine((text, ctx) => {
    if (text === "") return;
    try {
      parseProxyURL(text);
    } catch (err) {
      ctx.addIssue({ code: "custom", message: (err as Error).message });
    }
  }),
);

export const FeatureGateNamePattern = "^[A-Za-z][A-Za-z0-9]*$";
const FeatureGateName = z.string().check(z.maxLength(SettingBounds.featureGateNameMaxLength), z.regex(new RegExp(FeatureGateNamePattern), { message: "a feature gate is named by a letter, then letters and digits" }));

// What an assigned config may set; every field optional, absent meaning the install-time value.
// Strict: a key the agent does not know is refused (ConfigInvalid), never silently ignored. The CRD keeps
// unknown keys (preserve-unknown-fields) so that an agent newer than the hub's CRD still sees them, and
// an agent older than it refuses them itself, as the kubelet refuses a KubeletConfiguration it cannot read.
export const AgentSettingsSchema = withMeta(
  z.strictObject({
    // spoke-cluster-status: how often status is synced without an event
    statusSyncIntervalSeconds: z.optional(bounded(SettingBounds.statusSyncIntervalSeconds)),
    // spoke-cluster-status: custom ClusterClaims synced (OCM's --max-custom-cluster-claims)
    clusterClaimLimit: z.optional(bounded(SettingBounds.clusterClaimLimit)),
    // the spoke relay's resync tick
    relayResyncSeconds: z.optional(bounded(SettingBounds.relayResyncSeconds)),
    heartbeat: z.optional(
      withMeta(
        z.strictObject({
          // the proxy the heartbeat reaches the hub through; "" = none
          proxyURL: z.optional(ProxyURLSchema),
        }),
        { "x-kubernetes-preserve-unknown-fields": true },
      ),
    ),
    logLevel: z.optional(z.enum(LogLevels)),
    // feature switches
    features: z.optional(
      withMeta(
        z.record(FeatureGateName, z.boolean()).check(z.refine((gates) => Object.keys(gates).length <= SettingBounds.featureGates, { message: `at most ${SettingBounds.featureGates} feature gates` })),
        { maxProperties: SettingBounds.featureGates },
      ),
    ),
  }),
  { "x-kubernetes-preserve-unknown-fields": true },
);
export type AgentSettings = z.infer<typeof AgentSettingsSchema>;

// Each setting and the schema of each value it holds, for the allow-list's paths and the CLI's KEY=VALUE:
// a group's fields (heartbeat), a map's values under any name (features), or one value.
export type SettingShape =
  | { key: string; kind: "group"; fields: Readonly<Record<string, z.ZodMiniType>> }
  | { key: string; kind: "map"; value: z.ZodMiniType }
  | { key: string; kind: "value"; value: z.ZodMiniType };
const innerOf = (field: z.ZodMiniType) => (field as z.ZodMiniOptional)._zod.def.innerType as z.ZodMiniType;
export const settingShapes: readonly SettingShape[] = Object.entries(AgentSettingsSchema.shape).map(([key, field]): SettingShape => {
  const inner = innerOf(field);
  if (inner instanceof z.ZodMiniObject) return { key, kind: "group", fields: Object.fromEntries(Object.entries(inner.shape as Record<string, z.ZodMiniType>).map(([k, f]) => [k, innerOf(f)])) };
  if (inner instanceof z.ZodMiniRecord) return { key, kind: "map", value: inner._zod.def.valueType as z.ZodMiniType };
  return { key, kind: "value", value: inner };
});
