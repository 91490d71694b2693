// Turns a reconcile into a Knative function: parse the CloudEvent (zod), map it to keys of the root
// kind, reconcile each key by level, and answer with a status that makes the source retry or not.
import type { Clock } from "./clock.ts";
import { parseEvent, type FunctionEvent } from "./events.ts";
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
// A recheck further away than this is left to the periodic resync (and timers cannot hold days).
export const MAX_RECHECK_MS = 3_600_000;

// JSON lines, one object per decision, as a log pipeline wants them: on stderr, to `out`, or nowhere.
export function jsonLog(fn: string, out?: "quiet" | ((line: string) => void)): Log {
  const emit = typeof out === "function" ? out : out === "quiet" ? () => {} : (line: string) => process.stderr.write(line);
  const write = (level: string) => (fields: object, msg: string) => emit(`${JSON.stringify({ level, time: new Date().toISOString(), fn, msg, ...fields })}\n`);
  return { info: write("info"), warn: write("warn"), error: write("error") };
}

// Runs one reconcile, retrying write conflicts a few times at once (the next read sees the new version).
export async function reconcileKey<C>(spec: FunctionSpec<C>, io: Io<C>, key: Key): Promise<Outcome> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await spec.reconcile(io, key);
    } catch (err) {
      if (classifyError(err) !== "conflict" || attempt >= CONFLICT_RETRIES) throw err;
      io.log.info({ key, attempt }, "conflict: re-reading and trying again");
    }
  }
}

// Which HTTP status a failure becomes. Never the Kubernetes code itself: a leaked 404 or 409 would
// be misread by the ApiServerSource adapter and by Brokers.
function replyFor(err: unknown): Reply {
  const kind = classifyError(err);
  const message = err instanceof Error ? err.message : String(err);
  switch (kind) {
    case "conflict":
    case "transient":
    case "not-found": // something vanished mid-reconcile: the retry will read the new state
    case "already-exists":
    // Permissions here are granted by other reconcilers (acceptance, rotation) and arrive a moment
    // later than the events that need them; the retry finds them in place.
    case "forbidden":
    case "unauthorized":
      return { statusCode: 503, body: `retry: ${message}` };
    default:
      return { statusCode: 500, body: message };
  }
}

export async function handleEvent<C>(spec: FunctionSpec<C>, io: Io<C>, cloudevent: Record<string, unknown> | undefined): Promise<Reply> {
  const parsed = parseEvent(cloudevent);
  if (!parsed.ok) {
    io.log.warn({ reason: parsed.reason }, "rejected: malformed event");
    return { statusCode: 400, body: parsed.reason };
  }
  try {
    const keys = await spec.keys(parsed.event, io);
    if (!Array.isArray(keys)) {
      io.log.info({ reason: keys.skip }, "skipped");
      return { statusCode: 204 };
    }
    let recheckInMs: number | undefined;
    const failures: unknown[] = [];
    // Every key gets its turn: one that always fails must not starve the others of a resync.
    for (const key of keys) {
      try {
        const outcome = await reconcileKey(spec, io, key);
        if ("recheckInMs" in outcome && outcome.recheckInMs <= MAX_RECHECK_MS) recheckInMs = Math.min(recheckInMs ?? Infinity, outcome.recheckInMs);
      } catch (err) {
        if (keys.length > 1) io.log.warn({ key, error: err instanceof Error ? err.message : String(err) }, "reconcile failed; going on with the other keys");
        failures.push(err);
      }
    }
    // The most retryable failure answers for all of them.
    if (failures.length) throw failures.find((f) => replyFor(f).statusCode === 503) ?? failures[0];
    // Knative has no delayed redelivery; the resync tick covers rechecks. The local relay reads this header.
    return { statusCode: 204, headers: recheckInMs === undefined ? undefined : { "x-recheck-after-ms": String(Math.ceil(recheckInMs)) } };
  } catch (err) {
    const reply = replyFor(err);
    io.log[reply.statusCode === 500 ? "error" : "warn"]({ error: err instanceof Error ? err.message : String(err), status: reply.statusCode }, "reconcile failed");
    return reply;
  }
}

// The faas-js-runtime entry point: `export const handle = serve(spec, makeIo)`.
export function serve<C>(spec: FunctionSpec<C>, makeIo: () => Io<C>): (context: unknown, cloudevent?: unknown) => Promise<Reply> {
  let io: Io<C> | undefined;
  return async (_context, cloudevent) => {
    io ??= makeIo();
    return handleEvent(spec, io, cloudevent as Record<string, unknown> | undefined);
  };
}

