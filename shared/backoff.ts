// Waiting in the long-lived components (relay, heartbeat): exponential backoff with jitter, and delays
// that end early when a signal aborts, so stop() never waits out a retry.
import { sleep } from "./timers.ts";

export type BackoffConfig = { initialMs: number; maxMs: number };

export type Backoff = { next(): number; reset(): void };

// Doubles from initialMs up to maxMs; ±20 % jitter keeps many sources from reconnecting in step.
export function exponentialBackoff(c: BackoffConfig, random: () => number = Math.random): Backoff {
  let attempt = 0;
  return {
    next() {
      const base = Math.min(c.maxMs, c.initialMs * 2 ** attempt);
      attempt = Math.min(attempt + 1, 30);
      return Math.round(base * (0.8 + 0.4 * random()));
    },
    reset() {
      attempt = 0;
    },
  };
}

// Resolves after ms (clamped as every timer is: shared/timers.ts), or at once when signal aborts; never rejects.
export const delay = (ms: number, signal?: AbortSignal): Promise<void> => sleep(ms, signal);
