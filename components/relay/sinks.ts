// Delivery to one HTTP sink: binary-mode POSTs checked by status (cloudevents' httpTransport would
// resolve on a 500), one object key at a time but many keys at once, bursts per key coalesced to the
// latest state, retries with exponential backoff, and re-sends when the function asks to be called again.
import { binaryMessage, withAttributes, type CloudEvent } from "./cloudevents.ts";
import type { Clock } from "../../shared/clock.ts";
import { RECHECK_HEADER, type Log } from "../../shared/harness.ts";
import type { DeliveryConfig, SinkConfig } from "./config.ts";
import { delay, exponentialBackoff } from "../../shared/backoff.ts";
import { mismatch, mismatchAll } from "./cloudevents.ts";
import { after, clampTimerMs } from "../../shared/timers.ts";
import { metrics } from "../../shared/metrics.ts";
import { poster } from "./post.ts";


export type Envelope = {
  key: string; // one object (or one cluster's tick) as one source sees it
  event: CloudEvent;
  refresh(): CloudEvent | undefined; // the latest state, as a new event, for a recheck
};

export type Outcome = "delivered" | "rejected" | "gave-up";
export type DeliveryRecord = {
  time: string;
  sink: string;
  status: number | null; // null: no HTTP answer (network error, timeout)
  outcome: Outcome;
  attempts: number;
  event: Record<string, unknown>; // CloudEvent attributes and data
};

export type SinkStatus = {
  name: string;
  url: string;
  received: number; // events routed here
  coalesced: number; // replaced by a newer event for the same key before their delivery began
  superseded: number; // abandoned between retries because a newer event for the key arrived
  delivered: number;
  rejected: number;
  gaveUp: number;
  retries: number;
  rechecks: number;
  pending: number;
  inFlight: number;
};

export type Sink = {
  readonly name: string;
  mismatch(event: CloudEvent): string | undefined;
  enqueue(envelope: Envelope): void;
  status(): SinkStatus;
  stop(): Promise<void>;
};

export type SinkOptions = { config: SinkConfig; delivery: DeliveryConfig; clock: Clock; log: Log; record?(r: DeliveryRecord): void };

type Attempt = { status: number | null; retryAfterMs?: number; recheckAfterMs?: number; error?: string };

// sdk-go and Knative's dispatchers agree on these; every other 4xx is our event's fault and is dropped.
const RETRIED_STATUSES = new Set([404, 408, 409, 425, 429]);
export const isRetried = (status: number | null) => status === null || status >= 500 || RETRIED_STATUSES.has(status);

// What the relay counts per sink (docs/metrics.md), in the process's registry.
const sinkEvents = metrics.counter("ocmf_relay_events_received_total", "Events routed to a sink", ["sink"]);
const sinkSkipped = metrics.counter("ocmf_relay_events_skipped_total", "Events a sink never sent, by reason (coalesced: a newer one for the key came before delivery began; superseded: one came between retries)", ["sink", "reason"]);
const sinkDeliveries = metrics.counter("ocmf_relay_deliveries_total", "Events whose delivery ended, by outcome (delivered, rejected, gave-up) and the sink's last status code (none: no answer)", ["sink", "outcome", "code"]);
const sinkRetries = metrics.counter("ocmf_relay_delivery_retries_total", "Deliveries tried again after a failed attempt", ["sink"]);
const sinkQueue = metrics.gauge("ocmf_relay_queue_depth", "Events waiting for delivery (one per object key)", ["sink"]);
const sinkInFlight = metrics.gauge("ocmf_relay_in_flight", "Object keys whose delivery is under way", ["sink"]);

export function startSink(o: SinkOptions): Sink {
  const { config, delivery, log } = o;
  const http = poster(config.url);
  const pending = new Map<string, Envelope>(); // latest event per key, not yet started
  const workers = new Map<string, Promise<void>>(); // one per key being delivered
  const rechecks = new Map<string, NodeJS.Timeout>();
  const stopping = new AbortController();
  const slots = semaphore(delivery.concurrency);
  const counts = { received: 0, coalesced: 0, superseded: 0, delivered: 0, rejected: 0, gaveUp: 0, retries: 0, rechecks: 0 };
  const where = { sink: config.name };
  const sinkLabel = [config.name];
  const stopCollecting = metrics.onCollect(() => {
    sinkQueue.set(sinkLabel, pending.size);
    sinkInFlight.set(sinkLabel, workers.size);
  });

  function enqueue(envelope: Envelope): void {
    if (stopping.signal.aborted) return;
    counts.received++;
    sinkEvents.inc(sinkLabel);
    if (pending.has(envelope.key)) {
      counts.coalesced++;
      sinkSkipped.inc([config.name, "coalesced"]);
    }
    pending.set(envelope.key, envelope);
    if (!workers.has(envelope.key)) startWorker(envelope.key);
  }

  function startWorker(key: string): void {
    const worker = drain(key).finally(() => {
      workers.delete(key);
      // enqueued between the worker's last look and now (a microtask can run in that gap)
      if (pending.has(key) && !stopping.signal.aborted) startWorker(key);
    });
    workers.set(key, worker);
  }

  // Sequential per key, so a sink never sees an older state after a newer one for the same object.
  async function drain(key: string): Promise<void> {
    for (let envelope = take(key); envelope && !stopping.signal.aborted; envelope = take(key)) {
      try {
        await deliver(envelope);
      } catch (err) {
        log.error({ ...where, key, error: String(err) }, "bug: delivery threw; the event is dropped");
      }
    }
  }

  function take(key: string): Envelope | undefined {
    const envelope = pending.get(key);
    pending.delete(key);
    return envelope;
  }

  async function deliver(envelope: Envelope): Promise<void> {
    const backoff = exponentialBackoff(delivery.backoff);
    for (let attempts = 1; ; attempts++) {
      // A stop lets a POST already sent finish (its answer still counts) but sends no new one, even one
      // that waited for a slot: a function cut off mid-request would go on working with nobody waiting.
      const a = await slots.run(() => (stopping.signal.aborted ? Promise.resolve(undefined) : post(envelope.event)));
      if (!a) return;
      const base = { ...where, id: envelope.event.id, type: envelope.event.type, key: envelope.key, status: a.status, attempts };
      if (a.status !== null && a.status >= 200 && a.status < 300) {
        counts.delivered++;
        recordOutcome(envelope, a, "delivered", attempts);
        if (a.recheckAfterMs !== undefined) scheduleRecheck(envelope, a.recheckAfterMs);
        return;
      }
      if (!isRetried(a.status)) {
        counts.rejected++;
        recordOutcome(envelope, a, "rejected", attempts);
        log.warn({ ...base, error: a.error }, "dropped: the sink rejected the event and a retry would not help");
        return;
      }
      if (attempts >= delivery.maxAttempts) {
        counts.gaveUp++;
        recordOutcome(envelope, a, "gave-up", attempts);
        log.error({ ...base, error: a.error }, "dropped: retries exhausted (the resync tick is the safety net)");
        return;
      }
      const retryInMs = Math.min(a.retryAfterMs ?? backoff.next(), delivery.backoff.maxMs);
      counts.retries++;
      sinkRetries.inc(sinkLabel);
      log.warn({ ...base, error: a.error, retryInMs }, "sink failed: retrying after a backoff");
      await delay(retryInMs, stopping.signal);
      if (stopping.signal.aborted) return;
      // The state this event carries is stale once a newer one waits: send that one instead.
      if (pending.has(envelope.key)) {
        counts.superseded++;
        sinkSkipped.inc([config.name, "superseded"]);
        log.info({ ...base }, "superseded: a newer state of the object is waiting, sending that instead");
        return;
      }
    }
  }

  async function post(sent: CloudEvent): Promise<Attempt> {
    const event = config.extensions ? withAttributes(sent, config.extensions) : sent;
    try {
      const res = await http.post(binaryMessage(event), clampTimerMs(delivery.timeoutMs));
      return {
        status: res.status,
        retryAfterMs: retryAfterMs(res.header("retry-after"), o.clock.now()),
        recheckAfterMs: nonNegativeInt(res.header(RECHECK_HEADER)),
        error: res.status >= 200 && res.status < 300 ? undefined : res.body.slice(0, 300),
      };
    } catch (err) {
      return { status: null, error: err instanceof Error ? err.message : String(err) };
    }
  }

  // The function asked to be called again for this key: re-send the latest state then. A later ask
  // for the same key replaces an earlier one.
  function scheduleRecheck(envelope: Envelope, afterMs: number): void {
    if (stopping.signal.aborted) return; // an answer that arrived while stopping
    clearTimeout(rechecks.get(envelope.key));
    const timer = after(afterMs, () => {
      rechecks.delete(envelope.key);
      const event = envelope.refresh();
      if (!event || stopping.signal.aborted) return;
      counts.rechecks++;
      enqueue({ ...envelope, event });
    });
    rechecks.set(envelope.key, timer);
  }

  function recordOutcome(envelope: Envelope, a: Attempt, outcome: Outcome, attempts: number): void {
    sinkDeliveries.inc([config.name, outcome, a.status === null ? "none" : String(a.status)]);
    o.record?.({ time: o.clock.now().toISOString(), sink: config.name, status: a.status, outcome, attempts, event: envelope.event });
  }

  return {
    name: config.name,
    mismatch: (event) => (config.filters ? mismatchAll(config.filters, event) : mismatch(config.filter, event)),
    enqueue,
    status: () => ({ name: config.name, url: config.url, ...counts, pending: pending.size, inFlight: workers.size }),
    async stop() {
      stopping.abort();
      stopCollecting();
      for (const timer of rechecks.values()) clearTimeout(timer);
      rechecks.clear();
      pending.clear();
      await Promise.allSettled([...workers.values()]);
      http.close();
    },
  };
}

function nonNegativeInt(text: string | null): number | undefined {
  if (text === null || !/^\d+$/.test(text.trim())) return undefined;
  return Number(text.trim());
}

// Retry-After is seconds or an HTTP date (RFC 9110 §10.2.3).
function retryAfterMs(text: string | null, now: Date): number | undefined {
  if (text === null) return undefined;
  const seconds = nonNegativeInt(text);
  if (seconds !== undefined) return seconds * 1000;
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now.getTime());
}

// At most n POSTs in flight per sink; keys beyond that wait their turn.
function semaphore(n: number): { run<T>(f: () => Promise<T>): Promise<T> } {
  let free = n;
  const waiting: (() => void)[] = [];
  return {
    async run(f) {
      if (free > 0) free--;
      else await new Promise<void>((resolve) => waiting.push(resolve));
      try {
        return await f();
      } finally {
        const next = waiting.shift();
        if (next) next();
        else free++;
      }
    },
  };
}
