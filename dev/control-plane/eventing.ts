// Knative Eventing running in pods on a harness node (node.ts): its controller and webhook, the
// multi-tenant channel-based Broker (controller, ingress, filter) over the in-memory channel
// (controller, dispatcher), and the PingSource and ApiServerSource adapters the controller deploys
// when a source of theirs exists (our hub renders neither: its relay feeds the Broker).
// Every program is built by scripts/build-tools.sh from the Go module tools/knative pins and put on an
// empty base as one static binary (dev/build/static-image.ts), then imported into the node's containerd.
// The manifests are Knative's own, read from that module's config/ in the Go module cache; the only
// change is each `ko://` image reference turned into ours.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { readKnativeManifests, yamlIn, type KnativeManifest } from "./knative.ts";
import type { LocalCluster } from "./clusters.ts";
import type { LocalNode } from "./node.ts";
import { cachedStaticImages } from "../build/static-image.ts";
import { applyAll } from "../../cli/apply.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { DeploymentResource, MutatingWebhookConfigurationResource } from "../../shared/api/kube.ts";

const repoRoot = join(import.meta.dirname, "..", "..");
const toolsDir = join(repoRoot, "tools", "knative");

export const EventingNamespace = "knative-eventing";

// The programs under knative.dev/eventing/cmd/ that run as pods, in the order build-tools.sh prints them.
export const EVENTING_COMMANDS = [
  "controller",
  "webhook",
  "mtchannel_broker",
  "broker/filter",
  "broker/ingress",
  "in_memory/channel_controller",
  "in_memory/channel_dispatcher",
  "mtping",
  "apiserver_receive_adapter",
] as const;
export type EventingCommand = (typeof EVENTING_COMMANDS)[number];

// What Knative needs of kube-controller-manager besides a node's controllers (node.ts): its ClusterRoles
// are aggregated (channelable-manipulator, addressable-resolver, podspecable-binding, ...), and the API
// server, started with --enable-aggregator-routing=true, calls its webhook at the Endpoints' addresses.
export const EVENTING_CONTROLLERS = ["clusterrole-aggregation-controller", "endpoints-controller"] as const;

// Eventing's Deployments. The PingSource adapter is scaled up by the controller only once a PingSource
// exists, and ApiServerSource adapters are made per source.
export const EVENTING_DEPLOYMENTS = ["eventing-controller", "eventing-webhook", "mt-broker-controller", "mt-broker-filter", "mt-broker-ingress", "imc-controller", "imc-dispatcher"] as const;
// Those that serve (webhooks, the Broker's ingress and filter, the channel's dispatcher): startEventing
// waits until they are Available. The two controllers' readiness probes first run 20 s after start,
// long after they reconcile; whoever creates a Broker waits for it to be Ready, which needs them.
export const EVENTING_SERVING = ["eventing-webhook", "mt-broker-filter", "mt-broker-ingress", "imc-controller", "imc-dispatcher"] as const;

export type EventingBinaries = Record<EventingCommand, string>;

export function findEventingBinaries(): EventingBinaries {
  const out = execFileSync(join(repoRoot, "scripts", "build-tools.sh"), ["eventing"], { stdio: ["ignore", "pipe", "inherit"] }).toString().trim().split("\n");
  const found = new Map(out.map((l) => l.split(" ") as [string, string]));
  return Object.fromEntries(
    EVENTING_COMMANDS.map((c) => {
      const path = found.get(c);
      if (!path || !existsSync(path)) throw new Error(`knative.dev/eventing/cmd/${c} is missing after scripts/build-tools.sh eventing`);
      return [c, path];
    }),
  ) as EventingBinaries;
}

// The eventing module's source in the Go module cache, at the version tools/knative pins.
export function eventingModuleDir(): string {
  const env = { ...process.env, GOTOOLCHAIN: "local", GOFLAGS: "-mod=mod" };
  execFileSync("go", ["mod", "download", "knative.dev/eventing"], { cwd: toolsDir, env, stdio: ["ignore", "ignore", "inherit"] });
  const [version, dir] = execFileSync("go", ["list", "-m", "-f", "{{.Version}} {{.Dir}}", "knative.dev/eventing"], { cwd: toolsDir, env }).toString().trim().split(" ");
  if (!version || !dir || !existsSync(dir)) throw new Error(`knative.dev/eventing is not in the Go module cache (go list said: ${version} ${dir})`);
  return dir;
}

export const eventingVersion = (moduleDir: string) => /@(v[^/]+)$/.exec(moduleDir)?.[1] ?? "unknown";

export const eventingImage = (command: string, version: string) => `dev.local/knative-eventing/${command.replace("/", "-")}:${version}`;

// Files of config/ that make up Eventing core, the MT channel-based Broker and the in-memory channel.
// Left out: the Job sink and request-reply Deployments (their programs are not built) and the Broker's
// HorizontalPodAutoscalers (nothing here scales them).
const LEFT_OUT = ["config/core/deployments/job-sink.yaml", "config/core/deployments/request-reply.yaml", "config/core/deployments/webhook-hpa.yaml", "config/brokers/mt-channel-broker/deployments/hpa.yaml"];

export function eventingFiles(moduleDir: string): string[] {
  const dirs = [
    "config/core",
    "config/core/configmaps",
    "config/core/roles",
    "config/core/resources",
    "config/core/webhooks",
    "config/core/deployments",
    // The ConfigMaps the controller's env reads image names from (images of integrations not run here).
    "third_party/eventing-integrations-latest",
    "config/brokers/mt-channel-broker/roles",
    "config/brokers/mt-channel-broker/deployments",
    "config/channels/in-memory-channel",
    "config/channels/in-memory-channel/configmaps",
    "config/channels/in-memory-channel/roles",
    "config/channels/in-memory-channel/resources",
    "config/channels/in-memory-channel/webhooks",
    "config/channels/in-memory-channel/deployments",
  ];
  return dirs.flatMap((d) => yamlIn(moduleDir, d)).filter((f) => !LEFT_OUT.includes(f));
}

// Every `ko://knative.dev/eventing/cmd/<command>` string (container images and the controller's env
// naming the adapters' images) replaced by our image name for that command. A program we do not build
// (auth_proxy, only for OIDC) keeps a name no image has, so a pod that needed it would say so.
export function withImages<T>(value: T, image: (command: string) => string): T {
  if (typeof value === "string") {
    const m = /^ko:\/\/knative\.dev\/eventing\/cmd\/(.+)$/.exec(value);
    return (m ? image(m[1]!) : value) as T;
  }
  if (Array.isArray(value)) return value.map((v) => withImages(v, image)) as T;
  if (value && typeof value === "object") return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, withImages(v, image)])) as T;
  return value;
}

export function eventingManifests(moduleDir: string): KnativeManifest[] {
  const version = eventingVersion(moduleDir);
  return withImages(readKnativeManifests(moduleDir, eventingFiles(moduleDir)), (c) => eventingImage(c, version));
}

type Deployment = KubeObject & { status?: { conditions?: { type: string; status: string }[] } };
type WebhookConfiguration = KubeObject & { webhooks?: { rules?: unknown[]; clientConfig?: { caBundle?: string } }[] };

const available = (d: Deployment | undefined) => d?.status?.conditions?.some((c) => c.type === "Available" && c.status === "True") ?? false;

export type Eventing = { version: string; images: string[]; readyMs: number };

// Imports the images, applies Knative's manifests and waits until what serves is Available and the
// webhook has filled in its own configuration (until then Eventing's kinds go unvalidated and
// undefaulted). The node's stop removes it all with the pods.
export async function startEventing(cluster: LocalCluster, node: LocalNode, o: { binaries?: EventingBinaries; timeoutMs?: number; log?: (line: string) => void } = {}): Promise<Eventing> {
  const t0 = performance.now();
  const log = o.log ?? (() => {});
  const binaries = o.binaries ?? findEventingBinaries();
  const moduleDir = eventingModuleDir();
  const version = eventingVersion(moduleDir);
  const images = EVENTING_COMMANDS.map((c) => ({ reference: eventingImage(c, version), binary: binaries[c], path: `/ko-app/${c.split("/").pop()}` }));
  node.importImage(cachedStaticImages(`knative-eventing-${version}`, images));
  const deadline = Date.now() + (o.timeoutMs ?? 300_000);
  const client = KubeClient.fromKubeconfig(cluster.adminKubeconfig);
  try {
    await applyAll(client, eventingManifests(moduleDir), { waitForCrds: true, deadline, print: log });
    for (;;) {
      const got = await Promise.all(EVENTING_SERVING.map((n) => client.get<Deployment>(DeploymentResource, n, EventingNamespace)));
      const hooks = await client.get<WebhookConfiguration>(MutatingWebhookConfigurationResource, "webhook.eventing.knative.dev");
      const filled = hooks?.webhooks?.every((w) => (w.rules?.length ?? 0) > 0 && w.clientConfig?.caBundle) ?? false;
      const waiting = EVENTING_SERVING.filter((_, i) => !available(got[i]));
      if (!waiting.length && filled) break;
      if (Date.now() > deadline) throw new Error(`Knative Eventing not ready in time: ${waiting.length ? `not Available: ${waiting.join(", ")}` : "the webhook has not filled in its configuration"}`);
      await new Promise((r) => setTimeout(r, 500));
    }
  } finally {
    client.close();
  }
  return { version, images: images.map((i) => i.reference), readyMs: performance.now() - t0 };
}
