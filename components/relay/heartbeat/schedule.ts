// When the heartbeat runs next: OCM's lease period with its jitter, the backoff while the hub cannot be
// reached, and the one function all waiting goes through (tests inject their own).
import { delay } from "../../../shared/backoff.ts";

// Resolves after ms, or at once when signal aborts (stop, or a test waking the loop early).
export type Wait = (ms: number, signal: AbortSignal) => Promise<void>;
export const realWait: Wait = delay;

// OCM's lease updater runs wait.JitterUntil(period, 0.25, sliding): each wait is d … 1.25 d, counted
// from the end of the previous renewal.
export const JitterFactor = 0.25;
// First retry while the hub is unreachable; it doubles per failure up to one period.
export const FirstRetryMs = 1_000;

// random() in [0, 1), as Math.random: the result is in [d, 1.25 d).
export function jitteredPeriodMs(durationMs: number, random: () => number): number {
  return Math.round(durationMs * (1 + JitterFactor * random()));
}

// OCM starts its lease updater the moment its informer sees the cluster accepted. Without a watch,
// a sidecar that is not yet bootstrapped or accepted looks again this often, not a whole period later.
export const NotReadyRecheckMs = 2_000;

// failures ≥ 1 in a row: 1 s, 2 s, 4 s … never longer than the period, so a hub that comes back is
// renewed within one lease duration.
export function retryDelayMs(failures: number, periodMs: number): number {
  return Math.min(periodMs, FirstRetryMs * 2 ** Math.min(Math.max(failures - 1, 0), 30));
}
