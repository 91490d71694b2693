// The program of a function bundle (dist/functions/<name>/index.js): faas-js-runtime's HTTP server for
// one function module, started as the runtime's own CLI would start it, so `node index.js` is the
// whole container command. The bundle's entry is generated (dev/build/bundle.ts) as
//   await serveFunction("<name>", () => import("functions/<name>/index.ts"))
// and the import is dynamic so that a module which throws as it loads (a bad setting) is caught here:
// one line on stderr and exit code 1, so the pod crash-loops visibly instead of answering 500.
//   PORT              the port to listen on (Knative sets it; default 8080)
//   FUNC_LOG_LEVEL    the runtime's log level (default warn), as its CLI reads it
// The runtime serves /health/readiness and /health/liveness (LIVENESS_URL, READINESS_URL) and /metrics,
// and on SIGTERM or SIGINT closes the server and exits 0.
import faas from "faas-js-runtime";
import { configError, ConfigError } from "./function-env.ts";
import { jsonLog } from "./harness.ts";

type FunctionModule = { handle: (...args: never[]) => unknown };

const DEFAULT_PORT = 8080;

export async function serveFunction(name: string, load: () => Promise<FunctionModule>, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  let port: number;
  let module: FunctionModule;
  try {
    port = portFrom(name, env.PORT);
    module = await load();
  } catch (err) {
    process.stderr.write(err instanceof ConfigError ? `${err.message}\n` : `${name}: not started: ${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(1);
  }
  // `name` labels the runtime's metrics, as func.yaml's name does when `func` runs the function.
  await faas.start(module as never, { name, port, logLevel: env.FUNC_LOG_LEVEL || "warn" } as never);
  jsonLog(name).info({ port }, "serving");
}

// The runtime reads 0 as "the default port", so 0 is refused rather than quietly meaning 8080.
function portFrom(name: string, value: string | undefined): number {
  if (value === undefined || value === "") return DEFAULT_PORT;
  const port = Number(value);
  if (!Number.isInteger(port) || port < 1 || port > 65_535) throw configError(name, "PORT", value, "a port number from 1 to 65535");
  return port;
}
