// Waiting in a bench: read until there is a value, or fail naming what did not come.
export async function until<T>(read: () => Promise<T | undefined>, what: string, timeoutMs: number): Promise<T> {
  const t0 = performance.now();
  for (;;) {
    const v = await read();
    if (v !== undefined) return v;
    if (performance.now() - t0 > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
