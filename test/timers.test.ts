// shared/timers.ts, the one way shipping code makes a timer (issue 23): every delay clamped to what a
// Node timer holds and to a floor, so that no number can become a timer firing every millisecond.
import { describe, it, expect } from "vitest";
import { after, clampTimerMs, every, MaxTimerMs, MinIntervalMs, sleep } from "../shared/timers.ts";

describe("clampTimerMs", () => {
  it.each([
    { name: "relayResyncSeconds 2147484 in ms (past 2^31-1) is Node's maximum, not 1 ms", ms: 2_147_484_000, floor: undefined, want: MaxTimerMs },
    { name: "Infinity is Node's maximum", ms: Infinity, floor: undefined, want: MaxTimerMs },
    { name: "2^31-1 itself is kept", ms: MaxTimerMs, floor: undefined, want: MaxTimerMs },
    { name: "0 is the default floor of 1 ms", ms: 0, floor: undefined, want: 1 },
    { name: "a negative delay is the floor", ms: -5, floor: 1_000, want: 1_000 },
    { name: "a fraction is rounded up", ms: 1.2, floor: undefined, want: 2 },
    { name: "a delay above the floor is kept", ms: 5_000, floor: 1_000, want: 5_000 },
  ])("$name", ({ ms, floor, want }) => {
    expect(clampTimerMs(ms, floor)).toBe(want);
  });

  it("refuses NaN with a clear error rather than let Node make it 1 ms", () => {
    expect(() => clampTimerMs(Number.NaN)).toThrow("a timer delay must be a number of milliseconds, not NaN");
  });
});

describe("the timers", () => {
  it("a timeout of 2147484000 ms does not fire at once (Node alone would fire it after 1 ms)", async () => {
    let fired = 0;
    const t = after(2_147_484_000, () => fired++);
    await new Promise((r) => setTimeout(r, 100));
    clearTimeout(t);
    expect(fired).toBe(0);
  });

  it("an interval of 1 ms runs at most once a second (its floor), not every millisecond", async () => {
    let runs = 0;
    const t = every(1, () => runs++);
    await new Promise((r) => setTimeout(r, 500));
    clearInterval(t);
    expect(runs).toBe(0);
    expect(MinIntervalMs).toBe(1_000);
  });

  it("sleep ends at once when its signal aborts, however long the delay", async () => {
    const stop = new AbortController();
    const started = Date.now();
    const slept = sleep(2_147_484_000, stop.signal);
    stop.abort();
    await slept;
    expect(Date.now() - started).toBeLessThan(1_000);
  });
});
