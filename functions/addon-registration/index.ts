// Knative entry point: the spoke agent's add-on registration as a function.
import type { CloudEventFunction } from "faas-js-runtime";
import { jsonLog, serve } from "../../shared/harness.ts";
import { systemClock } from "../../shared/clock.ts";
import { clientsFromEnv } from "../../shared/kube/clients.ts";
import { configFromEnv, spec } from "./reconcile.ts";

export const handle = serve(spec, () => ({ clock: systemClock, log: jsonLog(spec.name), cluster: clientsFromEnv(), config: configFromEnv(process.env) })) satisfies CloudEventFunction;
