// Running functions in tests as production runs them: under their own RBAC identity (from
// manifests/rbac/<function>.yaml), fed ApiServerSource-shaped CloudEvents, directly or over HTTP.
import { randomUUID } from "node:crypto";
import type { KubeObject } from "../../shared/kube/client.ts";
import { handleEvent, jsonLog, RECHECK_HEADER, type Io, type Key, type Outcome, type Reply } from "../../shared/harness.ts";
import type { FunctionSpec } from "../../shared/harness.ts";
import { clientsFromKubeconfigs } from "../../shared/kube/clients.ts";
import type { Clock } from "../../shared/clock.ts";
import { systemClock } from "../../shared/clock.ts";


// Functions run under the RBAC of manifests/rbac/<fn>.yaml, bound to a user named after them.
export { identityFor } from "../../dev/control-plane/identities.ts";

export function testIo<C>(kubeconfigs: Record<string, string>, config: C, clock: Clock = systemClock): Io<C> {
  return { clock, config, log: jsonLog("test", process.env.DEBUG_FUNCTIONS ? undefined : "quiet"), cluster: clientsFromKubeconfigs(kubeconfigs) };
}

// The CloudEvent Knative's ApiServerSource would send for obj, plus our cluster extension.
export function objectEvent(o: { cluster: string; object: KubeObject; verb?: "add" | "update" | "delete"; mode?: "resource" | "ref" }): Record<string, unknown> {
  const mode = o.mode ?? "resource";
  const { apiVersion = "", kind = "", metadata } = o.object;
  return {
    specversion: "1.0",
    id: randomUUID(),
    source: `https://${o.cluster}.invalid`,
    type: `dev.knative.apiserver.${mode}.${o.verb ?? "update"}`,
    datacontenttype: "application/json",
    cluster: o.cluster,
    kind,
    apiversion: apiVersion,
    name: metadata.name,
    namespace: metadata.namespace ?? "",
    data: mode === "resource" ? o.object : { apiVersion, kind, name: metadata.name, namespace: metadata.namespace },
  };
}

export function tickEvent(cluster?: string): Record<string, unknown> {
  return { specversion: "1.0", id: randomUUID(), source: "/apis/v1/namespaces/ocm/pingsources/resync", type: "dev.knative.sources.ping", ...(cluster ? { cluster } : {}) };
}

// The function behind our CloudEvents HTTP server (shared/cloudevents-server.ts, as its bundle runs it),
// on a free loopback port. test/runtime-equivalence.test.ts serves one with faas-js-runtime's own.
export { startFunctionServer } from "../../dev/local/functions.ts";

// POST in binary mode, as the ApiServerSource adapter does; an event without data has no body and no
// content type (a JSON content type with an empty body is a 400 from the runtime).
export async function postEvent(url: string, ce: Record<string, unknown>): Promise<{ status: number; body: string }> {
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(ce)) if (k !== "data" && k !== "datacontenttype" && v !== undefined) headers[`ce-${k}`] = String(v);
  const hasData = ce.data !== undefined;
  if (hasData) headers["content-type"] = String(ce.datacontenttype ?? "application/json");
  const res = await fetch(url, { method: "POST", headers, body: hasData ? JSON.stringify(ce.data) : undefined });
  return { status: res.status, body: await res.text() };
}

// As a relay delivers: the same call again after each recheck it asks for within a second (the
// acceptor's, while the authorizer catches up with its grants), until it asks for none. The last answer.
async function asRelay<T>(call: () => Promise<T>, recheckOf: (answer: T) => number | undefined): Promise<T> {
  for (let i = 0; ; i++) {
    const answer = await call();
    const after = recheckOf(answer);
    if (after === undefined || !(after <= 1000) || i === 50) return answer;
    await new Promise((r) => setTimeout(r, after));
  }
}

// One event, delivered as a relay does.
export const deliverAsRelay = <C>(spec: FunctionSpec<C>, io: Io<C>, event: Record<string, unknown>): Promise<Reply> =>
  asRelay(() => handleEvent(spec, io, event), (reply) => (reply.statusCode === 204 && reply.headers?.[RECHECK_HEADER] !== undefined ? Number(reply.headers[RECHECK_HEADER]) : undefined));

// One reconcile of a key, called again as a relay would.
export const reconcileAsRelay = <C>(reconcile: (io: Io<C>, key: Key) => Promise<Outcome>, io: Io<C>, key: Key): Promise<Outcome> =>
  asRelay(() => reconcile(io, key), (outcome) => ("recheckInMs" in outcome ? outcome.recheckInMs : undefined));
