// What a deployed function runs with, read once from its environment (func.yaml run.envs) before its
// server listens: its settings, checked there so that a misconfigured pod fails at start instead of
// answering every event with 500; clients from OCM_KUBECONFIG_DIR or the pod's identity; the system
// clock; JSON logs on stderr.
import { statSync } from "node:fs";
import { z } from "zod";
import { systemClock } from "./clock.ts";
import { configError } from "./env-settings.ts";
import { jsonLog, type Io } from "./harness.ts";
import { clientsFromEnv, homeClusterOf } from "./kube/clients.ts";

export { ConfigError, configError } from "./env-settings.ts";

// `variableOf` names the variable behind a settings field (shared/env-settings.ts), so a bad value is
// reported under the name the operator set.
export function ioFromEnv<C>(fn: string, configFromEnv: (env: NodeJS.ProcessEnv) => C, env: NodeJS.ProcessEnv = process.env, variableOf: (field: string) => string = (f) => f): Io<C> {
  let config: C;
  try {
    config = configFromEnv(env);
  } catch (err) {
    if (!(err instanceof z.ZodError)) throw err;
    const [first, ...more] = err.issues;
    const variable = variableOf(String(first?.path[0] ?? ""));
    const also = more.length ? ` (and ${more.length} more: ${more.map((i) => variableOf(String(i.path[0]))).join(", ")})` : "";
    throw configError(fn, variable, env[variable], `${oneLine(first?.message ?? err.message)}${also}`);
  }
  const dir = env.OCM_KUBECONFIG_DIR;
  if (dir && !statSync(dir, { throwIfNoEntry: false })?.isDirectory()) throw configError(fn, "OCM_KUBECONFIG_DIR", dir, "not a directory");
  const io: Io<C> = { clock: systemClock, log: jsonLog(fn), cluster: clientsFromEnv(env), config };
  if (env.KUBERNETES_SERVICE_HOST && !dir) warmConnections(io, homeClusterOf(env));
  return io;
}

// In a pod, the first reconcile of a process (a function brought back from zero) would open its
// connections to the API server itself, a TLS handshake each, while judging its event. They are opened
// as the process starts instead, by reads of /version (granted to everyone), and kept alive for it.
const WARM_CONNECTIONS = 4;
function warmConnections(io: Io<unknown>, home: string): void {
  const client = io.cluster(home);
  Promise.all(Array.from({ length: WARM_CONNECTIONS }, () => client.request("GET", "/version"))).catch((err: unknown) =>
    io.log.warn({ error: err instanceof Error ? err.message : String(err) }, "could not open connections to the API server ahead of the first event"),
  );
}

const oneLine = (s: string) => s.replace(/\s+/g, " ").trim();
