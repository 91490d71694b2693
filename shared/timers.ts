// The one way shipping code makes a timer (issue 23). Node turns a delay above 2^31-1 ms, below 1 ms,
// Infinity or NaN into 1 ms, so a setting that is merely large (relayResyncSeconds 2147484, times 1000)
// becomes a timer firing every millisecond. Every delay here is clamped first: never above Node's
// maximum (about 24.8 days), never below the caller's floor, and a NaN is refused outright.
export const MaxTimerMs = 2 ** 31 - 1;
// Node's own floor for a timeout.
export const MinTimerMs = 1;
// The floor of a repeating timer: nothing in the agent needs to run more than once a second, and a
// faster loop is how a bad number turns into a storm.
export const MinIntervalMs = 1_000;

// ms rounded up, within [floorMs, MaxTimerMs]. Infinity is the maximum, -Infinity the floor.
export function clampTimerMs(ms: number, floorMs = MinTimerMs): number {
  if (typeof ms !== "number" || Number.isNaN(ms)) throw new RangeError(`a timer delay must be a number of milliseconds, not ${String(ms)}`);
  if (!(floorMs >= 0 && floorMs <= MaxTimerMs)) throw new RangeError(`a timer floor must be between 0 and ${MaxTimerMs} ms, not ${String(floorMs)}`);
  return Math.min(MaxTimerMs, Math.max(floorMs, Math.ceil(ms)));
}

export type TimerOptions = { floorMs?: number; unref?: boolean };

// setTimeout with the delay clamped.
export function after(ms: number, run: () => void, o: TimerOptions = {}): NodeJS.Timeout {
  const timer = setTimeout(run, clampTimerMs(ms, o.floorMs));
  if (o.unref) timer.unref();
  return timer;
}

// setInterval with the period clamped, by default to at least MinIntervalMs.
export function every(ms: number, run: () => void, o: TimerOptions = {}): NodeJS.Timeout {
  const timer = setInterval(run, clampTimerMs(ms, o.floorMs ?? MinIntervalMs));
  if (o.unref) timer.unref();
  return timer;
}

// Resolves after ms (clamped), or at once when signal aborts; never rejects.
export function sleep(ms: number, signal?: AbortSignal, o: TimerOptions = {}): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = after(ms, done, o);
    signal?.addEventListener("abort", done, { once: true });
  });
}
