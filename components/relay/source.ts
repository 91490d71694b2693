// One watched (cluster, resource, selector): shared/kube/reflector.ts's list-then-watch, fed by the
// relay's credentials (a re-list diffed against what it knew whenever they change), its changes turned
// into the relay's verbs. It reports changes; it does not deliver them.
import type { ApiResource } from "../../shared/api/resource.ts";
import type { KubeObject } from "../../shared/kube/client.ts";
import { objectKey, startReflector, type ChangeType, type ReflectorState } from "../../shared/kube/reflector.ts";
import type { Log } from "../../shared/harness.ts";
import type { WatchConfig } from "./config.ts";
import type { CredentialProvider } from "./connection.ts";
import type { Verb } from "./cloudevents.ts";

export { objectKey };

export type Change = { verb: Verb; object: KubeObject; server: string; previous?: KubeObject };

// not-served: the server has no such resource at all (issue 24: OCM's hub serves no AgentConfigs).
export type SourceState = "waiting-for-credentials" | Exclude<ReflectorState, "waiting-for-client">;
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

const VERBS: Record<ChangeType, Verb> = { ADDED: "add", MODIFIED: "update", DELETED: "delete" };

export function startSource(o: SourceOptions): Source {
  const reflector = startReflector<KubeObject>({
    name: o.name,
    fields: { source: o.name, cluster: o.cluster },
    resource: o.resource,
    namespace: o.namespace,
    labelSelector: o.labelSelector,
    fieldSelector: o.fieldSelector,
    client: () => o.credentials.current()?.client,
    timeoutSeconds: o.watch.timeoutSeconds,
    backoff: o.watch.backoff,
    log: o.log,
    onChange: (c) => o.onChange({ verb: VERBS[c.type], object: c.object, server: c.server, previous: c.previous }),
  });
  // New credentials may mean another identity or even another server, whose resourceVersions mean
  // nothing to the old one: start over with a list and diff it against what is known.
  const unsubscribe = o.credentials.subscribe(() => reflector.relist());

  return {
    name: o.name,
    ready: reflector.ready,
    get: (key) => reflector.get(key),
    objects: () => reflector.objects(),
    status: () => {
      const s = reflector.status();
      return {
        name: o.name,
        cluster: o.cluster,
        ...s,
        state: s.state === "waiting-for-client" ? "waiting-for-credentials" : s.state,
        user: o.credentials.current()?.user,
      };
    },
    async stop() {
      unsubscribe();
      await reflector.stop();
    },
  };
}
