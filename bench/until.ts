// Waiting in a bench. until: read until there is a value, or fail naming what did not come; for waits
// that time something, so each bench keeps its own fixed poll interval (its figures are only as fine as
// that interval), and a read that throws ends the wait with its error. setUp: for waits that time
// nothing (a server or a process still starting), the harness's own wait, which backs off and takes a
// check that throws as not ready yet, naming the last error if time runs out.
import { poller } from "../dev/control-plane/processes.ts";

export async function until<T>(read: () => Promise<T | undefined>, what: string, timeoutMs: number, o: { intervalMs?: number } = {}): Promise<T> {
  const t0 = performance.now();
  for (;;) {
    const v = await read();
    if (v !== undefined) return v;
    if (performance.now() - t0 > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, o.intervalMs ?? 20));
  }
}

// The same for a yes-or-no check; returns how long the wait took, in ms.
export async function untilTrue(check: () => Promise<boolean>, what: string, timeoutMs: number, o: { intervalMs?: number } = {}): Promise<number> {
  const t0 = performance.now();
  await until(async () => ((await check()) ? true : undefined), what, timeoutMs, o);
  return performance.now() - t0;
}

export const setUp = poller({ firstMs: 20, maxMs: 250 });
