// Polls a read until its assertion passes, like komega's Eventually, and returns the last value.
export async function eventually<T>(read: () => Promise<T> | T, o: { timeoutMs?: number; intervalMs?: number } = {}): Promise<T> {
  const deadline = Date.now() + (o.timeoutMs ?? 30_000);
  let interval = o.intervalMs ?? 50;
  for (;;) {
    try {
      return await read();
    } catch (err) {
      if (Date.now() > deadline) throw err;
    }
    await new Promise((r) => setTimeout(r, interval));
    interval = Math.min(interval * 1.5, 500);
  }
}
