// The addon-cluster-label Knative function. Its bundle serves `handle` with our own server (shared/cloudevents-server.ts);
// faas-js-runtime, Knative Functions' Node runtime, loads this file too and answers alike (test/runtime-equivalence.test.ts).
// Its settings are read and checked as the module loads: a bad one throws here, naming the variable.
import type { CloudEventFunction } from "faas-js-runtime";
import { serve } from "../../shared/harness.ts";
import { ioFromEnv } from "../../shared/function-env.ts";
import { configFromEnv, spec } from "./reconcile.ts";

const io = ioFromEnv(spec.name, configFromEnv);
export const handle = serve(spec, () => io) satisfies CloudEventFunction;
