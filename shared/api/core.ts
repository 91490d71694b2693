// Kubernetes core/v1 structs that OCM embeds in its own kinds (tolerations, resource requirements).
import { z } from "zod";
import { int64, mapList, quantity } from "./meta.ts";

export const TolerationSchema = z.looseObject({
  key: z.string().optional(),
  operator: z.string().optional(),
  value: z.string().optional(),
  effect: z.string().optional(),
  tolerationSeconds: int64().optional(),
});
export type Toleration = z.infer<typeof TolerationSchema>;

export const ResourceClaimSchema = z.looseObject({
  name: z.string(),
  request: z.string().optional(),
});

export const ResourceRequirementsSchema = z.looseObject({
  claims: mapList(ResourceClaimSchema, ["name"]).optional(),
  limits: z.record(z.string(), quantity()).optional(),
  requests: z.record(z.string(), quantity()).optional(),
});
export type ResourceRequirements = z.infer<typeof ResourceRequirementsSchema>;
