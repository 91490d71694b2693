// Knative's own admission webhooks (Serving and Eventing v0.50.0, built from their Go modules) judge
// what cli/render produces: every object renderHub and renderSpoke make is created for real on a hub
// and a spoke and comes back with Knative's defaults, and a broken variant of each Knative kind we
// render is refused by Knative with Knative's reason.
//
// The webhooks run as processes on this machine. The API servers reach them through a selectorless
// Service and an EndpointSlice (with --enable-aggregator-routing the API server calls endpoints, not a
// ClusterIP), and EndpointSlices refuse loopback, so the address is a private one on a bridge of our
// own, local to this machine (`ip route get` must say local), removed when the file ends.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { parseAllDocuments } from "yaml";
import { freePort, startClusters, type LocalCluster, type LocalClusters } from "../dev/control-plane/clusters.ts";
import { logTail, startProcess, stopProcess, type Managed } from "../dev/control-plane/processes.ts";
import { knativeModuleDirs, yamlIn } from "../dev/control-plane/knative.ts";
import { KubeClient, resourcePath, type KubeObject } from "../shared/kube/client.ts";
import { KubeError } from "../shared/kube/errors.ts";
import type { ApiResource } from "../shared/api/meta.ts";
import { renderHub, renderSpoke, type Manifest } from "../cli/render/index.ts";
import { isRelayFed, isSpokeRelayFed, readFunctions } from "../cli/render/func-yaml.ts";
import { eventually } from "./support/eventually.ts";

const repoRoot = join(import.meta.dirname, "..");
// Fixed, so a crashed run's leftovers are found and removed by the next one.
const BRIDGE = "ocmf-kwh0";
const ADDRESS = "10.77.0.1";
const LOCK = "/run/ocm-functions-knative-webhooks"; // holds the pid of the run that owns the bridge

type Webhook = { name: "serving" | "eventing"; namespace: string; service: string; binary: string; files: (moduleDir: string) => string[] };

// Where each webhook's objects are in its module: CRDs, config maps and webhook configurations.
const webhooks: Omit<Webhook, "binary">[] = [
  {
    name: "serving",
    namespace: "knative-serving",
    service: "webhook",
    files: (m) => ["config/core/100-namespace.yaml", ...yamlIn(m, "config/core/300-resources"), ...yamlIn(m, "config/core/configmaps"), ...yamlIn(m, "config/core/webhooks")],
  },
  {
    name: "eventing",
    namespace: "knative-eventing",
    service: "eventing-webhook",
    files: (m) => ["config/core/100-namespace.yaml", ...yamlIn(m, "config/core/resources"), ...yamlIn(m, "config/core/configmaps"), ...yamlIn(m, "config/core/webhooks")],
  },
];

// scripts/run.sh builds both before the tests and names them; run on its own, this file asks the build
// script (which builds them once, then answers at once).
function webhookBinaries(): Record<Webhook["name"], string> {
  let serving = process.env.OCM_FUNCTIONS_KNATIVE_SERVING_WEBHOOK;
  let eventing = process.env.OCM_FUNCTIONS_KNATIVE_EVENTING_WEBHOOK;
  if (!serving || !eventing) {
    const out = execFileSync(join(repoRoot, "scripts", "build-tools.sh"), ["knative-webhooks"], { stdio: ["ignore", "pipe", "inherit"] }).toString().trim().split("\n");
    [serving, eventing] = out.slice(-2);
  }
  for (const b of [serving!, eventing!]) if (!existsSync(b)) throw new Error(`${b} is missing after scripts/build-tools.sh knative-webhooks`);
  return { serving: serving!, eventing: eventing! };
}

const ip = (...args: string[]) => execFileSync("ip", args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
const isAlive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

// One run at a time owns the bridge: a live owner is waited for; a dead one's bridge is removed.
async function takeBridge(): Promise<void> {
  await eventually(
    () => {
      try {
        mkdirSync(LOCK);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
        const owner = Number(existsSync(join(LOCK, "pid")) ? readFileSync(join(LOCK, "pid"), "utf8") : NaN);
        if (owner && isAlive(owner)) throw new Error(`${BRIDGE} is in use by the test run with pid ${owner}`);
        rmSync(LOCK, { recursive: true, force: true }); // a crashed run's: take it over
        mkdirSync(LOCK);
      }
      writeFileSync(join(LOCK, "pid"), String(process.pid));
    },
    { timeoutMs: 20 * 60_000, intervalMs: 2_000 },
  );
  if (ip("-o", "link", "show").includes(` ${BRIDGE}:`)) ip("link", "del", BRIDGE);
  const holders = ip("-o", "addr", "show", "to", `${ADDRESS}/32`).trim();
  if (holders) throw new Error(`${ADDRESS} is already on this machine (${holders}); pick another address for this test`);
  ip("link", "add", BRIDGE, "type", "bridge");
  ip("addr", "add", `${ADDRESS}/32`, "dev", BRIDGE);
  ip("link", "set", BRIDGE, "up");
  // Traffic to the address must never leave the machine.
  const route = ip("route", "get", ADDRESS);
  if (!route.startsWith(`local ${ADDRESS} `)) throw new Error(`${ADDRESS} does not route locally: ${route}`);
}

function releaseBridge(): void {
  const owner = existsSync(join(LOCK, "pid")) ? Number(readFileSync(join(LOCK, "pid"), "utf8")) : undefined;
  if (owner !== process.pid) return;
  if (ip("-o", "link", "show").includes(` ${BRIDGE}:`)) ip("link", "del", BRIDGE);
  rmSync(LOCK, { recursive: true, force: true });
}

// The API resource of any kind a cluster serves, from its discovery documents.
class Resources {
  private readonly cache = new Map<string, ApiResource>();
  private readonly client: KubeClient;
  constructor(client: KubeClient) {
    this.client = client;
  }

  async of(o: { apiVersion: string; kind: string }): Promise<ApiResource> {
    const key = `${o.apiVersion}/${o.kind}`;
    const known = this.cache.get(key);
    if (known) return known;
    const [group, version] = o.apiVersion.includes("/") ? o.apiVersion.split("/") : ["", o.apiVersion];
    const list = await this.client.request<{ resources: { name: string; kind: string; namespaced: boolean }[] }>("GET", group ? `/apis/${group}/${version}` : `/api/${version}`);
    const r = list.resources.find((x) => x.kind === o.kind && !x.name.includes("/"));
    if (!r) throw new Error(`${key} is not served`);
    const resource = { group: group!, version: version!, kind: o.kind, plural: r.name, namespaced: r.namespaced };
    this.cache.set(key, resource);
    return resource;
  }

  // Discovery follows a new CRD a little after it is Established.
  async create<T extends KubeObject>(o: T & { apiVersion: string; kind: string }, dryRun = false): Promise<T> {
    const r = await eventually(() => this.of(o), { timeoutMs: 30_000 });
    const path = resourcePath(r, { namespace: o.metadata.namespace }) + (dryRun ? "?dryRun=All" : "");
    return this.client.request<T>("POST", path, o);
  }

  async get<T extends KubeObject>(o: { apiVersion: string; kind: string; metadata: { name?: string; namespace?: string } }): Promise<T | undefined> {
    return this.client.get<T>(await this.of(o), o.metadata.name!, o.metadata.namespace);
  }
}

type Side = { cluster: LocalCluster; client: KubeClient; resources: Resources; processes: Managed[] };
const sides = new Map<string, Side>();
let local: LocalClusters | undefined;
const startMs: Record<string, number> = {};

const crdEstablished = async (side: Side, name: string) => {
  const crd = await side.resources.get<KubeObject & { status?: { conditions?: { type: string; status: string }[] } }>({ apiVersion: "apiextensions.k8s.io/v1", kind: "CustomResourceDefinition", metadata: { name } });
  expect(crd?.status?.conditions?.some((c) => c.type === "Established" && c.status === "True"), `CRD ${name}`).toBe(true);
};

// Knative's namespace, CRDs, config maps and webhook configurations, as its release installs them.
async function installKnative(side: Side, w: Omit<Webhook, "binary">, moduleDir: string): Promise<void> {
  const docs = w
    .files(moduleDir)
    .flatMap((f) => parseAllDocuments(readFileSync(join(moduleDir, f), "utf8")).map((d) => d.toJS() as (KubeObject & { apiVersion: string; kind: string }) | null))
    .filter((d): d is KubeObject & { apiVersion: string; kind: string } => d !== null);
  const rank = (d: { kind: string }) => ["Namespace", "CustomResourceDefinition"].indexOf(d.kind) + 1 || 3;
  docs.sort((a, b) => rank(a) - rank(b));
  for (const doc of docs) {
    await side.resources.create(doc);
    if (doc.kind === "CustomResourceDefinition") await eventually(() => crdEstablished(side, doc.metadata.name!), { timeoutMs: 30_000 });
  }
}

// The selectorless Service the webhook configurations name, with its one endpoint on the bridge.
async function routeToWebhook(side: Side, w: Omit<Webhook, "binary">, port: number): Promise<void> {
  const portName = "https-webhook";
  await side.resources.create({ apiVersion: "v1", kind: "Service", metadata: { name: w.service, namespace: w.namespace }, spec: { ports: [{ name: portName, port: 443, targetPort: port }] } });
  await side.resources.create({
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: { name: `${w.service}-local`, namespace: w.namespace, labels: { "kubernetes.io/service-name": w.service } },
    addressType: "IPv4",
    endpoints: [{ addresses: [ADDRESS], conditions: { ready: true } }],
    ports: [{ name: portName, port, protocol: "TCP" }],
  });
}

// Each webhook as its Deployment runs it (config/core/deployments/webhook.yaml's env), minus the pod.
async function startWebhook(side: Side, w: Webhook, port: number): Promise<Managed> {
  const kubeconfig = join(side.cluster.dir, "admin.kubeconfig"); // written by startClusters
  const env: Record<string, string> = {
    SYSTEM_NAMESPACE: w.namespace,
    CONFIG_LOGGING_NAME: "config-logging",
    CONFIG_OBSERVABILITY_NAME: "config-observability",
    WEBHOOK_NAME: w.service,
    WEBHOOK_PORT: String(port),
    POD_NAME: `${w.service}-${side.cluster.name}`,
    KUBECONFIG: kubeconfig,
    PROFILING_PORT: String(await freePort()), // 8008 by default: two webhooks on one machine would collide
    ...(w.name === "eventing" ? { METRICS_DOMAIN: "knative.dev/eventing", SINK_BINDING_SELECTION_MODE: "exclusion" } : {}),
  };
  return startProcess(dirname(side.cluster.dir), `knative-${w.name}-webhook-${side.cluster.name}`, w.binary, [`--kubeconfig=${kubeconfig}`], env);
}

// A webhook is in force once the API server sends it what it must default and what it must refuse.
const readiness: Record<Webhook["name"], { defaulted: KubeObject & { apiVersion: string; kind: string }; seen: (o: KubeObject) => boolean; refused: KubeObject & { apiVersion: string; kind: string } }> = {
  serving: {
    defaulted: { apiVersion: "serving.knative.dev/v1", kind: "Service", metadata: { name: "probe", namespace: "default" }, spec: { template: { spec: { containers: [{ image: "dev.local/probe" }] } } } },
    seen: (o) => (o as unknown as { spec: { template: { spec: { containers: { name?: string }[] } } } }).spec.template.spec.containers[0]!.name === "user-container",
    refused: { apiVersion: "serving.knative.dev/v1", kind: "Service", metadata: { name: "probe", namespace: "default" }, spec: { template: { spec: { containerConcurrency: -1, containers: [{ image: "dev.local/probe" }] } } } },
  },
  eventing: {
    defaulted: { apiVersion: "eventing.knative.dev/v1", kind: "Trigger", metadata: { name: "probe", namespace: "default" }, spec: { broker: "probe", subscriber: { uri: "http://probe.invalid/" } } },
    seen: (o) => (o.metadata.labels as Record<string, string> | undefined)?.["eventing.knative.dev/broker"] === "probe",
    refused: { apiVersion: "sources.knative.dev/v1", kind: "PingSource", metadata: { name: "probe", namespace: "default" }, spec: { schedule: "not a schedule", sink: { uri: "http://probe.invalid/" } } },
  },
};

async function untilInForce(side: Side, w: Webhook, webhook: Managed): Promise<void> {
  const probe = readiness[w.name];
  const exited = () => webhook.child.exitCode !== null || webhook.child.signalCode !== null;
  await eventually(
    async () => {
      if (exited()) return; // reported below, without waiting out the timeout
      expect(probe.seen(await side.resources.create(probe.defaulted, true)), `${w.name} defaulting`).toBe(true);
      const refusal = await side.resources.create(probe.refused, true).then(
        () => "accepted",
        (err: unknown) => (err instanceof KubeError ? err.message : String(err)),
      );
      expect(refusal, `${w.name} validation`).toMatch(/admission webhook "validation\.webhook\./);
    },
    { timeoutMs: 120_000, intervalMs: 250 },
  ).catch((err: Error) => {
    throw new Error(`${err.message}\n${w.name} webhook log:\n${logTail(webhook)}`);
  });
  if (exited()) throw new Error(`the ${w.name} webhook on ${side.cluster.name} exited with ${webhook.child.exitCode ?? webhook.child.signalCode}:\n${logTail(webhook)}`);
}

beforeAll(async () => {
  const binaries = webhookBinaries();
  const modules = knativeModuleDirs(); // the modules' source, at the versions tools/knative-webhooks pins
  process.env.NO_PROXY = [process.env.NO_PROXY, ADDRESS, ".svc"].filter(Boolean).join(","); // never through a proxy
  await takeBridge();
  local = await startClusters({ names: ["hub", "spoke"], controllers: false, crds: false, apiserverFlags: ["--enable-aggregator-routing=true"] });
  await Promise.all(
    ["hub", "spoke"].map(async (name) => {
      const cluster = local!.get(name);
      const client = KubeClient.fromKubeconfig(cluster.adminKubeconfig);
      const side: Side = { cluster, client, resources: new Resources(client), processes: [] };
      sides.set(name, side);
      for (const w of webhooks) await installKnative(side, w, modules[w.name]);
      const t0 = Date.now();
      await Promise.all(
        webhooks.map(async (spec) => {
          const w = { ...spec, binary: binaries[spec.name] };
          const port = await freePort();
          await routeToWebhook(side, w, port);
          const p = await startWebhook(side, w, port);
          side.processes.push(p);
          await untilInForce(side, w, p);
          startMs[`${name}/${w.name}`] = Date.now() - t0;
        }),
      );
    }),
  );
  console.log(`[knative-webhooks] in force after (ms): ${JSON.stringify(startMs)}`);
}, 30 * 60_000);

afterAll(async () => {
  for (const side of sides.values()) {
    for (const p of side.processes) await stopProcess(p);
    side.client.close();
  }
  await local?.stop();
  releaseBridge();
}, 120_000);

type Created = { object: Manifest; created?: Manifest; error?: string };
const created: Record<string, Created[]> = {};

// Every rendered object, created in render order, as `kubectl create -f` would.
async function createAll(side: Side, objects: Manifest[]): Promise<Created[]> {
  const out: Created[] = [];
  for (const object of objects) {
    try {
      out.push({ object, created: await side.resources.create(object as Manifest & KubeObject) });
    } catch (err) {
      out.push({ object, error: err instanceof Error ? err.message : String(err) });
    }
    if (object.kind === "CustomResourceDefinition") await eventually(() => crdEstablished(side, object.metadata.name), { timeoutMs: 30_000 });
  }
  return out;
}

const failures = (results: Created[]) => results.filter((r) => r.error).map((r) => `${r.object.kind} ${r.object.metadata.name}: ${r.error}`);
// What the API server answered: read loosely, as any client of an unknown kind does.
type Loose = { [field: string]: any };
const createdOf = (side: string, kind: string): Loose[] => created[side]!.filter((r) => r.object.kind === kind).map((r) => r.created as Loose);

describe("what cli/render makes, judged by Knative's webhooks", () => {
  it("creates every object renderHub makes on a hub with Knative's webhooks in force", async () => {
    const hub = sides.get("hub")!;
    const objects = renderHub();
    created.hub = await createAll(hub, objects);
    expect(failures(created.hub)).toEqual([]);
    expect(created.hub.length).toBe(objects.length);
  });

  it("creates every object renderSpoke makes, the bootstrap kubeconfig included, on a spoke", async () => {
    const hubCluster = local!.get("hub");
    const { kubeconfig } = await hubCluster.createBootstrapToken(["system:bootstrappers:managedcluster"]);
    created.spoke = await createAll(sides.get("spoke")!, renderSpoke({ clusterName: "cluster1", bootstrapKubeconfig: kubeconfig }));
    expect(failures(created.spoke)).toEqual([]);
    expect(created.spoke.map((r) => r.object.kind)).toContain("Secret");
  });

  it.each(["hub", "spoke"])("has Serving default every %s function's Knative Service: user-container, timeoutSeconds, creator, probes", (side) => {
    const services = createdOf(side, "Service").filter((s) => s.apiVersion === "serving.knative.dev/v1");
    expect(services.length).toBe(readFunctions().filter((f) => f.side === side).length);
    for (const s of services) {
      const spec = s.spec.template.spec;
      expect(spec.containers[0].name, s.metadata.name).toBe("user-container");
      expect(s.metadata.annotations["serving.knative.dev/creator"]).toBe("admin");
      expect(s.metadata.annotations["serving.knative.dev/lastModifier"]).toBe("admin");
      expect(spec.timeoutSeconds).toBe(300); // config-defaults' revision-timeout-seconds: the render leaves it unset
      expect(spec.enableServiceLinks).toBe(false);
      expect(spec.containers[0].readinessProbe.successThreshold).toBe(1);
      expect(s.spec.traffic).toEqual([{ latestRevision: true, percent: 100 }]);
    }
  });

  it.each(["hub", "spoke"])("has Eventing default the %s Broker's config and every Trigger's broker label and subscriber namespace", (side) => {
    const [broker] = createdOf(side, "Broker");
    expect(broker!.spec.config).toEqual({ apiVersion: "v1", kind: "ConfigMap", name: "config-br-default-channel", namespace: "knative-eventing" });
    // one per Broker-fed function (the hub's lease monitor has a relay of its own, and the spoke's relay
    // delivers to agent-config itself), and one for the recheck requests
    const triggers = createdOf(side, "Trigger");
    const fns = readFunctions().filter((f) => f.side === side);
    expect(triggers.length).toBe(fns.filter((f) => !isRelayFed(f) && !isSpokeRelayFed(f)).length + 1);
    // a function with several subscriptions has them as one `any` of exact filters, as Knative stored it
    expect(triggers.some((t) => t.spec.filters?.[0]?.any?.length > 1)).toBe(true);
    for (const t of triggers) {
      expect(t.metadata.labels["eventing.knative.dev/broker"]).toBe(t.spec.broker);
      expect(t.spec.subscriber.ref.namespace).toBe(t.metadata.namespace);
    }
  });

  type Broken = { side: string; kind: string; what: string; breakIt: (o: any) => void; refusal: RegExp };
  const broken: Broken[] = [
    { side: "hub", kind: "Service", what: "min-scale -3", breakIt: (s) => (s.spec.template.metadata.annotations["autoscaling.knative.dev/min-scale"] = "-3"), refusal: /expected 0 <= -3 <= 2147483647: spec\.template\.metadata\.annotations\.autoscaling\.knative\.dev\/min-scale/ },
    { side: "spoke", kind: "Service", what: "timeoutSeconds over the 600 s cap", breakIt: (s) => (s.spec.template.spec.timeoutSeconds = 3600), refusal: /expected 0 <= 3600 <= 600: spec\.template\.spec\.timeoutSeconds/ },
    { side: "hub", kind: "Broker", what: "a backoff delay \"soon\"", breakIt: (b) => (b.spec.delivery.backoffDelay = "soon"), refusal: /invalid value: soon: spec\.delivery\.backoffDelay/ },
    { side: "hub", kind: "Trigger", what: "no subscriber", breakIt: (t) => delete t.spec.subscriber, refusal: /expected at least one, got none: spec\.subscriber\.ref, spec\.subscriber\.uri/ },
    { side: "spoke", kind: "Trigger", what: "no broker", breakIt: (t) => delete t.spec.broker, refusal: /missing field\(s\): spec\.broker/ },
    { side: "hub", kind: "ContainerSource", what: "a sink that names nothing", breakIt: (c) => (c.spec.sink = {}), refusal: /expected at least one, got none: spec\.sink\.ref, spec\.sink\.uri/ },
    { side: "spoke", kind: "ContainerSource", what: "no containers in its template", breakIt: (c) => (c.spec.template.spec.containers = []), refusal: /missing field\(s\): spec\.containers/ },
  ];

  it.each(broken)("refuses a $side $kind with $what, with Knative's reason", async ({ side, kind, breakIt, refusal }) => {
    const original = created[side]!.find((r) => r.object.kind === kind && (kind !== "Service" || r.object.apiVersion === "serving.knative.dev/v1"))!.object;
    const copy = structuredClone(original) as Manifest & Loose;
    copy.metadata.name = `broken-${original.metadata.name}`.slice(0, 63);
    breakIt(copy);
    const answer = await sides.get(side)!.resources.create(copy as Manifest & KubeObject).then(
      () => "created",
      (err: unknown) => (err instanceof KubeError ? err.message : String(err)),
    );
    expect(answer).toMatch(/admission webhook "validation\.webhook\.(serving|eventing)\.knative\.dev" denied the request/);
    expect(answer).toMatch(refusal);
  });
});
