// The status agent's configuration: the spoke agent's settings and OCM's claim flags.
import { z } from "zod";
import { MaxCustomClusterClaimsDefault } from "../../shared/api/spoke-status.ts";
import { commaList, SpokeAgentSettingsSchema, spokeAgentSettingsFromEnv } from "../../shared/settings.ts";

export const ConfigSchema = SpokeAgentSettingsSchema.extend({
  // OCM's --max-custom-cluster-claims
  maxCustomClusterClaims: z.int().min(0).default(MaxCustomClusterClaimsDefault),
  // OCM's --reserved-cluster-claim-suffixes: claims named with one of these endings count as reserved
  reservedClaimSuffixes: z.array(z.string().min(1)).default([]),
});
export type Config = z.infer<typeof ConfigSchema>;

export function configFromEnv(env: NodeJS.ProcessEnv): Config {
  return ConfigSchema.parse({
    ...spokeAgentSettingsFromEnv(env),
    maxCustomClusterClaims: env.MAX_CUSTOM_CLUSTER_CLAIMS ? Number(env.MAX_CUSTOM_CLUSTER_CLAIMS) : undefined,
    reservedClaimSuffixes: commaList.parse(env.RESERVED_CLUSTER_CLAIM_SUFFIXES),
  });
}
