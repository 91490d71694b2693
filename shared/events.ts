// CloudEvents in, typed events out: Knative ApiServerSource events (Resource and Reference mode)
// carrying our `cluster` extension, and PingSource ticks for resyncs. Its schemas are zod/mini's, which
// the relay (a long-lived process) can load at a small fraction of zod's full API's memory.
import * as z from "zod/mini";
import { pathSegmentProblem, type KubeObject } from "./kube/client.ts";
import type { Observed } from "./observed.ts";
import { groupOf } from "./api/resource.ts";

export const ApiServerSourceType = {
  ResourceAdd: "dev.knative.apiserver.resource.add",
  ResourceUpdate: "dev.knative.apiserver.resource.update",
  ResourceDelete: "dev.knative.apiserver.resource.delete",
  RefAdd: "dev.knative.apiserver.ref.add",
  RefUpdate: "dev.knative.apiserver.ref.update",
  RefDelete: "dev.knative.apiserver.ref.delete",
} as const;
export const PingSourceType = "dev.knative.sources.ping";
// Our extension for a source that hands observed state with the event (shared/observed.ts): with value
// "v1" the data is { object, observed } for an object event (object: what ApiServerSource's data would
// be) and { observed } for a tick.
export const StateExtension = "ocmfstate";

// Rechecks through a Broker (docs/relay.md, "Rechecks through a Broker"). A function behind a Broker
// answers a delivery it wants to look at again with a RecheckType CloudEvent: the Broker takes the
// reply, a Trigger routes it to a relay in recheck mode, and that relay sends a RecheckDueType event
// back to the Broker at the time, naming the function in TargetExtension, so only that function's
// Trigger passes it. Both carry the event that asked, whole, as data.
export const RecheckType = "io.ocm-functions.recheck";
export const RecheckDueType = "io.ocm-functions.recheck.due";
export const TargetExtension = "ocmftarget";
// A function's name, which a recheck's TargetExtension carries: a DNS label (it names a Knative Service).
export const isFunctionName = (name: string) => /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(name);
// A recheck further away than this is left to the periodic resync (and timers cannot hold days).
export const MAX_RECHECK_MS = 3_600_000;
const name = z.string().check(z.minLength(1));
const asked = z.looseObject({ specversion: z.string(), id: name, source: name, type: name });
export const RecheckRequestSchema = z.strictObject({
  afterMs: z.int().check(z.nonnegative(), z.maximum(MAX_RECHECK_MS)),
  event: asked, // the CloudEvent that asked, attributes and data, as structured mode writes it
});
export type RecheckRequest = z.infer<typeof RecheckRequestSchema>;
export const RecheckDueSchema = asked;

export type ObjectRef = { apiVersion: string; kind: string; namespace?: string; name: string };
export type ObjectEvent = {
  type: "object";
  verb: "add" | "update" | "delete";
  cluster: string;
  ref: ObjectRef;
  object?: KubeObject; // Resource mode only; a hint, never the truth
  observed?: Observed; // what the source handed with it
};
export type TickEvent = { type: "tick"; cluster?: string; observed?: Observed };
export type FunctionEvent = ObjectEvent | TickEvent;

// The names in an event end up in URL paths and keys, so they are held to Kubernetes' own rules (as the
// API server validates them) before any function sees them. An object's name: any name the API server
// accepts in a path (RBAC names carry colons), so not "." or "..", no "/" or "%", at most 253 characters.
const objectName = z.string().check(
  z.maxLength(253),
  z.superRefine((s, ctx) => {
    const problem = pathSegmentProblem(s);
    if (problem) ctx.addIssue({ code: "custom", message: `name ${problem}` });
  }),
);
const dns1123Label = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const dns1123Subdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
// "" is how ApiServerSource says "cluster-scoped".
const namespace = z.optional(z.union([z.literal(""), z.string().check(z.maxLength(63), z.regex(dns1123Label, "namespace must be a DNS-1123 label"))]));
const clusterName = z.string().check(z.maxLength(253), z.regex(dns1123Subdomain, "cluster must be a DNS-1123 subdomain"));
// Label values become keys too (a ManifestWork's add-on label names its add-on, a CSR's its cluster).
const labelValue = z.string().check(z.maxLength(63), z.regex(/^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/, "label values must be Kubernetes label values"));
const objectAttributes = z.object({
  type: z.enum(Object.values(ApiServerSourceType) as [string, ...string[]]),
  source: name,
  id: name,
  cluster: clusterName, // the `cluster` extension: which cluster the object lives in
  kind: name,
  apiversion: name,
  name: objectName,
  namespace,
});
const resourceData = z.looseObject({ metadata: z.looseObject({ name: objectName, namespace, labels: z.optional(z.record(z.string(), labelValue)) }) });
const refData = z.looseObject({ kind: name, name: objectName, apiVersion: name, namespace });
const tickAttributes = z.object({ type: z.literal(PingSourceType), source: name, id: name, cluster: z.optional(clusterName) });
const handedObject = z
  .object({ cluster: clusterName, apiVersion: name, kind: name, namespace: z.optional(z.string()), name: objectName, object: z.optional(resourceData), conditional: z.optional(z.boolean()) })
  .check(z.refine((h) => !h.object || (h.object.metadata.name === h.name && (h.object.metadata.namespace || undefined) === (h.namespace || undefined)), { error: "a handed object names another object than its entry" }));
const handedList = z.object({ cluster: clusterName, apiVersion: name, kind: name, namespace: z.optional(z.string()), labelSelector: z.optional(z.string()), items: z.array(resourceData) });
const observedSchema = z.object({ objects: z._default(z.array(handedObject), []), lists: z._default(z.array(handedList), []) });
const stateData = z.object({ object: z.optional(z.unknown()), observed: observedSchema });

// Custom resources' names are held to a DNS-1123 subdomain by the API server (lower-case alphanumerics,
// "-" and ".", at most 253). An event naming one of OCM's kinds otherwise names an object that cannot
// exist (ours, config.ocm-functions.io, likewise), so it is refused here (400) instead of reaching a selector or a URL. Built-in kinds keep the
// path-segment rule above: RBAC names, for one, may hold ":" and any character but "/" and "%".
const customResourceGroup = /(^|\.)(open-cluster-management|ocm-functions)\.io$/;
function kindNameProblem(apiVersion: string, name: string): string | undefined {
  const group = groupOf(apiVersion);
  if (!customResourceGroup.test(group) || dns1123Subdomain.test(name)) return undefined;
  return `name ${JSON.stringify(name)} of a ${group} object must be a DNS-1123 subdomain (lower-case alphanumerics, '-' and '.', starting and ending with an alphanumeric)`;
}

export type ParseResult = { ok: true; event: FunctionEvent } | { ok: false; reason: string };

// A schema's complaint as one line.
export const problemOf = (error: z.core.$ZodError) => z.prettifyError(error).replace(/\n/g, "; ");
const failure = (where: string, error: z.core.$ZodError): ParseResult => ({ ok: false, reason: `${where}: ${problemOf(error)}` });

// Accepts any CloudEvent-shaped object (the runtime hands us cloudevents v8 instances; tests v10).
export function parseEvent(ce: Record<string, unknown> | undefined): ParseResult {
  if (!ce || typeof ce !== "object") return { ok: false, reason: "no CloudEvent in the request" };
  let data = dataOf(ce);
  let observed: Observed | undefined;
  if (ce[StateExtension] !== undefined) {
    if (ce[StateExtension] !== "v1") return { ok: false, reason: `extension ${StateExtension} is ${JSON.stringify(ce[StateExtension])}, not "v1"` };
    const s = stateData.safeParse(data);
    if (!s.success) return failure("observed state", s.error);
    observed = s.data.observed as Observed;
    data = s.data.object;
  }
  if (ce.type === PingSourceType) {
    const t = tickAttributes.safeParse(ce);
    return t.success ? { ok: true, event: { type: "tick", cluster: t.data.cluster, ...(observed ? { observed } : {}) } } : failure("ping event", t.error);
  }
  const a = objectAttributes.safeParse(ce);
  if (!a.success) return failure("event attributes", a.error);
  const [, mode, verb] = a.data.type.split(".").slice(-3) as [string, "resource" | "ref", ObjectEvent["verb"]];
  const extra = observed ? { observed } : {};
  const ref: ObjectRef = { apiVersion: a.data.apiversion, kind: a.data.kind, name: a.data.name, namespace: a.data.namespace || undefined };
  const nameProblem = kindNameProblem(ref.apiVersion, ref.name);
  if (nameProblem) return { ok: false, reason: `event attributes: ${nameProblem}` };
  if (mode === "ref") {
    const d = refData.safeParse(data);
    if (!d.success) return failure("reference data", d.error);
    if (d.data.name !== ref.name || d.data.kind !== ref.kind) return { ok: false, reason: "reference data names another object than the event's extensions" };
    return { ok: true, event: { type: "object", verb, cluster: a.data.cluster, ref, ...extra } };
  }
  const d = resourceData.safeParse(data);
  if (!d.success) return failure("resource data", d.error);
  if (d.data.metadata.name !== ref.name) return { ok: false, reason: "resource data names another object than the event's extensions" };
  return { ok: true, event: { type: "object", verb, cluster: a.data.cluster, ref, object: d.data as KubeObject, ...extra } };
}

// A CloudEvent's data as JSON: a string body parsed (undefined when it is not JSON), anything else as is.
export const dataOf = (ce: { data?: unknown }): unknown => (typeof ce.data === "string" ? safeJson(ce.data) : ce.data);

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
