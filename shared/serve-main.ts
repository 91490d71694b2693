// The program of a function bundle (dist/functions/<name>/index.js): our CloudEvents HTTP server
// (./cloudevents-server.ts) around one function's definition, the default export of its module. The
// bundle's entry is generated (dev/build/bundle.ts), never written by hand:
//   export const handle = await functionMain("<name>", () => import("functions/<name>/reconcile.ts"), import.meta.main)
// The settings are read and checked before anything listens: a module that throws as it loads, or a bad
// setting, ends the process with one line on stderr and exit code 1, so the pod crash-loops visibly
// instead of answering 500. Run as the program (`node index.js`), it serves; loaded by another runtime
// (faas-js-runtime's `func run`), it only exports `handle`, which that runtime serves.
//   PORT   the port to listen on (Knative sets it; default 8080, the containerPort the manifests name)
// The server answers /health/readiness and /health/liveness; on SIGTERM or SIGINT it stops accepting,
// lets the events in flight be answered, and the process exits 0.
import { startCloudEventServer, type EventHandler } from "./cloudevents-server.ts";
import { configError, ConfigError } from "./function-env.ts";
import { jsonLog } from "./harness.ts";
import type { MultiClusterFunction } from "./sdk.ts";
import { stopOnSignals } from "./stop-signals.ts";

type FunctionModule = { default?: MultiClusterFunction<any> };
type Handle = ReturnType<MultiClusterFunction<unknown>["handler"]>;

const DEFAULT_PORT = 8080;

export async function functionMain(name: string, load: () => Promise<FunctionModule>, main: boolean, env: NodeJS.ProcessEnv = process.env): Promise<Handle> {
  let port: number;
  let handle: Handle;
  try {
    port = portFrom(name, env.PORT);
    const fn = (await load()).default;
    if (!fn?.handler) throw new Error("the module's default export is not a function's definition (defineFunction)");
    handle = fn.handler(env);
  } catch (err) {
    process.stderr.write(err instanceof ConfigError ? `${err.message}\n` : `${name}: not started: ${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(1);
  }
  if (main) await listen(name, handle, port);
  return handle;
}

async function listen(name: string, handle: Handle, port: number): Promise<void> {
  const log = jsonLog(name);
  let server;
  try {
    server = await startCloudEventServer(handle as EventHandler, { port, onError: (err) => log.error({ error: err instanceof Error ? err.stack : String(err) }, "handler threw") });
  } catch (err) {
    // a port in use, or not ours to take
    process.stderr.write(`${name}: not started: cannot listen on port ${port}: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  }
  stopOnSignals(async (signal) => {
    log.info({ signal }, "stopping: answering the events in flight");
    await server.close();
  });
  log.info({ port }, "serving");
}

// Port 0 would mean "any port", which nobody could reach, so it is refused.
function portFrom(name: string, value: string | undefined): number {
  if (value === undefined || value === "") return DEFAULT_PORT;
  const port = Number(value);
  if (!Number.isInteger(port) || port < 1 || port > 65_535) throw configError(name, "PORT", value, "a port number from 1 to 65535");
  return port;
}
