// The one list-then-watch loop (issue 25), as client-go's Reflector: list the resource, keep what it
// holds, watch from the list's resourceVersion (bookmarks advance it), resume from the last one after the
// server ends a stream or the connection fails (after a back-off), and list again after 410 Gone,
// diffing the new list against what it held so a consumer still sees every add, update and delete.
// Each failure is logged once, when it starts or changes, and the recovery once when it ends; a resource
// the server does not serve is a state, said once and looked at again at the slowest retry.
import type { ApiResource } from "../api/meta.ts";
import type { KubeClient, KubeObject, WatchEvent } from "./client.ts";
import { KubeError, statusCodeOf } from "./errors.ts";
import { exponentialBackoff, type BackoffConfig } from "../backoff.ts";
import { after, MaxTimerMs, sleep } from "../timers.ts";

// The shape of every logger in the tree (shared/harness.ts's Log), said here so this file pulls in no runtime.
export type ReflectorLog = {
  info(fields: object, msg: string): void;
  warn(fields: object, msg: string): void;
  error(fields: object, msg: string): void;
};

export type ChangeType = "ADDED" | "MODIFIED" | "DELETED";
// `previous`: on MODIFIED, the object as held before the change.
export type ReflectorChange<T extends KubeObject> = { type: ChangeType; object: T; server: string; previous?: T };

// waiting-for-client: the client getter has none (credentials not loaded yet); not-served: the server has
// no such resource at all (issue 24: OCM's hub serves no AgentConfigs).
export type ReflectorState = "waiting-for-client" | "listing" | "watching" | "backing-off" | "not-served" | "stopped";

export type ReflectorStatus = {
  state: ReflectorState;
  resourceVersion: string;
  objects: number;
  lists: number; // the first list and every re-list
  watches: number; // watch requests opened
  lastError?: string;
};

export type ReflectorOptions<T extends KubeObject> = {
  name: string; // in every log line, with `fields`
  fields?: Record<string, unknown>;
  resource: ApiResource;
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
  // A getter for a client whose credentials change (the relay's): undefined until there is one. After a
  // change, call relist(): another identity or server makes the old resourceVersion meaningless.
  client: KubeClient | (() => KubeClient | undefined);
  timeoutSeconds: number; // the server ends each watch after this long, and it is resumed
  backoff: BackoffConfig;
  log: ReflectorLog;
  // Each change, in order: after a list, ADDED/MODIFIED/DELETED for what differs from what was held.
  // A handler that throws is a bug: logged, and the change is not delivered again.
  onChange?(change: ReflectorChange<T>): void;
  unref?: boolean; // its timers never keep the process alive (the heartbeat sidecar)
};

export type Reflector<T extends KubeObject> = {
  readonly ready: Promise<void>; // the first list is done
  synced(): boolean; // listed, and a watch is open or resuming: what it holds is current
  get(key: string): T | undefined; // key: objectKey
  objects(): T[];
  status(): ReflectorStatus;
  relist(): void; // start over from a list, diffed against what is held
  stop(): Promise<void>;
};

export const objectKey = (o: KubeObject): string => `${o.metadata.namespace ?? ""}/${o.metadata.name ?? ""}`;

// A watch that ends sooner than this without an event counts as a failure, so a server (or a proxy) that
// closes streams at once is retried with back-off instead of in a tight loop.
const HEALTHY_WATCH_MS = 1_000;
// Past the server-side timeout plus this, a silent watch is presumed half-open (client-node #596, #958).
const WATCHDOG_GRACE_MS = 30_000;

class Expired extends Error {}

export function startReflector<T extends KubeObject>(o: ReflectorOptions<T>): Reflector<T> {
  const clientNow = typeof o.client === "function" ? o.client : () => o.client as KubeClient;
  const where = { reflector: o.name, ...o.fields };
  const timer = { unref: o.unref === true };
  const backoff = exponentialBackoff(o.backoff);
  let known = new Map<string, T>();
  let resourceVersion = "";
  let state: ReflectorState = "waiting-for-client";
  let stopped = false;
  let relistNeeded = false;
  let lists = 0;
  let watches = 0;
  let lastError: string | undefined;
  let failures = 0; // in a row, since the last success
  let interrupt = new AbortController();
  let markReady = () => {};
  const ready = new Promise<void>((resolve) => (markReady = resolve));
  const wake = () => interrupt.abort();
  const selectors = { namespace: o.namespace, labelSelector: o.labelSelector, fieldSelector: o.fieldSelector };

  function emit(type: ChangeType, object: T, server: string, previous?: T): void {
    if (!o.onChange) return;
    try {
      o.onChange({ type, object, server, ...(previous ? { previous } : {}) });
    } catch (err) {
      o.log.error({ ...where, error: String(err) }, "bug: the change handler threw; the change is dropped");
    }
  }

  async function list(client: KubeClient): Promise<void> {
    state = "listing";
    const answer = await client.list<T>(o.resource, selectors);
    lists++;
    const before = known;
    known = new Map(answer.items.map((item) => [objectKey(item), item]));
    resourceVersion = answer.resourceVersion;
    for (const [key, item] of known) {
      const prev = before.get(key);
      if (!prev) emit("ADDED", item, client.server);
      else if (prev.metadata.resourceVersion !== item.metadata.resourceVersion) emit("MODIFIED", item, client.server, prev);
    }
    // Deleted while nobody watched: the last state known stands for the object.
    for (const [key, prev] of before) if (!known.has(key)) emit("DELETED", prev, client.server);
  }

  function apply(e: WatchEvent, server: string): void {
    const object = e.object as T;
    const key = objectKey(object);
    const prev = known.get(key);
    if (object.metadata.resourceVersion) resourceVersion = object.metadata.resourceVersion;
    if (e.type === "DELETED") known.delete(key);
    else if (prev && prev.metadata.resourceVersion === object.metadata.resourceVersion) return; // seen in a list already
    else known.set(key, object);
    emit(e.type as ChangeType, object, server, e.type === "MODIFIED" ? prev : undefined);
  }

  // One watch request. Returns how many changes it carried; throws Expired on 410, a KubeError on any other
  // ERROR event or refusal, a network error when the connection fails.
  async function watchOnce(client: KubeClient, signal: AbortSignal): Promise<number> {
    state = "watching";
    watches++;
    let events = 0;
    let failure: Error | undefined;
    const w = client.watch(o.resource, { ...selectors, resourceVersion, timeoutSeconds: o.timeoutSeconds }, (e) => {
      if (failure || signal.aborted) return;
      if (e.type === "ERROR") {
        const s = e.object as { code?: number; reason?: string; message?: string };
        failure = s.code === 410 ? new Expired(s.message ?? "Gone") : new KubeError(s.code ?? 0, s.reason ?? "", `watch ${o.name}: ${s.code} ${s.reason}: ${s.message}`);
        w.stop();
      } else if (e.type === "BOOKMARK") {
        resourceVersion = e.object.metadata.resourceVersion ?? resourceVersion;
      } else {
        events++;
        apply(e, client.server);
      }
    });
    const stop = () => w.stop();
    signal.addEventListener("abort", stop, { once: true });
    if (signal.aborted) stop();
    const watchdog = after(o.timeoutSeconds * 1000 + WATCHDOG_GRACE_MS, () => {
      o.log.warn({ ...where, resourceVersion }, "watch outlived its server timeout: presumed dead, reconnecting");
      w.stop();
    }, timer);
    try {
      await w.done;
    } catch (err) {
      if (statusCodeOf(err) === 410) throw new Expired(err instanceof Error ? err.message : String(err));
      throw err;
    } finally {
      clearTimeout(watchdog);
      signal.removeEventListener("abort", stop);
    }
    if (failure) throw failure;
    return events;
  }

  // Said once per change of state: the first failure, or one that differs from the last; the rest are
  // counted. The recovery is said once too.
  function failed(message: string, fields: object, msg: string): void {
    failures++;
    if (message !== lastError) o.log.warn({ ...where, ...fields, error: message, failures }, msg);
    lastError = message;
  }
  function succeeded(): void {
    if (lastError !== undefined) o.log.info({ ...where, failures, resourceVersion }, "recovered: listing and watching again");
    lastError = undefined;
    failures = 0;
    backoff.reset();
  }

  async function run(): Promise<void> {
    let notServed = false; // said once, until it is served
    while (!stopped) {
      interrupt = new AbortController();
      const signal = interrupt.signal;
      const client = clientNow();
      if (!client) {
        state = "waiting-for-client";
        await sleep(MaxTimerMs, signal, timer);
        continue;
      }
      if (relistNeeded) {
        relistNeeded = false;
        resourceVersion = "";
      }
      try {
        if (!resourceVersion) {
          await list(client);
          if (notServed) o.log.info({ ...where, resource: resourceName(o.resource) }, "the server serves it now: listed");
          notServed = false;
          succeeded();
          markReady();
          if (signal.aborted) continue;
        }
        const started = performance.now();
        const events = await watchOnce(client, signal);
        if (signal.aborted) continue;
        if (events === 0 && performance.now() - started < HEALTHY_WATCH_MS) throw new Error("the server ended the watch at once");
        // a normal end (timeoutSeconds): resume at once from the last resourceVersion
        succeeded();
      } catch (err) {
        if (stopped || signal.aborted) continue;
        if (err instanceof Expired) {
          o.log.info({ ...where, resourceVersion }, "resourceVersion expired (410): re-listing and diffing against what is known");
          resourceVersion = "";
          continue;
        }
        const message = err instanceof Error ? err.message : String(err);
        // A list refused or not found because the server has no such resource is a state, not a
        // failure per retry: said once, and looked at again at the slowest retry.
        const code = statusCodeOf(err);
        if (!resourceVersion && (code === 403 || code === 404) && (await isNotServed(client, o.resource))) {
          if (!notServed) o.log.info({ ...where, resource: resourceName(o.resource), retryInMs: o.backoff.maxMs }, "the server does not serve this resource: looking again at the slowest retry");
          notServed = true;
          lastError = message;
          state = "not-served";
          await sleep(o.backoff.maxMs, signal, timer);
          continue;
        }
        state = "backing-off";
        const retryInMs = backoff.next();
        if (resourceVersion) failed(message, { retryInMs, resourceVersion }, "watch failed: resuming from the last resourceVersion after a backoff");
        else failed(message, { retryInMs }, "list failed: retrying after a backoff");
        await sleep(retryInMs, signal, timer);
      }
    }
    state = "stopped";
  }

  const running = run();

  return {
    ready,
    synced: () => state === "watching",
    get: (key) => known.get(key),
    objects: () => [...known.values()],
    status: () => ({ state, resourceVersion, objects: known.size, lists, watches, ...(lastError !== undefined ? { lastError } : {}) }),
    relist() {
      relistNeeded = true;
      wake();
    },
    async stop() {
      stopped = true;
      wake();
      await running;
    },
  };
}

export const resourceName = (r: ApiResource): string => (r.group ? `${r.plural}.${r.group}/${r.version}` : `${r.plural}/${r.version}`);

// Whether discovery, which every authenticated user may read, says the server has no such resource.
// Any other answer, or none, is no proof: false, and the caller backs off as for any failure.
async function isNotServed(client: KubeClient, r: ApiResource): Promise<boolean> {
  try {
    const list = await client.request<{ resources?: { name?: string }[] }>("GET", r.group ? `/apis/${r.group}/${r.version}` : `/api/${r.version}`);
    return !(list.resources ?? []).some((x) => x.name === r.plural);
  } catch (err) {
    return statusCodeOf(err) === 404;
  }
}
