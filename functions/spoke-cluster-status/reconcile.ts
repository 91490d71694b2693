// The spoke agent's ManagedCluster status (OCM §5.3): ordered steps on a copy of the status, patched
// once at the end and only when something changed. Issue order matters: a cluster the hub has not
// accepted gets nothing written.
import { z } from "zod";
import { ManagedClusterResource, type ManagedCluster } from "../../shared/api/cluster.ts";
import { AgentNamespaceDefault, BootstrapSecretName, HubKubeconfigSecretName } from "../../shared/api/registration.ts";
import { patchStatusIfChanged } from "../../shared/apply.ts";
import { done, type FunctionSpec, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import { bootstrappedHubClient } from "../../shared/hub-credentials.ts";
import type { KubeClient, KubeObject } from "../../shared/kube/client.ts";
import { joined } from "./steps/joined.ts";

export const ConfigSchema = z.object({
  managementCluster: z.string().min(1),
  clusterName: z.string().min(1),
  agentNamespace: z.string().default(AgentNamespaceDefault),
  bootstrapSecret: z.string().default(BootstrapSecretName),
  hubSecret: z.string().default(HubKubeconfigSecretName),
});
export type Config = z.infer<typeof ConfigSchema>;

export function configFromEnv(env: NodeJS.ProcessEnv): Config {
  return ConfigSchema.parse({
    managementCluster: env.OCM_CLUSTER_NAME ?? "spoke",
    clusterName: env.SPOKE_CLUSTER_NAME,
    agentNamespace: env.AGENT_NAMESPACE || undefined,
    bootstrapSecret: env.BOOTSTRAP_SECRET || undefined,
    hubSecret: env.HUB_KUBECONFIG_SECRET || undefined,
  });
}

type Status = NonNullable<ManagedCluster["status"]>;
export type StepContext = { now: Date; hub: KubeClient; spoke: KubeClient; io: Io<Config> };
export type Step = (draft: Status, ctx: StepContext) => "continue" | "stop" | Promise<"continue" | "stop">;

const steps: Step[] = [joined];

export const spec: FunctionSpec<Config> = {
  name: "spoke-cluster-status",
  keys(event, io) {
    const c = io.config;
    const key = { cluster: c.managementCluster, name: c.clusterName };
    if (event.type === "tick") return [key];
    const { kind, name, namespace } = event.ref;
    if (kind === "ManagedCluster" && name === c.clusterName) return [key];
    if (kind === "Secret" && namespace === c.agentNamespace && name === c.hubSecret) return [key];
    return { skip: `not this cluster's object: ${kind} ${namespace ?? ""}/${name}` };
  },
  reconcile,
};

export async function reconcile(io: Io<Config>, _key: Key): Promise<Outcome> {
  const c = io.config;
  const now = io.clock.now();
  const spoke = io.cluster(c.managementCluster);
  const got = await bootstrappedHubClient(spoke, c, now);
  if (!("hub" in got)) {
    io.log.info({ reason: got.reason }, "skipped: not bootstrapped");
    return done;
  }
  const { hub } = got;
  try {
    const cluster = await hub.get<ManagedCluster & KubeObject>(ManagedClusterResource, c.clusterName);
    if (!cluster) return done;
    const draft: Status = structuredClone(cluster.status ?? {});
    for (const step of steps) if ((await step(draft, { now, hub, spoke, io })) === "stop") break;
    await patchStatusIfChanged(hub, ManagedClusterResource, cluster, draft);
    return done;
  } finally {
    hub.close();
  }
}
