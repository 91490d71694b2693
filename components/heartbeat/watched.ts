// One named object kept current by a watch, so a period reads it from memory instead of over the network
// (OCM's agents use informers for the same reason). It lists the object by name, watches from the list's
// resourceVersion, resumes from the last one seen when the server ends the stream, and lists again after
// 410 Gone or an error (after a pause that grows with the failures). While no watch is in sync — not yet
// started, refused (RBAC without list/watch), the server unreachable — get() makes the GET every period
// made before, so a failure still reaches the caller to be classified.
import type { ApiResource } from "../../shared/api/meta.ts";
import type { KubeClient, KubeObject } from "../../shared/kube/client.ts";

export type Watched<T> = {
  // fresh: a GET whatever the watch holds, for a caller that must see a change it knows was just made,
  // or that suspects the watch (after a failure). It does not replace what the watch holds.
  get(o?: { fresh?: boolean }): Promise<T | undefined>;
  close(): void;
};

// The server ends a watch after this long and we resume it; the client gives up on one this much later,
// so a connection that died without a word (a half-open TCP one) is not trusted for ever.
const WATCH_SECONDS = 600;
const SILENT_GRACE_MS = 60_000;
const MAX_PAUSE_MS = 60_000;
const MIN_WATCH_MS = 1_000;

export function watchedObject<T extends KubeObject>(client: KubeClient, r: ApiResource, name: string, namespace?: string): Watched<T> {
  const fieldSelector = `metadata.name=${name}`;
  let synced = false;
  let value: T | undefined;
  let closed = false;
  let stopWatch = () => {};
  let endPause = () => {};

  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const t = setTimeout(resolve, ms);
      t.unref(); // never what keeps the process alive
      endPause = () => {
        clearTimeout(t);
        resolve();
      };
    });

  // Resolves when the watch has to start over from a list: the server said 410 Gone (or another ERROR).
  async function follow(from: string): Promise<void> {
    let resourceVersion = from;
    while (!closed) {
      let restart = false;
      const w = client.watch(r, { namespace, fieldSelector, resourceVersion, timeoutSeconds: WATCH_SECONDS }, (e) => {
        if (e.type === "ERROR") {
          restart = true;
          w.stop();
          return;
        }
        resourceVersion = e.object.metadata.resourceVersion ?? resourceVersion;
        if (e.type === "ADDED" || e.type === "MODIFIED") value = e.object as T;
        else if (e.type === "DELETED") value = undefined;
      });
      stopWatch = w.stop;
      const started = Date.now();
      const silent = setTimeout(w.stop, WATCH_SECONDS * 1_000 + SILENT_GRACE_MS);
      silent.unref();
      try {
        await w.done;
      } finally {
        clearTimeout(silent);
      }
      // A stream that ends as soon as it starts (a proxy that hangs up, an ERROR each time) must not
      // become a loop of requests: it counts as a failure, and the caller pauses.
      if (!closed && Date.now() - started < MIN_WATCH_MS) throw new Error("the watch ended as soon as it started");
      if (restart) return;
    }
  }

  void (async () => {
    let failures = 0;
    while (!closed) {
      try {
        const list = await client.list<T>(r, { namespace, fieldSelector });
        if (closed) return;
        value = list.items[0];
        synced = true;
        failures = 0;
        await follow(list.resourceVersion);
      } catch {
        failures++;
      }
      synced = false;
      if (failures && !closed) await pause(Math.min(MAX_PAUSE_MS, 1_000 * 2 ** (failures - 1)));
    }
  })();

  return {
    async get(o = {}) {
      if (synced && !o.fresh) return value;
      return client.get<T>(r, name, namespace);
    },
    close() {
      closed = true;
      synced = false;
      stopWatch();
      endPause();
    },
  };
}
