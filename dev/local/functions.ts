// Functions as their bundles run them: the same CloudEvents HTTP server (shared/cloudevents-server.ts),
// here on a free loopback-reachable port in this process.
import { startCloudEventServer, type EventHandler } from "../../shared/cloudevents-server.ts";
import { serve, type FunctionSpec, type Io } from "../../shared/harness.ts";
import { stopOnSignals } from "../../shared/stop-signals.ts";

export type FunctionServer = { url: string; close(): Promise<void> };
type Handle = (context: unknown, event?: unknown) => Promise<unknown>;

// How long close() lets a request in flight finish before cutting it: a test or local mode stopping
// must not wait on a reconcile whose API server is already gone.
const CLOSE_GRACE_MS = 2_000;

// `shutdown`, when given, runs on the process' first SIGINT or SIGTERM, then the server closes and
// the process exits 0 (as a function's own process does); without it the process' owner decides.
export async function startFunctionServer(handle: Handle, shutdown?: () => Promise<void>): Promise<FunctionServer> {
  // A handler that throws answers 500 with its message; the harness's handlers never throw.
  const server = await startCloudEventServer(handle as EventHandler, { onError: () => {} });
  const close = () => server.close(CLOSE_GRACE_MS);
  if (shutdown) {
    // Local mode runs a dozen servers in one process, each with its own listeners (no leak: one per signal each).
    process.setMaxListeners(process.getMaxListeners() + 1);
    stopOnSignals(async () => {
      await shutdown();
      await close();
    });
  }
  return { url: server.url, close };
}

export function startFunction<C>(spec: FunctionSpec<C>, io: Io<C>, shutdown?: () => Promise<void>): Promise<FunctionServer> {
  return startFunctionServer(serve(spec, () => io), shutdown);
}
