// Functions as the Knative Functions runtime runs them: faas-js-runtime HTTP servers on loopback ports.
import type { Server } from "node:http";
import faas from "faas-js-runtime";
import { serve, type FunctionSpec, type Io } from "../../shared/harness.ts";
import { freePort } from "../control-plane/clusters.ts";

export type FunctionServer = { url: string; close(): Promise<void> };
type Handle = (context: unknown, event?: unknown) => Promise<unknown>;

// The runtime reads port 0 as "use 8080", so the port is chosen here. `shutdown` runs when the runtime
// sees SIGINT/SIGTERM (it exits the process right after), so the caller's cleanup gets to finish.
export async function startFunctionServer(handle: Handle, shutdown?: () => Promise<void>): Promise<FunctionServer> {
  const port = await freePort();
  // Each runtime server adds its own SIGINT, SIGTERM and uncaughtException handlers to the process;
  // local mode runs a dozen servers in one process, so the limit grows with them (no leak: one each).
  process.setMaxListeners(process.getMaxListeners() + 1);
  const server: Server = await faas.start({ handle, ...(shutdown ? { shutdown } : {}) } as never, { port, logLevel: "silent" } as never);
  // closeAllConnections: a relay that stopped mid-delivery leaves kept-alive connections that would
  // otherwise hold close() for the runtime's 72 s keep-alive.
  const close = () =>
    new Promise<void>((r) => {
      server.close(() => r());
      server.closeAllConnections();
    });
  return { url: `http://127.0.0.1:${port}/`, close };
}

export function startFunction<C>(spec: FunctionSpec<C>, io: Io<C>, shutdown?: () => Promise<void>): Promise<FunctionServer> {
  return startFunctionServer(serve(spec, () => io), shutdown);
}
