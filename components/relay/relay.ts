// The relay's wiring: credentials per cluster, one source per watched (cluster, resource, selector),
// changes turned into CloudEvents and routed to every sink whose filter passes them, resync ticks per
// cluster (at the interval the agent settings give, when configured so), recording, in recheck mode
// functions' rechecks held until due (rechecks.ts), and a stop() that ends watches, retries and timers.
// With `metrics` configured it answers GET /metrics on that port.
import { systemClock, type Clock } from "../../shared/clock.ts";
import { jsonLog, type Log } from "../../shared/harness.ts";
import { metrics } from "../../shared/metrics.ts";
import { serveMetrics, type MetricsEndpoint } from "../../shared/metrics-endpoint.ts";
import type { KubeObject } from "../../shared/kube/client.ts";
import { RelayConfigSchema, sourceName, type RelayConfigInput } from "./config.ts";
import { credentialProviders, type CredentialStatus } from "./credentials.ts";
import { objectEvent, tickEvent, type CloudEvent, type Verb } from "./cloudevents.ts";
import { openRecorder } from "./recorder.ts";
import { startSink, type Envelope, type SinkStatus } from "./sinks.ts";
import { objectKey, startSource, type Source, type SourceStatus } from "./source.ts";
import { realEvery, startResync, type Every, type ResyncStatus } from "./resync.ts";
import { changedNothingWatched, observedFor, outsideEveryScope, settledRoot, withObserved, type Cache } from "./state.ts";
import { startRechecks } from "./rechecks.ts";
import { startHeartbeat, type Heartbeat, type HeartbeatStatus } from "./heartbeat/sidecar.ts";
import type { CloudEventServer } from "../../shared/cloudevents-server.ts";
import type { StateConfig } from "./config.ts";

// onBeat: told after each heartbeat, with its status (main.ts marks from it when the process is warm).
export type RelayOptions = RelayConfigInput & { clock?: Clock; log?: Log; every?: Every; onBeat?: (status: HeartbeatStatus) => void };

export type RelayStatus = {
  clusters: Record<string, CredentialStatus>;
  sources: SourceStatus[];
  sinks: SinkStatus[];
  resync: ResyncStatus;
  heartbeat?: HeartbeatStatus;
};

export type Relay = {
  // Every source has listed once (never settles for a source whose credentials never come).
  readonly ready: Promise<void>;
  // The metrics endpoint once it listens (rejects when it cannot: a port in use); undefined when not configured.
  readonly metrics?: Promise<MetricsEndpoint>;
  // In recheck mode, the server taking recheck requests once it listens.
  readonly rechecks?: Promise<CloudEventServer>;
  // The heartbeat once its health endpoint listens (rejects when it cannot); undefined when not configured.
  readonly heartbeat?: Promise<Heartbeat>;
  status(): RelayStatus;
  // What the watch caches hold: objects, and their size as JSON (each serialised: for measuring only).
  cacheSize(): { objects: number; jsonBytes: number };
  stop(): Promise<void>;
};

// Changes the relay's watches saw, per source and verb (docs/metrics.md).
const unrelated = metrics.counter("ocmf_relay_events_unrelated_total", "Events a sink did not send because a related object its function requires is not there (shared/sdk.ts Related.required), the object is outside every scope its function watches, an update changed nothing its watch looks at (Watch.changes), or the root object is settled (Definition.settled)", ["sink"]);
const changes = metrics.counter("ocmf_relay_changes_total", "Object changes seen by a source's watch, by verb (add, update, delete)", ["source", "verb"]);

export function startRelay(options: RelayOptions): Relay {
  const { clock = systemClock, log = jsonLog("relay"), every = realEvery, onBeat, ...input } = options;
  const config = RelayConfigSchema.parse(input);
  const overrides = config.ceOverrides.extensions;
  const recorder = config.record ? openRecorder(config.record, (err) => log.error({ file: config.record, error: err.message }, "recording stopped: cannot write")) : undefined;
  const providers = credentialProviders(config.clusters, { watch: config.watch, clock, log });
  const sinks = config.sinks.map((s) => ({ sink: startSink({ config: s, delivery: config.delivery, clock, log, record: recorder?.write }), state: s.state }));

  // A sink that asks for observed state gets each event with what the caches hold now (state.ts); a
  // recheck's refresh hands what they hold then.
  const caches = new Map<string, Cache>();
  // An event a related object the watch requires says is not for the function is not sent at all, nor
  // is one about an object outside the function's scopes, nor an update that changed nothing the watch
  // looks at (its `changes`), nor an add or update of a root object its settled test holds for.
  const withState = (state: StateConfig, envelope: Envelope, change?: { previous?: KubeObject; current: KubeObject }): Envelope | undefined => {
    if (change && outsideEveryScope(state, envelope.event, change)) return undefined;
    if (change?.previous && changedNothingWatched(state, envelope.event, { previous: change.previous, current: change.current })) return undefined;
    if (change && settledRoot(state, envelope.event, change.current)) return undefined;
    const hand = (event: CloudEvent) => {
      const observed = observedFor(state, (cluster, group, kind) => caches.get(`${cluster}|${group}|${kind}`), event);
      return observed === "unrelated" ? undefined : observed ? withObserved(event, observed) : event;
    };
    const event = hand(envelope.event);
    if (!event) return undefined;
    return {
      key: envelope.key,
      event,
      refresh() {
        const next = envelope.refresh();
        return next && hand(next);
      },
    };
  };
  function route(envelope: Envelope, change?: { previous?: KubeObject; current: KubeObject }): void {
    for (const { sink, state } of sinks) {
      if (sink.mismatch(envelope.event) !== undefined) continue;
      const sent = state ? withState(state, envelope, change) : envelope;
      if (sent) sink.enqueue(sent);
      else unrelated.inc([sink.name]);
    }
  }

  const sources = config.sources.map((s) => {
    const name = sourceName(s);
    const credentials = providers.get(s.cluster)!;
    const build = (verb: Verb, object: KubeObject, server: string) =>
      objectEvent({ verb, mode: s.mode, cluster: s.cluster, server, resource: s.resource, object, clock, overrides });
    const source: Source = startSource({
      name,
      cluster: s.cluster,
      resource: s.resource,
      namespace: s.namespace,
      labelSelector: s.labelSelector,
      fieldSelector: s.fieldSelector,
      credentials,
      watch: config.watch,
      log,
      onChange(change) {
        changes.inc([name, change.verb]);
        const key = objectKey(change.object);
        route({
          key: `${name}|${key}`,
          event: build(change.verb, change.object, change.server),
          // A recheck sends what the source knows now, under the verb the function asked about (so it
          // passes the same verbs the first event passed); an object gone since is sent as deleted, and
          // one back since its deletion as added.
          refresh() {
            const server = credentials.current()?.client.server ?? change.server;
            const latest = source.get(key);
            return latest ? build(change.verb === "delete" ? "add" : change.verb, latest, server) : build("delete", change.object, server);
          },
        }, { previous: change.previous, current: change.object });
      },
    });
    caches.set(`${s.cluster}|${s.resource.group}|${s.resource.kind}`, { ...s, get: source.get, objects: source.objects });
    return source;
  });

  const tickClusters = [...new Set(config.sources.map((s) => s.cluster))];
  function tick(): void {
    for (const cluster of tickClusters) {
      const build = () => tickEvent({ cluster, source: config.resync.source, clock, overrides });
      route({ key: `tick|${cluster}`, event: build(), refresh: build });
    }
  }
  const settingsRef = config.agentSettings;
  const resync = startResync({
    intervalMs: config.resync.intervalMs,
    tick,
    every,
    log,
    settings: settingsRef && { ref: settingsRef, credentials: providers.get(settingsRef.cluster)!, watch: config.watch },
  });

  const rechecks = config.rechecks && startRechecks({ ...config.rechecks, clock, log, route });
  rechecks?.listening.catch((err: Error) => log.error({ port: config.rechecks!.port, error: err.message }, "rechecks: cannot listen"));

  log.info(
    {
      rechecks: config.rechecks,
      sources: sources.map((s) => s.name),
      sinks: config.sinks.map((s) => ({ name: s.name, url: s.url, filter: s.filter ?? {} })),
      resyncMs: config.resync.intervalMs,
      agentSettings: settingsRef,
      record: config.record,
    },
    sinks.length ? "relay started" : "relay started without sinks: events go nowhere",
  );

  // The heartbeat reads the agent's secrets with the same client the sources on that cluster use.
  const hb = config.heartbeat;
  const heartbeat =
    hb &&
    startHeartbeat({
      spoke: providers.get(hb.cluster)!.current()!.client,
      secrets: { clusterName: hb.clusterName, agentNamespace: hb.agentNamespace, bootstrapSecret: hb.bootstrapSecret, hubSecret: hb.hubSecret },
      log,
      clock,
      ...(hb.health ? { health: hb.health } : {}),
      ...(onBeat ? { onBeat } : {}),
    });
  let beating: Heartbeat | undefined;
  heartbeat?.then(
    (h) => {
      beating = h;
      log.info({ cluster: hb!.clusterName, health: h.healthUrl && `${h.healthUrl}/healthz` }, "heartbeat started");
    },
    (err: Error) => log.error({ port: hb!.health?.port, error: err.message }, "heartbeat: cannot serve its health endpoint"),
  );

  const endpoint = config.metrics && serveMetrics(config.metrics);
  // A caller that never looks at it still hears of a failure to listen.
  endpoint?.catch((err: Error) => log.error({ port: config.metrics!.port, error: err.message }, "metrics: cannot listen"));

  let stopped: Promise<void> | undefined;
  return {
    metrics: endpoint,
    rechecks: rechecks?.listening,
    heartbeat,
    ready: Promise.all([...sources.map((s) => s.ready), resync.ready]).then(() => {}),
    cacheSize: () => {
      const all = sources.flatMap((s) => s.objects());
      return { objects: all.length, jsonBytes: all.reduce((n, o) => n + Buffer.byteLength(JSON.stringify(o)), 0) };
    },
    status: () => ({
      clusters: Object.fromEntries([...providers].map(([name, p]) => [name, p.status()])),
      sources: sources.map((s) => s.status()),
      sinks: sinks.map((s) => s.sink.status()),
      resync: resync.status(),
      ...(beating ? { heartbeat: beating.status() } : {}),
    }),
    stop() {
      stopped ??= (async () => {
        // Ticks, sources and held rechecks first, so nothing new is routed to sinks that are stopping.
        await Promise.all([resync.stop(), ...sources.map((s) => s.stop()), rechecks?.stop(), heartbeat?.then((h) => h.stop(), () => {})]);
        await Promise.all(sinks.map((s) => s.sink.stop()));
        await Promise.all([...providers.values()].map((p) => p.stop()));
        await endpoint?.then((e) => e.close(), () => {});
        await recorder?.close().catch((err: Error) => log.error({ file: config.record, error: err.message }, "recording did not close cleanly"));
        log.info({}, "relay stopped");
      })();
      return stopped;
    },
  };
}
