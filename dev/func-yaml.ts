// A function's func.yaml, the one source of its deployment: what run.envs, deploy.serviceAccountName and
// deploy.subscriptions (the Trigger filters) say. Local mode filters its relays' deliveries by these
// subscriptions exactly as Knative's Triggers would.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parse } from "yaml";
import { z } from "zod";

const functionsDir = join(import.meta.dirname, "..", "functions");

export const FuncYamlSchema = z.looseObject({
  name: z.string().min(1),
  run: z.looseObject({ envs: z.array(z.looseObject({ name: z.string().min(1), value: z.string() })).default([]) }).optional(),
  deploy: z
    .looseObject({
      serviceAccountName: z.string().optional(),
      subscriptions: z.array(z.looseObject({ source: z.string(), filters: z.record(z.string(), z.string()) })).default([]),
    })
    .optional(),
});
export type FuncYaml = z.infer<typeof FuncYamlSchema>;

export function readFuncYaml(fn: string): FuncYaml {
  return FuncYamlSchema.parse(parse(readFileSync(join(functionsDir, fn, "func.yaml"), "utf8")));
}

// The Trigger filters of a function's subscriptions.
export const subscriptionFilters = (fn: string): Record<string, string>[] => (readFuncYaml(fn).deploy?.subscriptions ?? []).map((s) => s.filters);
