// ManagedClusterConditionAvailable from the spoke API server's own health endpoints, judged as OCM's
// availableReconcile does: /livez (or /healthz where /livez is missing or refused) answering 200 means
// available; a failure is written only once failures have lasted 20 s, so a blip does not flip it.
//
// OCM keeps the time of the first failure in memory; a function remembers nothing, so it lives in a
// ConfigMap next to the agent's secrets on the spoke. The hub's API stays exactly OCM's (no extra
// condition or annotation on the ManagedCluster, no write on the hub while a failure is young), and the
// ConfigMap is on the API server this function already reads its hub credentials from, so keeping it
// there adds no new way to fail: when that server cannot be reached, nothing here runs at all.
//
// OCM's agent renews its lease in the process that writes Available, so it never claims availability
// while its own lease is stale. Ours are apart: with the heartbeat sidecar down and this function
// running, Available=True on every ManagedCluster event and the lease monitor's Unknown on every update
// took turns without end (issue 24). So no Available, True or False, is written while the hub may
// judge the lease expired; the monitor's Unknown stands until the sidecar renews the lease again, and
// the claim is looked at again one lease duration later, not only at the next resync.
import { ClusterLabel, ManagedClusterConditionType, ManagedClusterLeaseName, ManagedClusterReason, type ManagedCluster } from "../../../shared/api/cluster.ts";
import { LeaseDurationTimes } from "../../../shared/api/health.ts";
import { ConfigMapResource, LeaseResource } from "../../../shared/api/kube.ts";
import { AvailableCondition, kubeAPIServerUnavailableCondition } from "../../../shared/api/spoke-status.ts";
import { lastRenewal, leaseDurationMs, leaseExpiresAt, type Lease } from "../../../shared/cluster-lease.ts";
import { findCondition, hasCondition, setCondition, type NewCondition } from "../../../shared/conditions.ts";
import type { KubeClient, KubeObject } from "../../../shared/kube/client.ts";
import { rawGet, type RawAnswer, type RawFailure } from "../../../shared/kube/raw.ts";
import type { Status, Step, StepContext, StepResult } from "../step.ts";

// OCM: failureThreshold and healthCheckRetryInterval.
export const FailureThresholdMs = 20_000;
export const RetryIntervalMs = 5_000;
const FirstFailureKey = "firstFailureTime";

export const probeStateName = (cluster: string) => `${cluster}-kube-apiserver-probe`;

type ConfigMap = KubeObject & { data?: Record<string, string> };
// `answer` is what came back, for the log: the condition's detail can be as bare as "unknown".
export type Probe = { ok: true } | { ok: false; statusCode: number; detail: string; answer: string };

export const available: Step = async (draft, ctx) => {
  const { now, spoke, managed, io } = ctx;
  const probe = await probeKubeAPIServer(managed);
  const at = { name: probeStateName(io.config.clusterName), namespace: io.config.agentNamespace, cluster: io.config.clusterName };
  if (probe.ok) {
    const withheld = await leaseWithholds(draft, AvailableCondition, ctx);
    if (withheld) io.log.info({ cluster: at.cluster, reason: withheld }, "Available=True not claimed: the cluster lease is stale");
    else draft.conditions = setCondition(draft.conditions, AvailableCondition, now);
    if (await forgetFailure(spoke, at)) io.log.info({ cluster: at.cluster }, "kube-apiserver probe recovered: failure streak forgotten");
    // A renewal wakes nothing here (this function does not watch the lease), so the claim is looked at
    // again when a live heartbeat will have renewed: a heartbeat back from a stop renews at once, then
    // once per lease duration.
    return withheld ? { continueAndRecheckInMs: leaseDurationMs(ctx.cluster) } : "continue";
  }
  const since = await firstFailure(spoke, at, now);
  const judged = judgeFailure(since, now);
  const unavailable = kubeAPIServerUnavailableCondition(probe.statusCode, probe.detail);
  const withheld = judged.write ? await leaseWithholds(draft, unavailable, ctx) : undefined;
  if (withheld) {
    io.log.warn({ cluster: at.cluster, statusCode: probe.statusCode, answer: probe.answer, since, reason: withheld }, "kube-apiserver failing for 20 s or more, Available=False not written: the cluster lease is stale");
  } else if (judged.write) {
    draft.conditions = setCondition(draft.conditions, unavailable, now);
    io.log.warn({ cluster: at.cluster, statusCode: probe.statusCode, answer: probe.answer, since }, "kube-apiserver failing for 20 s or more: Available=False");
  } else {
    io.log.warn({ cluster: at.cluster, statusCode: probe.statusCode, answer: probe.answer, since }, "kube-apiserver probe failed: Available kept until failures last 20 s");
  }
  return judged.result;
};

// Why the lease forbids writing `want` now, or undefined. A write that changes nothing is never
// withheld, and costs no read of the lease: a healthy cluster pays nothing for this.
async function leaseWithholds(draft: Status, want: NewCondition, ctx: StepContext): Promise<string | undefined> {
  if (hasCondition(draft.conditions, want)) return undefined;
  const lease = await ctx.hub.get<Lease>(LeaseResource, ManagedClusterLeaseName, ctx.io.config.clusterName);
  return staleLease({ lease, cluster: { ...ctx.cluster, status: { ...ctx.cluster.status, conditions: draft.conditions } }, now: ctx.now });
}

// The lease is stale for the agent's purpose when either
// - the hub has said Unknown because the lease stopped (the monitor's verdict, at whatever grace the hub
//   runs with) and the lease has not been renewed since, or has gone; or
// - it is expired by the monitor's own rule at OCM's grace of five lease durations, judged on this
//   side's clock, which is the clock the heartbeat writes renewTime with.
// The verdict's lastTransitionTime is whole seconds: a renewal in the same second as the verdict counts
// as an answer to it, and the monitor, which reads the lease afresh, then finds it fresh.
export function staleLease(o: { lease: Lease | undefined; cluster: ManagedCluster; now: Date }): string | undefined {
  const available = findCondition(o.cluster.status?.conditions, ManagedClusterConditionType.Available);
  const verdictAt = available?.status === "Unknown" && available.reason === ManagedClusterReason.ManagedClusterLeaseUpdateStopped ? Date.parse(available.lastTransitionTime ?? "") : NaN;
  const verdict = Number.isNaN(verdictAt) ? undefined : new Date(verdictAt).toISOString();
  if (!o.lease) return verdict ? `the hub marked the cluster Unknown at ${verdict} and the lease is gone` : undefined;
  const renewed = lastRenewal(o.lease);
  const renewedAt = new Date(renewed).toISOString();
  if (verdict && renewed <= verdictAt) return `the hub marked the cluster Unknown at ${verdict}, and the lease was last renewed at ${renewedAt}, before that`;
  if (o.now.getTime() >= leaseExpiresAt(o.lease, o.cluster, LeaseDurationTimes)) return `the lease was last renewed at ${renewedAt}, ${LeaseDurationTimes} lease durations or more ago`;
  return undefined;
}

// A failure younger than the threshold keeps the old condition and asks to be probed again as OCM
// does, every 5 s, and never later than the moment the failure would count.
export function judgeFailure(since: Date, now: Date): { write: boolean; result: StepResult } {
  const failingMs = Math.max(0, now.getTime() - since.getTime());
  if (failingMs >= FailureThresholdMs) return { write: true, result: "stop" };
  return { write: false, result: { stopAndRecheckInMs: Math.min(RetryIntervalMs, FailureThresholdMs - failingMs) } };
}

export async function probeKubeAPIServer(spoke: KubeClient): Promise<Probe> {
  let answer = await rawGet(spoke, "/livez");
  if (answer.status === 200) return { ok: true };
  // OCM: /livez exists from Kubernetes 1.16 on; where it is missing or refused, /healthz decides.
  if (answer.status === 404 || answer.status === 403) {
    answer = await rawGet(spoke, "/healthz");
    if (answer.status === 200) return { ok: true };
  }
  return { ok: false, statusCode: answer.status, detail: failureDetail(answer), answer: "error" in answer ? answer.error : answer.body.slice(0, 300) };
}

// OCM prints client-go's error for the answer (Result.Raw), not the body: the text of
// NewGenericServerResponse, which quotes the body only when it is text. So a 403 with a JSON Status
// reads "unknown" there, and here. One difference on purpose: client-go reports status 0 for a text
// answer it has no decoder for (a failing /livez answers text/plain 500); we keep the real code.
export function failureDetail(a: RawAnswer | RawFailure): string {
  if ("error" in a) return `Get "${a.url}": ${a.error}`;
  const { status, contentType, body } = a;
  if (status > 200 && status < 300) return body;
  const text = contentType === "" || contentType.trim().toLowerCase().startsWith("text/");
  const serverMessage = text ? Buffer.from(body).subarray(0, 2048).toString().trim() : "unknown";
  switch (status) {
    case 400:
      return "the server rejected our request for an unknown reason";
    case 401:
      return "the server has asked for the client to provide credentials";
    case 403:
    case 415:
      return serverMessage;
    case 404:
      return "the server could not find the requested resource";
    case 405:
      return "the server does not allow this method on the requested resource";
    case 406:
      return serverMessage === "" || serverMessage === "unknown" ? "the server was unable to respond with a content type that the client supports" : serverMessage;
    case 409:
      return "the server reported a conflict";
    case 422:
      return "the server rejected our request due to an error in our request";
    case 429:
      return "the server has received too many requests and has asked us to try again later";
    case 503:
      return "the server is currently unable to handle the request";
    case 504:
      return "the server was unable to return a response in the time allotted, but may still be processing the request";
    default:
      return status >= 500 ? `an error on the server (${goQuote(serverMessage)}) has prevented the request from succeeding` : `the server responded with the status code ${status} but did not return more information`;
  }
}

// Go's %q for the text an API server sends.
function goQuote(s: string): string {
  const named: Record<string, string> = { '"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\x07": "\\a", "\b": "\\b", "\f": "\\f", "\v": "\\v" };
  let out = "";
  for (const ch of s) {
    const code = ch.codePointAt(0)!;
    out += named[ch] ?? (code < 0x20 || code === 0x7f ? `\\x${code.toString(16).padStart(2, "0")}` : ch);
  }
  return `"${out}"`;
}

// When the current failure streak began: recorded now if none is (or the record is unreadable).
async function firstFailure(spoke: KubeClient, at: { name: string; namespace: string; cluster: string }, now: Date): Promise<Date> {
  const existing = await spoke.get<ConfigMap>(ConfigMapResource, at.name, at.namespace);
  const recorded = Date.parse(existing?.data?.[FirstFailureKey] ?? "");
  if (!Number.isNaN(recorded)) return new Date(recorded);
  const data = { [FirstFailureKey]: now.toISOString() };
  if (existing) await spoke.update(ConfigMapResource, { ...existing, data });
  else await spoke.create<ConfigMap>(ConfigMapResource, { metadata: { name: at.name, namespace: at.namespace, labels: { [ClusterLabel.ClusterName]: at.cluster } }, data });
  return now;
}

// true when there was a streak to forget.
async function forgetFailure(spoke: KubeClient, at: { name: string; namespace: string }): Promise<boolean> {
  const existing = await spoke.get<ConfigMap>(ConfigMapResource, at.name, at.namespace);
  return existing ? spoke.delete(ConfigMapResource, at.name, at.namespace) : false;
}
