// Observed state handed over with an event (docs/writing-functions.md, "What the event hands you"): the
// objects a function needs to judge a key, as the watch cache of the source that sent the event held
// them, each at the resourceVersion it was seen at. A reconcile reads through a client that answers
// from that state and goes to the API server only on a miss, so judging a quiet object costs no read.
//
// Three rules keep a stale view from ever causing a wrong write:
// - never older than judged: a handed object older than one this process has already seen (from an
//   earlier event, a read or a write's answer) is not used; the API is read instead;
// - a reconcile that writes confirms first: before a write, every handed object and list it used
//   since its last write is read again and compared whole, content and resourceVersion, and a
//   difference throws a conflict (409, StaleStateError) that the runtime retries with what was handed
//   of the other kinds and what the API server answered this delivery's reads, confirming or not
//   (afterStale): those answers are its own, so they are not read again (a consistent list may wait
//   up to 100 ms for the API server's watch cache). A reconcile that writes nothing reads nothing. Whole, because
//   whoever can reach a function's endpoint (a pod beside it, a Broker's ingress) can post an event
//   that hands a real object's name and resourceVersion with content of its own: a write conditioned
//   on that resourceVersion alone would pass the API server's check while judged from the forgery
//   (docs/security.md, "Handed state");
// - a write to an object drops that kind's handed state: what comes after reads what is stored.
import type { ApiResource } from "./api/resource.ts";
import { StaleStateError } from "./kube/errors.ts";
import { groupOf } from "./api/resource.ts";
import { metrics } from "./metrics.ts";
import type { KubeClient, KubeObject, ListOptions } from "./kube/client.ts";
import type { LabelQuery } from "./selector-query.ts";
import { labelSelectorObject, matches } from "./label-match.ts";
import { isDeepStrictEqual } from "node:util";

// One object as the source holds it; without `object` the source knows there is no such object.
// `conditional`: the function writes it only conditionally (shared/sdk.ts Related), so handed absent it
// is not confirmed before a write (a create finds out); handed present it is, as any other.
export type HandedObject = { cluster: string; apiVersion: string; kind: string; namespace?: string; name: string; object?: KubeObject; conditional?: boolean };
// Every object of a kind in a scope (a namespace, a label selector, or all), as the source holds them.
export type HandedList = { cluster: string; apiVersion: string; kind: string; namespace?: string; labelSelector?: string; items: KubeObject[] };
export type Observed = { objects: HandedObject[]; lists: HandedList[] };

const kindId = (cluster: string, group: string, kind: string) => `${cluster}|${group}|${kind}`;
const objectId = (kind: string, namespace: string | undefined, name: string) => `${kind}|${namespace ?? ""}|${name}`;
const seenId = (cluster: string, kind: string, o: KubeObject) => `${cluster}|${objectId(kind, o.metadata.namespace, o.metadata.name!)}`;

// resourceVersions are opaque, but the API server's are etcd revisions: compared as numbers when both
// are, and otherwise never assumed to be newer.
function olderThan(a: string | undefined, b: string | undefined): boolean {
  if (!a || !b || !/^\d+$/.test(a) || !/^\d+$/.test(b)) return false;
  return BigInt(a) < BigInt(b);
}

// The newest resourceVersion a process has seen per object: what makes an older handed state lose.
export type Seen = Map<string, string>;

// Deleted objects never leave the map, so it is bounded: past this many entries it starts over. That
// forgets only the guard against an older view, never a write's confirmation.
const SEEN_LIMIT = 100_000;

function noteSeen(seen: Seen, cluster: string, kind: string, o: KubeObject | undefined): void {
  if (!o?.metadata.resourceVersion || !o.metadata.name) return;
  if (seen.size >= SEEN_LIMIT) seen.clear();
  const id = seenId(cluster, kind, o);
  if (!olderThan(o.metadata.resourceVersion, seen.get(id))) seen.set(id, o.metadata.resourceVersion);
}

// Called as a delivery arrives, before anything is judged: what it hands is now the newest this
// process knows of, unless it knew newer, so a run that judges later (a key's queued turn) never goes
// by an older state that happened to arrive last.
export function noteHanded(seen: Seen, observed: Observed): void {
  for (const h of observed.objects) noteSeen(seen, h.cluster, h.kind, h.object);
  for (const l of observed.lists) for (const i of l.items) noteSeen(seen, l.cluster, l.kind, i);
}

const observedReads = metrics.counter("ocmf_observed_reads_total", "Reads a function's reconcile made, by where the answer came from (handed: the event's observed state; api: a read on a miss; stale: handed but older than already seen, so read from the API; confirm: a re-read before the first write)", ["controller", "source"]);

export type ObservedClients = { cluster(name: string): KubeClient };

// What the API server answered an earlier try's reads (a confirming read, or one the handed state could
// not answer), by kind ("<cluster>|<group>|<kind>"): each object (null: absent) and each list by its
// options. A judgement again after a stale one starts from them, and they are not confirmed.
type KindAnswers = { objects: Map<string, KubeObject | null>; lists: Map<string, KubeObject[]> };
export type Answered = ReadonlyMap<string, { readonly objects: ReadonlyMap<string, KubeObject | null>; readonly lists: ReadonlyMap<string, readonly KubeObject[]> }>;

// Clients for one reconcile: `live(cluster)` is the function's own, `observed` what the event handed.
export function observedClients(fn: string, live: (cluster: string) => KubeClient, observed: Observed, seen: Seen, known: Answered = new Map()): ObservedClients {
  const objects = new Map<string, Map<string, HandedObject>>();
  for (const h of observed.objects) mapOf(objects, kindId(h.cluster, groupOf(h.apiVersion), h.kind)).set(objectId(h.kind, h.namespace, h.name), h);
  const lists = new Map<string, HandedList[]>();
  for (const l of observed.lists) {
    const id = kindId(l.cluster, groupOf(l.apiVersion), l.kind);
    lists.set(id, [...(lists.get(id) ?? []), l]);
  }
  const dropped = new Set<string>(); // kinds written to: their handed state no longer counts
  // `confirm` reads it again and says whether it is the same as handed; its answer is kept for a next
  // judgement (`answered`), as is that of every read the handed state could not answer
  const used: { id: string; cluster: string; r: ApiResource; confirm: (client: KubeClient) => Promise<boolean> }[] = [];
  const answered = new Map<string, KindAnswers>([...known].map(([kind, a]) => [kind, { objects: new Map(a.objects), lists: new Map([...a.lists].map(([k, items]) => [k, [...items]])) }]));
  const answersOf = (kind: string): KindAnswers => {
    let a = answered.get(kind);
    if (!a) answered.set(kind, (a = { objects: new Map(), lists: new Map() }));
    return a;
  };
  let confirmedUpTo = 0; // used[0..confirmedUpTo) were read again before an earlier write
  const clients = new Map<string, KubeClient>();

  // A handed list by name, built on its first lookup (a tick's sweep looks up every item of it).
  const indexes = new WeakMap<HandedList, Map<string, KubeObject>>();
  function indexOf(l: HandedList): Map<string, KubeObject> {
    let index = indexes.get(l);
    if (!index) indexes.set(l, (index = new Map(l.items.map((o) => [objectId(l.kind, o.metadata.namespace ?? undefined, o.metadata.name!), o]))));
    return index;
  }

  // What the handed state says of one object: the object, known absent (null), or nothing (undefined).
  function lookup(cluster: string, r: ApiResource, name: string, namespace?: string): KubeObject | null | undefined {
    const id = kindId(cluster, r.group, r.kind);
    if (dropped.has(id)) return undefined;
    const h = objects.get(id)?.get(objectId(r.kind, namespace, name));
    if (h) return h.object ?? null;
    for (const l of lists.get(id) ?? []) {
      const item = indexOf(l).get(objectId(r.kind, namespace, name));
      if (item) return item;
      // a whole scope without it proves it absent only if the scope has no selector and holds its namespace
      if (!l.labelSelector && (l.namespace === undefined || l.namespace === namespace)) return null;
    }
    return undefined;
  }

  // Writes sent at once confirm one after another, each what was used before it; a stale state found
  // once refuses every later write of the reconcile too.
  let confirming: Promise<void> = Promise.resolve();
  function confirmBeforeWrite(): Promise<void> {
    confirming = confirming.then(confirmNow);
    return confirming;
  }
  // The reads go at once: a write waits for the slowest of them, not for their sum.
  async function confirmNow(): Promise<void> {
    const pending = used.slice(confirmedUpTo, (confirmedUpTo = used.length));
    observedReads.inc([fn, "confirm"], pending.length);
    const same = await Promise.all(pending.map((u) => u.confirm(live(u.cluster))));
    const stale = pending.filter((_, i) => !same[i]);
    if (stale.length) {
      // with the kinds written before it: their handed state, and what was answered of them, went with the write
      const kinds = [...new Set([...stale.map((u) => kindId(u.cluster, u.r.group, u.r.kind)), ...dropped])];
      const kept = new Map([...answered].filter(([kind]) => !dropped.has(kind)));
      throw new StaleStateError(`the state handed with the event has changed since (${stale.map((u) => u.id).join(", ")}): judging again with what the API server holds`, kinds, kept);
    }
  }

  function clientFor(cluster: string): KubeClient {
    const real = live(cluster);
    const note = (o: KubeObject | undefined, kind: string) => noteSeen(seen, cluster, kind, o);
    const fresh = (o: KubeObject, kind: string) => !olderThan(o.metadata.resourceVersion, seen.get(seenId(cluster, kind, o)));
    const get = async <T extends KubeObject>(r: ApiResource, name: string, namespace?: string): Promise<T | undefined> => {
      const kind = kindId(cluster, r.group, r.kind);
      const id = objectId(r.kind, namespace, name);
      // what the API server answered an earlier read of it in this delivery, needing no confirmation; else what was handed
      const answer = dropped.has(kind) ? undefined : answered.get(kind)?.objects.get(id);
      const found = answer !== undefined ? answer : lookup(cluster, r, name, namespace);
      if (found === null || (found && fresh(found, r.kind))) {
        observedReads.inc([fn, "handed"]);
        if (found) note(found, r.kind);
        // handed absent and conditional: the function only creates it, and the API server answers that;
        // present, its content is what a write carries, so it is confirmed whole like any other
        if (answer === undefined && (found !== null || !objects.get(kind)?.get(id)?.conditional))
          used.push({
            id: `${r.kind} ${namespace ? `${namespace}/` : ""}${name}`,
            cluster,
            r,
            confirm: async (c) => {
              const now = await c.get(r, name, namespace);
              answersOf(kind).objects.set(id, now ?? null);
              note(now, r.kind);
              return sameObject(now, found ?? undefined);
            },
          });
        return (found ? structuredClone(found) : undefined) as T | undefined;
      }
      observedReads.inc([fn, found ? "stale" : "api"]);
      const got = await real.get<T>(r, name, namespace);
      answersOf(kind).objects.set(id, got ? structuredClone(got) : null); // a copy: the function may change what it got
      note(got, r.kind);
      return got;
    };
    const list = async <T extends KubeObject>(r: ApiResource, o: Omit<ListOptions, "labelSelector"> & { labelSelector?: string | LabelQuery } = {}) => {
      const selectsNothing = typeof o.labelSelector === "object" && o.labelSelector.selects === "nothing";
      const selector = typeof o.labelSelector === "object" ? (o.labelSelector.selects === "matching" ? o.labelSelector.labelSelector : undefined) : o.labelSelector;
      const id = kindId(cluster, r.group, r.kind);
      const optionsKey = JSON.stringify([o.namespace ?? "", selectsNothing ? "nothing" : (selector ?? ""), o.fieldSelector ?? ""]);
      const earlier = dropped.has(id) ? undefined : answered.get(id)?.lists.get(optionsKey);
      if (earlier) {
        observedReads.inc([fn, "handed"]);
        return { items: structuredClone(earlier) as T[], resourceVersion: "" };
      }
      const byField = fieldFilter(o.fieldSelector);
      const candidates = byField && !selectsNothing && !dropped.has(id) ? (lists.get(id) ?? []).filter((l) => l.namespace === o.namespace) : [];
      // the list handed for that selector, or else the whole scope filtered here by it
      const exact = candidates.find((l) => (l.labelSelector || undefined) === (selector || undefined));
      const byLabels = exact || !selector ? undefined : labelFilter(selector);
      const match = exact ?? (byLabels ? candidates.find((l) => !l.labelSelector) : undefined);
      if (match && match.items.every((i) => fresh(i, r.kind))) {
        observedReads.inc([fn, "handed"]);
        const items = match.items.filter((i) => byField!(i) && (!byLabels || byLabels(i)));
        for (const i of items) note(i, r.kind);
        used.push({
          id: `${r.kind} list`,
          cluster,
          r,
          confirm: async (c) => {
            const now = (await c.list(r, o)).items;
            answersOf(id).lists.set(optionsKey, now);
            return sameItems(now, items);
          },
        });
        return { items: structuredClone(items) as T[], resourceVersion: "" };
      }
      observedReads.inc([fn, match ? "stale" : "api"]);
      const got = await real.list<T>(r, o);
      answersOf(id).lists.set(optionsKey, structuredClone(got.items));
      for (const i of got.items) note(i, r.kind);
      return got;
    };
    // Every write: confirm what was judged, drop the kind's handed state, remember what the server answered.
    const writing = (verb: string, call: (r: ApiResource, ...rest: unknown[]) => Promise<unknown>) => async (r: ApiResource, ...rest: unknown[]) => {
      await confirmBeforeWrite();
      dropped.add(kindId(cluster, r.group, r.kind));
      const out = await call(r, ...rest);
      if (out && typeof out === "object" && "metadata" in out) note(out as KubeObject, r.kind);
      return out;
    };
    return new Proxy(real, {
      get(target, prop) {
        if (prop === "get") return get;
        if (prop === "list") return list;
        if (prop === "create" || prop === "update" || prop === "patch" || prop === "delete") {
          return writing(prop, (target[prop] as (r: ApiResource, ...rest: unknown[]) => Promise<unknown>).bind(target));
        }
        if (prop === "request") {
          // a raw call: reads pass, a write confirms first (its kind is not known, so every handed state goes)
          return async (method: string, ...rest: unknown[]) => {
            if (method !== "GET") {
              await confirmBeforeWrite();
              for (const id of [...objects.keys(), ...lists.keys()]) dropped.add(id);
              objects.clear();
              lists.clear();
              answered.clear();
            }
            return (target.request as (m: string, ...r: unknown[]) => Promise<unknown>)(method, ...rest);
          };
        }
        const v = Reflect.get(target, prop, target) as unknown;
        return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
  }

  return {
    cluster(name) {
      let c = clients.get(name);
      if (!c) clients.set(name, (c = clientFor(name)));
      return c;
    },
  };
}

// The next judgement after a stale one: the handed state less the kinds found changed or written to
// ("<cluster>|<group>|<kind>"), and what the confirming reads answered, which it does not read again; the
// rest of those kinds is read from the API.
export function afterStale(observed: Observed, err: StaleStateError): { observed: Observed; known: Answered } {
  const drop = new Set(err.kinds);
  const kept = (h: { cluster: string; apiVersion: string; kind: string }) => !drop.has(kindId(h.cluster, groupOf(h.apiVersion), h.kind));
  return { observed: { objects: observed.objects.filter(kept), lists: observed.lists.filter(kept) }, known: err.answered as Answered };
}

// The same object, whole: what the API server holds now against what was handed (both undefined: still
// absent). A list's items carry no apiVersion and kind, so those two are left out.
function sameObject(now: KubeObject | undefined, handed: KubeObject | undefined): boolean {
  if (!now || !handed) return now === handed;
  const bare = ({ apiVersion: _a, kind: _k, ...rest }: KubeObject & { apiVersion?: unknown; kind?: unknown }) => rest;
  return isDeepStrictEqual(bare(now), bare(handed));
}

function sameItems(now: readonly KubeObject[], handed: readonly KubeObject[]): boolean {
  if (now.length !== handed.length) return false;
  const key = (o: KubeObject) => `${o.metadata.namespace ?? ""}/${o.metadata.name}`;
  const byKey = new Map(handed.map((o) => [key(o), o]));
  return now.every((o) => sameObject(o, byKey.get(key(o))));
}

// A label selector as a filter over a whole handed scope, for the forms labelSelectorObject reads
// (`key`, `!key`, `key=value`, `key!=value`); any other (set-based `in`, `notin`): undefined, and the
// API server answers it.
function labelFilter(selector: string): ((o: KubeObject) => boolean) | undefined {
  let parsed: ReturnType<typeof labelSelectorObject>;
  try {
    parsed = labelSelectorObject(selector);
  } catch {
    return undefined; // not a form read here: not a fault, the API server answers it
  }
  return (o) => matches(parsed, o.metadata.labels as Record<string, string> | undefined);
}

// The field selectors every kind serves, as a filter: "metadata.name=X" and "metadata.namespace=X",
// comma-separated (no escapes: names need none). Any other selector: undefined (not answered).
function fieldFilter(selector: string | undefined): ((o: KubeObject) => boolean) | undefined {
  if (!selector) return () => true;
  const terms = selector.split(",").map((t) => /^metadata\.(name|namespace)==?([^=!\\,]*)$/.exec(t));
  if (terms.some((t) => !t)) return undefined;
  return (o) => terms.every((t) => (t![1] === "name" ? o.metadata.name : (o.metadata.namespace ?? "")) === t![2]);
}

function mapOf<V>(m: Map<string, Map<string, V>>, id: string): Map<string, V> {
  let inner = m.get(id);
  if (!inner) m.set(id, (inner = new Map()));
  return inner;
}
