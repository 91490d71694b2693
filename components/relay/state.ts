// Observed state from the relay's watch caches, handed to a sink's function with each event
// (shared/observed.ts): the event's own object as the cache holds it now, the related objects the
// function's watch names, and on a resync tick the whole scope of each watch that asks for it. Only
// what a cache can vouch for is handed: an object it holds, or an absence where the cache's scope
// would hold the object; anything else is left out and the function reads it from the API.
import { isDeepStrictEqual } from "node:util";
import { groupOf, type ApiResource } from "../../shared/api/resource.ts";
import { DEFAULT_BODY_LIMIT } from "../../shared/cloudevents-server.ts";
import { PingSourceType, StateExtension } from "../../shared/events.ts";
import type { KubeObject } from "../../shared/kube/client.ts";
import { labelSelectorObject, matches } from "../../shared/label-match.ts";
import type { HandedList, HandedObject, Observed } from "../../shared/observed.ts";
import { at, isSettledBy } from "../../shared/settled.ts";
import { apiVersionOf, withAttributes, withTypeMeta, type CloudEvent } from "./cloudevents.ts";
import type { StateConfig } from "./config.ts";

// One kind's watch cache and the scope it watches.
export type Cache = {
  resource: ApiResource;
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
  get(key: string): KubeObject | undefined; // key: "<namespace>/<name>"
  objects(): KubeObject[];
};
export type Caches = (cluster: string, group: string, kind: string) => Cache | undefined;

type StateWatch = StateConfig["watches"][number];

const labelsOf = (o: KubeObject) => (o.metadata.labels ?? {}) as Record<string, string>;
const selects = (selector: string | undefined, o: KubeObject) => !selector || matches(parsed(selector), labelsOf(o));
// The few selectors of a relay's functions, parsed once each.
const parsedSelectors = new Map<string, ReturnType<typeof labelSelectorObject>>();
function parsed(selector: string): ReturnType<typeof labelSelectorObject> {
  let p = parsedSelectors.get(selector);
  if (!p) parsedSelectors.set(selector, (p = labelSelectorObject(selector)));
  return p;
}
const inScope = (scope: { namespace?: string; labelSelector?: string }, o: KubeObject) =>
  (scope.namespace === undefined || scope.namespace === (o.metadata.namespace ?? "")) && selects(scope.labelSelector, o);

// "{name}", "{namespace}", "{label:KEY}" of `o`; undefined when a label it names is missing.
export function expand(template: string | undefined, o: KubeObject): string | undefined {
  if (template === undefined) return undefined;
  let missing = false;
  const out = template.replace(/\{(name|namespace|label:([^}]+))\}/g, (_m, what: string, label?: string) => {
    if (what === "name") return o.metadata.name ?? "";
    if (what === "namespace") return o.metadata.namespace ?? "";
    const v = labelsOf(o)[label!];
    if (v === undefined) missing = true;
    return v ?? "";
  });
  return missing ? undefined : out;
}

const handed = (cluster: string, c: Cache, namespace: string | undefined, name: string, object?: KubeObject): HandedObject => ({
  cluster,
  apiVersion: apiVersionOf(c.resource),
  kind: c.resource.kind,
  ...(namespace ? { namespace } : {}),
  name,
  ...(object ? { object: withTypeMeta(c.resource, object) } : {}),
});

// What the lists of one event may add up to, in bytes of JSON: two thirds of what a function's server
// takes a request, leaving the rest for the event's own object and the named objects. A list that
// would pass it is not handed: the function reads it from the API, as on any miss.
export const HANDED_LISTS_MAX_BYTES = Math.floor((DEFAULT_BODY_LIMIT * 2) / 3);
type Budget = { bytes: number };

// Each cached object's size as JSON, measured once: a cache replaces an object when it changes, so the
// object itself is the key, and a list's size costs a sum, not a serialization, on every event.
const sizes = new WeakMap<KubeObject, number>();
function sizeOf(o: KubeObject): number {
  let n = sizes.get(o);
  if (n === undefined) sizes.set(o, (n = JSON.stringify(o).length));
  return n;
}

// Whether every object `scope` selects is one `cache` selects: its selector is the cache's with more
// terms (a selector's comma-separated terms must all hold). Set-based terms, whose values hold commas
// too, are compared only as the same whole selector.
export function narrows(scope: string | undefined, cache: string | undefined): boolean {
  if (!cache || cache === scope) return true;
  if (!scope || /[()]/.test(cache) || /[()]/.test(scope)) return false;
  const terms = new Set(scope.split(",").flatMap((t) => termsSaidBy(t.trim())));
  return cache.split(",").every((t) => terms.has(t.trim()));
}

// A term, and the existence term `key` that a `key=value` (or `key==value`) says too; `key!=value`
// says nothing of whether the label is there.
function termsSaidBy(term: string): string[] {
  const key = /^([^=!]+?)==?[^=]*$/.exec(term)?.[1]?.trim();
  return key ? [term, key] : [term];
}

// The objects in a cache that `scope` selects, if the cache holds all of them and they fit the budget.
function listOf(cluster: string, c: Cache, scope: { namespace?: string; labelSelector?: string }, budget: Budget): HandedList | undefined {
  const complete = !c.fieldSelector && narrows(scope.labelSelector, c.labelSelector) && (c.namespace === undefined || c.namespace === scope.namespace);
  if (!complete) return undefined;
  const selected = c.objects().filter((o) => inScope(scope, o));
  const bytes = selected.reduce((sum, o) => sum + sizeOf(o), 0);
  if (bytes > budget.bytes) return undefined;
  budget.bytes -= bytes;
  const items = selected.map((o) => withTypeMeta(c.resource, o));
  return {
    cluster,
    apiVersion: apiVersionOf(c.resource),
    kind: c.resource.kind,
    ...(scope.namespace !== undefined ? { namespace: scope.namespace } : {}),
    ...(scope.labelSelector ? { labelSelector: scope.labelSelector } : {}),
    items,
  };
}

// One object by name: held, known absent, or (undefined) not something the cache can vouch for. A
// conditional one (shared/sdk.ts Related) is handed absent whenever the cache does not hold it.
function one(cluster: string, c: Cache, namespace: string | undefined, name: string, conditional = false): HandedObject | undefined {
  const ns = c.resource.namespaced ? namespace : undefined;
  const object = c.get(`${ns ?? ""}/${name}`);
  const mark = conditional ? { conditional: true } : {};
  if (object) return { ...handed(cluster, c, ns, name, object), ...mark };
  const wouldHold = !c.fieldSelector && !c.labelSelector && (c.namespace === undefined || c.namespace === (ns ?? ""));
  return wouldHold || conditional ? { ...handed(cluster, c, ns, name), ...mark } : undefined;
}

const kindOf = (attrs: Record<string, unknown>) => ({ group: groupOf(String(attrs.apiversion ?? "")), kind: String(attrs.kind ?? "") });

// The watch of the function an object event is for: its cluster and kind, with `subject` in its scope.
function watchOf(state: StateConfig, cluster: string, attrs: Record<string, unknown>, subject: KubeObject): StateWatch | undefined {
  const { group, kind } = kindOf(attrs);
  return state.watches.find((w) => w.cluster === cluster && w.group === group && w.kind === kind && inScope(w, subject));
}

// What to hand with the event; undefined when nothing; "unrelated" when a related object the watch
// requires is, as the cache shows, not there (the event is not for this function).
export function observedFor(state: StateConfig, caches: Caches, event: CloudEvent): Observed | "unrelated" | undefined {
  const attrs = event as unknown as Record<string, unknown>;
  const cluster = String(attrs.cluster ?? "");
  const budget: Budget = { bytes: HANDED_LISTS_MAX_BYTES };
  if (event.type === PingSourceType) {
    const lists = state.watches
      .filter((w) => w.onTick && w.cluster === cluster)
      .flatMap((w) => {
        const c = caches(w.cluster, w.group, w.kind);
        const l = c && listOf(cluster, c, w, budget);
        return l ? [l] : [];
      });
    return lists.length ? { objects: [], lists } : undefined;
  }
  const { group, kind } = kindOf(attrs);
  const own = caches(cluster, group, kind);
  if (!own) return undefined;
  const namespace = String(attrs.namespace ?? "") || undefined;
  const name = String(attrs.name ?? "");
  const current = own.get(`${namespace ?? ""}/${name}`);
  // Labels decide the scope: the cache's copy, or the last state a delete carries in its data.
  const data = event.data as KubeObject | undefined;
  const subject = current ?? (data?.metadata ? data : { metadata: { name, namespace } });
  const watch = watchOf(state, cluster, attrs, subject);
  if (!watch) return undefined;
  const objects: HandedObject[] = [];
  const lists: HandedList[] = [];
  const self = one(cluster, own, namespace, name);
  if (self) objects.push(self);
  for (const r of watch.related) {
    const c = caches(cluster, r.group, r.kind);
    if (!c) continue;
    const ns = expand(r.namespace, subject);
    if (r.namespace !== undefined && ns === undefined) continue;
    if (r.name !== undefined) {
      const n = expand(r.name, subject);
      const h = n ? one(cluster, c, ns, n, r.conditional) : undefined;
      if (r.required && h && !h.object) return "unrelated";
      if (h) objects.push(h);
      continue;
    }
    const selector = expand(r.labelSelector, subject);
    if (r.labelSelector !== undefined && selector === undefined) continue;
    const l = listOf(cluster, c, { ...(ns !== undefined ? { namespace: ns } : {}), ...(selector ? { labelSelector: selector } : {}) }, budget);
    if (r.required && l && l.items.length === 0) return "unrelated";
    if (l) lists.push(l);
  }
  return { objects, lists };
}

// Whether an update changed none of the parts its watch looks at (shared/sdk.ts Watch.changes), judged
// between the object as the cache held it before and the event's: such an update wakes nothing, as a
// controller-runtime predicate drops it before the queue. Any other event, or a watch without
// `changes`, is judged by observedFor as usual.
// `current` is the object as the source holds it now (a Reference-mode event carries no object).
// An object event of a kind the function watches, about an object in none of its watches' scopes
// before or after the change: the relay watches the kind wider for another function, and this one
// would only skip it. One that enters or leaves a scope still goes, as a selected watch would send it.
export function outsideEveryScope(state: StateConfig, event: CloudEvent, change: { previous?: KubeObject; current: KubeObject }): boolean {
  const attrs = event as unknown as Record<string, unknown>;
  const cluster = String(attrs.cluster ?? "");
  const { group, kind } = kindOf(attrs);
  // A kind no watch names is not judged here (the function asked for it some other way), unless a watch
  // names a kind of that name in another group: a subscription filters by kind alone, so SIG's
  // PlacementDecision comes through a filter meant for OCM's.
  if (!state.watches.some((w) => w.cluster === cluster && w.group === group && w.kind === kind)) return state.watches.some((w) => w.cluster === cluster && w.kind === kind);
  return !watchOf(state, cluster, attrs, change.current) && !(change.previous && watchOf(state, cluster, attrs, change.previous));
}

export function changedNothingWatched(state: StateConfig, event: CloudEvent, change: { previous: KubeObject; current: KubeObject }): boolean {
  if (!event.type.endsWith(".update")) return false;
  const attrs = event as unknown as Record<string, unknown>;
  const { previous, current } = change;
  const watch = watchOf(state, String(attrs.cluster ?? ""), attrs, current);
  if (!watch?.changes) return false;
  return watch.changes.every((path) => isDeepStrictEqual(at(previous, path), at(current, path)));
}

// An add or update of the function's root object that the object, as the source holds it now, shows
// settled (shared/sdk.ts Definition.settled in its declarative form): the function would only skip it.
// A deletion is never settled: what the object leaves behind may be the function's to clean up.
export function settledRoot(state: StateConfig, event: CloudEvent, current: KubeObject): boolean {
  if (event.type.endsWith(".delete")) return false;
  const attrs = event as unknown as Record<string, unknown>;
  const watch = watchOf(state, String(attrs.cluster ?? ""), attrs, current);
  return !!watch?.settled && isSettledBy(watch.settled, current);
}

// The event with its observed state: our extension set and the data wrapped as shared/events.ts reads it.
export function withObserved(event: CloudEvent, observed: Observed): CloudEvent {
  const data = event.type === PingSourceType ? { observed } : { object: event.data, observed };
  return withAttributes(event, { [StateExtension]: "v1", data, datacontenttype: "application/json" });
}
