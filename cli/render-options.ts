// The render's options as flags, shared by the commands that render: `render hub` and `install hub`
// take the hub's, `render spoke` and `join` the spoke's. Only the flags live here; the render is cli/render.
import { InvalidArgumentError, Option, type Command } from "commander";
import type { Workloads } from "./render/objects.ts";
import { AllowListSchema } from "../shared/agent-config.ts";

export type CommonFlags = { registry?: string; tag?: string; brokerClass?: string; env?: Record<string, string>; workloads?: Workloads };
export type HubFlags = CommonFlags & { namespace?: string; resyncSeconds?: number };
export type SpokeFlags = CommonFlags & { clusterName: string; spokeExternalServerUrls?: string[]; agentConfigAllow?: string };

// NAME=VALUE, repeatable: values for func.yaml's run.envs (e.g. OCM_CLUSTER_AUTO_APPROVAL_USERS).
function envEntry(value: string, previous: Record<string, string> = {}): Record<string, string> {
  const eq = value.indexOf("=");
  if (eq <= 0) throw new InvalidArgumentError("give NAME=VALUE");
  return { ...previous, [value.slice(0, eq)]: value.slice(eq + 1) };
}

// Whole seconds, bounded as every seconds setting of ours is (docs/agent-config.md).
function positiveSeconds(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || n < 1 || n > 86_400) throw new InvalidArgumentError("give whole seconds from 1 to 86400");
  return n;
}

const urls = (value: string) => value.split(",").map((u) => u.trim()).filter(Boolean);

// Checked as the agent-config function will check it, so a typo fails the join instead of the function.
function allowList(value: string): string {
  const parsed = AllowListSchema.safeParse(value);
  if (!parsed.success) throw new InvalidArgumentError(parsed.error.issues.map((i) => i.message).join("; "));
  return value;
}

function commonFlags(c: Command): Command {
  return c
    .option("--registry <registry>", "the images are <registry>/ocm-functions/<name>:<tag> (default dev.local)")
    .option("--tag <tag>", "the images' tag (default latest)")
    .option("--broker-class <class>", "the Brokers' eventing.knative.dev/broker.class (default MTChannelBasedBroker)")
    .option("--env <NAME=VALUE>", "a value for the functions' func.yaml run.envs, e.g. OCM_CLUSTER_AUTO_APPROVAL_USERS=system:bootstrap:abc123; repeatable", envEntry)
    .addOption(
      new Option("--workloads <form>", "how the functions run: knative (Knative Services) or deployments (Deployments and Services, for clusters with Eventing but no Serving); default knative").choices([
        "knative",
        "deployments",
      ] satisfies Workloads[]),
    );
}

export function hubFlags(c: Command): Command {
  return commonFlags(c)
    .option("--namespace <namespace>", "the hub functions' namespace (default open-cluster-management-hub)")
    .option("--resync-seconds <seconds>", "how often the hub's relays tick every function that sweeps (default 1800, as OCM's hub informers resync)", positiveSeconds);
}

export function spokeFlags(c: Command, o: { clusterNameRequired: boolean }): Command {
  const described = "the ManagedCluster's name (OCM's --spoke-cluster-name)";
  const named = o.clusterNameRequired ? c.requiredOption("--cluster-name <name>", described) : c.option("--cluster-name <name>", described, "cluster1");
  return commonFlags(named)
    .option("--spoke-external-server-urls <urls>", "the spoke API server's URLs the hub is told, comma-separated", urls)
    .option(
      "--agent-config-allow <paths>",
      "the agent settings a hub-assigned AgentConfig may change on this cluster, comma-separated (e.g. statusSyncIntervalSeconds,heartbeat.proxyURL,logLevel,features); none for nothing; default all",
      allowList,
    );
}

const common = (f: CommonFlags) => ({
  ...(f.registry ? { registry: f.registry } : {}),
  ...(f.tag ? { tag: f.tag } : {}),
  ...(f.brokerClass ? { brokerClass: f.brokerClass } : {}),
  ...(f.env ? { env: f.env } : {}),
  ...(f.workloads ? { workloads: f.workloads } : {}),
});

export const hubOptions = (f: HubFlags) => ({ ...common(f), ...(f.namespace ? { namespace: f.namespace } : {}), ...(f.resyncSeconds ? { resyncSeconds: f.resyncSeconds } : {}) });

export const spokeOptions = (f: SpokeFlags, bootstrapKubeconfig?: string) => ({
  ...common({ ...f, ...(f.agentConfigAllow !== undefined ? { env: { ...f.env, OCM_AGENT_CONFIG_ALLOW: f.agentConfigAllow } } : {}) }),
  clusterName: f.clusterName,
  ...(f.spokeExternalServerUrls ? { externalServerUrls: f.spokeExternalServerUrls } : {}),
  ...(bootstrapKubeconfig !== undefined ? { bootstrapKubeconfig } : {}),
});
