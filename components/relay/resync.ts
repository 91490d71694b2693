// The relay's resync ticks: one timer at the configured interval or, when the relay names the spoke
// agent's settings checkpoint (docs/agent-config.md), at its active relayResyncSeconds, restarted
// whenever the checkpoint changes. The checkpoint is watched like any other source, so a change costs
// nothing until it happens; an unreadable one leaves the interval as it is.
import { ConfigMapResource } from "../../shared/api/kube.ts";
import { CheckpointKey, parseCheckpoint, readActiveKey } from "../../shared/checkpoint.ts";
import type { Log } from "../../shared/harness.ts";
import type { KubeObject } from "../../shared/kube/client.ts";
import type { AgentSettingsRef, WatchConfig } from "./config.ts";
import type { CredentialProvider } from "./credentials.ts";
import { startSource, type Source, type SourceStatus } from "./source.ts";
import { fieldSelectorOf } from "../../shared/selector-query.ts";
import { every } from "../../shared/timers.ts";

// Calls run every ms until the returned function is called. Tests inject their own and call run themselves.
export type Every = (ms: number, run: () => void) => () => void;

// Through shared/timers.ts: never faster than once a second, never past Node's maximum (which Node
// would otherwise turn into a tick every millisecond).
export const realEvery: Every = (ms, run) => {
  const timer = every(ms, run);
  return () => clearInterval(timer);
};

// hash: the active settings last read from the checkpoint; absent without one.
export type ResyncStatus = { intervalMs: number; hash?: string; settings?: SourceStatus };

export type Resync = { readonly ready: Promise<void>; status(): ResyncStatus; stop(): Promise<void> };

type ConfigMap = KubeObject & { data?: Record<string, string> };

export function startResync(o: {
  intervalMs: number; // the configured interval; 0 turns ticks off
  tick(): void;
  every: Every;
  log: Log;
  settings?: { ref: AgentSettingsRef; credentials: CredentialProvider; watch: WatchConfig };
}): Resync {
  let intervalMs = -1;
  let hash: string | undefined;
  let stopTicks = () => {};

  function schedule(ms: number, from: string | undefined): void {
    hash = from;
    if (ms === intervalMs) return;
    const first = intervalMs < 0;
    stopTicks();
    intervalMs = ms;
    stopTicks = ms > 0 ? o.every(ms, o.tick) : () => {};
    if (!first) o.log.info({ resyncMs: ms, hash: from }, "resync interval changed: ticks restarted");
  }
  schedule(o.intervalMs, undefined);

  let source: Source | undefined;
  if (o.settings) {
    const { ref } = o.settings;
    source = startSource({
      name: `agent settings: ${ref.cluster}/${ref.namespace}/${ref.name}`,
      cluster: ref.cluster,
      resource: ConfigMapResource,
      namespace: ref.namespace,
      fieldSelector: fieldSelectorOf({ "metadata.name": ref.name }),
      credentials: o.settings.credentials,
      watch: o.settings.watch,
      log: o.log,
      // A deleted checkpoint leaves no object: the install-time settings, so the configured interval.
      onChange() {
        const checkpoint = source?.objects()[0] as ConfigMap | undefined;
        if (!checkpoint) return schedule(o.intervalMs, undefined);
        const { active } = parseCheckpoint(checkpoint.data);
        const { error } = readActiveKey(checkpoint.data?.[CheckpointKey.Active]);
        if (error) o.log.warn({ error, using: active.hash }, "active agent settings unreadable: running the last-known-good ones");
        const seconds = active.settings.relayResyncSeconds;
        schedule(seconds === undefined ? o.intervalMs : seconds * 1000, active.hash);
      },
    });
  }

  return {
    ready: source?.ready ?? Promise.resolve(),
    status: () => ({ intervalMs, ...(hash ? { hash } : {}), ...(source ? { settings: source.status() } : {}) }),
    async stop() {
      stopTicks();
      stopTicks = () => {};
      await source?.stop();
    },
  };
}
