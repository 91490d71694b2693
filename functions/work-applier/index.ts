// Knative entry point: the spoke's work agent (ManifestWork → spoke resources) as a function.
import type { CloudEventFunction } from "faas-js-runtime";
import { serve, jsonLog } from "../../shared/harness.ts";
import { systemClock } from "../../shared/clock.ts";
import { clientsFromEnv } from "../../shared/kube/clients.ts";
import { spec, configFromEnv } from "./reconcile.ts";

export const handle = serve(spec, () => ({ clock: systemClock, log: jsonLog(spec.name), cluster: clientsFromEnv(), config: configFromEnv(process.env) })) satisfies CloudEventFunction;
