// Settings as a deployment gives them: one environment variable per field (func.yaml's run.envs). A
// schema field says which variable it is read from, and how that text becomes the value the schema
// checks, where the field is declared:
//
//   leaseDurationSeconds: fromEnv("ADDON_LEASE_DURATION_SECONDS", z.number().int().positive().default(60), asNumber),
//
// A field that names no variable is read from its name in SCREAMING_SNAKE_CASE. An unset or empty
// variable leaves the field to its default. A bad value is a ConfigError that names the variable.
import { z } from "zod";

// A setting the process cannot run with; the message is one line that names the variable.
export class ConfigError extends Error {
  override name = "ConfigError";
}

export function configError(fn: string, variable: string, value: string | undefined, problem: string): ConfigError {
  return new ConfigError(`${fn}: invalid configuration: ${variable}${value === undefined ? " (unset)" : `=${JSON.stringify(value)}`}: ${problem}`);
}

type FromEnv = { variable: string; read: (text: string) => unknown };
const declared = new WeakMap<z.ZodType, FromEnv>();

export function fromEnv<T extends z.ZodType>(variable: string, schema: T, read: (text: string) => unknown = (text) => text): T {
  declared.set(schema, { variable, read });
  return schema;
}

// The readers a variable's text needs most: a number (what is not one fails the schema), a comma list,
// a comma list of key=value pairs, JSON.
export const asNumber = (text: string) => Number(text);
export const asList = (text: string) => text.split(",").map((s) => s.trim()).filter(Boolean);
export const asKeyValues = (text: string): Record<string, string> => Object.fromEntries(asList(text).map((kv) => kv.split("=", 2) as [string, string]));
export const asJson = (text: string): unknown => JSON.parse(text);

const screamingSnake = (field: string) => field.replace(/([a-z0-9])([A-Z])/g, "$1_$2").toUpperCase();
const fieldsOf = (schema: z.ZodType) => (schema instanceof z.ZodObject ? (schema.shape as Record<string, z.ZodType>) : {});

// The variable a top-level field is read from.
export function variableOf(schema: z.ZodType, field: string): string {
  const f = fieldsOf(schema)[field];
  return (f && declared.get(f)?.variable) ?? screamingSnake(field);
}

// The schema's input from the environment: each field from its variable, read; unset ones left out.
export function readEnvSettings(fn: string, schema: z.ZodType, env: NodeJS.ProcessEnv): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [field, f] of Object.entries(fieldsOf(schema))) {
    const { variable, read } = declared.get(f) ?? { variable: screamingSnake(field), read: (text: string) => text };
    const text = env[variable];
    if (text === undefined || text === "") continue;
    try {
      out[field] = read(text);
    } catch (err) {
      throw configError(fn, variable, text, err instanceof Error ? err.message : String(err));
    }
  }
  return out;
}
