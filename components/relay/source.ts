// One watched (cluster, resource, selector): an initial list, then a watch resumed from the last
// resourceVersion or bookmark after every disconnect, and a re-list diffed against what it knew when
// the server answers 410 or the credentials change. It reports changes; it does not deliver them.
import type { ApiResource } from "../../shared/api/meta.ts";
import type { KubeClient, KubeObject, WatchEvent } from "../../shared/kube/client.ts";
import { KubeError, statusCodeOf } from "../../shared/kube/errors.ts";
import type { Log } from "../../shared/harness.ts";
import type { WatchConfig } from "./config.ts";
import type { CredentialProvider } from "./credentials.ts";
import { delay, exponentialBackoff } from "../../shared/backoff.ts";
import type { Verb } from "./cloudevents.ts";

export type Change = { verb: Verb; object: KubeObject; server: string };

export type SourceState = "waiting-for-credentials" | "listing" | "watching" | "backing-off" | "stopped";
export type SourceStatus = {
  name: string;
  cluster: string;
  state: SourceState;
  resourceVersion: string;
  objects: number;
  user?: string;
  lists: number; // initial list plus every re-list
  watches: number; // watch requests opened
  lastError?: string;
};

export type SourceOptions = {
  name: string;
  cluster: string;
  resource: ApiResource;
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
  credentials: CredentialProvider;
  watch: WatchConfig;
  log: Log;
  onChange(change: Change): void;
};

export type Source = {
  readonly name: string;
  readonly ready: Promise<void>; // the first list is done
  get(key: string): KubeObject | undefined;
  objects(): KubeObject[];
  status(): SourceStatus;
  stop(): Promise<void>;
};

export const objectKey = (o: KubeObject) => `${o.metadata.namespace ?? ""}/${o.metadata.name ?? ""}`;

const VERBS = { ADDED: "add", MODIFIED: "update", DELETED: "delete" } as const;
// A watch that ends sooner than this without an event counts as a failure, so a server that closes
// streams at once is retried with backoff instead of in a tight loop.
const HEALTHY_WATCH_MS = 1_000;
// Past the server-side timeout plus this, a silent watch is presumed half-open (client-node #596, #958).
const WATCHDOG_GRACE_MS = 30_000;

type WatchOutcome = { expired: boolean; events: number };

export function startSource(o: SourceOptions): Source {
  let known = new Map<string, KubeObject>();
  let resourceVersion = "";
  let state: SourceState = "waiting-for-credentials";
  let stopped = false;
  let relistNeeded = false;
  let lists = 0;
  let watches = 0;
  let lastError: string | undefined;
  let interrupt = new AbortController();
  let markReady = () => {};
  const ready = new Promise<void>((resolve) => (markReady = resolve));
  const backoff = exponentialBackoff(o.watch.backoff);
  const where = { source: o.name, cluster: o.cluster };
  const wake = () => interrupt.abort();

  // New credentials may mean another identity or even another server, whose resourceVersions mean
  // nothing to the old one: start over with a list and diff it against what is known.
  const unsubscribe = o.credentials.subscribe(() => {
    relistNeeded = true;
    wake();
  });

  function emit(verb: Verb, object: KubeObject, server: string): void {
    try {
      o.onChange({ verb, object, server });
    } catch (err) {
      o.log.error({ ...where, error: String(err) }, "bug: the change handler threw; the change is dropped");
    }
  }

  async function relist(client: KubeClient): Promise<void> {
    state = "listing";
    const list = await client.list<KubeObject>(o.resource, { namespace: o.namespace, labelSelector: o.labelSelector, fieldSelector: o.fieldSelector });
    lists++;
    const before = known;
    known = new Map(list.items.map((item) => [objectKey(item), item]));
    resourceVersion = list.resourceVersion;
    for (const [key, item] of known) {
      const prev = before.get(key);
      if (!prev) emit("add", item, client.server);
      else if (prev.metadata.resourceVersion !== item.metadata.resourceVersion) emit("update", item, client.server);
    }
    // Deleted while nobody watched: the last state known stands for the object.
    for (const [key, prev] of before) if (!known.has(key)) emit("delete", prev, client.server);
  }

  function apply(e: WatchEvent, server: string): void {
    const object = e.object;
    const key = objectKey(object);
    const prev = known.get(key);
    if (object.metadata.resourceVersion) resourceVersion = object.metadata.resourceVersion;
    if (e.type === "DELETED") {
      known.delete(key);
    } else {
      if (prev && prev.metadata.resourceVersion === object.metadata.resourceVersion) return; // seen in a list already
      known.set(key, object);
    }
    emit(VERBS[e.type as keyof typeof VERBS], object, server);
  }

  async function watchOnce(client: KubeClient, signal: AbortSignal): Promise<WatchOutcome> {
    state = "watching";
    watches++;
    const outcome: WatchOutcome = { expired: false, events: 0 };
    let failure: KubeError | undefined;
    const w = client.watch(
      o.resource,
      { namespace: o.namespace, labelSelector: o.labelSelector, fieldSelector: o.fieldSelector, resourceVersion, timeoutSeconds: o.watch.timeoutSeconds },
      (e) => {
        if (outcome.expired || failure || signal.aborted) return;
        if (e.type === "ERROR") {
          const status = e.object as { code?: number; reason?: string; message?: string };
          if (status.code === 410) outcome.expired = true;
          else failure = new KubeError(status.code ?? 0, status.reason ?? "", `watch ${o.name}: ${status.code} ${status.reason}: ${status.message}`);
          w.stop();
        } else if (e.type === "BOOKMARK") {
          resourceVersion = e.object.metadata.resourceVersion ?? resourceVersion;
        } else {
          outcome.events++;
          apply(e, client.server);
        }
      },
    );
    const stop = () => w.stop();
    signal.addEventListener("abort", stop, { once: true });
    if (signal.aborted) stop();
    const watchdog = setTimeout(() => {
      o.log.warn({ ...where, resourceVersion }, "watch outlived its server timeout: presumed dead, reconnecting");
      w.stop();
    }, o.watch.timeoutSeconds * 1000 + WATCHDOG_GRACE_MS);
    try {
      await w.done;
    } finally {
      clearTimeout(watchdog);
      signal.removeEventListener("abort", stop);
    }
    if (failure) throw failure;
    return outcome;
  }

  async function run(): Promise<void> {
    while (!stopped) {
      interrupt = new AbortController();
      const signal = interrupt.signal;
      const conn = o.credentials.current();
      if (!conn) {
        state = "waiting-for-credentials";
        await delay(2 ** 31 - 1, signal);
        continue;
      }
      if (relistNeeded) {
        relistNeeded = false;
        resourceVersion = "";
      }
      try {
        if (!resourceVersion) {
          await relist(conn.client);
          lastError = undefined;
          backoff.reset();
          markReady();
          if (signal.aborted) continue;
        }
        const started = performance.now();
        const outcome = await watchOnce(conn.client, signal);
        if (outcome.expired) {
          o.log.info({ ...where, resourceVersion }, "resourceVersion expired (410): re-listing and diffing against what is known");
          resourceVersion = "";
          continue;
        }
        if (signal.aborted) continue;
        if (outcome.events === 0 && performance.now() - started < HEALTHY_WATCH_MS) throw new Error("the server ended the watch at once");
        // a normal end (timeoutSeconds): resume at once from the last resourceVersion
        backoff.reset();
        lastError = undefined;
      } catch (err) {
        if (stopped || signal.aborted) continue;
        if (statusCodeOf(err) === 410) {
          o.log.info({ ...where, resourceVersion }, "resourceVersion expired (410 at connect): re-listing");
          resourceVersion = "";
          continue;
        }
        lastError = err instanceof Error ? err.message : String(err);
        state = "backing-off";
        const retryInMs = backoff.next();
        o.log.warn({ ...where, error: lastError, retryInMs, resourceVersion }, resourceVersion ? "watch failed: resuming from the last resourceVersion after a backoff" : "list failed: retrying after a backoff");
        await delay(retryInMs, signal);
      }
    }
    state = "stopped";
  }

  const running = run();

  return {
    name: o.name,
    ready,
    get: (key) => known.get(key),
    objects: () => [...known.values()],
    status: () => ({
      name: o.name,
      cluster: o.cluster,
      state,
      resourceVersion,
      objects: known.size,
      user: o.credentials.current()?.user,
      lists,
      watches,
      ...(lastError ? { lastError } : {}),
    }),
    async stop() {
      stopped = true;
      unsubscribe();
      wake();
      await running;
    },
  };
}
