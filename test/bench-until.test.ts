// The benches' timed wait (bench/until.ts): a fixed poll interval each bench chooses, and a read that
// throws ends it. (Its untimed set-up wait is the harness's poller, test/poller.test.ts.)
import { describe, expect, it } from "vitest";
import { until, untilTrue } from "../bench/until.ts";

describe("a bench's timed wait", () => {
  it("returns the first value a read gives, after the reads it took", async () => {
    let reads = 0;
    const v = await until(async () => (++reads === 3 ? "ready" : undefined), "three reads", 5_000, { intervalMs: 1 });
    expect(v).toBe("ready");
    expect(reads).toBe(3);
  });

  it("ends at once with the error of a read that throws", async () => {
    let reads = 0;
    const err = await until(
      async () => {
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

  it("fails naming what did not come once its time is up", async () => {
    let reads = 0;
    const err = await until(async () => (++reads, undefined), "the thing", 30, { intervalMs: 1 }).catch((e: Error) => e);
    expect(reads).toBeGreaterThan(1);
    expect((err as Error).message).toBe("the thing: not within 30 ms");
  });

  it("untilTrue waits for a check to hold and returns how long it waited", async () => {
    const t0 = performance.now();
    const waited = await untilTrue(async () => performance.now() - t0 >= 15, "15 ms passed", 5_000, { intervalMs: 1 });
    expect(waited).toBeGreaterThanOrEqual(15);
    expect(waited).toBeLessThanOrEqual(performance.now() - t0);
  });
});
