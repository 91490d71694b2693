// The settings every hub function and every spoke function shares, each with the variable a deployment
// sets it with (shared/env-settings.ts).
import { z } from "zod";
import { asList, fromEnv } from "./env-settings.ts";
import { AutoApprovalEntry } from "./auto-approval.ts";
import { AgentNamespaceDefault, BootstrapSecretName, HubKubeconfigSecretName } from "./api/registration.ts";

export const HubSettingsSchema = z.object({
  // the cluster the hub functions act on; events from any other cluster are not theirs
  hubCluster: fromEnv("OCM_CLUSTER_NAME", z.string().min(1).default("hub")),
  // OCM's --cluster-auto-approval-users, each entry optionally narrowed to the cluster names that user
  // may register (shared/auto-approval.ts); non-empty turns on the ManagedClusterAutoApproval gate
  autoApprovalUsers: fromEnv("OCM_CLUSTER_AUTO_APPROVAL_USERS", z.array(AutoApprovalEntry).default([]), asList),
});
export type HubSettings = z.infer<typeof HubSettingsSchema>;

// Where every spoke function finds its agent: the cluster names in events, and the agent's secrets.
export const SpokeAgentSettingsSchema = z.object({
  managementCluster: fromEnv("OCM_CLUSTER_NAME", z.string().min(1).default("spoke")), // the spoke's name in events: where the agent's secrets live (the spoke itself unless Hosted)
  hubCluster: fromEnv("OCM_HUB_CLUSTER_NAME", z.string().min(1).default("hub")), // the hub's name in events
  // Hosted mode: the name in events of the managed cluster, what the agent reports on and applies work to,
  // when it is not the management cluster (docs/agent-modes.md)
  managedCluster: fromEnv("OCM_MANAGED_CLUSTER_NAME", z.string().min(1).optional()),
  clusterName: fromEnv("SPOKE_CLUSTER_NAME", z.string().min(1)), // the ManagedCluster's name (--spoke-cluster-name)
  agentNamespace: fromEnv("AGENT_NAMESPACE", z.string().default(AgentNamespaceDefault)),
  bootstrapSecret: fromEnv("BOOTSTRAP_SECRET", z.string().default(BootstrapSecretName)),
  hubSecret: fromEnv("HUB_KUBECONFIG_SECRET", z.string().default(HubKubeconfigSecretName)),
});

// Hub functions that need only to know which cluster is the hub.
export const HubClusterSchema = HubSettingsSchema.pick({ hubCluster: true });
export type HubCluster = z.infer<typeof HubClusterSchema>;

// The cluster a spoke agent reports on and applies work to: the management cluster itself in Default mode.
export const managedClusterOf = (c: { managementCluster: string; managedCluster?: string }): string => c.managedCluster ?? c.managementCluster;
