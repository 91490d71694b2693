// The sidecar's health record (docs/agent-config.md): key `heartbeat` of the agent-health ConfigMap, the
// outcome of its renewals under the active hash, which the agent-config function judges a trial by. The
// record last known to be stored is remembered, so a steady outcome costs no call at all; a change of
// hash or outcome costs a GET and a write (shared recordHealth, which writes only what differs).
import { HealthKey, recordHealth, type HealthObservation } from "../../../shared/checkpoint.ts";
import type { Log } from "../../../shared/harness.ts";
import type { KubeClient } from "../../../shared/kube/client.ts";

export type HealthRecorder = { observe(observed: HealthObservation, now: Date): Promise<void> };

export function healthRecorder(o: { spoke: KubeClient; namespace: string; log: Log }): HealthRecorder {
  let stored: { hash: string; ok: boolean } | undefined;
  return {
    async observe(observed, now) {
      if (stored?.hash === observed.hash && stored.ok === observed.ok) return;
      try {
        const wrote = await recordHealth(o.spoke, o.namespace, HealthKey.Heartbeat, observed, now);
        stored = { hash: observed.hash, ok: observed.ok };
        if (wrote) o.log.info({ hash: observed.hash, ok: observed.ok, error: observed.error }, `health record written: renewals under this config now ${observed.ok ? "succeed" : "fail"}`);
      } catch (err) {
        // The record waits; renewing does not. The next renewal tries again, since stored is unchanged.
        o.log.warn({ hash: observed.hash, ok: observed.ok, error: err instanceof Error ? err.message : String(err) }, "health record not written: trying again after the next renewal");
      }
    },
  };
}
