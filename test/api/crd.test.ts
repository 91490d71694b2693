// The zod → structural CRD schema conversion, checked on values.
import { z } from "zod";
import { describe, expect, it } from "vitest";
import { toCrd, toRootSchema, toStructuralSchema, type JsonSchema } from "../../shared/api/crd.ts";
import { crds } from "../../shared/api/crds.ts";
import {
  base64,
  dateTime,
  embeddedResource,
  int32,
  int64,
  intOrString,
  mapList,
  ObjectMetaSchema,
} from "../../shared/api/meta.ts";

const field = (schema: z.ZodType): JsonSchema =>
  (toStructuralSchema(z.looseObject({ f: schema }))["properties"] as Record<string, JsonSchema>)["f"]!;

describe("toStructuralSchema", () => {
  it.each([
    {
      name: "a preserve-unknown-fields node keeps the extension and its object type, nothing else",
      schema: z.looseObject({}).meta({ "x-kubernetes-preserve-unknown-fields": true }),
      want: { type: "object", "x-kubernetes-preserve-unknown-fields": true },
    },
    {
      name: "an embedded resource is an object with both extensions",
      schema: embeddedResource(),
      want: { type: "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true },
    },
    {
      name: "int-or-string keeps anyOf integer|string without zod's safe-integer bounds",
      schema: intOrString(),
      want: { anyOf: [{ type: "integer" }, { type: "string" }], "x-kubernetes-int-or-string": true },
    },
    {
      name: "int32 becomes format int32 without bounds",
      schema: int32(),
      want: { type: "integer", format: "int32" },
    },
    {
      name: "int64 keeps explicit bounds",
      schema: int64().min(0),
      want: { type: "integer", minimum: 0, format: "int64" },
    },
    { name: "date-time and byte formats pass through", schema: dateTime(), want: { type: "string", format: "date-time" } },
    { name: "byte format", schema: base64(), want: { type: "string", format: "byte" } },
    {
      name: "nullable becomes nullable: true",
      schema: dateTime().nullable(),
      want: { type: "string", format: "date-time", nullable: true },
    },
    {
      name: "a map keeps its value schema and drops propertyNames",
      schema: z.record(z.string(), z.string()),
      want: { type: "object", additionalProperties: { type: "string" } },
    },
    {
      name: "a loose object drops additionalProperties and keeps required",
      schema: z.looseObject({ a: z.string(), b: z.boolean().optional() }),
      want: { type: "object", properties: { a: { type: "string" }, b: { type: "boolean" } }, required: ["a"] },
    },
    {
      name: "a strict object drops additionalProperties: false",
      schema: z.strictObject({ a: z.string() }),
      want: { type: "object", properties: { a: { type: "string" } }, required: ["a"] },
    },
    {
      name: "a default in meta is a CRD default and leaves the field optional",
      schema: z.looseObject({ n: int32().meta({ default: 60 }).optional() }),
      want: { type: "object", properties: { n: { type: "integer", format: "int32", default: 60 } } },
    },
    {
      name: "list-type map carries its keys",
      schema: mapList(z.looseObject({ name: z.string() }), ["name"]),
      want: {
        type: "array",
        items: { type: "object", properties: { name: { type: "string" } }, required: ["name"] },
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
      },
    },
  ])("$name", ({ schema, want }) => {
    expect(field(schema)).toEqual(want);
  });

  it("drops $schema at the root", () => {
    expect(toStructuralSchema(z.looseObject({}))).toEqual({ type: "object" });
  });

  it("refuses unions a structural schema cannot express", () => {
    expect(() => field(z.union([z.string(), z.boolean()]))).toThrow(/cannot express type/);
    expect(() => field(z.union([z.string(), z.looseObject({})]))).toThrow(/int-or-string/);
  });

  it("refuses untyped nodes", () => {
    expect(() => field(z.unknown())).toThrow(/type/);
  });
});

describe("toRootSchema", () => {
  it("leaves metadata to the API server: type object and not required", () => {
    const root = toRootSchema(z.looseObject({ metadata: ObjectMetaSchema, spec: z.looseObject({}) }));
    expect(root).toEqual({
      type: "object",
      properties: { metadata: { type: "object" }, spec: { type: "object" } },
      required: ["spec"],
    });
  });
});

describe("toCrd", () => {
  it("names the CRD <plural>.<group> and defaults listKind", () => {
    const crd = toCrd({
      group: "example.io",
      kind: "Thing",
      plural: "things",
      singular: "thing",
      scope: "Namespaced",
      versions: [{ name: "v1", served: true, storage: true, schema: z.looseObject({}) }],
    });
    expect(crd.metadata.name).toBe("things.example.io");
    expect(crd.spec.names.listKind).toBe("ThingList");
  });
});

// Walks every generated schema node and reports what Kubernetes would reject as non-structural.
function nonStructural(node: JsonSchema, path: string): string[] {
  const problems: string[] = [];
  const typeless = node["x-kubernetes-int-or-string"] === true || node["x-kubernetes-preserve-unknown-fields"] === true;
  if (node["type"] === undefined && !typeless) problems.push(`${path}: no type`);
  if (node["anyOf"] && node["x-kubernetes-int-or-string"] !== true) problems.push(`${path}: anyOf`);
  if (node["additionalProperties"] !== undefined && node["properties"] !== undefined)
    problems.push(`${path}: properties and additionalProperties`);
  for (const key of ["$schema", "$ref", "$defs", "propertyNames", "oneOf", "allOf"])
    if (key in node) problems.push(`${path}: ${key}`);
  for (const [name, child] of Object.entries((node["properties"] ?? {}) as Record<string, JsonSchema>))
    problems.push(...nonStructural(child, `${path}.${name}`));
  if (node["items"]) problems.push(...nonStructural(node["items"] as JsonSchema, `${path}[]`));
  if (typeof node["additionalProperties"] === "object")
    problems.push(...nonStructural(node["additionalProperties"] as JsonSchema, `${path}{}`));
  return problems;
}

describe("generated CRDs", () => {
  it("are structural in every version", () => {
    const problems = crds.flatMap((crd) =>
      crd.spec.versions.flatMap((v) =>
        nonStructural(
          (v["schema"] as { openAPIV3Schema: JsonSchema }).openAPIV3Schema,
          `${crd.spec.names.kind}/${v["name"] as string}`,
        ),
      ),
    );
    expect(problems).toEqual([]);
  });

  it("have exactly one storage version each", () => {
    const storage = crds.map((crd) => [crd.spec.names.kind, crd.spec.versions.filter((v) => v["storage"]).length]);
    expect(storage.filter(([, n]) => n !== 1)).toEqual([]);
  });
});
