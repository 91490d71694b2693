// Knative Serving running in pods on a harness node (node.ts) beside Eventing (eventing.ts): its
// controller, webhook, activator and autoscaler, the queue-proxy every revision pod carries, and
// Traefik with its own Knative provider as the ingress (no Envoy, no Gateway API). Every program is
// built by scripts/build-tools.sh (tools/serving, tools/traefik) and put on an empty base as one static
// binary, then imported into the node's containerd; nothing is pulled. Serving's manifests are its own,
// read from the module cache at the versions tools/serving pins, with each `ko://` image reference
// turned into ours; Traefik's objects are ours (below). The node's stop removes it all with the pods.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { readKnativeManifests, yamlIn, type KnativeManifest } from "./knative.ts";
import type { LocalCluster } from "./clusters.ts";
import type { LocalNode } from "./node.ts";
import { cachedStaticImages } from "../build/static-image.ts";
import { applyAll } from "../../cli/apply.ts";
import type { Manifest } from "../../cli/render/objects.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { DeploymentResource, MutatingWebhookConfigurationResource } from "../../shared/api/kube.ts";
import type { ApiResource } from "../../shared/api/meta.ts";

const repoRoot = join(import.meta.dirname, "..", "..");
const toolsDir = join(repoRoot, "tools", "serving");

export const ServingNamespace = "knative-serving";
export const TraefikNamespace = "traefik";
// The KIngress class Traefik's Knative provider reconciles (config-network's ingress-class).
export const TraefikIngressClass = "traefik.ingress.networking.knative.dev";
// Knative's external domain here: public and cluster-local hosts differ, so a test can tell which
// entrypoint answered.
export const ServingDomain = "example.com";

// The programs under knative.dev/serving/cmd/ that run as pods (queue: the queue-proxy sidecar), in the
// order build-tools.sh prints them; it prints traefik after them.
export const SERVING_COMMANDS = ["controller", "activator", "autoscaler", "webhook", "queue"] as const;
export type ServingCommand = (typeof SERVING_COMMANDS)[number];
export type ServingBinaries = Record<ServingCommand | "traefik", string>;

// What Serving needs of kube-controller-manager besides what Eventing needs: a revision's public
// Service has no selector, and Knative writes core Endpoints for it (the pods', or the activator's when
// scaled to zero). kube-proxy reads only EndpointSlices, so without the mirroring controller that
// Service routes nowhere, Traefik answers 502 and the autoscaler's probe of the activator fails, so
// nothing scales to zero, while the KService still says Ready.
export const SERVING_CONTROLLERS = ["endpointslice-mirroring-controller"] as const;

export const SERVING_DEPLOYMENTS = ["controller", "webhook", "activator", "autoscaler"] as const;

// Ports above 1024: Traefik's image runs as an unprivileged user.
const TRAEFIK_PUBLIC_PORT = 8081;
const TRAEFIK_PRIVATE_PORT = 8082;
const TRAEFIK_PING_PORT = 8083;

export function findServingBinaries(): ServingBinaries {
  const out = execFileSync(join(repoRoot, "scripts", "build-tools.sh"), ["serving"], { stdio: ["ignore", "pipe", "inherit"] }).toString().trim().split("\n");
  const found = new Map(out.map((l) => l.split(" ") as [string, string]));
  return Object.fromEntries(
    [...SERVING_COMMANDS, "traefik" as const].map((c) => {
      const path = found.get(c);
      if (!path || !existsSync(path)) throw new Error(`${c} is missing after scripts/build-tools.sh serving`);
      return [c, path];
    }),
  ) as ServingBinaries;
}

export type ServingModules = { serving: string; networking: string; caching: string };

// Serving's source in the Go module cache, and the networking and caching modules at the versions its
// go.mod pins: Serving's module zip lacks the CRDs it links to from theirs.
export function servingModuleDirs(): ServingModules {
  const env = { ...process.env, GOTOOLCHAIN: "local", GOFLAGS: "-mod=mod" };
  const modules = ["knative.dev/serving", "knative.dev/networking", "knative.dev/caching"];
  execFileSync("go", ["mod", "download", ...modules], { cwd: toolsDir, env, stdio: ["ignore", "ignore", "inherit"] });
  const lines = execFileSync("go", ["list", "-m", "-f", "{{.Path}} {{.Dir}}", ...modules], { cwd: toolsDir, env }).toString().trim().split("\n");
  const dir = (m: string) => {
    const d = lines.find((l) => l.startsWith(`${m} `))?.slice(m.length + 1);
    if (!d || !existsSync(d)) throw new Error(`${m} is not in the Go module cache (go list said: ${lines.join("; ")})`);
    return d;
  };
  return { serving: dir(modules[0]!), networking: dir(modules[1]!), caching: dir(modules[2]!) };
}

export const servingVersion = (moduleDir: string) => /@(v[^/]+)$/.exec(moduleDir)?.[1] ?? "unknown";
export const servingImage = (command: string, version: string) => `dev.local/knative-serving/${command}:${version}`;
export const traefikImage = (version: string) => `dev.local/traefik/traefik:${version}`;
// The Traefik version is the binary's, from its name (scripts/build-tools.sh names it traefik-<version>-<hash>).
export const traefikVersion = (binary: string) => /traefik-(v[0-9][^-]*)-[0-9a-f]{12}$/.exec(binary)?.[1] ?? "unknown";

// Files of Serving's config/core, without the HorizontalPodAutoscalers and PodDisruptionBudgets of the
// activator and webhook (one node, nothing scales them) and without the cert-manager Certificate that
// nothing here reconciles; then the CRDs and config-network from networking, the Image CRD from caching.
const LEFT_OUT = ["config/core/deployments/activator-hpa.yaml", "config/core/deployments/webhook-hpa.yaml", "config/core/300-knativecertificate.yaml"];

export function servingFiles(m: ServingModules): { module: string; file: string }[] {
  const core = ["config/core", "config/core/200-roles", "config/core/300-resources", "config/core/configmaps", "config/core/deployments", "config/core/webhooks"];
  const networking = ["ingress", "serverlessservice", "certificate", "domain-claim", "config-network"].map((n) => `config/${n}.yaml`);
  return [
    ...core.flatMap((d) => yamlIn(m.serving, d)).filter((f) => !LEFT_OUT.includes(f)).map((file) => ({ module: m.serving, file })),
    ...networking.map((file) => ({ module: m.networking, file })),
    { module: m.caching, file: "config/image.yaml" },
  ];
}

// Every `ko://knative.dev/serving/cmd/<command>` string replaced by our image of that command.
function withImages<T>(value: T, image: (command: string) => string): T {
  if (typeof value === "string") {
    const m = /^ko:\/\/knative\.dev\/serving\/cmd\/(.+)$/.exec(value);
    return (m ? image(m[1]!) : value) as T;
  }
  if (Array.isArray(value)) return value.map((v) => withImages(v, image)) as T;
  if (value && typeof value === "object") return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, withImages(v, image)])) as T;
  return value;
}

export type ServingSettings = {
  // config-autoscaler's keys (e.g. stable-window, scale-to-zero-grace-period), over Knative's defaults.
  autoscaler?: Readonly<Record<string, string>>;
  // CPU each of Serving's and Traefik's containers requests: Knative asks 100m-300m each (600m in
  // all), which on a 2-core node leaves too little for Eventing and a hub of revisions. Default 25m.
  cpuRequest?: string;
  // config-deployment's queue-sidecar-cpu-request: what each revision pod's queue-proxy requests
  // (Knative's default 25m). Default 10m.
  queueCpuRequest?: string;
};

type ConfigMap = KnativeManifest & { data?: Record<string, string> };
type PodTemplate = { spec: { containers: { resources?: { requests?: Record<string, string> } }[] } };

// Knative's objects with our images, Traefik as the ingress class, our domain, the autoscaler's
// settings and the CPU requests of what runs on the node.
export function servingManifests(m: ServingModules, s: ServingSettings = {}): KnativeManifest[] {
  const version = servingVersion(m.serving);
  const cpu = s.cpuRequest ?? "25m";
  const settings: Record<string, Record<string, string>> = {
    "config-network": { "ingress-class": TraefikIngressClass },
    "config-domain": { [ServingDomain]: "" },
    "config-deployment": { "queue-sidecar-cpu-request": s.queueCpuRequest ?? "10m" },
    "config-autoscaler": { ...s.autoscaler },
  };
  const docs = servingFiles(m).flatMap(({ module, file }) => readKnativeManifests(module, [file]));
  return withImages(docs, (c) => servingImage(c, version)).map((d) => {
    if (d.kind === "ConfigMap" && d.metadata.namespace === ServingNamespace && settings[d.metadata.name]) {
      const c = d as ConfigMap;
      return { ...c, data: { ...c.data, ...settings[d.metadata.name] } };
    }
    if (d.kind === "Deployment" && d.metadata.namespace === ServingNamespace) return withCpuRequest(d, cpu);
    return d;
  });
}

function withCpuRequest(d: KnativeManifest, cpu: string): KnativeManifest {
  const spec = d.spec as { template: PodTemplate };
  const containers = spec.template.spec.containers.map((c) => ({ ...c, resources: { ...c.resources, requests: { ...c.resources?.requests, cpu } } }));
  return { ...d, spec: { ...spec, template: { ...spec.template, spec: { ...spec.template.spec, containers } } } };
}

// Traefik in its own namespace, reading Knative's KIngresses of its class and routing them: public
// ones on one entrypoint (the `traefik` Service), cluster-local ones on another (`privtraefik`, port
// 80, which Knative's placeholder Services of cluster-local routes point at). Both are NodePorts too,
// which kube-proxy opens on the node's address only: the host cannot reach a ClusterIP (the node
// routes the Service range nowhere from the host), so that is how a test sends a request. Its rights are those its provider uses: it watches KIngresses,
// Services and Secrets, and writes KIngress status.
export function traefikManifests(image: string, cpuRequest = "25m"): Manifest[] {
  const ns = TraefikNamespace;
  const labels = { "app.kubernetes.io/name": "traefik" };
  const role = "ocm-functions:traefik-knative";
  return [
    { apiVersion: "v1", kind: "Namespace", metadata: { name: ns } },
    { apiVersion: "v1", kind: "ServiceAccount", metadata: { name: "traefik", namespace: ns } },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRole",
      metadata: { name: role },
      rules: [
        { apiGroups: [""], resources: ["services", "secrets"], verbs: ["get", "list", "watch"] },
        { apiGroups: ["networking.internal.knative.dev"], resources: ["ingresses"], verbs: ["get", "list", "watch"] },
        { apiGroups: ["networking.internal.knative.dev"], resources: ["ingresses/status"], verbs: ["update"] },
      ],
    },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRoleBinding",
      metadata: { name: role },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: role },
      subjects: [{ kind: "ServiceAccount", name: "traefik", namespace: ns }],
    },
    {
      apiVersion: "apps/v1",
      kind: "Deployment",
      metadata: { name: "traefik", namespace: ns, labels },
      spec: {
        replicas: 1,
        selector: { matchLabels: labels },
        template: {
          metadata: { labels },
          spec: {
            serviceAccountName: "traefik",
            containers: [
              {
                name: "traefik",
                image,
                imagePullPolicy: "Never",
                args: [
                  "--experimental.knative=true",
                  "--providers.knative=true",
                  "--providers.knative.publicEntrypoints=pweb",
                  "--providers.knative.privateEntrypoints=privweb",
                  `--providers.knative.publicService.namespace=${ns}`,
                  "--providers.knative.publicService.name=traefik",
                  `--providers.knative.privateService.namespace=${ns}`,
                  "--providers.knative.privateService.name=privtraefik",
                  `--entrypoints.pweb.address=:${TRAEFIK_PUBLIC_PORT}`,
                  `--entrypoints.privweb.address=:${TRAEFIK_PRIVATE_PORT}`,
                  `--entrypoints.ping.address=:${TRAEFIK_PING_PORT}`,
                  "--ping=true",
                  "--ping.entryPoint=ping",
                  "--global.checknewversion=false",
                  "--global.sendanonymoususage=false",
                ],
                ports: [
                  { name: "pweb", containerPort: TRAEFIK_PUBLIC_PORT },
                  { name: "privweb", containerPort: TRAEFIK_PRIVATE_PORT },
                  { name: "ping", containerPort: TRAEFIK_PING_PORT },
                ],
                readinessProbe: { httpGet: { path: "/ping", port: TRAEFIK_PING_PORT }, periodSeconds: 2 },
                resources: { requests: { cpu: cpuRequest, memory: "64Mi" } },
              },
            ],
          },
        },
      },
    },
    {
      apiVersion: "v1",
      kind: "Service",
      metadata: { name: "traefik", namespace: ns, labels },
      spec: { type: "NodePort", selector: labels, ports: [{ name: "http", port: 80, targetPort: TRAEFIK_PUBLIC_PORT }] },
    },
    {
      apiVersion: "v1",
      kind: "Service",
      metadata: { name: "privtraefik", namespace: ns, labels },
      spec: { type: "NodePort", selector: labels, ports: [{ name: "http", port: 80, targetPort: TRAEFIK_PRIVATE_PORT }] },
    },
  ];
}

type Deployment = KubeObject & { status?: { conditions?: { type: string; status: string }[] } };
type WebhookConfiguration = KubeObject & { webhooks?: { rules?: unknown[]; clientConfig?: { caBundle?: string } }[] };
type Service = KubeObject & { spec?: { ports?: { nodePort?: number }[] } };
const ServiceResource = { group: "", version: "v1", kind: "Service", plural: "services", namespaced: true } as const satisfies ApiResource;

const available = (d: Deployment | undefined) => d?.status?.conditions?.some((c) => c.type === "Available" && c.status === "True") ?? false;

export type Serving = {
  version: string;
  traefikVersion: string;
  images: string[];
  // Where the host reaches Traefik's entrypoints: http://<node address>:<port>, with Host
  // <ksvc>.<ns>.example.com (public) or <ksvc>.<ns>.svc.cluster.local (cluster-local).
  publicAddress: { host: string; port: number };
  privateAddress: { host: string; port: number };
  readyMs: number;
};

// Imports the images, applies Serving's manifests and Traefik's, and waits until every Deployment is
// Available and Serving's webhook has filled in its configuration (until then a KService would go
// undefaulted). Needs a node with services (kube-proxy: Traefik proxies to ClusterIPs) and a cluster
// running SERVING_CONTROLLERS beside Eventing's.
export async function startServing(cluster: LocalCluster, node: LocalNode, o: ServingSettings & { binaries?: ServingBinaries; timeoutMs?: number; log?: (line: string) => void } = {}): Promise<Serving> {
  const t0 = performance.now();
  const log = o.log ?? (() => {});
  const binaries = o.binaries ?? findServingBinaries();
  const modules = servingModuleDirs();
  const version = servingVersion(modules.serving);
  const tVersion = traefikVersion(binaries.traefik);
  const images = [
    ...SERVING_COMMANDS.map((c) => ({ reference: servingImage(c, version), binary: binaries[c], path: `/ko-app/${c}` })),
    { reference: traefikImage(tVersion), binary: binaries.traefik, path: "/traefik" },
  ];
  node.importImage(cachedStaticImages(`knative-serving-${version}`, images));
  const deadline = Date.now() + (o.timeoutMs ?? 300_000);
  const client = KubeClient.fromKubeconfig(cluster.adminKubeconfig);
  try {
    await applyAll(client, [...servingManifests(modules, o), ...traefikManifests(traefikImage(tVersion), o.cpuRequest)], { waitForCrds: true, deadline, print: log });
    const deployments = [...SERVING_DEPLOYMENTS.map((n) => [n, ServingNamespace] as const), ["traefik", TraefikNamespace] as const];
    for (;;) {
      const got = await Promise.all(deployments.map(([n, ns]) => client.get<Deployment>(DeploymentResource, n, ns)));
      const hooks = await client.get<WebhookConfiguration>(MutatingWebhookConfigurationResource, "webhook.serving.knative.dev");
      const filled = hooks?.webhooks?.every((w) => (w.rules?.length ?? 0) > 0 && w.clientConfig?.caBundle) ?? false;
      const waiting = deployments.filter((_, i) => !available(got[i])).map(([n, ns]) => `${ns}/${n}`);
      if (!waiting.length && filled) break;
      if (Date.now() > deadline) throw new Error(`Knative Serving not ready in time: ${waiting.length ? `not Available: ${waiting.join(", ")}` : "the webhook has not filled in its configuration"}`);
      await new Promise((r) => setTimeout(r, 500));
    }
    const nodePort = async (name: string) => {
      const port = (await client.get<Service>(ServiceResource, name, TraefikNamespace))?.spec?.ports?.[0]?.nodePort;
      if (!port) throw new Error(`Service ${TraefikNamespace}/${name} has no NodePort`);
      return { host: node.address, port };
    };
    const [publicAddress, privateAddress] = [await nodePort("traefik"), await nodePort("privtraefik")];
    return { version, traefikVersion: tVersion, images: images.map((i) => i.reference), publicAddress, privateAddress, readyMs: performance.now() - t0 };
  } finally {
    client.close();
  }
}
