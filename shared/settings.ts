// Function settings read from the environment (func.yaml run.envs), and the ones every hub function shares.
import { z } from "zod";

// "a, b,,c" → ["a", "b", "c"]; unset → [].
export const commaList = z
  .string()
  .optional()
  .transform((s) => (s ?? "").split(",").map((u) => u.trim()).filter(Boolean));

export const HubSettingsSchema = z.object({
  // the cluster the hub functions act on; events from any other cluster are not theirs
  hubCluster: z.string().min(1),
  // OCM's --cluster-auto-approval-users; non-empty turns on the ManagedClusterAutoApproval gate
  autoApprovalUsers: z.array(z.string().min(1)),
});
export type HubSettings = z.infer<typeof HubSettingsSchema>;

export function hubSettingsFromEnv(env: NodeJS.ProcessEnv): HubSettings {
  return HubSettingsSchema.parse({
    hubCluster: env.OCM_CLUSTER_NAME || "hub",
    autoApprovalUsers: commaList.parse(env.OCM_CLUSTER_AUTO_APPROVAL_USERS),
  });
}
