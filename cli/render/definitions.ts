// Every function's definition (shared/sdk.ts), found by reading functions/: each folder with a
// func.yaml holds a function whose definition is the default export of its reconcile.ts. What
// cli/render, local mode, the build and the tests derive each function from; no list is kept by hand.
import type { MultiClusterFunction } from "../../shared/sdk.ts";
import { readFunctions } from "./func-yaml.ts";

// Each definition has a config type of its own; callers get the config from its configFromEnv.
type AnyFunction = MultiClusterFunction<any>;

// The import names the file with a pattern, so the CLI's bundle holds every function's module.
const loaded = await Promise.all(
  readFunctions().map(async (f) => {
    const module = (await import(`../../functions/${f.name}/reconcile.ts`)) as { default?: AnyFunction };
    const fn = module.default;
    if (!fn?.definition) throw new Error(`functions/${f.name}/reconcile.ts has no default export made by defineFunction`);
    if (fn.definition.name !== f.name) throw new Error(`functions/${f.name}/reconcile.ts defines the function ${fn.definition.name}`);
    return fn;
  }),
);
export const definitions: ReadonlyMap<string, AnyFunction> = new Map(loaded.map((f) => [f.definition.name, f]));

export function definitionOf(name: string): AnyFunction {
  const fn = definitions.get(name);
  if (!fn) throw new Error(`no functions/${name}/reconcile.ts`);
  return fn;
}

// A function's watches with its settings as a deployment gives them (its container's env).
export function watchesOf(name: string, env: readonly { name: string; value: string }[]) {
  const fn = definitionOf(name);
  const config = fn.configFromEnv(Object.fromEntries(env.map((e) => [e.name, e.value])));
  return { fn, config, watches: fn.definition.watches(config) };
}
