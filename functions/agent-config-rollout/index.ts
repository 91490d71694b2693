// The agent-config-rollout Knative function: faas-js-runtime loads this file and calls `handle`.
// Its settings are read and checked as the module loads: a bad one throws here, naming the variable.
import type { CloudEventFunction } from "faas-js-runtime";
import { serve } from "../../shared/harness.ts";
import { ioFromEnv } from "../../shared/function-env.ts";
import { configFromEnv, spec } from "./reconcile.ts";

const io = ioFromEnv(spec.name, configFromEnv);
export const handle = serve(spec, () => io) satisfies CloudEventFunction;
