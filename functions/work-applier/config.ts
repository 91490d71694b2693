// The work agent's configuration: the spoke agent's settings and its own flags. Its own module, so
// that the files reconcile.ts imports can name Config without importing reconcile.ts back.
import { z } from "zod";
import { commaList, SpokeAgentSettingsSchema, spokeAgentSettingsFromEnv } from "../../shared/settings.ts";
import { DEFAULT_MANIFEST_LIMIT_BYTES } from "./admission.ts";

export const ConfigSchema = SpokeAgentSettingsSchema.extend({
  agentID: z.string().min(1).optional(), // OCM's --agent-id; default the hub hash, as OCM's
  manifestLimitBytes: z.number().int().positive().default(DEFAULT_MANIFEST_LIMIT_BYTES),
  rawFeedbackJsonString: z.boolean().default(false), // feature gate RawFeedbackJsonString
  maxJsonRawLength: z.number().int().positive().default(1024), // --max-json-raw-length
  // OCM's status controller reads every applied object this often (--status-sync-interval, 10 s).
  statusSyncIntervalMs: z.number().int().positive().default(10_000),
});
export type Config = z.infer<typeof ConfigSchema>;

export function configFromEnv(env: NodeJS.ProcessEnv): Config {
  const gates = Object.fromEntries(commaList.parse(env.WORK_FEATURE_GATES).map((kv) => kv.split("=", 2) as [string, string]));
  return ConfigSchema.parse({
    ...spokeAgentSettingsFromEnv(env),
    agentID: env.AGENT_ID || undefined,
    manifestLimitBytes: env.WORK_MANIFEST_LIMIT_BYTES ? Number(env.WORK_MANIFEST_LIMIT_BYTES) : undefined,
    rawFeedbackJsonString: gates.RawFeedbackJsonString === "true",
    maxJsonRawLength: env.MAX_JSON_RAW_LENGTH ? Number(env.MAX_JSON_RAW_LENGTH) : undefined,
    statusSyncIntervalMs: env.STATUS_SYNC_INTERVAL_SECONDS ? Number(env.STATUS_SYNC_INTERVAL_SECONDS) * 1000 : undefined,
  });
}
