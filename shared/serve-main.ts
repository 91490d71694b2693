// The program of a function bundle (dist/functions/<name>/index.js): our CloudEvents HTTP server
// (./cloudevents-server.ts) around one function module's `handle`, so `node index.js` is the whole
// container command. The bundle's entry is generated (dev/build/bundle.ts) as
//   await serveFunction("<name>", () => import("functions/<name>/index.ts"))
// and the import is dynamic so that a module which throws as it loads (a bad setting) is caught here:
// one line on stderr and exit code 1, so the pod crash-loops visibly instead of answering 500.
//   PORT   the port to listen on (Knative sets it; default 8080, the containerPort the manifests name)
// The server answers /health/readiness and /health/liveness; on SIGTERM or SIGINT it stops accepting,
// lets the events in flight be answered, and the process exits 0.
import { startCloudEventServer, type EventHandler } from "./cloudevents-server.ts";
import { configError, ConfigError } from "./function-env.ts";
import { jsonLog } from "./harness.ts";
import { stopOnSignals } from "./stop-signals.ts";

type FunctionModule = { handle: (...args: never[]) => unknown };

const DEFAULT_PORT = 8080;

export async function serveFunction(name: string, load: () => Promise<FunctionModule>, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const log = jsonLog(name);
  let port: number;
  let module: FunctionModule;
  try {
    port = portFrom(name, env.PORT);
    module = await load();
  } catch (err) {
    process.stderr.write(err instanceof ConfigError ? `${err.message}\n` : `${name}: not started: ${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(1);
  }
  const handle = module.handle as unknown as EventHandler;
  let server;
  try {
    server = await startCloudEventServer(handle, { port, onError: (err) => log.error({ error: err instanceof Error ? err.stack : String(err) }, "handler threw") });
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
