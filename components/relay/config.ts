// The relay's configuration as one zod/mini schema: which (cluster, resource, selector) to watch, with which
// credentials, and which HTTP sinks get which events. The CLI reads it from a file; tests pass it inline.
import * as z from "zod/mini";
import { parse } from "yaml";
import { AgentNamespaceDefault, BootstrapSecretName, HubKubeconfigSecretName, HubSecretKey } from "../../shared/api/registration.ts";
import { CheckpointConfigMapName } from "../../shared/checkpoint.ts";
import { RecheckDueType, TargetExtension } from "../../shared/events.ts";

// zod/mini, not zod's full API: the relay is a long-lived process (the one a spoke keeps), and the full
// API would cost it about 9 MiB of private memory (`npm run bench -- heartbeat`).
const name = z.string().check(z.minLength(1));
const positiveMs = z.int().check(z.positive());
const port = z.int().check(z.minimum(0), z.maximum(65_535));
// CloudEvents: extension names are lower-case letters and digits only, or the SDK throws.
const extensionName = z.string().check(z.regex(/^[a-z0-9]+$/, { error: "a CloudEvent attribute name is lower-case letters and digits" }));

export const ApiResourceSchema = z.object({
  group: z._default(z.string(), ""),
  version: name,
  kind: name,
  plural: name,
  namespaced: z.boolean(),
});

export const SecretRefSchema = z.object({
  cluster: name, // the configured cluster the Secret lives on; it must have static credentials
  namespace: name,
  name,
  key: z._default(name, HubSecretKey.Kubeconfig),
});
export type SecretRef = z.infer<typeof SecretRefSchema>;

// Where a cluster's kubeconfig comes from. A secret kubeconfig may name client-certificate/client-key
// (and certificate-authority) as relative file names that are keys of the same secret, as OCM's
// hub-kubeconfig-secret does; the fallback is used while the first secret is missing or invalid.
export const CredentialsSchema = z.union([
  z.strictObject({ kubeconfig: name }),
  z.strictObject({ kubeconfigFile: name }),
  z.strictObject({ inCluster: z.literal(true) }),
  z.strictObject({ secret: SecretRefSchema, fallback: z.optional(SecretRefSchema) }),
]);
export type CredentialsConfig = z.infer<typeof CredentialsSchema>;

export const SourceSchema = z.object({
  name: z.optional(name),
  cluster: name,
  resource: ApiResourceSchema,
  namespace: z.optional(name),
  labelSelector: z.optional(z.string()),
  fieldSelector: z.optional(z.string()),
  // ApiServerSource's default is Reference.
  mode: z._default(z.enum(["Resource", "Reference"]), "Reference"),
});
export type SourceConfig = z.infer<typeof SourceSchema>;

// Trigger's spec.filter.attributes: exact, case-sensitive, ANDed; no filter means every event.
// `filters` stands for several Triggers of one subscriber (a function's func.yaml subscriptions): an
// event matching any of them is delivered, once.
const TriggerFilterSchema = z.record(extensionName, z.string());
// Observed state to hand a function with each event (components/relay/state.ts, shared/observed.ts):
// shared/sdk.ts stateOf derives it from the function's watches.
const dottedPath = z.string().check(z.regex(/^[A-Za-z0-9]+(\.[A-Za-z0-9]+)*$/));
const RelatedSchema = z.object({
  group: z.string(),
  kind: name,
  name: z.optional(z.string()),
  namespace: z.optional(z.string()),
  labelSelector: z.optional(z.string()),
  required: z.optional(z.boolean()),
  conditional: z.optional(z.boolean()),
});
// shared/settled.ts' clauses
const word = z.string().check(z.minLength(1));
const SettledClauseSchema = z.union([
  z.strictObject({ has: dottedPath }),
  z.strictObject({ lacks: dottedPath }),
  z.strictObject({ is: dottedPath, value: z.union([z.string(), z.number(), z.boolean()]) }),
  z.strictObject({ includes: dottedPath, values: z.array(z.string()).check(z.minLength(1)) }),
  z.strictObject({ lacksCondition: word }),
  z.strictObject({ condition: z.strictObject({ type: word, status: word, reason: z.optional(word), message: z.optional(z.string()) }) }),
  z.strictObject({
    get all() {
      return z.array(SettledClauseSchema).check(z.minLength(1));
    },
  }),
]);
export const StateSchema = z.object({
  watches: z.array(
    z.object({
      cluster: name,
      group: z.string(),
      kind: name,
      namespace: z.optional(z.string()),
      labelSelector: z.optional(z.string()),
      related: z._default(z.array(RelatedSchema), []),
      onTick: z._default(z.boolean(), false),
      changes: z.optional(z.array(dottedPath).check(z.minLength(1))),
      // the root kind's settled test (shared/settled.ts): an add or update it holds for is not sent
      settled: z.optional(z.array(SettledClauseSchema).check(z.minLength(1))),
    }),
  ),
});
export type StateConfig = z.infer<typeof StateSchema>;
export const SinkSchema = z
  .object({
    name,
    url: z.url(),
    filter: z.optional(TriggerFilterSchema),
    filters: z.optional(z.array(TriggerFilterSchema).check(z.minLength(1))),
    state: z.optional(StateSchema),
    // set on every event this sink sends (a Broker target's name, so that its Trigger alone delivers it)
    extensions: z.optional(z.record(extensionName, z.string())),
  })
  .check(z.refine((s) => !(s.filter && s.filters), { error: "a sink has filter or filters, not both" }));
export type SinkConfig = z.infer<typeof SinkSchema>;

// A function that a Broker (K_SINK) feeds, as a sink of its own at the Broker: the relay sends it only
// what its subscriptions pass and its watches ask for, with the observed state they ask to be handed,
// each event naming it in ocmftarget, so that its Trigger (cli/render/objects.ts triggers) lets through
// its events and nobody else's. Its due rechecks pass too.
export const TargetSchema = z.object({
  name: z.string().check(z.regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, { error: "a target is a function's name (a DNS label)" })),
  filters: z.array(TriggerFilterSchema.check(z.refine((f) => Object.keys(f).length > 0, { error: "a target's filter names at least one attribute" }))).check(z.minLength(1)),
  state: z.optional(StateSchema),
});
// A configuration's kSinkTargets (unchecked, as read) as sinks, each at the URL urlOf gives its name (the
// Broker's K_SINK in production; the function itself in dev/local/deployed.ts).
export function targetSinks(input: unknown, urlOf: (name: string) => string): z.input<typeof SinkSchema>[] {
  const targets = z.array(TargetSchema).safeParse(input);
  if (!targets.success) throw new Error(`invalid relay configuration: kSinkTargets: ${z.prettifyError(targets.error)}`);
  return targets.data.map((t) => ({
    name: t.name,
    url: urlOf(t.name),
    filters: [...t.filters, { type: RecheckDueType, [TargetExtension]: t.name }],
    ...(t.state ? { state: t.state } : {}),
    extensions: { [TargetExtension]: t.name },
  }));
}

export const BackoffSchema = z.object({
  initialMs: z._default(positiveMs, 200),
  maxMs: z._default(positiveMs, 30_000),
});
export type BackoffConfig = z.infer<typeof BackoffSchema>;

export const DeliverySchema = z.object({
  maxAttempts: z._default(z.int().check(z.positive()), 10),
  backoff: z.prefault(BackoffSchema, { initialMs: 100 }),
  timeoutMs: z._default(positiveMs, 30_000),
  concurrency: z._default(z.int().check(z.positive()), 16),
});
export type DeliveryConfig = z.infer<typeof DeliverySchema>;

export const WatchSchema = z.object({
  // The server ends each watch after this long and the relay resumes from the last resourceVersion,
  // which also bounds how long a half-open connection can go unnoticed.
  timeoutSeconds: z._default(z.int().check(z.positive()), 300),
  backoff: z.prefault(BackoffSchema, {}),
});
export type WatchConfig = z.infer<typeof WatchSchema>;

export const ResyncSchema = z.object({
  intervalMs: z._default(z.int().check(z.nonnegative()), 300_000), // 0 turns ticks off
  source: z._default(name, "/apis/v1/namespaces/default/pingsources/ocm-relay-resync"),
});

// The spoke agent's settings checkpoint (docs/agent-config.md), watched on one of the configured
// clusters: the resync interval follows its active relayResyncSeconds, and resync.intervalMs stands for
// an absent one. Only a spoke's relay names it.
export const AgentSettingsRefSchema = z.object({
  cluster: name, // the configured cluster the checkpoint ConfigMap lives on
  namespace: name,
  name: z._default(name, CheckpointConfigMapName),
});
export type AgentSettingsRef = z.infer<typeof AgentSettingsRefSchema>;

// Where the relay answers GET /metrics (docs/metrics.md); none when not configured. Loopback unless
// told otherwise: a Prometheus scraping the pod sets host 0.0.0.0.
export const MetricsSchema = z.strictObject({
  port,
  host: z._default(name, "127.0.0.1"),
});

// A Trigger reaches the pod on its Service, so the default is every interface.
export const RechecksSchema = z.strictObject({
  port,
  host: z._default(name, "0.0.0.0"),
  source: z._default(name, "/ocm-functions/rechecks"),
  maxHeld: z._default(z.int().check(z.positive()), 100_000),
});

// A spoke's relay also keeps the heartbeat (./heartbeat/sidecar.ts), so one long-lived process per spoke
// holds both: it reads the agent's secrets and settings with the credentials of `cluster` (the
// management cluster, configured with static credentials), renews the cluster lease on the hub, and
// answers the health endpoint the platform restarts it by. Its names are OCM's agent defaults.
export const HeartbeatSchema = z.strictObject({
  cluster: name, // the configured cluster the agent's secrets live on; it must have static credentials
  clusterName: name, // the ManagedCluster whose lease it renews
  agentNamespace: z._default(name, AgentNamespaceDefault),
  bootstrapSecret: z._default(name, BootstrapSecretName),
  hubSecret: z._default(name, HubKubeconfigSecretName),
  health: z.optional(z.strictObject({ port, host: z._default(name, "127.0.0.1") })),
});
export type HeartbeatConfig = z.infer<typeof HeartbeatSchema>;

export const RelayConfigSchema = z
  .object({
    clusters: z.record(name, CredentialsSchema),
    sources: z._default(z.array(SourceSchema), []),
    sinks: z._default(z.array(SinkSchema), []),
    // K_CE_OVERRIDES' shape: extensions set on every event the relay sends.
    ceOverrides: z.prefault(z.object({ extensions: z._default(z.record(extensionName, z.string()), {}) }), {}),
    resync: z.prefault(ResyncSchema, {}),
    delivery: z.prefault(DeliverySchema, {}),
    watch: z.prefault(WatchSchema, {}),
    record: z.optional(name), // append one JSON line per delivered event to this file
    agentSettings: z.optional(AgentSettingsRefSchema),
    metrics: z.optional(MetricsSchema),
    // the observed state the K_SINK sink hands (a ContainerSource's one function), as a sink's `state`
    kSinkState: z.optional(StateSchema),
    // or the functions a Broker at K_SINK feeds, each a sink of its own there (TargetSchema)
    kSinkTargets: z.optional(z.array(TargetSchema)),
    // recheck mode (rechecks.ts): where the relay takes functions' recheck requests, which it sends to
    // its sinks when they are due
    rechecks: z.optional(RechecksSchema),
    heartbeat: z.optional(HeartbeatSchema),
  })
  .check(
    z.superRefine((cfg, ctx) => {
      if (cfg.heartbeat) {
        const creds = cfg.clusters[cfg.heartbeat.cluster];
        if (!creds || "secret" in creds) ctx.addIssue({ code: "custom", path: ["heartbeat", "cluster"], message: `cluster ${cfg.heartbeat.cluster} has no static credentials configured` });
      }
      if (cfg.agentSettings && !cfg.clusters[cfg.agentSettings.cluster]) {
        ctx.addIssue({ code: "custom", path: ["agentSettings", "cluster"], message: `no credentials configured for cluster ${cfg.agentSettings.cluster}` });
      }
      const names = new Set<string>();
      cfg.sources.forEach((s, i) => {
        if (!cfg.clusters[s.cluster]) ctx.addIssue({ code: "custom", path: ["sources", i, "cluster"], message: `no credentials configured for cluster ${s.cluster}` });
        const n = sourceName(s);
        if (names.has(n)) ctx.addIssue({ code: "custom", path: ["sources", i, "name"], message: `two sources are named ${n}` });
        names.add(n);
      });
      if (cfg.kSinkState && cfg.kSinkTargets) ctx.addIssue({ code: "custom", path: ["kSinkTargets"], message: "K_SINK is one function (kSinkState) or a Broker's targets (kSinkTargets), not both" });
      const sinkNames = new Set<string>();
      cfg.sinks.forEach((s, i) => {
        if (sinkNames.has(s.name)) ctx.addIssue({ code: "custom", path: ["sinks", i, "name"], message: `two sinks are named ${s.name}` });
        sinkNames.add(s.name);
      });
      for (const [cluster, creds] of Object.entries(cfg.clusters)) {
        if (!("secret" in creds)) continue;
        for (const ref of [creds.secret, creds.fallback]) {
          // One level only: reading a secret with credentials that themselves come from a secret would
          // let a rotation on one cluster restart readers on another in a cycle.
          const from = ref && cfg.clusters[ref.cluster];
          if (ref && (!from || "secret" in from)) {
            ctx.addIssue({ code: "custom", path: ["clusters", cluster], message: `secret ${ref.namespace}/${ref.name} must live on a cluster with static credentials, not ${ref.cluster}` });
          }
        }
      }
    }),
  );
export type RelayConfigInput = z.input<typeof RelayConfigSchema>;
export type RelayConfig = z.output<typeof RelayConfigSchema>;

export function sourceName(s: { name?: string; cluster: string; resource: { plural: string; group?: string }; namespace?: string; labelSelector?: string }): string {
  if (s.name) return s.name;
  const group = s.resource.group ? `.${s.resource.group}` : "";
  return `${s.cluster}/${s.resource.plural}${group}${s.namespace ? `/${s.namespace}` : ""}${s.labelSelector ? `?${s.labelSelector}` : ""}`;
}

// The spoke agent's credentials for the hub, as OCM keeps them in the agent namespace.
export function hubCredentialsFromAgentSecrets(spokeCluster: string, agentNamespace: string): CredentialsConfig {
  return {
    secret: { cluster: spokeCluster, namespace: agentNamespace, name: HubKubeconfigSecretName, key: HubSecretKey.Kubeconfig },
    fallback: { cluster: spokeCluster, namespace: agentNamespace, name: BootstrapSecretName, key: HubSecretKey.Kubeconfig },
  };
}

// The spoke agent's checkpoint, in the agent namespace of the spoke it runs on.
export function agentSettingsCheckpoint(spokeCluster: string, agentNamespace: string): AgentSettingsRef {
  return { cluster: spokeCluster, namespace: agentNamespace, name: CheckpointConfigMapName };
}

// The production configuration: the relay's own file (YAML or JSON), then what a ContainerSource or
// SinkBinding injects: K_SINK becomes a sink without a filter, K_CE_OVERRIDES adds its extensions.
export function configFromEnvironment(text: string | undefined, env: NodeJS.ProcessEnv): RelayConfig {
  const doc = (text ? parse(text) : {}) as Record<string, unknown> & { sinks?: unknown[]; ceOverrides?: { extensions?: Record<string, string> }; kSinkTargets?: unknown };
  const kSink = env.K_SINK;
  const kSinks = !kSink ? [] : doc.kSinkTargets !== undefined ? targetSinks(doc.kSinkTargets, () => kSink) : [{ name: "k-sink", url: kSink, ...(doc.kSinkState ? { state: doc.kSinkState } : {}) }];
  const sinks = [...(doc.sinks ?? []), ...kSinks];
  let fromEnv: { extensions?: Record<string, string> } = {};
  try {
    if (env.K_CE_OVERRIDES) fromEnv = JSON.parse(env.K_CE_OVERRIDES);
  } catch (err) {
    throw new Error(`K_CE_OVERRIDES is not JSON: ${err instanceof Error ? err.message : String(err)}`);
  }
  const extensions = { ...doc.ceOverrides?.extensions, ...fromEnv.extensions };
  if (env.OCM_RELAY_RECORD) doc.record = env.OCM_RELAY_RECORD;
  if (env.OCM_RELAY_METRICS_PORT) {
    const port = Number(env.OCM_RELAY_METRICS_PORT);
    if (!/^\d+$/.test(env.OCM_RELAY_METRICS_PORT) || port < 1 || port > 65_535) throw new Error(`OCM_RELAY_METRICS_PORT ${JSON.stringify(env.OCM_RELAY_METRICS_PORT)} is not a port number from 1 to 65535`);
    doc.metrics = { ...(doc.metrics as object | undefined), port };
  }
  const parsed = RelayConfigSchema.safeParse({ ...doc, sinks, ceOverrides: { extensions } });
  if (!parsed.success) throw new Error(`invalid relay configuration: ${z.prettifyError(parsed.error)}`);
  return parsed.data;
}
