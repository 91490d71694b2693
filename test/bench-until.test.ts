// The benches' one wait (bench/until.ts): each bench passes its own poll interval and says whether a
// failed read means "not yet".
import { describe, expect, it } from "vitest";
import { until, untilTrue } from "../bench/until.ts";

describe("a bench's wait", () => {
  it("returns the first value a read gives, after the reads it took", async () => {
    let reads = 0;
    const v = await until(() => (++reads === 3 ? "ready" : undefined), "three reads", 5_000, { intervalMs: 1 });
    expect(v).toBe("ready");
    expect(reads).toBe(3);
  });

  it("ends at once with the error of a read that throws, unless told to retry", async () => {
    let reads = 0;
    const err = await until(
      () => {
        reads++;
        throw new Error("refused");
      },
      "the thing",
      5_000,
      { intervalMs: 1 },
    ).catch((e: Error) => e);
    expect((err as Error).message).toBe("refused");
    expect(reads).toBe(1);
  });

  it("with retryErrors, reads again after a throw and names the last error when time runs out", async () => {
    let reads = 0;
    const err = await until(() => Promise.reject(new Error(`refused ${++reads}`)), "the thing", 30, { intervalMs: 1, retryErrors: true }).catch((e: Error) => e);
    expect(reads).toBeGreaterThan(1);
    expect((err as Error).message).toBe(`the thing: not within 30 ms (last error: refused ${reads})`);
  });

  it("with retryErrors, a read that throws and then answers gives its answer", async () => {
    let reads = 0;
    const v = await until(
      () => {
        if (++reads < 3) throw new Error("not yet");
        return reads;
      },
      "a late answer",
      5_000,
      { intervalMs: 1, retryErrors: true },
    );
    expect(v).toBe(3);
  });

  it("untilTrue waits for a check to hold and returns how long it waited", async () => {
    const t0 = performance.now();
    const waited = await untilTrue(async () => performance.now() - t0 >= 15, "15 ms passed", 5_000, { intervalMs: 1 });
    expect(waited).toBeGreaterThanOrEqual(15);
    expect(waited).toBeLessThanOrEqual(performance.now() - t0);
  });
});
