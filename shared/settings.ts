// Function settings read from the environment (func.yaml run.envs): the ones every hub function and
// every spoke function shares.
import { z } from "zod";
import { AutoApprovalEntry } from "./auto-approval.ts";
import { AgentNamespaceDefault, BootstrapSecretName, HubKubeconfigSecretName } from "./api/registration.ts";

// "a, b,,c" → ["a", "b", "c"]; unset → [].
export const commaList = z
  .string()
  .optional()
  .transform((s) => (s ?? "").split(",").map((u) => u.trim()).filter(Boolean));

export const HubSettingsSchema = z.object({
  // the cluster the hub functions act on; events from any other cluster are not theirs
  hubCluster: z.string().min(1),
  // OCM's --cluster-auto-approval-users, each entry optionally narrowed to the cluster names that user
  // may register (shared/auto-approval.ts); non-empty turns on the ManagedClusterAutoApproval gate
  autoApprovalUsers: z.array(AutoApprovalEntry),
});
export type HubSettings = z.infer<typeof HubSettingsSchema>;

export function hubSettingsFromEnv(env: NodeJS.ProcessEnv): HubSettings {
  return HubSettingsSchema.parse({
    hubCluster: env.OCM_CLUSTER_NAME || "hub",
    autoApprovalUsers: commaList.parse(env.OCM_CLUSTER_AUTO_APPROVAL_USERS),
  });
}

// Where every spoke function finds its agent: the cluster names in events, and the agent's secrets.
export const SpokeAgentSettingsSchema = z.object({
  managementCluster: z.string().min(1), // the spoke's name in events: where the agent's secrets live (the spoke itself unless Hosted)
  hubCluster: z.string().min(1).default("hub"), // the hub's name in events
  clusterName: z.string().min(1), // the ManagedCluster's name (--spoke-cluster-name)
  agentNamespace: z.string().default(AgentNamespaceDefault),
  bootstrapSecret: z.string().default(BootstrapSecretName),
  hubSecret: z.string().default(HubKubeconfigSecretName),
});

// An empty variable counts as unset, so func.yaml's "" placeholders fall back to the defaults.
export function spokeAgentSettingsFromEnv(env: NodeJS.ProcessEnv): z.input<typeof SpokeAgentSettingsSchema> {
  return {
    managementCluster: env.OCM_CLUSTER_NAME || "spoke",
    hubCluster: env.OCM_HUB_CLUSTER_NAME || undefined,
    clusterName: env.SPOKE_CLUSTER_NAME ?? "",
    agentNamespace: env.AGENT_NAMESPACE || undefined,
    bootstrapSecret: env.BOOTSTRAP_SECRET || undefined,
    hubSecret: env.HUB_KUBECONFIG_SECRET || undefined,
  };
}

// Hub functions that need only to know which cluster is the hub.
export const HubClusterSchema = HubSettingsSchema.pick({ hubCluster: true });
export type HubCluster = z.infer<typeof HubClusterSchema>;
export const hubClusterFromEnv = (env: NodeJS.ProcessEnv): HubCluster => HubClusterSchema.parse({ hubCluster: env.OCM_CLUSTER_NAME || "hub" });

// The settings of a hub function, as a definition takes them: `...hubSettings` or `...hubClusterSettings`.
export const hubSettings = { config: HubSettingsSchema, env: hubSettingsFromEnv };
export const hubClusterSettings = { config: HubClusterSchema, env: hubClusterFromEnv };
