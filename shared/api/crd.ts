// Turns a kind description plus its zod schemas into an apiextensions.k8s.io/v1 CustomResourceDefinition,
// deriving each version's openAPIV3Schema from the zod schema so the two can never disagree.
import { z } from "zod";

// The subset of OpenAPI v3 that structural CRD schemas use.
export type JsonSchema = { [key: string]: unknown };

export type PrinterColumn = {
  name: string;
  type: "string" | "integer" | "number" | "boolean" | "date";
  jsonPath: string;
  description?: string;
  format?: string;
  priority?: number;
};

export type KindVersion = {
  name: string;
  served: boolean;
  storage: boolean;
  schema: z.ZodType;
  printerColumns?: readonly PrinterColumn[];
  // Omitted means no subresources; OCM's kinds mostly use { status: {} }.
  subresources?: { status?: Record<string, never> };
  // a version still served, with the warning the API server sends its clients
  deprecationWarning?: string;
};

export type KindDescription = {
  group: string;
  kind: string;
  plural: string;
  singular: string;
  listKind?: string;
  shortNames?: readonly string[];
  categories?: readonly string[];
  scope: "Namespaced" | "Cluster";
  versions: readonly KindVersion[];
};

export type CustomResourceDefinition = {
  apiVersion: "apiextensions.k8s.io/v1";
  kind: "CustomResourceDefinition";
  metadata: { name: string };
  spec: {
    group: string;
    names: {
      kind: string;
      listKind: string;
      plural: string;
      singular: string;
      shortNames?: string[];
      categories?: string[];
    };
    scope: "Namespaced" | "Cluster";
    versions: JsonSchema[];
  };
};

export function toCrd(d: KindDescription): CustomResourceDefinition {
  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: { name: `${d.plural}.${d.group}` },
    spec: {
      group: d.group,
      names: {
        kind: d.kind,
        listKind: d.listKind ?? `${d.kind}List`,
        plural: d.plural,
        singular: d.singular,
        ...(d.shortNames ? { shortNames: [...d.shortNames] } : {}),
        ...(d.categories ? { categories: [...d.categories] } : {}),
      },
      scope: d.scope,
      versions: d.versions.map((v) => ({
        ...(v.deprecationWarning ? { deprecated: true, deprecationWarning: v.deprecationWarning } : {}),
        name: v.name,
        served: v.served,
        storage: v.storage,
        ...(v.printerColumns ? { additionalPrinterColumns: v.printerColumns.map((c) => ({ ...c })) } : {}),
        schema: { openAPIV3Schema: toRootSchema(v.schema) },
        ...(v.subresources ? { subresources: { ...v.subresources } } : {}),
      })),
    },
  };
}

// The API server owns metadata validation: a CRD may only say `metadata: {type: object}`, and the root
// must not require it (objects are always created with one anyway).
export function toRootSchema(schema: z.ZodType): JsonSchema {
  const root = toStructuralSchema(schema);
  const properties = root["properties"] as Record<string, JsonSchema> | undefined;
  if (properties?.["metadata"]) properties["metadata"] = { type: "object" };
  const required = (root["required"] as string[] | undefined)?.filter((k) => k !== "metadata");
  if (required && required.length > 0) root["required"] = required;
  else delete root["required"];
  return root;
}

export function toStructuralSchema(schema: z.ZodType): JsonSchema {
  // io "input": a field with a zod default is optional to the writer, which is what the API server checks.
  const json = z.toJSONSchema(schema, { io: "input", unrepresentable: "throw", cycles: "throw" });
  return structural(json as JsonSchema);
}

// Limits zod adds to z.int()/z.int32() by itself; Kubernetes expresses them as `format` instead.
const implicitBounds = new Set([
  Number.MIN_SAFE_INTEGER,
  Number.MAX_SAFE_INTEGER,
  -2147483648,
  2147483647,
]);

function structural(node: JsonSchema): JsonSchema {
  const out: JsonSchema = {};
  for (const [key, value] of Object.entries(node)) {
    switch (key) {
      case "$schema":
      case "propertyNames": // record keys are always strings in Kubernetes
        break;
      case "type":
        // zod writes `.nullable()` as type [T, "null"]; Kubernetes wants T plus nullable: true.
        if (Array.isArray(value)) {
          const types = value.filter((t) => t !== "null");
          if (types.length !== 1) throw new Error(`cannot express type ${JSON.stringify(value)} in a CRD`);
          out["type"] = types[0];
          if (types.length < value.length) out["nullable"] = true;
        } else out["type"] = value;
        break;
      case "minimum":
      case "maximum":
        if (!implicitBounds.has(value as number)) out[key] = value;
        break;
      case "properties":
        if (Object.keys(value as object).length === 0) break; // z.looseObject({}): nothing to declare
        out[key] = Object.fromEntries(
          Object.entries(value as Record<string, JsonSchema>).map(([k, v]) => [k, structural(v)]),
        );
        break;
      case "items":
        out[key] = structural(value as JsonSchema);
        break;
      case "additionalProperties":
        // A loose object (`{}`) or strict object (`false`) says nothing a structural schema may say;
        // only a map's value schema is kept.
        if (typeof value === "object" && value !== null && !isOpenObject(node, value as JsonSchema))
          out[key] = structural(value as JsonSchema);
        break;
      case "anyOf":
        out[key] = (value as JsonSchema[]).map(structural);
        break;
      default:
        out[key] = value;
    }
  }
  if (Array.isArray(out["anyOf"])) {
    const anyOf = out["anyOf"] as JsonSchema[];
    // zod writes `.nullable()` on objects and unions as anyOf [T, {type: null}].
    const nonNull = anyOf.filter((s) => s["type"] !== "null");
    if (nonNull.length < anyOf.length) {
      delete out["anyOf"];
      if (nonNull.length === 1) Object.assign(out, nonNull[0], { nullable: true });
      else out["anyOf"] = nonNull;
      out["nullable"] = true;
    }
  }
  if (out["anyOf"] && out["x-kubernetes-int-or-string"] !== true)
    throw new Error("anyOf is only expressible in a CRD for x-kubernetes-int-or-string");
  if (out["type"] === undefined && !out["x-kubernetes-int-or-string"] && !out["x-kubernetes-preserve-unknown-fields"])
    throw new Error(`structural schemas need a type: ${JSON.stringify(node)}`);
  return out;
}

function isOpenObject(node: JsonSchema, additional: JsonSchema): boolean {
  return "properties" in node && Object.keys(additional).length === 0;
}
