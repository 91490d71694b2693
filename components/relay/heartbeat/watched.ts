// One named object kept current by shared/kube/reflector.ts's list-then-watch, so a period reads it from
// memory instead of over the network (OCM's agents use informers for the same reason). While the
// reflector is not in sync — not yet listed, refused (RBAC without list/watch), the server unreachable,
// backing off — get() makes the GET every period made before, so a failure still reaches the caller to
// be classified; the reflector logs its own failures once each.
import type { ApiResource } from "../../../shared/api/resource.ts";
import type { KubeClient, KubeObject } from "../../../shared/kube/client.ts";
import { startReflector, type ReflectorLog } from "../../../shared/kube/reflector.ts";
import { fieldSelectorOf } from "../../../shared/selector-query.ts";

export type Watched<T> = {
  // fresh: a GET whatever the watch holds, for a caller that must see a change it knows was just made,
  // or that suspects the watch (after a failure). It does not replace what the watch holds.
  get(o?: { fresh?: boolean }): Promise<T | undefined>;
  close(): void;
};

// The server ends a watch after this long and it is resumed; failures pause from 1 s up to a minute.
const WATCH_SECONDS = 600;
const BACKOFF = { initialMs: 1_000, maxMs: 60_000 };

export function watchedObject<T extends KubeObject>(client: KubeClient, r: ApiResource, name: string, namespace: string | undefined, log: ReflectorLog): Watched<T> {
  let closed = false;
  const reflector = startReflector<T>({
    name: `${r.plural}/${name}`,
    fields: namespace ? { namespace } : {},
    resource: r,
    namespace,
    fieldSelector: fieldSelectorOf({ "metadata.name": name }),
    client,
    timeoutSeconds: WATCH_SECONDS,
    backoff: BACKOFF,
    log,
    unref: true, // never what keeps the process alive
  });
  return {
    async get(o = {}) {
      if (!closed && reflector.synced() && !o.fresh) return reflector.objects()[0];
      return client.get<T>(r, name, namespace);
    },
    close() {
      closed = true;
      void reflector.stop();
    },
  };
}
