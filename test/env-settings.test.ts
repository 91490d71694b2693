// Settings read from the environment as a deployment sets them (shared/env-settings.ts): each field from
// the variable it declares, through its reader; a bad value is one ConfigError line naming that variable.
import { describe, it, expect } from "vitest";
import { z } from "zod";
import { asJson, asList, asNumber, ConfigError, fromEnv, readEnvSettings, variableOf } from "../shared/env-settings.ts";
import { ioFromEnv } from "../shared/function-env.ts";

const Schema = z.object({
  cluster: fromEnv("OCM_CLUSTER_NAME", z.string().min(1).default("hub")),
  graceSeconds: fromEnv("GRACE", z.number().min(1.5).default(5), asNumber),
  names: fromEnv("NAMES", z.array(z.string()).default([]), asList),
  extra: fromEnv("EXTRA_JSON", z.record(z.string(), z.number()).default({}), asJson),
  plainField: z.string().default("x"),
});
const read = (env: NodeJS.ProcessEnv) => Schema.parse(readEnvSettings("fn", Schema, env));
const io = (env: NodeJS.ProcessEnv) => ioFromEnv("fn", read, env, (field) => variableOf(Schema, field));

describe("settings from the environment", () => {
  it("reads each field from the variable it declares, through its reader, and an undeclared one from its name in SCREAMING_SNAKE_CASE", () => {
    expect(read({ OCM_CLUSTER_NAME: "h2", GRACE: "2.5", NAMES: "a, b,,c", EXTRA_JSON: '{"n":1}', PLAIN_FIELD: "y" })).toEqual({ cluster: "h2", graceSeconds: 2.5, names: ["a", "b", "c"], extra: { n: 1 }, plainField: "y" });
  });

  it("leaves an unset or empty variable to the field's default", () => {
    expect(read({ OCM_CLUSTER_NAME: "", GRACE: "" })).toEqual({ cluster: "hub", graceSeconds: 5, names: [], extra: {}, plainField: "x" });
  });

  it.each([
    { env: { GRACE: "1" }, variable: "GRACE" },
    { env: { GRACE: "soon" }, variable: "GRACE" },
    { env: { EXTRA_JSON: "{" }, variable: "EXTRA_JSON" },
    { env: { EXTRA_JSON: '{"n":"one"}' }, variable: "EXTRA_JSON" },
  ])("a bad $variable is one ConfigError line that names it and its value", ({ env, variable }) => {
    let thrown: unknown;
    try {
      io(env);
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(ConfigError);
    const message = (thrown as Error).message;
    expect(message).toMatch(new RegExp(`^fn: invalid configuration: ${variable}=`));
    expect(message).not.toContain("\n");
  });
});
