// Group certificates.k8s.io: the CertificateSigningRequest shape the hub functions read, and its
// condition types (Kubernetes' strings; the resource coordinates live in kube.ts).
import { z } from "zod";
import { typeMeta } from "./meta.ts";

export const CsrConditionType = { Approved: "Approved", Denied: "Denied", Failed: "Failed" } as const;
export const KeyUsage = {
  DigitalSignature: "digital signature",
  KeyEncipherment: "key encipherment",
  ClientAuth: "client auth",
  ServerAuth: "server auth",
} as const;

export const CsrConditionSchema = z.looseObject({
  type: z.string(),
  status: z.string(),
  reason: z.string().optional(),
  message: z.string().optional(),
  lastUpdateTime: z.string().optional(),
  lastTransitionTime: z.string().optional(),
});
export type CsrCondition = z.infer<typeof CsrConditionSchema>;

export const CertificateSigningRequestSchema = z.looseObject({
  ...typeMeta,
  spec: z.looseObject({
    request: z.string(), // base64 of PEM
    signerName: z.string(),
    usages: z.array(z.string()).optional(),
    expirationSeconds: z.int().optional(),
    // set by the API server from the requester's credentials
    username: z.string().optional(),
    uid: z.string().optional(),
    groups: z.array(z.string()).optional(),
    extra: z.record(z.string(), z.array(z.string())).optional(),
  }),
  status: z
    .looseObject({
      conditions: z.array(CsrConditionSchema).optional(),
      certificate: z.string().optional(),
    })
    .optional(),
});
export type CertificateSigningRequest = z.infer<typeof CertificateSigningRequestSchema>;
