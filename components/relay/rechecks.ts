// Recheck mode (docs/relay.md, "Rechecks through a Broker"): the relay answers POSTs of RecheckType
// CloudEvents, which a Trigger routes here from the Broker that a function answered with one. Each is
// held until it is due and then sent to the relay's sinks (the Broker) as a RecheckDueType event that
// names the function in TargetExtension and carries the event that asked. One recheck is held per
// function and object (or per function and cluster, for a tick): a later ask replaces an earlier one's
// event and keeps the sooner of the two times, as a relay feeding a function directly does.
import { randomUUID } from "node:crypto";
import type { Clock } from "../../shared/clock.ts";
import { startCloudEventServer, type CloudEvent as Received, type CloudEventServer } from "../../shared/cloudevents-server.ts";
import { dataOf, isFunctionName, problemOf, RecheckDueType, RecheckRequestSchema, RecheckType, TargetExtension, type RecheckRequest } from "../../shared/events.ts";
import type { Log, Reply } from "../../shared/harness.ts";
import { metrics } from "../../shared/metrics.ts";
import { after } from "../../shared/timers.ts";
import type { Envelope } from "./sinks.ts";
import { cloudEvent } from "./cloudevents.ts";

// maxHeld: what one relay holds at most. A recheck request names its own object, so anyone who can reach
// the Service could otherwise grow the map without end; past it a new one is refused with a 503 (the
// Broker retries it), and one already held is still replaced.
export type RechecksOptions = { port: number; host: string; source: string; maxHeld: number; clock: Clock; log: Log; route(envelope: Envelope): void };

export type Rechecks = {
  readonly listening: Promise<CloudEventServer>;
  pending(): number;
  stop(): Promise<void>;
};

const requests = metrics.counter("ocmf_relay_recheck_requests_total", "Recheck requests a relay in recheck mode received, by result (held, replaced, rejected: a 400, full: a 503)", ["result"]);
const held = metrics.gauge("ocmf_relay_rechecks_pending", "Rechecks a relay in recheck mode holds until they are due", []);
// How late a due recheck leaves the relay against the time it was asked for (the timer's own lateness:
// an event loop that is kept busy shows here).
const lateness = metrics.histogram("ocmf_relay_recheck_lateness_seconds", "Seconds between the time a recheck was due and its sending", [], [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5]);

type Held = { dueAt: number; request: RecheckRequest; target: string; cluster?: string; timer: NodeJS.Timeout };

export function startRechecks(o: RechecksOptions): Rechecks {
  const holding = new Map<string, Held>();
  let stopped = false;

  const due = (key: string) => {
    const h = holding.get(key);
    if (!h) return;
    holding.delete(key);
    held.set([], holding.size);
    lateness.observe([], Math.max(0, o.clock.now().getTime() - h.dueAt) / 1000);
    const event = cloudEvent({
      specversion: "1.0",
      id: randomUUID(),
      time: o.clock.now().toISOString(),
      type: RecheckDueType,
      source: o.source,
      [TargetExtension]: h.target,
      ...(h.cluster ? { cluster: h.cluster } : {}),
      datacontenttype: "application/json",
      data: h.request.event,
    });
    o.log.info({ ce: event.id, target: h.target, recheckOf: h.request.event.id }, "recheck due: sent");
    o.route({ key: `recheck|${key}`, event, refresh: () => event });
  };

  const receive = (_context: unknown, ce: Received): Reply => {
    const reject = (reason: string): Reply => {
      requests.inc(["rejected"]);
      o.log.warn({ ce: ce.id, reason }, "recheck: rejected");
      return { statusCode: 400, body: reason };
    };
    if (stopped) return { statusCode: 503, body: "stopping" };
    if (ce.type !== RecheckType) return reject(`a relay in recheck mode takes ${RecheckType} events, not ${ce.type}`);
    const target = ce[TargetExtension];
    if (typeof target !== "string" || !isFunctionName(target)) return reject(`extension ${TargetExtension} must name the function (a DNS label)`);
    const parsed = RecheckRequestSchema.safeParse(dataOf(ce));
    if (!parsed.success) return reject(`the data is not a recheck request: ${problemOf(parsed.error)}`);
    const request = parsed.data;
    const asked = request.event as Record<string, unknown>;
    const cluster = typeof asked.cluster === "string" ? asked.cluster : undefined;
    // the object the asking event is about (its subject, as ApiServerSource and our relay set it), or for
    // an event without one (a tick) its type
    const key = JSON.stringify([target, cluster ?? "", typeof asked.subject === "string" ? asked.subject : asked.type]);
    const dueAt = o.clock.now().getTime() + request.afterMs;
    const before = holding.get(key);
    if (!before && holding.size >= o.maxHeld) {
      requests.inc(["full"]);
      o.log.warn({ ce: ce.id, target, held: holding.size }, "recheck: refused, the relay holds its most");
      return { statusCode: 503, body: `the relay holds ${o.maxHeld} rechecks, its most` };
    }
    const at = before ? Math.min(before.dueAt, dueAt) : dueAt;
    if (before) clearTimeout(before.timer);
    const timer = after(at - o.clock.now().getTime(), () => due(key));
    holding.set(key, { dueAt: at, request, target, cluster, timer });
    held.set([], holding.size);
    requests.inc([before ? "replaced" : "held"]);
    o.log.info({ ce: ce.id, target, afterMs: request.afterMs, dueAt: new Date(at).toISOString() }, "recheck: held");
    return { statusCode: 202 };
  };

  const listening = startCloudEventServer(receive, { port: o.port, host: o.host, onError: (err) => o.log.error({ error: err instanceof Error ? err.message : String(err) }, "recheck: handler failed") });
  return {
    listening,
    pending: () => holding.size,
    async stop() {
      stopped = true;
      for (const h of holding.values()) clearTimeout(h.timer);
      // What is held is lost with the process; the resync tick finds whatever it was for.
      if (holding.size) o.log.warn({ dropped: holding.size }, "recheck: stopping with rechecks held");
      holding.clear();
      held.set([], 0);
      await listening.then((s) => s.close(), () => {});
    },
  };
}
