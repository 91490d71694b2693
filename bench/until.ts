// Waiting in a bench: read until there is a value, or fail naming what did not come. Each bench keeps
// its own poll interval (its latency figures are only as fine as that interval). A read that throws ends
// the wait with its error, unless retryErrors: then it counts as no value yet (a server still starting,
// a log not written yet), and the timeout's error names the last one.
export type UntilOptions = { intervalMs?: number; retryErrors?: boolean };

export async function until<T>(read: () => Promise<T | undefined> | T | undefined, what: string, timeoutMs: number, o: UntilOptions = {}): Promise<T> {
  const t0 = performance.now();
  let lastError: Error | undefined;
  for (;;) {
    let v: T | undefined;
    try {
      v = await read();
    } catch (err) {
      if (!o.retryErrors) throw err;
      lastError = err as Error;
    }
    if (v !== undefined) return v;
    if (performance.now() - t0 > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms${lastError ? ` (last error: ${lastError.message})` : ""}`);
    await new Promise((r) => setTimeout(r, o.intervalMs ?? 20));
  }
}

// The same for a yes-or-no check; returns how long the wait took, in ms.
export async function untilTrue(check: () => Promise<boolean>, what: string, timeoutMs: number, o: UntilOptions = {}): Promise<number> {
  const t0 = performance.now();
  await until(async () => ((await check()) ? true : undefined), what, timeoutMs, o);
  return performance.now() - t0;
}
