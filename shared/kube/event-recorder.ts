// Kubernetes Events (core/v1) that functions record about the objects they reconcile, named and
// stamped as client-go's recorder does, with time from the injected clock.
import { randomInt } from "node:crypto";
import { EventResource } from "../api/kube.ts";
import { rfc3339 } from "../clock.ts";
import type { KubeClient, KubeObject } from "./client.ts";
import { isAlreadyExists } from "./errors.ts";

export type EventType = "Normal" | "Warning";

export type EventRecord = {
  // The object the event is about; `namespace` says where the event is stored.
  regarding: { apiVersion: string; kind: string; name: string; uid?: string; namespace: string };
  type: EventType;
  reason: string;
  message: string;
  component: string; // the function's name
  now: Date;
};

// client-go names events <object>.<unix nanoseconds in hex>. Our clock has milliseconds, so the
// nanoseconds within one are drawn at random: two events in the same millisecond keep both.
export const eventName = (objectName: string, now: Date) => `${objectName}.${(BigInt(now.getTime()) * 1_000_000n + BigInt(randomInt(1_000_000))).toString(16)}`;

// The API server wants involvedObject.namespace to equal the event's namespace (or be empty for an
// event in "default"), so an event about a cluster-scoped object stored in a namespace names that
// namespace on its reference, as OCM does for ManagedClusters.
export async function recordEvent(client: KubeClient, e: EventRecord): Promise<void> {
  const at = rfc3339(e.now);
  const event: KubeObject = {
    metadata: { name: eventName(e.regarding.name, e.now), namespace: e.regarding.namespace },
    involvedObject: e.regarding,
    type: e.type,
    reason: e.reason,
    action: e.reason,
    message: e.message,
    source: { component: e.component },
    reportingComponent: e.component,
    reportingInstance: e.component,
    firstTimestamp: at,
    lastTimestamp: at,
    count: 1,
  };
  try {
    await client.create(EventResource, event);
  } catch (err) {
    // the same event at the same instant was recorded already (a retried reconcile)
    if (!isAlreadyExists(err)) throw err;
  }
}
