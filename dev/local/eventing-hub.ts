// A hub whose functions run as pods on a real node and are invoked by Knative Eventing: two local
// clusters (hub and spoke), a node on the hub (node.ts, with Services and DNS), Knative Eventing in pods
// (eventing.ts), our function and relay images built from the bundles and imported, and then what
// `ocmf install hub --workloads deployments --wait all` applies: every hub function a Deployment and a
// Service, subscribed by its rendered Triggers on the Broker that the hub's relay (a ContainerSource)
// feeds. A recorder subscribed to the Broker with no filter (on the node's address, which
// the pods reach) keeps every event the Broker delivered. The spoke is local processes, joined by the
// caller with joinSpoke and runDeployed.
// With workloads "knative", Knative Serving and Traefik run beside Eventing (serving.ts) and the install
// is `ocmf install hub --wait all` with its default workloads: every hub function a Knative Service,
// whose revision pods come and go with its events. Ready alone proves no route (a KService says Ready
// while nothing routes to it when endpoints are not mirrored), so the harness then sends each KService
// a request through Traefik's cluster-local entrypoint, as a Broker delivery reaches it.
// Used by test/eventing-node.test.ts, scripts/record-join-broker.ts and bench/broker-latency.ts. Needs root.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, get as httpGet, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { bundle } from "../build/bundle.ts";
import { buildImages, planImages } from "../build/images.ts";
import { startClusters, DEFAULT_CONTROLLERS, type LocalCluster } from "../control-plane/clusters.ts";
import { freeNodeSubnet, startNode, startScheduler, KUBERNETES_SERVICE_HOSTS, SERVICE_CONTROLLERS, type LocalNode } from "../control-plane/node.ts";
import { startEventing, EVENTING_CONTROLLERS, type Eventing } from "../control-plane/eventing.ts";
import { knativeCrds } from "../control-plane/knative.ts";
import { startServing, SERVING_CONTROLLERS, type Serving, type ServingSettings } from "../control-plane/serving.ts";
import { applyAll, applyObject } from "../../cli/apply.ts";
import { Discovery } from "../../cli/discovery.ts";
import { installHub } from "../../cli/install.ts";
import { bootstrapKubeconfig as bootstrapKubeconfigOf, createBootstrapToken, hubEndpointOf } from "../../cli/bootstrap-token.ts";
import { waitUntilReady } from "../../cli/readiness.ts";
import { HubNamespaceDefault, type Manifest } from "../../cli/render/index.ts";
import type { Workloads } from "../../cli/render/objects.ts";
import { readFunctions } from "../../cli/render/func-yaml.ts";
import { KubeClient } from "../../shared/kube/client.ts";

// Images are tagged so that a pod never asks for :latest (which kubelet would try to pull).
export const IMAGE_TAG = "local";
export const RECORDER_TRIGGER = "ocmf-recorder";

// One event as the Broker delivered it: the CloudEvent in structured form (attributes from the ce-
// headers, data parsed when JSON), and when it arrived.
export type Delivery = { time: string; event: Record<string, unknown> };

export type EventingHub = {
  work: string; // a temporary folder: bundles (dist/), images, run directories
  dist: string;
  hub: LocalCluster;
  spoke: LocalCluster;
  hubAdmin: KubeClient;
  spokeAdmin: KubeClient;
  node: LocalNode;
  eventing: Eventing;
  serving?: Serving; // with workloads "knative"
  workloads: Workloads;
  namespace: string; // the hub functions'
  functions: string[]; // the hub functions, each a Deployment, or a Knative Service, of that name
  bootstrapKubeconfig: string; // a file: what `ocmf join --hub-kubeconfig` takes
  deliveries: Delivery[];
  installMs: number; // from the first object applied until everything is Ready (--wait all)
  stop(): Promise<void>;
};

// The harness's own controllers (CSR signing above all), and those a node and Eventing need
// (node.test.ts explains the node's).
const CONTROLLERS = [...DEFAULT_CONTROLLERS, "serviceaccount-controller", "root-ca-certificate-publisher-controller", "node-lifecycle-controller", ...SERVICE_CONTROLLERS, ...EVENTING_CONTROLLERS];

// A GET with a Host header of our choosing (fetch keeps the URL's), answered with its status.
export function getStatus(o: { host: string; port: number; path: string; hostHeader: string; timeoutMs?: number }): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpGet({ host: o.host, port: o.port, path: o.path, headers: { host: o.hostHeader }, timeout: o.timeoutMs ?? 10_000 }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode ?? 0));
    });
    req.on("timeout", () => req.destroy(new Error(`no answer in ${o.timeoutMs ?? 10_000} ms`)));
    req.on("error", reject);
  });
}

// One request to each function's Knative Service the way a Trigger's delivery goes: to Traefik's
// cluster-local entrypoint with the host name of the KService's cluster-local address, answered by the
// function's own readiness path. Tries until every one answers 200 or the deadline passes; returns how
// long that took.
export async function requestEachKnativeService(o: { serving: Serving; namespace: string; functions: readonly string[]; deadline: number }): Promise<number> {
  const t0 = performance.now();
  const { host, port } = o.serving.privateAddress;
  const last = new Map<string, string>();
  for (let pending = [...o.functions]; pending.length; ) {
    const answered = await Promise.all(
      pending.map(async (fn) => {
        try {
          const status = await getStatus({ host, port, path: "/health/readiness", hostHeader: `${fn}.${o.namespace}.svc.cluster.local` });
          last.set(fn, `HTTP ${status}`);
          return status === 200;
        } catch (err) {
          last.set(fn, err instanceof Error ? err.message : String(err));
          return false;
        }
      }),
    );
    pending = pending.filter((_, i) => !answered[i]);
    if (pending.length && Date.now() > o.deadline) throw new Error(`Knative Services not answering through Traefik: ${pending.map((fn) => `${fn} (${last.get(fn)})`).join(", ")}`);
    if (pending.length) await new Promise((r) => setTimeout(r, 500));
  }
  return performance.now() - t0;
}

function structured(headers: Record<string, string | string[] | undefined>, body: string): Record<string, unknown> {
  const event: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(headers)) if (k.startsWith("ce-") && typeof v === "string") event[k.slice(3)] = v;
  const type = headers["content-type"];
  if (typeof type === "string") event.datacontenttype = type;
  if (body) event.data = typeof type === "string" && type.startsWith("application/json") ? JSON.parse(body) : body;
  return event;
}

function startRecorder(host: string, deliveries: Delivery[]): Promise<{ server: Server; port: number }> {
  const server = createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (c: string) => (body += c));
    req.on("end", () => {
      try {
        deliveries.push({ time: new Date().toISOString(), event: structured(req.headers, body) });
        res.writeHead(202).end();
      } catch (err) {
        res.writeHead(400).end(String(err));
      }
    });
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, host, () => resolve({ server, port: (server.address() as { port: number }).port }));
  });
}

// autoApprove: the cluster whose bootstrap CSR the hub approves and whose registration it accepts by
// itself (OCM_CLUSTER_AUTO_APPROVAL_USERS names the bootstrap token's user for that cluster alone);
// true: every cluster that joins with that token.
// workloads: how the hub functions run (default deployments); serving: Serving's settings (the
// autoscaler's windows above all) when they run as Knative Services; resyncSeconds: the hub relays' ticks.
export async function startEventingHub(
  o: { autoApprove?: string | true; workloads?: Workloads; serving?: ServingSettings; resyncSeconds?: number; log?: (line: string) => void } = {},
): Promise<EventingHub> {
  const log = o.log ?? (() => {});
  const workloads = o.workloads ?? "deployments";
  const work = mkdtempSync(join(tmpdir(), "eventing-hub-"));
  const dist = join(work, "dist");
  const subnet = freeNodeSubnet();
  const undo: (() => Promise<void>)[] = [async () => rmSync(work, { recursive: true, force: true })];
  const stop = async () => {
    for (const u of undo.splice(0).reverse()) await u().catch((err: Error) => log(`stopping: ${err.message}`));
  };
  try {
    const [, clusters] = await Promise.all([
      bundle({ outdir: dist }),
      startClusters({
        names: ["hub", "spoke"],
        crds: false, // ocmf install hub brings OCM's; the spoke gets Knative's and join brings the rest
        controllers: workloads === "knative" ? [...CONTROLLERS, ...SERVING_CONTROLLERS] : CONTROLLERS,
        serviceAccountAdmission: true,
        servingHosts: [`10.78.${subnet}.1`, ...KUBERNETES_SERVICE_HOSTS],
        apiserverFlags: ["--authorization-mode=Node", "--enable-admission-plugins=NodeRestriction", "--enable-aggregator-routing=true"],
      }),
    ]);
    undo.push(() => clusters.stop());
    const hub = clusters.get("hub");
    const spoke = clusters.get("spoke");
    const hubAdmin = KubeClient.fromKubeconfig(hub.adminKubeconfig);
    const spokeAdmin = KubeClient.fromKubeconfig(spoke.adminKubeconfig);
    undo.push(async () => {
      hubAdmin.close();
      spokeAdmin.close();
    });

    const scheduler = await startScheduler(hub);
    undo.push(() => scheduler.stop());
    const starting = startNode(hub, { name: "node-a", subnet, apiserverProxy: true, services: true, log });
    // The images are built while the node starts (its processes get on without this one's event loop).
    // The hub's pods run only hub functions and the relay (the Broker's source, which also holds
    // rechecks, and cluster-lease-monitor's own).
    const functions = readFunctions()
      .filter((f) => f.side === "hub")
      .map((f) => f.name);
    const archive = join(work, "images.tar");
    let buildError: unknown;
    try {
      const specs = planImages(dist).filter((s) => functions.includes(s.name) || s.name === "relay");
      buildImages({ specs, out: work, tag: IMAGE_TAG, oneArchive: archive });
    } catch (err) {
      buildError = err;
    }
    const node = await starting;
    undo.push(() => node.stop());
    if (buildError) throw buildError;
    node.importImage(archive);
    const [eventing, serving] = await Promise.all([
      startEventing(hub, node, { log }),
      workloads === "knative" ? startServing(hub, node, { ...o.serving, log }) : undefined,
      // The spoke serves Knative's kinds, so `ocmf join` can apply its render there.
      applyAll(spokeAdmin, knativeCrds(), { waitForCrds: true, deadline: Date.now() + 120_000, print: log }),
    ]);

    const deliveries: Delivery[] = [];
    const recorder = await startRecorder(node.address, deliveries);
    // The Broker goes on delivering while the harness stops (a relay ticking every few seconds keeps its
    // keep-alive connections busy), so close() alone may wait for as long as it runs: end them too.
    undo.push(
      () =>
        new Promise<void>((resolve) => {
          recorder.server.close(() => resolve());
          recorder.server.closeAllConnections();
        }),
    );

    let bootstrapKubeconfig = join(work, "bootstrap.kubeconfig");
    let env: Record<string, string> = {};
    if (o.autoApprove) {
      const token = await createBootstrapToken(hubAdmin, { now: new Date() });
      // a user alone is an auto-approval user for every cluster name
      env = { OCM_CLUSTER_AUTO_APPROVAL_USERS: o.autoApprove === true ? `system:bootstrap:${token.id}` : `system:bootstrap:${token.id}=${o.autoApprove}` };
      bootstrapKubeconfig = join(work, "auto-approved.kubeconfig");
      writeFileSync(bootstrapKubeconfig, bootstrapKubeconfigOf(hubEndpointOf(hubAdmin), token.token), { mode: 0o600 });
    }
    const t0 = performance.now();
    await installHub(
      hubAdmin,
      { render: { workloads, tag: IMAGE_TAG, env, ...(o.resyncSeconds ? { resyncSeconds: o.resyncSeconds } : {}) }, wait: { level: "all", timeoutMs: 300_000, timeoutText: "5 minutes" }, ...(o.autoApprove ? {} : { bootstrapKubeconfigFile: bootstrapKubeconfig }) },
      log,
    );
    const installMs = performance.now() - t0;
    if (workloads === "knative") {
      const ms = await requestEachKnativeService({ serving: serving!, namespace: HubNamespaceDefault, functions, deadline: Date.now() + 120_000 });
      log(`every Knative Service answered a request through Traefik ${(ms / 1000).toFixed(1)} s after install`);
    }
    const trigger: Manifest = {
      apiVersion: "eventing.knative.dev/v1",
      kind: "Trigger",
      metadata: { name: RECORDER_TRIGGER, namespace: HubNamespaceDefault },
      // A delivery the filter could not make (a connection refused or reset on a loaded node) is tried
      // again rather than dropped: a missing recording fails a test that looks for it.
      spec: { broker: "default", subscriber: { uri: `http://${node.address}:${recorder.port}/` }, delivery: { retry: 5, backoffPolicy: "exponential", backoffDelay: "PT0.2S" } },
    };
    await applyObject(hubAdmin, new Discovery(hubAdmin), trigger);
    await waitUntilReady(hubAdmin, [trigger], { deadline: Date.now() + 60_000, timeoutText: "60 s", print: log });
    return { work, dist, hub, spoke, hubAdmin, spokeAdmin, node, eventing, serving, workloads, namespace: HubNamespaceDefault, functions, bootstrapKubeconfig, deliveries, installMs, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
