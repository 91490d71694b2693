// Turns a reconcile into a Knative function: parse the CloudEvent (zod), map it to keys of the root
// kind, reconcile each key by level, and answer with a status that makes the source retry or not.
//
// Failures (docs/writing-functions.md, "Failures"): each one is classified and decided once, by
// shared/kube/errors.ts's decisionOf, and logged once per delivery with its decision. A reconcile
// that fails several ways at once throws an AggregateError; every member is decided and logged.
//   retry       429, 5xx, unreachable, 409 conflict, 404/AlreadyExists mid-reconcile, 401   -> 503
//   permission  a 403 from the authorizer (RBAC), named with user, verb and resource         -> 500
//   error       anything the classifier does not know                                        -> 500
//   terminal    400/422, an admission denial (a ValidatingAdmissionPolicy, a webhook, a
//               namespace being terminated), logged with the denial's message               -> 422
// The answer to a delivery, whatever the number of keys and failures: the highest of
// retry > permission > error > terminal > success (204). A retry redoes every key by level, so it
// costs the others nothing; a permission missing or an unexpected error is still worth the source's
// bounded retries (a grant may arrive, a bug be fixed); a terminal failure alone must not be retried,
// and 422 is retried by neither Knative's Brokers nor the ApiServerSource adapter nor our relay.
// Every log line of a delivery carries { ce: the CloudEvent id, fn: the function, key } (key once
// there is one).
import type { Clock } from "./clock.ts";
import { randomUUID } from "node:crypto";
import { dataOf, MAX_RECHECK_MS, parseEvent, problemOf, RecheckDueSchema, RecheckDueType, RecheckType, TargetExtension, type FunctionEvent, type TickEvent } from "./events.ts";
import { classifyError, decisionOf, missingPermission, StaleStateError, type Decision, type MissingPermission } from "./kube/errors.ts";
import type { KubeClient } from "./kube/client.ts";
import { metrics, RECONCILE_TIME_BUCKETS } from "./metrics.ts";
import { afterStale, noteHanded, observedClients, type Answered, type Observed, type Seen } from "./observed.ts";

export type Key = { cluster: string; namespace?: string; name: string };
export type Outcome = { done: true } | { recheckInMs: number };
export const done: Outcome = { done: true };

export type Log = {
  info(fields: object, msg: string): void;
  warn(fields: object, msg: string): void;
  error(fields: object, msg: string): void;
};

// What a reconcile may touch: clients for the clusters it was given, the clock, a logger, settings.
export type Io<Config = unknown> = {
  clock: Clock;
  log: Log;
  cluster(name: string): KubeClient;
  config: Config;
};

// Why an event woke nothing, as a bounded set (the metric's label; the reason itself goes to the log):
// not-watched, verb (watched, not for this change), settled, unmapped (watched, no keys from it),
// no-roots (a tick for a cluster where nothing is reconciled), function (the function's own keys said
// so: the default). The harness adds malformed, no-keys and sweep-joined.
export const SkipClasses = ["not-watched", "verb", "settled", "unmapped", "no-roots", "function", "malformed", "no-keys", "sweep-joined"] as const;
export type SkipClass = (typeof SkipClasses)[number];
export type Skip = { skip: string };
// The class rides beside the skip, not in it, so a skip still reads { skip: reason } wherever it is
// compared or logged.
const classOfSkip = new WeakMap<Skip, SkipClass>();
export function classified(skip: Skip, reason: SkipClass): Skip {
  classOfSkip.set(skip, reason);
  return skip;
}
export const skipClass = (skip: Skip): SkipClass => classOfSkip.get(skip) ?? "function";

export type FunctionSpec<Config> = {
  name: string;
  // Map an event to keys of the root kind. An empty list means "not ours"; give the reason.
  keys(event: FunctionEvent, io: Io<Config>): Promise<Key[] | Skip> | Key[] | Skip;
  reconcile(io: Io<Config>, key: Key): Promise<Outcome>;
};

export type Reply = { statusCode: number; body?: string; headers?: Record<string, string> };
// The answer that asks a relay delivering straight to the function to send the event again after so
// many milliseconds (components/relay/sinks.ts).
export const RECHECK_HEADER = "x-recheck-after-ms";

// What the harness counts (docs/metrics.md), under controller-runtime's names where it has one; the
// controller label is the function's name.
const reconcileTotal = metrics.counter("controller_runtime_reconcile_total", "Total number of reconciliations per controller", ["controller", "result"]);
const reconcileErrors = metrics.counter("controller_runtime_reconcile_errors_total", "Total number of reconciliation errors per controller", ["controller"]);
const reconcileTime = metrics.histogram("controller_runtime_reconcile_time_seconds", "Length of time per reconciliation per controller", ["controller"], RECONCILE_TIME_BUCKETS);
const activeWorkers = metrics.gauge("controller_runtime_active_workers", "Number of reconciles running now per controller (keys in flight)", ["controller"]);
const queueDepth = metrics.gauge("workqueue_depth", "Keys waiting for their turn: an earlier reconcile of the same key still runs", ["name"]);
const eventsReceived = metrics.counter("ocmf_events_received_total", "CloudEvents received per function, by type (object, tick, recheck, malformed)", ["controller", "type"]);
const eventsSkipped = metrics.counter("ocmf_events_skipped_total", "CloudEvents that woke no reconcile, by reason class", ["controller", "reason"]);
const failures = metrics.counter("ocmf_errors_total", "Failures per function by stage (keys, reconcile) and class (rbac-defect, denied, conflict, transient, not-found, already-exists, unauthorized, invalid, unknown)", ["controller", "stage", "class"]);

const CONFLICT_RETRIES = 3;

// JSON lines, one object per decision, as a log pipeline wants them: on stderr, to `out`, or nowhere.
export function jsonLog(fn: string, out?: "quiet" | ((line: string) => void)): Log {
  const emit = typeof out === "function" ? out : out === "quiet" ? () => {} : (line: string) => process.stderr.write(line);
  const write = (level: string) => (fields: object, msg: string) => emit(`${JSON.stringify({ level, time: new Date().toISOString(), fn, msg, ...fields })}\n`);
  return { info: write("info"), warn: write("warn"), error: write("error") };
}

// A logger whose every line carries `bound` (the delivery's CloudEvent id, function, key); a line's own
// fields cannot hide them.
export function withFields(log: Log, bound: object): Log {
  return {
    info: (fields, msg) => log.info({ ...fields, ...bound }, msg),
    warn: (fields, msg) => log.warn({ ...fields, ...bound }, msg),
    error: (fields, msg) => log.error({ ...fields, ...bound }, msg),
  };
}

// One failure, classified and decided once (shared/kube/errors.ts).
export type Failure = { error: unknown; message: string; class: string; decision: Decision; missing?: MissingPermission };

function judged(error: unknown): Failure {
  const message = error instanceof Error ? error.message : String(error);
  const decision = decisionOf(error);
  if (decision !== "permission") return { error, message, class: classifyError(error), decision };
  const missing = missingPermission(error);
  const what = missing.verb ? `${missing.user} may not ${missing.verb} ${missing.resource}${missing.group ? `.${missing.group}` : ""}${missing.namespace ? ` in ${missing.namespace}` : ""}` : message;
  return { error, message: `permission missing: ${what}`, class: "rbac-defect", decision, missing };
}

// The failures one throw stands for: an AggregateError (several writes of one reconcile failed) is all
// of its members.
function membersOf(err: unknown): unknown[] {
  return err instanceof AggregateError ? err.errors.flatMap(membersOf) : [err];
}

type Result = { outcome: Outcome } | { failures: Failure[] };

// One reconcile as the runtime runs it (tests drive it too): the outcome, or the failure as thrown.
export async function reconcileKey<C>(spec: FunctionSpec<C>, io: Io<C>, key: Key, observed?: Observed): Promise<Outcome> {
  const result = await attemptKey(spec, observed ? judgingFrom(spec, io, observed, seenOf(io)) : { io }, key, io);
  if ("outcome" in result) return result.outcome;
  const errors = result.failures.map((f) => f.error);
  throw errors.length === 1 ? errors[0] : new AggregateError(errors, result.failures.map((f) => f.message).join("; "));
}

// Runs one reconcile. Only a write conflict is tried again here, at once (the next read sees the new
// version); anything else is decided at its first throw. The authorizer's refusal is never waited out
// in the request: a grant on its way wakes the function by an event of its own (an agent's, through
// shared/hub-credentials.ts withAgentHub), and any other refusal is a permission missing. A run
// judged from handed state (shared/observed.ts) that was found changed is judged again from the rest
// of it and what the confirming reads found (afterStale); after a write's own conflict, only the API's
// answer counts: the next try has `live` clients.
async function attemptKey<C>(spec: FunctionSpec<C>, first: Judging<C>, key: Key, live: Io<C> = first.io): Promise<Result> {
  let conflicts = 0;
  for (let judging = first; ; ) {
    const { io } = judging;
    try {
      return { outcome: await spec.reconcile(io, key) };
    } catch (err) {
      const members = membersOf(err);
      const failures = members.map(judged);
      if (failures.every((f) => f.class === "conflict") && ++conflicts < CONFLICT_RETRIES) {
        io.log.info({ attempt: conflicts, error: failures[0]?.message }, "conflict: re-reading and trying again");
        // a stale judgement: the same error for every write it refused
        const stale = members.every((e) => e === members[0]) && members[0] instanceof StaleStateError ? members[0] : undefined;
        judging = stale && judging.afterStale ? judging.afterStale(stale) : { io: live };
        continue;
      }
      return { failures };
    }
  }
}

// controller-runtime's workqueue promise, per process: one key is never reconciled twice at once, and
// the events that arrive while it runs fold into a single run after it (which reads what they changed).
// Concurrent runs of one key would read the same state and write over each other: conflicts at best,
// a rollout's wave assigned twice at worst. Replicas of a function are kept apart by resourceVersions.
// A waiting run judges with the newest delivery's io (its handed state; an older one's objects lose to
// what noteHanded recorded from the newer).
type Turn = { last: Promise<Result>; waiting?: Promise<Result>; waitingJudging?: Judging<unknown> };
const turnsByIo = new WeakMap<object, Map<string, Turn>>();

// `io` names the process's queue; the run judges and logs through `keyJudging` (the delivery that began it).
function reconcileInTurn<C>(spec: FunctionSpec<C>, io: Io<C>, keyJudging: Judging<C>, key: Key): Promise<Result> {
  let turns = turnsByIo.get(io);
  if (!turns) turnsByIo.set(io, (turns = new Map()));
  const id = JSON.stringify([spec.name, key.cluster, key.namespace ?? "", key.name]);
  const turn = turns.get(id);
  if (turn?.waiting) {
    turn.waitingJudging = keyJudging as Judging<unknown>; // not begun yet: it will judge this event's state too
    return turn.waiting;
  }
  const controller = [spec.name];
  queueDepth.add(controller, 1);
  const begin = async () => {
    const judging = (entry.waitingJudging ?? keyJudging) as Judging<C>;
    if (entry.waiting === run) [entry.waiting, entry.waitingJudging] = [undefined, undefined];
    queueDepth.add(controller, -1);
    activeWorkers.add(controller, 1);
    const started = performance.now();
    try {
      const result = await attemptKey(spec, judging, key, { ...judging.io, cluster: io.cluster });
      if ("failures" in result) {
        reconcileTotal.inc([spec.name, "error"]);
        reconcileErrors.inc(controller);
      } else reconcileTotal.inc([spec.name, "recheckInMs" in result.outcome ? "requeue_after" : "success"]);
      return result;
    } finally {
      reconcileTime.observe(controller, (performance.now() - started) / 1000);
      activeWorkers.add(controller, -1);
    }
  };
  const run: Promise<Result> = turn ? turn.last.then(begin, begin) : Promise.resolve().then(begin);
  const entry: Turn = turn ?? { last: run };
  entry.last = run;
  entry.waiting = run;
  turns.set(id, entry);
  const forget = () => {
    if (entry.last === run) turns.delete(id);
  };
  run.then(forget, forget);
  return run;
}

// The newest resourceVersion seen per object, per process (the io names it, as for the key queues).
const seenByIo = new WeakMap<object, Seen>();
function seenOf(io: object): Seen {
  let seen = seenByIo.get(io);
  if (!seen) seenByIo.set(io, (seen = new Map()));
  return seen;
}

// The io a reconcile judges with and, when its clients answer from handed state first
// (shared/observed.ts), how the next try judges after a stale judgement: without the kinds it found
// changed, from what the confirming reads answered. Without afterStale, a conflict's next try reads live.
type Judging<C> = { io: Io<C>; afterStale?: (stale: StaleStateError) => Judging<C> };
function judgingFrom<C>(spec: FunctionSpec<C>, io: Io<C>, observed: Observed, seen: Seen, known?: Answered): Judging<C> {
  return {
    io: { ...io, cluster: observedClients(spec.name, io.cluster, observed, seen, known).cluster },
    afterStale: (stale) => {
      const next = afterStale(observed, stale);
      return judgingFrom(spec, io, next.observed, seen, next.known);
    },
  };
}

// Which HTTP status a decision becomes. Never the Kubernetes code itself: a leaked 404 or 409 would
// be misread by the ApiServerSource adapter and by Brokers (docs/relay.md, "Retried").
const answers: Record<Decision, { rank: number; statusCode: number; prefix: string }> = {
  retry: { rank: 4, statusCode: 503, prefix: "retry" },
  permission: { rank: 3, statusCode: 500, prefix: "permission" },
  error: { rank: 2, statusCode: 500, prefix: "error" },
  terminal: { rank: 1, statusCode: 422, prefix: "terminal" },
};

// The one answer to a delivery with failures: the first failure of the highest-ranked decision.
function replyFor(all: readonly Failure[]): Reply {
  let first = all[0]!;
  for (const f of all) if (answers[f.decision].rank > answers[first.decision].rank) first = f;
  const answer = answers[first.decision];
  const body = first.decision === "permission" ? first.message : `${answer.prefix}: ${first.message}`;
  return { statusCode: answer.statusCode, body };
}

// Each failure on its own line, with what the runtime decided about it.
function logFailures(log: Log, stage: "keys" | "reconcile", all: readonly Failure[]): void {
  for (const f of all) {
    const fields = { stage, decision: f.decision, class: f.class, error: f.message, status: answers[f.decision].statusCode };
    if (f.decision === "permission") log.error({ ...fields, missing: f.missing }, "permission missing: the identity may not make a call it needs");
    else if (f.decision === "terminal") log.warn(fields, "failed for good: the request is refused as it stands; no retry");
    else if (f.decision === "error") log.error(fields, "failed: an unexpected error");
    else log.warn(fields, "failed: the event is to be delivered again");
  }
}

// A resync tick that comes while the sweep of an earlier one still runs (a source that gave up waiting
// and sent it again, or a sweep longer than the tick period) joins that sweep and gets its answer: two
// sweeps never overlap, and a slow one is not multiplied by its own re-sends.
const sweepsByIo = new WeakMap<object, WeakMap<object, Map<string, Promise<Reply>>>>();

function sweepOnce<C>(spec: FunctionSpec<C>, io: Io<C>, tick: TickEvent, ce: string): Promise<Reply> {
  let bySpec = sweepsByIo.get(io);
  if (!bySpec) sweepsByIo.set(io, (bySpec = new WeakMap()));
  let sweeps = bySpec.get(spec);
  if (!sweeps) bySpec.set(spec, (sweeps = new Map()));
  const id = tick.cluster ?? "";
  const running = sweeps.get(id);
  if (running) {
    eventsSkipped.inc([spec.name, "sweep-joined"]);
    withFields(io.log, { ce, fn: spec.name }).info({ cluster: tick.cluster }, "tick: joined the sweep already running");
    return running;
  }
  const sweep = handleParsed(spec, io, tick, ce).finally(() => sweeps!.delete(id));
  sweeps.set(id, sweep);
  return sweep;
}

// How a function asks to be called again (`recheckInMs`): "header", the x-recheck-after-ms answer a relay
// that delivers straight to it honours; "event", that header and a RecheckType CloudEvent as the reply,
// which a Broker takes back and a relay in recheck mode re-delivers at the time (shared/events.ts).
export type Rechecks = "header" | "event";

export async function handleEvent<C>(spec: FunctionSpec<C>, io: Io<C>, cloudevent: Record<string, unknown> | undefined, rechecks: Rechecks = "header"): Promise<Reply> {
  // A valid event has a non-empty string id; a malformed one's is logged only if it is a string.
  const ce = typeof cloudevent?.id === "string" ? cloudevent.id : undefined;
  const rejected = (reason: string): Reply => {
    eventsSkipped.inc([spec.name, "malformed"]);
    withFields(io.log, { ce, fn: spec.name }).warn({ reason }, "rejected: malformed event");
    return { statusCode: 400, body: reason };
  };
  // A recheck that is due carries the event that asked for it: that event is judged again, with what
  // the API says now (state it handed then is old by now).
  let asked = cloudevent;
  if (cloudevent?.type === RecheckDueType) {
    eventsReceived.inc([spec.name, "recheck"]);
    if (cloudevent[TargetExtension] !== spec.name) {
      eventsSkipped.inc([spec.name, "not-watched"]);
      withFields(io.log, { ce, fn: spec.name }).info({ target: cloudevent[TargetExtension] }, "skipped: a recheck for another function");
      return { statusCode: 204 };
    }
    const inner = RecheckDueSchema.safeParse(dataOf(cloudevent));
    if (!inner.success) return rejected(`recheck: the data is not the CloudEvent that asked: ${problemOf(inner.error)}`);
    asked = inner.data;
    withFields(io.log, { ce, fn: spec.name }).info({ recheckOf: inner.data.id }, "recheck due: judging the event again");
  }
  const parsed = parseEvent(asked);
  if (asked === cloudevent) eventsReceived.inc([spec.name, parsed.ok ? (parsed.event.type === "tick" ? "tick" : "object") : "malformed"]);
  if (!parsed.ok) return rejected(parsed.reason);
  const event: FunctionEvent = asked === cloudevent ? parsed.event : { ...parsed.event, observed: undefined };
  const reply = await (event.type === "tick" ? sweepOnce(spec, io, event, ce!) : handleParsed(spec, io, event, ce!));
  return rechecks === "event" ? withRecheckEvent(spec.name, reply, asked!) : reply;
}

// The reply a Broker takes back when the function asks to be called again: a RecheckType CloudEvent in
// binary mode, naming the function, with the event that asked; its cluster extension is that event's.
function withRecheckEvent(fn: string, reply: Reply, asked: Record<string, unknown>): Reply {
  const after = reply.headers?.[RECHECK_HEADER];
  if (reply.statusCode !== 204 || after === undefined) return reply;
  const cluster: Record<string, string> = typeof asked.cluster === "string" ? { "ce-cluster": asked.cluster } : {};
  return {
    statusCode: 200,
    headers: {
      ...reply.headers,
      "ce-specversion": "1.0",
      "ce-id": randomUUID(),
      "ce-type": RecheckType,
      "ce-source": `/ocm-functions/${fn}`,
      [`ce-${TargetExtension}`]: fn,
      ...cluster,
      "content-type": "application/json",
    },
    body: JSON.stringify({ afterMs: Number(after), event: asked }),
  };
}

// `io` is the process's (its identity names the key queues and sweeps); the delivery's own logs go
// through copies whose logger carries the CloudEvent id, the function and the key.
async function handleParsed<C>(spec: FunctionSpec<C>, io: Io<C>, event: FunctionEvent, ce: string): Promise<Reply> {
  const bound = { ce, fn: spec.name };
  const { observed } = event;
  const seen = seenOf(io);
  if (observed) noteHanded(seen, observed);
  // Every stage judges from what the event hands, each with its own record of what it used.
  const judge = (x: Io<C>): Judging<C> => (observed ? judgingFrom(spec, x, observed, seen) : { io: x });
  const deliveryIo: Io<C> = judge({ ...io, log: withFields(io.log, bound) }).io;
  let keys: Key[] | Skip;
  try {
    keys = await spec.keys(event, deliveryIo);
  } catch (err) {
    const all = membersOf(err).map(judged);
    for (const c of new Set(all.map((f) => f.class))) failures.inc([spec.name, "keys", c]);
    logFailures(deliveryIo.log, "keys", all);
    return replyFor(all);
  }
  if (!Array.isArray(keys)) {
    const reason = skipClass(keys);
    eventsSkipped.inc([spec.name, reason]);
    deliveryIo.log.info({ reason: keys.skip, class: reason }, "skipped");
    return { statusCode: 204 };
  }
  if (keys.length === 0) eventsSkipped.inc([spec.name, "no-keys"]);
  // Every key is settled: one that always fails must not starve the others of a resync.
  let recheckInMs: number | undefined;
  const failed: Failure[] = [];
  for (const key of keys) {
    const keyJudging = judge({ ...io, log: withFields(io.log, { ...bound, key }) });
    const result = await reconcileInTurn(spec, io, keyJudging, key);
    if ("failures" in result) {
      for (const c of new Set(result.failures.map((f) => f.class))) failures.inc([spec.name, "reconcile", c]);
      logFailures(keyJudging.io.log, "reconcile", result.failures);
      failed.push(...result.failures);
      continue;
    }
    const { outcome } = result;
    if ("recheckInMs" in outcome && outcome.recheckInMs <= MAX_RECHECK_MS) recheckInMs = Math.min(recheckInMs ?? Infinity, outcome.recheckInMs);
  }
  // Then one answer for all, by the rule in this file's header; done, with the soonest recheck (read
  // by relays; a Broker drops it), only when no key failed.
  if (failed.length) return replyFor(failed);
  return { statusCode: 204, headers: recheckInMs === undefined ? undefined : { [RECHECK_HEADER]: String(Math.ceil(recheckInMs)) } };
}

// The function's entry point (faas-js-runtime's handle contract, served by shared/cloudevents-server.ts): `export const handle = serve(spec, makeIo)`.
export function serve<C>(spec: FunctionSpec<C>, makeIo: () => Io<C>, rechecks: Rechecks = "header"): (context: unknown, cloudevent?: unknown) => Promise<Reply> {
  let io: Io<C> | undefined;
  return async (_context, cloudevent) => {
    io ??= makeIo();
    return labelled(await handleEvent(spec, io, cloudevent as Record<string, unknown> | undefined, rechecks));
  };
}

// A reply's body is a plain-text reason, and says so: faas-js-runtime labels a body without a
// Content-Type as JSON, so without this the same 400 would be text from our server and "JSON" from it.
function labelled(reply: Reply): Reply {
  if (reply.body === undefined || reply.headers?.["content-type"] !== undefined) return reply;
  return { ...reply, headers: { ...reply.headers, "content-type": "text/plain; charset=utf-8" } };
}

