// `ocmf run function FILE`: a function written with defineFunction, run on this machine as it runs
// deployed (dev/local/run-function.ts: its runtime server, and a relay built from its watches), against
// the clusters whose kubeconfigs a directory holds, until Ctrl-C. Its settings come from the environment,
// as func.yaml's run.envs give them to the deployed function.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { z } from "zod";
import type { MultiClusterFunction } from "../shared/sdk.ts";

const isDefinition = (x: unknown): x is MultiClusterFunction<unknown> => typeof x === "object" && x !== null && "definition" in x && "configFromEnv" in x;

export async function runFunctionFile(o: { file: string; kubeconfigDir: string }, print: (line: string) => void): Promise<void> {
  const fn = ((await import(pathToFileURL(o.file).href)) as { default?: unknown }).default;
  if (!isDefinition(fn)) throw new Error(`${o.file} has no default export made by defineFunction`);
  let config: unknown;
  try {
    config = fn.configFromEnv(process.env);
  } catch (err) {
    if (err instanceof z.ZodError) throw new Error(`${fn.definition.name}: invalid settings in the environment: ${z.prettifyError(err)}`);
    throw err;
  }
  const kubeconfigs = Object.fromEntries(
    readdirSync(o.kubeconfigDir)
      .filter((f) => f.endsWith(".kubeconfig"))
      .map((f) => [f.slice(0, -".kubeconfig".length), readFileSync(join(o.kubeconfigDir, f), "utf8")]),
  );
  const watched = [...new Set(fn.definition.watches(config).map((w) => w.cluster))];
  const missing = watched.filter((c) => !(c in kubeconfigs));
  if (missing.length) throw new Error(`${fn.definition.name} watches ${missing.join(", ")}: put ${missing.map((c) => `${c}.kubeconfig`).join(", ")} in ${o.kubeconfigDir}`);

  const { runFunction } = await import("../dev/local/run-function.ts");
  const running = await runFunction(fn, { config, kubeconfigs });
  await running.relay.ready;
  print(`${fn.definition.name} is running on ${running.server.url}, watching ${watched.join(", ")}; its decisions are logged below. Ctrl-C stops it.`);
  await new Promise<void>((resolve) => {
    process.once("SIGINT", resolve);
    process.once("SIGTERM", resolve);
  });
  await running.stop();
}
