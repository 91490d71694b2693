// The long-lived components' shutdown: the first SIGTERM or SIGINT runs stop once, then the process
// exits 0; a second signal while stopping is ignored.
export function stopOnSignals(stop: (signal: NodeJS.Signals) => Promise<void>): void {
  let stopping = false;
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    process.on(signal, () => {
      if (stopping) return;
      stopping = true;
      void stop(signal).then(() => process.exit(0));
    });
  }
}
