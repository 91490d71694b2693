// Turns a reconcile into a Knative function: parse the CloudEvent (zod), map it to keys of the root
// kind, reconcile each key by level, and answer with a status that makes the source retry or not.
import type { Clock } from "./clock.ts";
import { parseEvent, type FunctionEvent, type TickEvent } from "./events.ts";
import { classifyError } from "./kube/errors.ts";
import type { KubeClient } from "./kube/client.ts";

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

export type FunctionSpec<Config> = {
  name: string;
  // Map an event to keys of the root kind. An empty list means "not ours"; give the reason.
  keys(event: FunctionEvent, io: Io<Config>): Promise<Key[] | { skip: string }> | Key[] | { skip: string };
  reconcile(io: Io<Config>, key: Key): Promise<Outcome>;
};

export type Reply = { statusCode: number; body?: string; headers?: Record<string, string> };

const CONFLICT_RETRIES = 3;
// Permissions granted by another reconciler (acceptance, rotation) reach the authorizer a moment after
// the event that needs them: a refused call is tried again a few times at once, then it is a defect.
const FORBIDDEN_RETRY_DELAYS_MS = [200, 500];
// A recheck further away than this is left to the periodic resync (and timers cannot hold days).
export const MAX_RECHECK_MS = 3_600_000;

// JSON lines, one object per decision, as a log pipeline wants them: on stderr, to `out`, or nowhere.
export function jsonLog(fn: string, out?: "quiet" | ((line: string) => void)): Log {
  const emit = typeof out === "function" ? out : out === "quiet" ? () => {} : (line: string) => process.stderr.write(line);
  const write = (level: string) => (fields: object, msg: string) => emit(`${JSON.stringify({ level, time: new Date().toISOString(), fn, msg, ...fields })}\n`);
  return { info: write("info"), warn: write("warn"), error: write("error") };
}

// A call still refused after the retries: the identity lacks a permission (our RBAC, or the hub's
// grant to the cluster), named as the API server named it.
export class RbacDefect extends Error {
  readonly missing: { user?: string; verb?: string; resource?: string; group?: string; namespace?: string };
  constructor(cause: unknown) {
    const message = cause instanceof Error ? cause.message : String(cause);
    const m = /User "([^"]*)" cannot (\S+) resource "([^"]*)" in API group "([^"]*)"(?: in the namespace "([^"]*)")?/.exec(message);
    const missing: RbacDefect["missing"] = m ? { user: m[1], verb: m[2], resource: m[3], group: m[4], ...(m[5] ? { namespace: m[5] } : {}) } : {};
    const what = m ? `${missing.user} may not ${missing.verb} ${missing.resource}${missing.group ? `.${missing.group}` : ""}${missing.namespace ? ` in ${missing.namespace}` : ""}` : message;
    super(`RBAC defect: ${what}`, { cause });
    this.name = "RbacDefect";
    this.missing = missing;
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// Runs one reconcile, retrying write conflicts a few times at once (the next read sees the new version)
// and a refused call a few times after a short wait; a call refused every time is an RbacDefect.
export async function reconcileKey<C>(spec: FunctionSpec<C>, io: Io<C>, key: Key): Promise<Outcome> {
  let conflicts = 0;
  let refusals = 0;
  for (;;) {
    try {
      return await spec.reconcile(io, key);
    } catch (err) {
      const kind = classifyError(err);
      if (kind === "conflict" && ++conflicts < CONFLICT_RETRIES) {
        io.log.info({ key, attempt: conflicts }, "conflict: re-reading and trying again");
        continue;
      }
      if (kind === "forbidden") {
        const wait = FORBIDDEN_RETRY_DELAYS_MS[refusals++];
        if (wait === undefined) throw new RbacDefect(err);
        io.log.info({ key, attempt: refusals, waitMs: wait }, "forbidden: waiting for the permission to arrive");
        await sleep(wait);
        continue;
      }
      throw err;
    }
  }
}

// controller-runtime's workqueue promise, per process: one key is never reconciled twice at once, and
// the events that arrive while it runs fold into a single run after it (which reads what they changed).
// Concurrent runs of one key would read the same state and write over each other: conflicts at best,
// a rollout's wave assigned twice at worst. Replicas of a function are kept apart by resourceVersions.
type Turn = { last: Promise<Outcome>; waiting?: Promise<Outcome> };
const turnsByIo = new WeakMap<object, Map<string, Turn>>();

function reconcileInTurn<C>(spec: FunctionSpec<C>, io: Io<C>, key: Key): Promise<Outcome> {
  let turns = turnsByIo.get(io);
  if (!turns) turnsByIo.set(io, (turns = new Map()));
  const id = JSON.stringify([spec.name, key.cluster, key.namespace ?? "", key.name]);
  const turn = turns.get(id);
  if (turn?.waiting) return turn.waiting; // not begun yet: it will read this event's state too
  const begin = () => {
    if (entry.waiting === run) entry.waiting = undefined;
    return reconcileKey(spec, io, key);
  };
  const run: Promise<Outcome> = turn ? turn.last.then(begin, begin) : Promise.resolve().then(begin);
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

// Which HTTP status a failure becomes. Never the Kubernetes code itself: a leaked 404 or 409 would
// be misread by the ApiServerSource adapter and by Brokers. An RBAC defect is a 500: the source's
// bounded retries may still find the permission granted, and the log names what is missing.
function replyFor(err: unknown): Reply {
  const message = err instanceof Error ? err.message : String(err);
  if (err instanceof RbacDefect) return { statusCode: 500, body: message };
  switch (classifyError(err)) {
    case "conflict":
    case "transient":
    case "not-found": // something vanished mid-reconcile: the retry will read the new state
    case "already-exists":
    case "unauthorized": // a credential being rotated
      return { statusCode: 503, body: `retry: ${message}` };
    default:
      return { statusCode: 500, body: message };
  }
}

function logFailure(io: Io<unknown>, err: unknown, reply: Reply, key?: Key): void {
  const error = err instanceof Error ? err.message : String(err);
  if (err instanceof RbacDefect) io.log.error({ key, error, missing: err.missing, status: reply.statusCode }, "RBAC defect: a permission is missing");
  else io.log[reply.statusCode === 500 ? "error" : "warn"]({ key, error, status: reply.statusCode }, "reconcile failed");
}

// A resync tick that comes while the sweep of an earlier one still runs (a source that gave up waiting
// and sent it again, or a sweep longer than the tick period) joins that sweep and gets its answer: two
// sweeps never overlap, and a slow one is not multiplied by its own re-sends.
const sweepsByIo = new WeakMap<object, WeakMap<object, Map<string, Promise<Reply>>>>();

function sweepOnce<C>(spec: FunctionSpec<C>, io: Io<C>, tick: TickEvent): Promise<Reply> {
  let bySpec = sweepsByIo.get(io);
  if (!bySpec) sweepsByIo.set(io, (bySpec = new WeakMap()));
  let sweeps = bySpec.get(spec);
  if (!sweeps) bySpec.set(spec, (sweeps = new Map()));
  const id = tick.cluster ?? "";
  const running = sweeps.get(id);
  if (running) {
    io.log.info({ cluster: tick.cluster }, "tick: joined the sweep already running");
    return running;
  }
  const sweep = handleParsed(spec, io, tick).finally(() => sweeps!.delete(id));
  sweeps.set(id, sweep);
  return sweep;
}

export async function handleEvent<C>(spec: FunctionSpec<C>, io: Io<C>, cloudevent: Record<string, unknown> | undefined): Promise<Reply> {
  const parsed = parseEvent(cloudevent);
  if (!parsed.ok) {
    io.log.warn({ reason: parsed.reason }, "rejected: malformed event");
    return { statusCode: 400, body: parsed.reason };
  }
  return parsed.event.type === "tick" ? sweepOnce(spec, io, parsed.event) : handleParsed(spec, io, parsed.event);
}

async function handleParsed<C>(spec: FunctionSpec<C>, io: Io<C>, event: FunctionEvent): Promise<Reply> {
  let keys: Key[] | { skip: string };
  try {
    keys = await spec.keys(event, io);
  } catch (err) {
    const reply = replyFor(err);
    logFailure(io, err, reply);
    return reply;
  }
  if (!Array.isArray(keys)) {
    io.log.info({ reason: keys.skip }, "skipped");
    return { statusCode: 204 };
  }
  // Every key is settled: one that always fails must not starve the others of a resync.
  let recheckInMs: number | undefined;
  const replies: Reply[] = [];
  for (const key of keys) {
    try {
      const outcome = await reconcileInTurn(spec, io, key);
      if ("recheckInMs" in outcome && outcome.recheckInMs <= MAX_RECHECK_MS) recheckInMs = Math.min(recheckInMs ?? Infinity, outcome.recheckInMs);
    } catch (err) {
      const reply = replyFor(err);
      logFailure(io, err, reply, key);
      replies.push(reply);
    }
  }
  // Then one answer for all: a retry (503) if any key needs one, since the retry reconciles every key;
  // else the first failure; else done, with the soonest recheck (read by relays; a Broker drops it).
  if (replies.length) return replies.find((r) => r.statusCode === 503) ?? replies[0]!;
  return { statusCode: 204, headers: recheckInMs === undefined ? undefined : { "x-recheck-after-ms": String(Math.ceil(recheckInMs)) } };
}

// The function's entry point (faas-js-runtime's handle contract, served by shared/cloudevents-server.ts): `export const handle = serve(spec, makeIo)`.
export function serve<C>(spec: FunctionSpec<C>, makeIo: () => Io<C>): (context: unknown, cloudevent?: unknown) => Promise<Reply> {
  let io: Io<C> | undefined;
  return async (_context, cloudevent) => {
    io ??= makeIo();
    return handleEvent(spec, io, cloudevent as Record<string, unknown> | undefined);
  };
}

