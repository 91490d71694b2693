// The public API for writing a multi-cluster function (docs/writing-functions.md). One definition says
// what the function watches on which clusters, how an event on another object maps to the keys of the
// objects it reconciles, and the reconcile itself. The handler Knative calls, the relay sources that feed
// it (dev/local/run-function.ts runs them locally) and its func.yaml subscriptions all come from it.
//
//   export default defineFunction({
//     name: "deployment-copy",
//     config: ConfigSchema,
//     watches: (c) => [{ cluster: c.source, resource: DeploymentResource, root: true }, ...],
//     map: (event, io) => ...,          // only for events of watches that are not the root
//     reconcile: async (io, key) => ...,
//   });
import { z } from "zod";
import type { ApiResource } from "./api/meta.ts";
import { ApiServerSourceType, PingSourceType, type FunctionEvent, type ObjectEvent } from "./events.ts";
import { ioFromEnv } from "./function-env.ts";
import { serve, type FunctionSpec, type Io, type Key, type Outcome, type Reply } from "./harness.ts";

// One kind on one cluster, as an event source watches it. `root` marks the kind the function reconciles:
// its events are keyed by the object itself, and a resync tick lists it. Every other watch's events go
// through `map`.
export type Watch = {
  cluster: string; // the cluster's name as events carry it (the `cluster` extension)
  resource: ApiResource;
  namespace?: string; // one namespace, or all
  labelSelector?: string;
  mode?: "Resource" | "Reference"; // what the events carry: the object (default), or only its reference
  root?: boolean;
};

export type KeysOrSkip = Key[] | { skip: string };

export type Definition<C> = {
  name: string; // a DNS label: the function's Service, identity and Triggers are named after it
  // The settings, checked as the function starts; `env` reads them from the environment (func.yaml's
  // run.envs), by default each schema field from the variable of its name in SCREAMING_SNAKE_CASE.
  config: z.ZodType<C>;
  env?: (env: NodeJS.ProcessEnv) => unknown;
  watches: (config: C) => readonly Watch[];
  resyncSeconds?: number; // how often every root object is reconciled without an event; 0: never
  map?: (event: ObjectEvent, io: Io<C>) => KeysOrSkip | Promise<KeysOrSkip>;
  reconcile: (io: Io<C>, key: Key) => Promise<Outcome>;
};

export type MultiClusterFunction<C> = {
  definition: Definition<C>;
  spec: FunctionSpec<C>; // what the harness and the tests drive
  configFromEnv: (env: NodeJS.ProcessEnv) => C;
  // faas-js-runtime's entry point; the settings are read from the environment at the first event.
  handle: (context: unknown, cloudevent?: unknown) => Promise<Reply>;
  // func.yaml's deploy.subscriptions: what a Broker's Triggers must let through to this function.
  subscriptions: (config: C) => { source: string; filters: Record<string, string> }[];
};

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const screamingSnake = (field: string) => field.replace(/([a-z0-9])([A-Z])/g, "$1_$2").toUpperCase();

export function defineFunction<C>(d: Definition<C>): MultiClusterFunction<C> {
  if (!DNS_LABEL.test(d.name)) throw new Error(`defineFunction: name ${JSON.stringify(d.name)} is not a DNS label`);
  const configFromEnv = (env: NodeJS.ProcessEnv): C => d.config.parse(d.env ? d.env(env) : defaultEnv(d.config, env));
  const spec: FunctionSpec<C> = {
    name: d.name,
    keys: (event, io) => keysOf(d, event, io),
    reconcile: d.reconcile,
  };
  const handle = serve(spec, () => ioFromEnv(d.name, configFromEnv));
  return { definition: d, spec, configFromEnv, handle, subscriptions: (config) => subscriptionsOf(d, config) };
}

// Each top-level field of an object schema from its variable, missing ones left to the schema's defaults.
function defaultEnv(schema: z.ZodType, env: NodeJS.ProcessEnv): unknown {
  if (!(schema instanceof z.ZodObject)) return {};
  const fields = Object.keys(schema.shape);
  return Object.fromEntries(fields.flatMap((f) => (env[screamingSnake(f)] ? [[f, env[screamingSnake(f)]]] : [])));
}

const sameKind = (w: Watch, e: ObjectEvent) =>
  w.resource.kind === e.ref.kind && (w.resource.group === "" ? e.ref.apiVersion === w.resource.version : e.ref.apiVersion.startsWith(`${w.resource.group}/`));
const inScope = (w: Watch, e: ObjectEvent) => w.cluster === e.cluster && sameKind(w, e) && (w.namespace === undefined || w.namespace === (e.ref.namespace ?? ""));

async function keysOf<C>(d: Definition<C>, event: FunctionEvent, io: Io<C>): Promise<KeysOrSkip> {
  const watches = d.watches(io.config);
  const roots = watches.filter((w) => w.root);
  if (event.type === "tick") {
    // A resync: every root object, as controller-runtime's periodic resync re-queues its cache.
    const keys: Key[] = [];
    for (const w of roots) {
      if (event.cluster && event.cluster !== w.cluster) continue;
      const { items } = await io.cluster(w.cluster).list(w.resource, { namespace: w.namespace, labelSelector: w.labelSelector });
      keys.push(...items.map((o) => ({ cluster: w.cluster, namespace: o.metadata.namespace, name: o.metadata.name! })));
    }
    return keys;
  }
  if (roots.some((w) => inScope(w, event))) return [{ cluster: event.cluster, namespace: event.ref.namespace, name: event.ref.name }];
  if (!watches.some((w) => inScope(w, event))) return { skip: `${event.ref.kind} ${event.ref.name} on ${event.cluster} is not watched` };
  if (!d.map) return { skip: `${event.ref.kind} is watched but the function maps no keys from it` };
  return d.map(event, io);
}

// One subscription per watch and verb in the watch's mode, and the resync ticks: exactly what the
// function's keys take, so a Broker wakes it for nothing else.
function subscriptionsOf<C>(d: Definition<C>, config: C): { source: string; filters: Record<string, string> }[] {
  const subscriptions: { source: string; filters: Record<string, string> }[] = [];
  const seen = new Set<string>();
  for (const w of d.watches(config)) {
    const types = w.mode === "Reference" ? [ApiServerSourceType.RefAdd, ApiServerSourceType.RefUpdate, ApiServerSourceType.RefDelete] : [ApiServerSourceType.ResourceAdd, ApiServerSourceType.ResourceUpdate, ApiServerSourceType.ResourceDelete];
    for (const type of types) {
      const id = `${type}/${w.resource.kind}`;
      if (seen.has(id)) continue;
      seen.add(id);
      subscriptions.push({ source: "default", filters: { type, kind: w.resource.kind } });
    }
  }
  if (d.resyncSeconds) subscriptions.push({ source: "default", filters: { type: PingSourceType } });
  return subscriptions;
}
