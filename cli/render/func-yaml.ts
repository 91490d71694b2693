// Every function's func.yaml, read as the one source of its deployment: where it runs, its env, its
// service account, its scale and resources, and its subscriptions (the Trigger filters).
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parse } from "yaml";
import { z } from "zod";
import { AgentNamespaceDefault } from "../../shared/api/registration.ts";

const functionsDir = join(import.meta.dirname, "..", "..", "functions");

const quantities = z.strictObject({ cpu: z.string().optional(), memory: z.string().optional() });

// knative/func's func.yaml (specVersion 0.35.0), the parts we deploy from.
export const FuncYamlSchema = z.looseObject({
  name: z.string().regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/),
  run: z.looseObject({ envs: z.array(z.strictObject({ name: z.string().min(1), value: z.string() })).default([]) }).prefault({}),
  deploy: z.looseObject({
    namespace: z.string().optional(),
    annotations: z.record(z.string(), z.string()).optional(),
    serviceAccountName: z.string().min(1),
    options: z
      .looseObject({
        scale: z.strictObject({ min: z.number().int().nonnegative().optional(), max: z.number().int().nonnegative().optional() }).optional(),
        resources: z
          .strictObject({
            requests: quantities.optional(),
            limits: quantities.extend({ concurrency: z.number().int().nonnegative().optional() }).optional(),
          })
          .optional(),
      })
      .optional(),
    subscriptions: z.array(z.strictObject({ source: z.string().min(1), filters: z.record(z.string(), z.string()) })).min(1),
  }),
});
export type FuncYaml = z.infer<typeof FuncYamlSchema>;

export type Side = "hub" | "spoke";

// A function whose timing matters (its reconciles ask to look again at a given time) is fed by a relay
// instead of Triggers: the relay delivers straight to it and honours the x-recheck-after-ms answer,
// which a Broker drops. On the hub it gets a relay of its own ("hub-relay"); on the spoke the agent's
// relay delivers to it directly ("spoke-relay").
export const EventsAnnotation = "ocm-functions.io/events";
export const isRelayFed = (f: FuncYaml) => f.deploy.annotations?.[EventsAnnotation] === "hub-relay";
export const isSpokeRelayFed = (f: FuncYaml) => f.deploy.annotations?.[EventsAnnotation] === "spoke-relay";
export type FunctionDeployment = FuncYaml & { side: Side };

// A function that names the agent's namespace runs there, on the spoke; every other one runs on the hub,
// in the namespace the render options give.
const sideOf = (f: FuncYaml): Side => (f.deploy.namespace === AgentNamespaceDefault ? "spoke" : "hub");

export function readFunctions(dir = functionsDir): FunctionDeployment[] {
  return readdirSync(dir, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => d.name)
    .sort()
    .map((name) => {
      const parsed = FuncYamlSchema.safeParse(parse(readFileSync(join(dir, name, "func.yaml"), "utf8")));
      if (!parsed.success) throw new Error(`functions/${name}/func.yaml: ${z.prettifyError(parsed.error)}`);
      if (parsed.data.name !== name) throw new Error(`functions/${name}/func.yaml names the function ${parsed.data.name}`);
      return { ...parsed.data, side: sideOf(parsed.data) };
    });
}

