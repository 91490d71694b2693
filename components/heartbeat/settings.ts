// The settings the sidecar runs with (docs/agent-config.md): the checkpoint's active config, read again
// every period and merged over the sidecar's install-time values, and the log level it sets.
//
// Re-read each period rather than watched: the proxy matters only when a renewal is made, so a read just
// before each one applies a change exactly when it counts. It costs one GET of a small ConfigMap per
// period on the management cluster, over the kept-alive connection the hub-secret read already uses;
// a watch would hold a second long-lived connection and a server-side watcher, and need resume, 410 and
// half-open handling, to save one GET a minute at OCM's default lease.
import { LogLevels, type AgentSettings, type LogLevel } from "../../shared/api/agent-config.ts";
import { InstallTimeHash, mergeSettings, readActiveSettings } from "../../shared/agent-config.ts";
import type { Log } from "../../shared/harness.ts";
import type { KubeClient } from "../../shared/kube/client.ts";

// proxyURL absent: the hub kubeconfig's own proxy-url (OCM carries it over from the bootstrap
// kubeconfig); "": none, straight to the hub.
export type SidecarSettings = { hash: string; proxyURL?: string; logLevel: LogLevel };

export const InstallTimeSettings: AgentSettings = { logLevel: "info" };

export const sidecarSettings = (hash: string, settings: AgentSettings): SidecarSettings => ({
  hash,
  ...(settings.heartbeat?.proxyURL !== undefined ? { proxyURL: settings.heartbeat.proxyURL } : {}),
  logLevel: settings.logLevel ?? "info",
});

export type SettingsReader = { read(): Promise<SidecarSettings> };

// Never throws: while the checkpoint cannot be read, the sidecar keeps what it runs (the install-time
// settings until a first read), and says so once, not every period.
export function settingsReader(o: { spoke: KubeClient; namespace: string; installTime?: AgentSettings; log: Log }): SettingsReader {
  const installTime = o.installTime ?? InstallTimeSettings;
  let current = sidecarSettings(InstallTimeHash, installTime);
  let failing = false;
  return {
    async read() {
      try {
        const active = await readActiveSettings(o.spoke, o.namespace);
        if (failing) o.log.info({ hash: active.hash }, "agent settings readable again");
        failing = false;
        current = sidecarSettings(active.hash, mergeSettings(installTime, active.settings));
      } catch (err) {
        if (!failing) o.log.warn({ error: err instanceof Error ? err.message : String(err), keeping: current.hash }, "agent settings unreadable: keeping the ones in use");
        failing = true;
      }
      return current;
    },
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
