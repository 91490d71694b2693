// The settings the sidecar runs with (docs/agent-config.md): the checkpoint's active config, merged over
// the sidecar's install-time values, and the log level it sets.
//
// The checkpoint is watched (./watched.ts), so a period costs no request for it and a change is in use
// by the next renewal, the one where the proxy counts. Without list/watch on the ConfigMap (an older
// RBAC) the watch falls back to one GET each period.
import { LogLevels, type AgentSettings, type LogLevel } from "../../../shared/api/agent-settings.ts";
import { ConfigMapResource } from "../../../shared/api/kube.ts";
import { CheckpointConfigMapName, CheckpointKey, InstallTimeHash, mergeSettings, readActiveKey } from "../../../shared/checkpoint.ts";
import type { Log } from "../../../shared/harness.ts";
import type { KubeClient, KubeObject } from "../../../shared/kube/client.ts";
import { watchedObject } from "./watched.ts";

// proxyURL absent: the hub kubeconfig's own proxy-url (OCM carries it over from the bootstrap
// kubeconfig); "": none, straight to the hub.
export type SidecarSettings = { hash: string; proxyURL?: string; logLevel: LogLevel };

export const InstallTimeSettings: AgentSettings = { logLevel: "info" };

export const sidecarSettings = (hash: string, settings: AgentSettings): SidecarSettings => ({
  hash,
  ...(settings.heartbeat?.proxyURL !== undefined ? { proxyURL: settings.heartbeat.proxyURL } : {}),
  logLevel: settings.logLevel ?? "info",
});

// fresh: read the checkpoint with a GET rather than trust the watch (see Watched).
export type SettingsReader = { read(fresh?: boolean): Promise<SidecarSettings>; close(): void };

type ConfigMap = KubeObject & { data?: Record<string, string> };

// Never throws: while the checkpoint cannot be read, the sidecar keeps what it runs (the install-time
// settings until a first read), and says so once, not every period.
export function settingsReader(o: { spoke: KubeClient; namespace: string; installTime?: AgentSettings; log: Log }): SettingsReader {
  const installTime = o.installTime ?? InstallTimeSettings;
  const checkpoint = watchedObject<ConfigMap>(o.spoke, ConfigMapResource, CheckpointConfigMapName, o.namespace, o.log);
  let current = sidecarSettings(InstallTimeHash, installTime);
  let parsedText: string | undefined | null = null; // the active key last parsed; null: none yet
  let failing = false;
  return {
    async read(fresh) {
      try {
        const cm = await checkpoint.get({ fresh });
        // Parsed again only when it changed: a steady period does no parsing either.
        const text = cm?.data?.[CheckpointKey.Active];
        if (text !== parsedText) {
          // As readActiveSettings: the active key alone, the install-time config when it is absent or
          // unreadable, which is said, since only an agent-config function older than this sidecar (or
          // a hand edit) writes settings this sidecar's schema refuses.
          const { active, error } = readActiveKey(text);
          if (error) o.log.warn({ error, using: active.hash }, "active agent settings unreadable: running the install-time settings");
          current = sidecarSettings(active.hash, mergeSettings(installTime, active.settings));
          parsedText = text;
        }
        if (failing) o.log.info({ hash: current.hash }, "agent settings readable again");
        failing = false;
      } catch (err) {
        if (!failing) o.log.warn({ error: err instanceof Error ? err.message : String(err), keeping: current.hash }, "agent settings unreadable: keeping the ones in use");
        failing = true;
      }
      return current;
    },
    close: () => checkpoint.close(),
  };
}

export type LevelledLog = Log & { debug(fields: object, msg: string): void };

const rank = Object.fromEntries(LogLevels.map((l, i) => [l, i])) as Record<LogLevel, number>;

// Lines above the level in use are dropped. The shared Log has no debug method: a debug line goes out
// as info with its level field set to debug (jsonLog lets fields override its own).
export function levelledLog(base: Log, level: () => LogLevel): LevelledLog {
  const on = (l: LogLevel) => rank[l] <= rank[level()];
  return {
    error: (fields, msg) => on("error") && base.error(fields, msg),
    warn: (fields, msg) => on("warn") && base.warn(fields, msg),
    info: (fields, msg) => on("info") && base.info(fields, msg),
    debug: (fields, msg) => on("debug") && base.info({ ...fields, level: "debug" }, msg),
  };
}
