// Group authentication.open-cluster-management.io: OCM's ManagedServiceAccount (its managed-serviceaccount
// add-on), a ServiceAccount on a managed cluster whose token is reported back to the hub, with the strings
// that add-on defines.
import { z } from "zod";
import { type ApiResource, ConditionSchema, dateTime, int32, typeMeta } from "./meta.ts";

export const AuthenticationGroup = "authentication.open-cluster-management.io";

export const ManagedServiceAccountResource = {
  group: AuthenticationGroup,
  version: "v1beta1",
  kind: "ManagedServiceAccount",
  plural: "managedserviceaccounts",
  namespaced: true,
} as const satisfies ApiResource;
// served, deprecated, with the same schema (OCM's older clients)
export const ManagedServiceAccountV1alpha1Resource = { ...ManagedServiceAccountResource, version: "v1alpha1" } as const satisfies ApiResource;

// The add-on and its agent, as OCM names them: the agent's hub identity is
// system:open-cluster-management:cluster:<cluster>:addon:managed-serviceaccount:agent:addon-agent.
export const MsaAddOnName = "managed-serviceaccount";
export const MsaAgentName = "addon-agent";

export const MsaLabel = {
  // on the spoke's ServiceAccount and the hub's token Secret: made by the add-on
  IsManagedServiceAccount: "authentication.open-cluster-management.io/is-managed-serviceaccount",
  // on a ManagedServiceAccount: copy its token to the namespaces of its cluster's ClusterProfiles
  SyncToClusterProfile: "authentication.open-cluster-management.io/sync-to-clusterprofile",
  // on such a copy: "<cluster>-<name>" of the ManagedServiceAccount it came from
  SyncedFrom: "authentication.open-cluster-management.io/synced-from",
} as const;

export const MsaConditionType = { SecretCreated: "SecretCreated", TokenReported: "TokenReported" } as const;
export const MsaReason = { SecretCreated: "SecretCreated", TokenReported: "TokenReported", TokenReportFailed: "TokenReportFailed" } as const;

// The token Secret's data keys on the hub.
export const MsaSecretKey = { Token: "token", CaCert: "ca.crt" } as const;

export const DefaultTokenValidity = "8640h0m0s";

export const ManagedServiceAccountSchema = z.looseObject({
  ...typeMeta,
  spec: z.looseObject({
    rotation: z.looseObject({
      // deprecated by OCM: tokens are always rotated
      enabled: z.boolean().meta({ default: true }).optional(),
      validity: z.string().meta({ default: DefaultTokenValidity }).optional(),
    }),
    ttlSecondsAfterCreation: int32().min(0).meta({ exclusiveMinimum: true }).optional(),
  }).optional(),
  status: z
    .looseObject({
      // a plain list, as OCM declares it
      conditions: z.array(ConditionSchema).optional(),
      expirationTimestamp: dateTime().optional(),
      tokenSecretRef: z.looseObject({ name: z.string(), lastRefreshTimestamp: dateTime() }).optional(),
    })
    .optional(),
});

export type ManagedServiceAccount = z.infer<typeof ManagedServiceAccountSchema>;

// A Go time.Duration string ("8640h0m0s", "1h30m", "90s") in milliseconds; undefined when it is not one.
export function durationMs(text: string): number | undefined {
  if (!/^(\d+(\.\d+)?(h|m|s|ms))+$/.test(text)) return undefined;
  let ms = 0;
  for (const [, n, , unit] of text.matchAll(/(\d+(\.\d+)?)(h|ms|m|s)/g)) ms += Number(n) * { h: 3_600_000, m: 60_000, s: 1000, ms: 1 }[unit as "h" | "m" | "s" | "ms"];
  return ms;
}
