// Kubernetes meta/v1 shapes (ObjectMeta, Condition, LabelSelector), the per-kind API coordinates, and the
// zod builders that carry Kubernetes schema extensions through .meta() into generated CRDs (see crd.ts).
import { z } from "zod";

export { groupOf, type ApiResource } from "./resource.ts";

// Builders for Kubernetes field shapes. Each carries its OpenAPI extension or format in .meta(), so the
// CRD generator reads it from the schema instead of a second description of the type.
export const int32 = () => z.int32().meta({ format: "int32" });
// int64 fields are parsed as JS numbers, so values beyond 2^53 are rejected rather than rounded.
export const int64 = () => z.int().meta({ format: "int64" });
export const dateTime = () => z.string().meta({ format: "date-time" });
export const base64 = () => z.string().meta({ format: "byte" });
export const intOrString = () =>
  z.union([z.int(), z.string()]).meta({ "x-kubernetes-int-or-string": true });
// resource.Quantity: "100m", "1Gi" or a bare number.
export const quantity = () =>
  intOrString().meta({
    pattern:
      "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$",
  });
// runtime.RawExtension holding a whole Kubernetes object.
export const embeddedResource = () =>
  z.looseObject({}).meta({
    "x-kubernetes-embedded-resource": true,
    "x-kubernetes-preserve-unknown-fields": true,
  });
export const atomicList = <T extends z.ZodType>(item: T) =>
  z.array(item).meta({ "x-kubernetes-list-type": "atomic" });
export const mapList = <T extends z.ZodType>(item: T, keys: readonly string[]) =>
  z.array(item).meta({ "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [...keys] });
export const stringMap = () => z.record(z.string(), z.string());

export const OwnerReferenceSchema = z.looseObject({
  apiVersion: z.string(),
  kind: z.string(),
  name: z.string(),
  uid: z.string(),
  controller: z.boolean().optional(),
  blockOwnerDeletion: z.boolean().optional(),
});
export type OwnerReference = z.infer<typeof OwnerReferenceSchema>;

// Objects read from the API server always have a name; everything else is optional.
export const ObjectMetaSchema = z.looseObject({
  name: z.string(),
  generateName: z.string().optional(),
  namespace: z.string().optional(),
  uid: z.string().optional(),
  resourceVersion: z.string().optional(),
  generation: z.int().optional(),
  creationTimestamp: dateTime().optional(),
  deletionTimestamp: dateTime().optional(),
  deletionGracePeriodSeconds: z.int().optional(),
  labels: stringMap().optional(),
  annotations: stringMap().optional(),
  finalizers: z.array(z.string()).optional(),
  ownerReferences: z.array(OwnerReferenceSchema).optional(),
  managedFields: z.array(z.looseObject({})).optional(),
});
export type ObjectMeta = z.infer<typeof ObjectMetaSchema>;

export const ConditionStatus = { True: "True", False: "False", Unknown: "Unknown" } as const;
export type ConditionStatus = (typeof ConditionStatus)[keyof typeof ConditionStatus];

const qualifiedName =
  /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$/;

// metav1.Condition, with the API server's own validation.
export const ConditionSchema = z.looseObject({
  type: z.string().max(316).regex(qualifiedName),
  status: z.enum(["True", "False", "Unknown"]),
  observedGeneration: int64().min(0).optional(),
  lastTransitionTime: dateTime(),
  reason: z
    .string()
    .min(1)
    .max(1024)
    .regex(/^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$/),
  message: z.string().max(32768),
});
export type Condition = z.infer<typeof ConditionSchema>;

export const conditionList = () => mapList(ConditionSchema, ["type"]);

export const LabelSelectorRequirementSchema = z.looseObject({
  key: z.string(),
  operator: z.string(),
  values: atomicList(z.string()).optional(),
});
export type LabelSelectorRequirement = z.infer<typeof LabelSelectorRequirementSchema>;

export const LabelSelectorSchema = z
  .looseObject({
    matchExpressions: atomicList(LabelSelectorRequirementSchema).optional(),
    matchLabels: stringMap().optional(),
  })
  .meta({ "x-kubernetes-map-type": "atomic" });
export type LabelSelector = z.infer<typeof LabelSelectorSchema>;

// Fields every Kubernetes object has at its root.
export const typeMeta = {
  apiVersion: z.string().optional(),
  kind: z.string().optional(),
  metadata: ObjectMetaSchema,
};
