// The work agent's configuration: the spoke agent's settings and its own flags. Its own module, so
// that the files reconcile.ts imports can name Config without importing reconcile.ts back.
import { z } from "zod";
import { SpokeAgentSettingsSchema } from "../../shared/settings.ts";
import { asKeyValues, asNumber, fromEnv } from "../../shared/env-settings.ts";
import { DEFAULT_MANIFEST_LIMIT_BYTES } from "./admission.ts";

export const ConfigSchema = SpokeAgentSettingsSchema.extend({
  agentID: fromEnv("AGENT_ID", z.string().min(1).optional()), // OCM's --agent-id; default the hub hash, as OCM's
  manifestLimitBytes: fromEnv("WORK_MANIFEST_LIMIT_BYTES", z.number().int().positive().default(DEFAULT_MANIFEST_LIMIT_BYTES), asNumber),
  // feature gate RawFeedbackJsonString, in OCM's --feature-gates form (Gate=true,Other=false)
  rawFeedbackJsonString: fromEnv("WORK_FEATURE_GATES", z.boolean().default(false), (text) => asKeyValues(text).RawFeedbackJsonString === "true"),
  maxJsonRawLength: fromEnv("MAX_JSON_RAW_LENGTH", z.number().int().positive().default(1024), asNumber), // --max-json-raw-length
  // OCM's status controller reads every applied object this often (--status-sync-interval, 10 s).
  statusSyncIntervalMs: fromEnv("STATUS_SYNC_INTERVAL_SECONDS", z.number().int().positive().default(10_000), (text) => Number(text) * 1000),
});
export type Config = z.infer<typeof ConfigSchema>;
