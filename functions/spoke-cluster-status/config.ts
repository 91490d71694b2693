// The status agent's configuration: the spoke agent's settings and OCM's claim flags.
import { z } from "zod";
import { MaxCustomClusterClaimsDefault } from "../../shared/api/spoke-status.ts";
import { SpokeAgentSettingsSchema } from "../../shared/settings.ts";
import { asList, asNumber, fromEnv } from "../../shared/env-settings.ts";

export const ConfigSchema = SpokeAgentSettingsSchema.extend({
  // OCM's --max-custom-cluster-claims
  maxCustomClusterClaims: fromEnv("MAX_CUSTOM_CLUSTER_CLAIMS", z.int().min(0).default(MaxCustomClusterClaimsDefault), asNumber),
  // OCM's --reserved-cluster-claim-suffixes: claims named with one of these endings count as reserved
  reservedClaimSuffixes: fromEnv("RESERVED_CLUSTER_CLAIM_SUFFIXES", z.array(z.string().min(1)).default([]), asList),
});
export type Config = z.infer<typeof ConfigSchema>;
