// The public API for writing a multi-cluster function (docs/writing-functions.md). A function is one
// definition: what it watches on which clusters, how an event on each watched kind maps to the keys of
// the objects it reconciles, what it writes, its settings and the reconcile itself. Everything else
// comes from it: the program a bundle runs (shared/serve-main.ts), the relay sources and
// ApiServerSources that feed it, its func.yaml subscriptions, its RBAC (cli/render/rbac.ts) and every
// list of functions (cli/render/definitions.ts reads functions/).
//
//   export default defineFunction({
//     name: "deployment-copy",
//     config: ConfigSchema,
//     watches: (c) => [
//       { cluster: c.source, resource: DeploymentResource, root: true },
//       { cluster: c.source, resource: ManagedClusterResource, keys: (event, io) => ... },
//     ],
//     writes: (c) => [{ cluster: c.target, why: "the copies", apiGroups: ["apps"], resources: ["deployments"], verbs: ["create", "update", "delete"] }],
//     reconcile: async (io, key) => ...,
//   });
import { z } from "zod";
import type { ApiResource } from "./api/meta.ts";
import type { KubeObject } from "./kube/client.ts";
import { ApiServerSourceType, isFunctionName, PingSourceType, type FunctionEvent, type ObjectEvent, type TickEvent } from "./events.ts";
import { configError, readEnvSettings, variableOf } from "./env-settings.ts";
import { ioFromEnv } from "./function-env.ts";
import { isSettledBy, type SettledClause, type SettledWhen } from "./settled.ts";
import { classified, serve, type Rechecks, type FunctionSpec, type Io, type Key, type Outcome, type Reply, type Skip } from "./harness.ts";

// What a function file needs besides defineFunction, from the same import.
export { z };
export { done, type Io, type Key, type Outcome } from "./harness.ts";
export type { ObjectEvent, TickEvent } from "./events.ts";
export type { SettledWhen } from "./settled.ts";

export type KeysOrSkip = Key[] | Skip;
export type Verb = ObjectEvent["verb"];
export const AllVerbs: readonly Verb[] = ["add", "update", "delete"];

// One kind on one cluster, as an event source watches it (controller-runtime's For and Watches).
export type Watch<C = unknown> = {
  cluster: string; // the cluster's name as events carry it (the `cluster` extension)
  resource: ApiResource;
  namespace?: string; // one namespace, or all
  labelSelector?: string; // the source sends only these objects' events
  fieldSelector?: string; // likewise (relay-fed sources only: an ApiServerSource has no field selectors)
  // What the events carry: the object ("Resource", the default) or only its reference ("Reference").
  // "Either": the function reads what it needs itself, so the source may send whichever is cheaper.
  mode?: "Resource" | "Reference" | "Either";
  verbs?: readonly Verb[]; // the changes that wake the function; default all three
  // `root`: the kind the function reconciles. Its events are keyed by the object itself unless `keys`
  // says otherwise, and a resync tick lists it.
  root?: boolean;
  // How this kind's events map to keys (a copy wakes its source, a lease its cluster); the definition's
  // `map` when not given. Return { skip } with a reason for an event that wakes nothing.
  keys?: (event: ObjectEvent, io: Io<C>) => KeysOrSkip | Promise<KeysOrSkip>;
  // What else the function needs to judge the keys this kind's events wake: the source hands these
  // objects from its watch cache with every such event (shared/observed.ts), and the event's own object
  // always. Each must be a kind this function watches on the same cluster.
  related?: readonly Related[];
  // The source hands every object of this watch with each resync tick, so a sweep lists nothing.
  // Default: for the root kind (what a sweep lists); a watch with a field selector never.
  onTick?: boolean;
  // The parts of the object the function judges this kind by, as dotted paths ("metadata.labels"):
  // an update that changes none of them wakes nothing from a source that holds the object's last
  // state (a relay). Sources without one (Knative's ApiServerSource) still send it, and the function
  // judges it as any event, so this saves work and never decides anything.
  changes?: readonly string[];
};

// Related objects, named from the event's object: in each field "{name}", "{namespace}" and
// "{label:KEY}" stand for its name, namespace and the value of its label KEY. With `name`, that one
// object; without, every object in `namespace` (or all) that `labelSelector` selects. `required`: the
// event wakes the function only if the source's cache shows the object there, or the list not empty
// (a ManagedCluster change wakes no placement-scheduler on a hub without Placements). `conditional`:
// the function writes this object only conditionally (a create, or a write carrying the
// resourceVersion it read), and judges nothing else by it: it is handed even absent from a cache that
// cannot vouch for absence (one of labelled objects), and handed absent it is not read again before a
// write, since a create finds out (shared/observed.ts). Handed present it is confirmed whole like any
// other: its content is what a write carries, and a forged one must never be written back.
export type Related = { resource: ApiResource; name?: string; namespace?: string; labelSelector?: string; required?: boolean; conditional?: boolean };

// A permission the function needs beyond what its watches read (get, list and watch on every watched
// kind, which come with the watch): every write, and any read no watch covers. `why` is the comment
// above the rule in the rendered RBAC. With `namespace` the rule goes into a Role there, else into the
// function's ClusterRole. Only the grants on the cluster the function runs on become its RBAC; what it
// does elsewhere is another identity's (a spoke function reaches the hub as its cluster's agent).
// `role` puts the rule into a ClusterRole of its own, <function role>:<role>, for a grant that is
// reviewed or withdrawn on its own (a work agent's execution rights).
export type Grant = RbacRule & { cluster: string; namespace?: string; role?: string; why: string };

export type Definition<C> = {
  name: string; // a DNS label: the function's Service, identity and Triggers are named after it
  // The settings, checked before the function's server listens; read from the environment (func.yaml's
  // run.envs), each schema field from the variable it declares (shared/env-settings.ts' fromEnv) or
  // else of its name in SCREAMING_SNAKE_CASE; `env` replaces that reading.
  config: z.ZodType<C>;
  env?: (env: NodeJS.ProcessEnv) => unknown;
  watches: (config: C) => readonly Watch<C>[];
  // How often every root object is reconciled without an event (deployed, the PingSource's schedule);
  // 0 or unset: never, unless `resync` is given.
  resyncSeconds?: number;
  // The keys a resync tick wakes, when not every root object (a tick names the cluster it is for, if any).
  resync?: (io: Io<C>, tick: TickEvent) => KeysOrSkip | Promise<KeysOrSkip>;
  map?: (event: ObjectEvent, io: Io<C>) => KeysOrSkip | Promise<KeysOrSkip>; // for watches without `keys`
  // Whether a root object needs nothing from the function, judged from the object alone. One an add or
  // update event carries (Resource mode), or a resync tick lists, wakes no reconcile when settled: every
  // later change brings its own event, so a stale copy that looks settled skips nothing a newer one
  // would not show. Written as data (shared/settled.ts: clauses, any of which settles the object), the
  // relay that feeds the function runs the same test and does not wake it at all; a function form
  // is for a test that needs code, and only the woken function runs it.
  settled?: SettledWhen | ((object: KubeObject, io: Io<C>) => boolean);
  writes?: (config: C) => readonly Grant[];
  reconcile: (io: Io<C>, key: Key) => Promise<Outcome>;
};

export type Subscription = { source: string; filters: Record<string, string> };

export type MultiClusterFunction<C> = {
  definition: Definition<C>;
  spec: FunctionSpec<C>; // what the harness and the tests drive
  configFromEnv: (env: NodeJS.ProcessEnv) => C;
  // The handler shared/cloudevents-server.ts (or faas-js-runtime) calls. The settings are read and
  // checked here, before any server listens: a bad one throws a ConfigError naming its variable.
  handler: (env?: NodeJS.ProcessEnv) => (context: unknown, cloudevent?: unknown) => Promise<Reply>;
  // func.yaml's deploy.subscriptions: what a Broker's Triggers must let through to this function.
  subscriptions: (config: C) => Subscription[];
  // What a relay sink hands it and need not send it (stateOf of its watches and its settled test).
  state: (config: C) => { watches: StateWatch[] };
  ticks: boolean; // whether resync ticks wake it
};


// How the function asks to be called again (shared/harness.ts Rechecks): the render sets "event" for a
// function a Broker feeds; unset, the x-recheck-after-ms answer alone, for a relay that feeds it.
export const RechecksVariable = "OCMF_RECHECKS";
function rechecksFrom(fn: string, env: NodeJS.ProcessEnv): Rechecks {
  const value = env[RechecksVariable];
  if (value === undefined || value === "" || value === "header") return "header";
  if (value === "event") return "event";
  throw configError(fn, RechecksVariable, value, '"header" or "event"');
}

export function defineFunction<C>(d: Definition<C>): MultiClusterFunction<C> {
  if (!isFunctionName(d.name)) throw new Error(`defineFunction: name ${JSON.stringify(d.name)} is not a DNS label`);
  const configFromEnv = (env: NodeJS.ProcessEnv): C => d.config.parse(d.env ? d.env(env) : readEnvSettings(d.name, d.config, env));
  const spec: FunctionSpec<C> = {
    name: d.name,
    keys: (event, io) => keysOf(d, event, io),
    reconcile: d.reconcile,
  };
  const handler = (env: NodeJS.ProcessEnv = process.env) => {
    const io = ioFromEnv(d.name, configFromEnv, env, (field) => variableOf(d.config, field));
    return serve(spec, () => io, rechecksFrom(d.name, env));
  };
  const ticks = !!d.resyncSeconds || d.resync !== undefined;
  return { definition: d, spec, configFromEnv, handler, ticks, subscriptions: (config) => subscriptionsOf(d.watches(config), ticks), state: (config) => stateOf(d.watches(config), d.settled) };
}

export const isKindOf = (r: ApiResource, ref: { apiVersion: string; kind: string }) =>
  r.kind === ref.kind && (r.group === "" ? ref.apiVersion === r.version : ref.apiVersion.startsWith(`${r.group}/`));
const inScope = <C>(w: Watch<C>, e: ObjectEvent) => w.cluster === e.cluster && isKindOf(w.resource, e.ref) && (w.namespace === undefined || w.namespace === (e.ref.namespace ?? ""));

async function keysOf<C>(d: Definition<C>, event: FunctionEvent, io: Io<C>): Promise<KeysOrSkip> {
  const watches = d.watches(io.config);
  if (event.type === "tick") return d.resync ? d.resync(io, event) : listRoots(watches, event, io, d.settled);
  const w = watches.find((w) => inScope(w, event));
  if (!w) return classified({ skip: `${event.ref.kind} ${event.ref.namespace ? `${event.ref.namespace}/` : ""}${event.ref.name} on ${event.cluster} is not watched` }, "not-watched");
  if (!(w.verbs ?? AllVerbs).includes(event.verb)) return classified({ skip: `${event.ref.kind} is not watched for ${event.verb}` }, "verb");
  if (w.keys) return w.keys(event, io);
  if (w.root) {
    // a deletion is never settled: what the object leaves behind may be the function's to clean up
    if (event.verb !== "delete" && event.object && isSettled(d.settled, event.object as KubeObject, io)) return classified({ skip: `${event.ref.kind} ${event.ref.name} as the event carries it is settled` }, "settled");
    return [{ cluster: event.cluster, namespace: event.ref.namespace, name: event.ref.name }];
  }
  if (d.map) return d.map(event, io);
  return classified({ skip: `${event.ref.kind} is watched but the function maps no keys from it` }, "unmapped");
}

const isSettled = <C>(settled: Definition<C>["settled"], o: KubeObject, io: Io<C>) =>
  settled === undefined ? false : typeof settled === "function" ? settled(o, io) : isSettledBy(settled, o);

// A resync: every root object, as controller-runtime's periodic resync re-queues its cache.
async function listRoots<C>(watches: readonly Watch<C>[], tick: TickEvent, io: Io<C>, settled?: Definition<C>["settled"]): Promise<KeysOrSkip> {
  const roots = watches.filter((w) => w.root && (!tick.cluster || tick.cluster === w.cluster));
  if (roots.length === 0) return classified({ skip: `tick for cluster ${tick.cluster}, where this function reconciles nothing` }, "no-roots");
  const keys: Key[] = [];
  for (const w of roots) {
    const { items } = await io.cluster(w.cluster).list(w.resource, { namespace: w.namespace, labelSelector: w.labelSelector, fieldSelector: w.fieldSelector });
    keys.push(...items.filter((o) => !isSettled(settled, o, io)).map((o) => ({ cluster: w.cluster, namespace: o.metadata.namespace, name: o.metadata.name! })));
  }
  return keys;
}

const typeOf = (mode: "Resource" | "Reference", verb: Verb) =>
  mode === "Resource" ? ({ add: ApiServerSourceType.ResourceAdd, update: ApiServerSourceType.ResourceUpdate, delete: ApiServerSourceType.ResourceDelete } as const)[verb] : ({ add: ApiServerSourceType.RefAdd, update: ApiServerSourceType.RefUpdate, delete: ApiServerSourceType.RefDelete } as const)[verb];

// func.yaml's subscriptions: per watched kind the event types its watches take (one filter on the kind
// alone when they take every type), and the resync ticks. Exactly what the function's keys take, so a
// Broker wakes it for nothing else.
export function subscriptionsOf<C>(watches: readonly Watch<C>[], ticks: boolean): Subscription[] {
  const byKind = new Map<string, Set<string>>();
  for (const w of watches) {
    const types = byKind.get(w.resource.kind) ?? new Set<string>();
    const modes = w.mode === "Either" ? (["Resource", "Reference"] as const) : [w.mode ?? "Resource"];
    for (const mode of modes) for (const verb of w.verbs ?? AllVerbs) types.add(typeOf(mode, verb));
    byKind.set(w.resource.kind, types);
  }
  const subscriptions: Subscription[] = [];
  for (const [kind, types] of byKind) {
    if (types.size === 6) subscriptions.push({ source: "default", filters: { kind } });
    else for (const type of types) subscriptions.push({ source: "default", filters: { type, kind } });
  }
  if (ticks) subscriptions.push({ source: "default", filters: { type: PingSourceType } });
  return subscriptions;
}

// What a relay sink hands the function with each event (components/relay/config.ts StateSchema): per
// watch its scope, its related objects and whether ticks carry its whole scope, and what it need not
// be sent at all (`changes`, `settled`). Watches with a field
// selector hand nothing (a cache cannot tell which objects such a selector leaves out).
export type StateWatch = {
  cluster: string;
  group: string;
  kind: string;
  namespace?: string;
  labelSelector?: string;
  related: { group: string; kind: string; name?: string; namespace?: string; labelSelector?: string; required?: boolean; conditional?: boolean }[];
  onTick: boolean;
  changes?: string[];
  settled?: SettledClause[];
};
// `settled` is the definition's: in its declarative form it goes on the root watches, for the relay.
export function stateOf<C>(watches: readonly Watch<C>[], settled?: Definition<C>["settled"]): { watches: StateWatch[] } {
  const watched = (cluster: string, r: ApiResource) => watches.some((w) => w.cluster === cluster && w.resource.group === r.group && w.resource.kind === r.kind);
  return {
    watches: watches
      .filter((w) => !w.fieldSelector)
      .map((w) => ({
        cluster: w.cluster,
        group: w.resource.group,
        kind: w.resource.kind,
        ...(w.namespace !== undefined ? { namespace: w.namespace } : {}),
        ...(w.labelSelector ? { labelSelector: w.labelSelector } : {}),
        related: (w.related ?? []).map((r) => {
          if (!watched(w.cluster, r.resource)) throw new Error(`a ${w.resource.kind} watch relates ${r.resource.kind}, which the function does not watch on ${w.cluster}`);
          const { resource, ...names } = r;
          return { group: resource.group, kind: resource.kind, ...names };
        }),
        onTick: w.onTick ?? !!w.root,
        ...(w.changes ? { changes: [...w.changes] } : {}),
        ...(w.root && Array.isArray(settled) ? { settled: [...settled] } : {}),
      })),
  };
}

// The RBAC a function's watches need: get, list and watch on every watched resource, per cluster
// (cli/render/rbac.ts adds the definition's `writes`); a relay's sources, as its configuration spells
// them, need the same.
export type RbacRule = { apiGroups?: string[]; resources?: string[]; resourceNames?: string[]; nonResourceURLs?: string[]; verbs: string[] };
export function watchRules(watches: readonly { cluster: string; resource: { group?: string; plural: string } }[]): Map<string, RbacRule[]> {
  const byCluster = new Map<string, Map<string, Set<string>>>();
  for (const w of watches) {
    const groups = byCluster.get(w.cluster) ?? new Map<string, Set<string>>();
    const group = w.resource.group ?? "";
    groups.set(group, (groups.get(group) ?? new Set()).add(w.resource.plural));
    byCluster.set(w.cluster, groups);
  }
  return new Map(
    [...byCluster].map(([cluster, groups]) => [
      cluster,
      [...groups].sort(([a], [b]) => a.localeCompare(b)).map(([group, plurals]) => ({ apiGroups: [group], resources: [...plurals].sort(), verbs: ["get", "list", "watch"] })),
    ]),
  );
}
