// The heartbeat sidecar as a process: `node components/heartbeat/main.ts`, configured from the environment. It reads
// the agent's secrets on the management cluster (KUBECONFIG, else the pod's service account) and renews
// the cluster lease on the hub. On SIGTERM/SIGINT it stops and logs its counters.
import { z } from "zod";
import { AgentNamespaceDefault, BootstrapSecretName, HubKubeconfigSecretName } from "../../shared/api/registration.ts";
import { jsonLog } from "../../shared/harness.ts";
import { stopOnSignals } from "../../shared/stop-signals.ts";
import { KubeClient } from "../../shared/kube/client.ts";
import { startHeartbeat, type Heartbeat } from "./sidecar.ts";

const ConfigSchema = z.object({
  clusterName: z.string().min(1),
  agentNamespace: z.string().min(1).default(AgentNamespaceDefault),
  bootstrapSecret: z.string().min(1).default(BootstrapSecretName),
  hubSecret: z.string().min(1).default(HubKubeconfigSecretName),
  healthPort: z.coerce.number().int().min(0).max(65_535).default(8000),
  healthHost: z.string().min(1).default("127.0.0.1"),
  kubeconfig: z.string().min(1).optional(), // a file; the in-cluster service account when absent
});
type Config = z.infer<typeof ConfigSchema>;

// The same variable names as spoke-registration's, so one set of env serves both.
function configFromEnv(env: NodeJS.ProcessEnv): Config {
  const parsed = ConfigSchema.safeParse({
    clusterName: env.SPOKE_CLUSTER_NAME,
    agentNamespace: env.AGENT_NAMESPACE || undefined,
    bootstrapSecret: env.BOOTSTRAP_SECRET || undefined,
    hubSecret: env.HUB_KUBECONFIG_SECRET || undefined,
    healthPort: env.HEALTH_PORT || undefined,
    healthHost: env.HEALTH_HOST || undefined,
    kubeconfig: env.KUBECONFIG || undefined,
  });
  if (!parsed.success) throw new Error(`invalid heartbeat configuration: ${z.prettifyError(parsed.error)}`);
  return parsed.data;
}

function managementClient(c: Config): KubeClient {
  if (c.kubeconfig) return KubeClient.fromKubeconfigFile(c.kubeconfig);
  if (!process.env.KUBERNETES_SERVICE_HOST) throw new Error("no management-cluster credentials: set KUBECONFIG, or run in a pod");
  return KubeClient.inCluster();
}

// Module loading, JIT warm-up and the first TLS handshakes are over by then.
const WARM_AFTER_RENEWALS = 3;

const log = jsonLog("heartbeat");
let spoke: KubeClient;
let heartbeat: Heartbeat;
let warm: { renewals: number; cpu: NodeJS.CpuUsage } | undefined;
try {
  const c = configFromEnv(process.env);
  spoke = managementClient(c);
  heartbeat = await startHeartbeat({
    spoke,
    secrets: { clusterName: c.clusterName, agentNamespace: c.agentNamespace, bootstrapSecret: c.bootstrapSecret, hubSecret: c.hubSecret },
    log,
    health: { port: c.healthPort, host: c.healthHost },
    onBeat(s) {
      if (!warm && s.renewals >= WARM_AFTER_RENEWALS) warm = { renewals: s.renewals, cpu: process.cpuUsage() };
    },
  });
  log.info({ cluster: c.clusterName, health: `${heartbeat.healthUrl}/healthz` }, "started");
} catch (err) {
  log.error({ error: err instanceof Error ? err.message : String(err) }, "not started");
  process.exit(2);
}

stopOnSignals(async (signal) => {
  await heartbeat.stop();
  spoke.close();
  const s = heartbeat.status();
  const cpu = process.cpuUsage();
  const steady = warm && s.renewals > warm.renewals ? { renewals: s.renewals - warm.renewals, cpuUs: cpu.user + cpu.system - warm.cpu.user - warm.cpu.system } : undefined;
  log.info({ signal, beats: s.beats, renewals: s.renewals, cpuUs: cpu.user + cpu.system, rssBytes: process.memoryUsage.rss(), steady }, "stopped");
});
