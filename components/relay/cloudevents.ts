// The CloudEvents the relay emits, shaped as Knative's ApiServerSource and PingSource shape theirs
// (spec §1.1, §2.1), plus our `cluster` extension and the K_CE_OVERRIDES extensions. They are plain frozen
// objects sent in binary content mode by our own encoder: the cloudevents SDK (with its JSON-schema
// validator and big-number JSON parser) would cost the long-lived relay memory for nothing it needs.
import { randomUUID } from "node:crypto";
import type { ApiResource } from "../../shared/api/resource.ts";
import type { KubeObject } from "../../shared/kube/client.ts";
import type { Clock } from "../../shared/clock.ts";
import { ApiServerSourceType, PingSourceType } from "../../shared/events.ts";

// A CloudEvent as the relay holds and sends it: its context attributes (the spec's and extensions, whose
// names config.ts holds to lower-case letters and digits) and its data.
export type CloudEvent = Readonly<{
  specversion: string;
  id: string;
  type: string;
  source: string;
  time?: string;
  subject?: string;
  datacontenttype?: string;
  data?: unknown;
  [attribute: string]: unknown;
}>;

export const cloudEvent = (attributes: CloudEvent): CloudEvent => Object.freeze({ ...attributes });

// The same event with attributes added or replaced (the SDK's cloneWith).
export const withAttributes = (event: CloudEvent, more: Readonly<Record<string, unknown>>): CloudEvent => Object.freeze({ ...event, ...more });

// Binary content mode (CloudEvents HTTP protocol binding, 3.1): each attribute but data and
// datacontenttype as a ce- header, datacontenttype as Content-Type, the data as the body, JSON unless it
// is already a string. An event without data (a tick) goes without a body and so without a content
// type: the functions' runtime answers an empty JSON body with 400.
export function binaryMessage(event: CloudEvent): { headers: Record<string, string>; body?: string } {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(event)) {
    if (name === "data" || name === "datacontenttype" || value === undefined || value === null) continue;
    headers[`ce-${name}`] = String(value);
  }
  if (event.data === undefined) return { headers };
  headers["content-type"] = event.datacontenttype ?? "application/json";
  return { headers, body: typeof event.data === "string" ? event.data : JSON.stringify(event.data) };
}

export type Verb = "add" | "update" | "delete";
export type Mode = "Resource" | "Reference";
export type Overrides = Readonly<Record<string, string>>;

const TYPES = {
  Resource: { add: ApiServerSourceType.ResourceAdd, update: ApiServerSourceType.ResourceUpdate, delete: ApiServerSourceType.ResourceDelete },
  Reference: { add: ApiServerSourceType.RefAdd, update: ApiServerSourceType.RefUpdate, delete: ApiServerSourceType.RefDelete },
} as const;

export const apiVersionOf = (r: Pick<ApiResource, "group" | "version">) => (r.group ? `${r.group}/${r.version}` : r.version);

// apimachinery's UnsafeGuessKindToResource, which the adapter uses for the subject: lower-case kind,
// "y" → "ies", "s" → "ses", else "+s" (so "Endpoints" stays as is).
export function guessPlural(kind: string): string {
  const singular = kind.toLowerCase();
  if (singular.endsWith("endpoints")) return singular;
  if (singular.endsWith("s")) return `${singular}es`;
  if (singular.endsWith("y")) return `${singular.slice(0, -1)}ies`;
  return `${singular}s`;
}

// List items of built-in kinds come without apiVersion and kind; the event needs both.
export function withTypeMeta(r: ApiResource, o: KubeObject): KubeObject {
  return { ...o, apiVersion: o.apiVersion ?? apiVersionOf(r), kind: o.kind ?? r.kind };
}

export function objectEvent(o: { verb: Verb; mode: Mode; cluster: string; server: string; resource: ApiResource; object: KubeObject; clock: Clock; overrides: Overrides }): CloudEvent {
  const object = withTypeMeta(o.resource, o.object);
  const apiVersion = object.apiVersion!;
  const kind = object.kind!;
  const name = object.metadata.name ?? "";
  const namespace = object.metadata.namespace ?? "";
  // corev1.ObjectReference: namespace is omitempty.
  const ref = { kind, ...(namespace ? { namespace } : {}), name, apiVersion };
  return cloudEvent({
    specversion: "1.0",
    id: randomUUID(),
    time: o.clock.now().toISOString(),
    type: TYPES[o.mode][o.verb],
    source: o.server,
    subject: `/apis/${apiVersion}/namespaces/${namespace}/${guessPlural(kind)}/${name}`,
    datacontenttype: "application/json",
    data: o.mode === "Resource" ? object : ref,
    kind,
    apiversion: apiVersion,
    name,
    namespace,
    cluster: o.cluster,
    ...o.overrides,
  });
}

// A PingSource tick without data, one per cluster, so a function can resync what lives there.
export function tickEvent(o: { cluster: string; source: string; clock: Clock; overrides: Overrides }): CloudEvent {
  return cloudEvent({
    specversion: "1.0",
    id: randomUUID(),
    time: o.clock.now().toISOString(),
    type: PingSourceType,
    source: o.source,
    cluster: o.cluster,
    ...o.overrides,
  });
}

// Trigger filter semantics: every listed attribute must equal the event's exactly. Gives the reason
// an event does not pass, or undefined when it does.
export function mismatch(filter: Readonly<Record<string, string>> | undefined, event: CloudEvent): string | undefined {
  for (const [attribute, want] of Object.entries(filter ?? {})) {
    const got = (event as unknown as Record<string, unknown>)[attribute];
    if (got !== want) return `${attribute} is ${got === undefined ? "unset" : JSON.stringify(got)}, not ${JSON.stringify(want)}`;
  }
  return undefined;
}

// Several Triggers of one subscriber: undefined when any filter matches, else why none did.
export function mismatchAll(filters: readonly Readonly<Record<string, string>>[], event: CloudEvent): string | undefined {
  const why: string[] = [];
  for (const f of filters) {
    const m = mismatch(f, event);
    if (m === undefined) return undefined;
    why.push(m);
  }
  return `no subscription matches (${why.join("; ")})`;
}
