// What `ocmf install hub` and `ocmf join` put on a cluster, run as Knative would run it but on a local
// cluster without Knative's controllers: every Knative Service as its function bundle, every
// ContainerSource as a relay bundle, every Deployment as its bundle, each a process
// under the identity of its ServiceAccount (a TokenRequest token in a kubeconfig, since no pod mounts
// one), with the env its object gives, fed as its Broker and Triggers (or its sink) say. It reads the
// objects from the cluster, so it runs what was applied, not what a render says.
import { again } from "../../cli/transient.ts";
import { mkdirSync, writeFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { parse } from "yaml";
import { freePort, type LocalCluster } from "../control-plane/clusters.ts";
import { logTail, startGuard, startProcess, stopProcess, type Managed } from "../control-plane/processes.ts";
import { Discovery } from "../../cli/discovery.ts";
import { partOfSelector } from "../../cli/render/index.ts";
import { triggerFilters, type TriggerSpec } from "../../cli/render/objects.ts";
import { KubeClient, resourcePath, type KubeObject } from "../../shared/kube/client.ts";
import { buildKubeconfig } from "../../shared/kube/kubeconfig.ts";
import { targetSinks, type RelayConfigInput } from "../../components/relay/config.ts";
import { TargetExtension } from "../../shared/events.ts";
import { SecretResource } from "../../shared/api/kube.ts";

export type DeployedOptions = {
  cluster: LocalCluster; // where the objects are; read with its admin credentials
  namespace: string; // where install or join put the functions and sources
  dist: string; // what `npm run build` wrote
  runDir: string; // kubeconfigs and logs
  recordDir?: string; // each relay records what it delivers to <recordDir>/<its object's name>.jsonl
};

export type Deployed = {
  functions: Map<string, string>; // Knative Service name → URL
  processes: Managed[];
  // Stops the process of one object (e.g. a spoke's relay, which keeps its heartbeat), or starts it again as it was.
  halt(object: string): Promise<void>;
  resume(object: string): void;
  stop(): Promise<void>;
};

type Env = { name: string; value?: string; valueFrom?: unknown }[];
type Container = { image: string; env?: Env; volumeMounts?: { name: string; mountPath: string }[] };
type PodSpec = { serviceAccountName?: string; containers: Container[]; volumes?: { name: string; secret?: { secretName: string; items?: { key: string; path: string }[] } }[] };
type Ref = { apiVersion: string; kind: string; name: string };
type KService = KubeObject & { spec: { template: { spec: PodSpec } } };
type Trigger = KubeObject & { spec: TriggerSpec & { broker: string; subscriber: { ref: Ref } } };
type ContainerSource = KubeObject & { spec: { template: { spec: PodSpec }; sink: { ref: Ref } } };
type Deployment = KubeObject & { spec: { template: { spec: PodSpec } } };

const name = (o: KubeObject) => o.metadata.name!;

function envOf(c: Container, what: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of c.env ?? []) {
    if (e.valueFrom !== undefined) throw new Error(`${what}: env ${e.name} comes from valueFrom, which local processes do not resolve`);
    out[e.name] = e.value ?? "";
  }
  return out;
}

// A Secret mounted where OCM_KUBECONFIG_DIR points (Hosted mode: the managed cluster's kubeconfig) is
// written into the process's own kubeconfig folder, as the kubelet would project it. Any other volume
// is refused: a pod's file left out would be a silent gap.
async function mountedKubeconfigs(admin: KubeClient, namespace: string, pod: PodSpec, c: Container, env: Record<string, string>, dir: string, what: string): Promise<void> {
  for (const v of pod.volumes ?? []) {
    const mount = c.volumeMounts?.find((m) => m.name === v.name);
    if (!mount) continue;
    if (!v.secret || mount.mountPath !== env.OCM_KUBECONFIG_DIR) throw new Error(`${what}: volume ${v.name} at ${mount.mountPath} is not a Secret of kubeconfigs at OCM_KUBECONFIG_DIR, which local processes cannot give it`);
    const secret = await admin.get<KubeObject & { data?: Record<string, string> }>(SecretResource, v.secret.secretName, namespace);
    if (!secret) throw new Error(`${what}: Secret ${v.secret.secretName} of volume ${v.name} is missing`);
    for (const item of v.secret.items ?? Object.keys(secret.data ?? {}).map((key) => ({ key, path: key }))) {
      const data = secret.data?.[item.key];
      if (data === undefined) throw new Error(`${what}: Secret ${v.secret.secretName} has no key ${item.key}`);
      writeFileSync(join(dir, item.path), Buffer.from(data, "base64"), { mode: 0o600 });
    }
  }
}

export async function runDeployed(o: DeployedOptions): Promise<Deployed> {
  mkdirSync(join(o.runDir, "pids"), { recursive: true });
  startGuard(o.runDir);
  const admin = KubeClient.fromKubeconfig(o.cluster.adminKubeconfig);
  const discovery = new Discovery(admin);
  const processes: Managed[] = [];
  const functions = new Map<string, string>();
  const stop = async () => {
    await Promise.all([...processes].reverse().map((p) => stopProcess(p)));
  };

  const list = async <T extends KubeObject>(apiVersion: string, kind: string): Promise<T[]> => {
    const t = { apiVersion, kind };
    if (!(await discovery.isServed(t))) return [];
    // a CRD just established answers 429 while its storage initializes: try again, as kubectl does
    return (await again(async () => admin.list<T>(await discovery.resourceOf(t), { namespace: o.namespace, labelSelector: partOfSelector }))).items;
  };

  // A kubeconfig for a ServiceAccount, its token from the TokenRequest API.
  const identity = async (account: string, file: string): Promise<string> => {
    const path = `${resourcePath({ group: "", version: "v1", kind: "ServiceAccount", plural: "serviceaccounts", namespaced: true }, { namespace: o.namespace, name: account })}/token`;
    const answer = await admin.request<{ status: { token: string } }>("POST", path, { apiVersion: "authentication.k8s.io/v1", kind: "TokenRequest", spec: { expirationSeconds: 7200 } });
    const text = buildKubeconfig({ server: o.cluster.url, caPem: o.cluster.caPem, clusterName: o.cluster.name, userName: `system:serviceaccount:${o.namespace}:${account}`, credentials: { kind: "token", token: answer.status.token } });
    writeFileSync(file, text, { mode: 0o600 });
    return file;
  };

  // The bundle an image stands for: <registry>/ocm-functions/<name>:<tag>.
  const bundleOf = (image: string): string => {
    const m = /\/ocm-functions\/([a-z0-9-]+):/.exec(image);
    if (!m) throw new Error(`image ${image} is not one of ours`);
    const candidates = [join(o.dist, "functions", m[1]!, "index.js"), join(o.dist, "components", `${m[1]}.js`)];
    const found = candidates.find((c) => existsSync(c));
    if (!found) throw new Error(`no bundle for image ${image} in ${o.dist}`);
    return found;
  };

  const launches = new Map<string, { bundle: string; env: Record<string, string> }>();
  const start = (what: string, bundle: string, env: Record<string, string>): Managed => {
    launches.set(what, { bundle, env });
    const p = startProcess(o.runDir, `${o.cluster.name}-${what}`, process.execPath, [bundle], env);
    processes.push(p);
    return p;
  };
  const recording = (what: string): Record<string, string> => (o.recordDir ? { OCM_RELAY_RECORD: join(o.recordDir, `${what}.jsonl`) } : {});
  const halt = async (what: string) => {
    const name = `${o.cluster.name}-${what}`;
    const running = processes.filter((p) => p.name === name);
    if (!running.length) throw new Error(`no process runs ${what}`);
    for (const p of running) {
      await stopProcess(p);
      processes.splice(processes.indexOf(p), 1);
    }
  };
  const resume = (what: string) => {
    const l = launches.get(what);
    if (!l) throw new Error(`${what} was never started`);
    start(what, l.bundle, l.env);
  };

  const dirFor = (what: string) => {
    const dir = join(o.runDir, what);
    mkdirSync(dir, { recursive: true });
    return dir;
  };

  try {
    const [services, triggers, containerSources, apiServerSources, pingSources, deployments] = await Promise.all([
      list<KService>("serving.knative.dev/v1", "Service"),
      list<Trigger>("eventing.knative.dev/v1", "Trigger"),
      list<ContainerSource>("sources.knative.dev/v1", "ContainerSource"),
      list<KubeObject>("sources.knative.dev/v1", "ApiServerSource"),
      list<KubeObject>("sources.knative.dev/v1", "PingSource"),
      list<Deployment>("apps/v1", "Deployment"),
    ]);

    // What ocmf renders feeds every Broker from a relay (a ContainerSource); Knative's own adapters do
    // not run here, and an object left unrun would be a silent gap.
    const unrun = [...apiServerSources, ...pingSources].map((x) => `${x.kind ?? "source"} ${name(x)}`);
    if (unrun.length) throw new Error(`${unrun.join(", ")}: ApiServerSources and PingSources do not run locally`);

    // Functions first: the relays need their URLs.
    await Promise.all(
      services.map(async (s) => {
        const pod = s.spec.template.spec;
        const container = pod.containers[0]!;
        const env = envOf(container, `Service ${name(s)}`);
        const kubeconfigs = dirFor(`${name(s)}/kubeconfigs`);
        // the function's own cluster, as its OCM_CLUSTER_NAME names it, is where its pod would run
        await identity(pod.serviceAccountName ?? "default", join(kubeconfigs, `${env.OCM_CLUSTER_NAME || "hub"}.kubeconfig`));
        await mountedKubeconfigs(admin, o.namespace, pod, container, env, kubeconfigs, `Service ${name(s)}`);
        let port = await freePort();
        let p = start(name(s), bundleOf(container.image), { ...env, PORT: String(port), OCM_KUBECONFIG_DIR: kubeconfigs });
        let url = `http://127.0.0.1:${port}/`;
        for (let delay = 50, tries = 1; ; delay = Math.min(delay * 1.5, 500)) {
          // a port free when it was picked may be taken before the process listens: pick another
          if (p.child.exitCode !== null && tries < 3 && logTail(p).includes("EADDRINUSE")) {
            tries++;
            port = await freePort();
            p = start(name(s), bundleOf(container.image), { ...env, PORT: String(port), OCM_KUBECONFIG_DIR: kubeconfigs });
            url = `http://127.0.0.1:${port}/`;
            continue;
          }
          if (p.child.exitCode !== null) throw new Error(`function ${name(s)} exited with ${p.child.exitCode}:\n${logTail(p)}`);
          const ok = await fetch(`${url}health/readiness`).then((r) => r.ok, () => false);
          if (ok) break;
          await new Promise((r) => setTimeout(r, delay));
        }
        functions.set(name(s), url);
      }),
    );

    // A relay in recheck mode takes recheck requests on a core Service named as its ContainerSource
    // (cli/render/objects.ts recheckRoute): here, on a loopback port of its own.
    const relayConfigs = new Map(containerSources.map((cs) => [name(cs), parse(envOf(cs.spec.template.spec.containers[0]!, `ContainerSource ${name(cs)}`).OCM_RELAY_CONFIG ?? "{}") as RelayConfigInput]));
    const rechecks = new Map<string, number>();
    // Ports picked now and listened on only once the relays start: none may be picked twice.
    const picked = new Set<number>();
    const unpickedPort = async (): Promise<number> => {
      for (;;) {
        const port = await freePort();
        if (picked.has(port)) continue;
        picked.add(port);
        return port;
      }
    };
    for (const [source, config] of relayConfigs) if (config.rechecks) rechecks.set(source, await unpickedPort());
    const urlOf = (ref: Ref) => {
      if (ref.kind === "Service" && ref.apiVersion === "v1" && rechecks.has(ref.name)) return `http://127.0.0.1:${rechecks.get(ref.name)}/`;
      const url = ref.kind === "Service" && ref.apiVersion.startsWith("serving.knative.dev/") ? functions.get(ref.name) : undefined;
      if (!url) throw new Error(`no running function for ${ref.kind} ${ref.name}`);
      return url;
    };
    // What a Broker delivers: to each Trigger's subscriber, the events its filter lets through.
    type Sink = { name: string; url: string; filters: Record<string, string>[] };
    const brokerSinks = (broker: string): Sink[] => {
      const bySubscriber = new Map<string, { ref: Ref; filters: Record<string, string>[] }>();
      for (const t of triggers.filter((x) => x.spec.broker === broker)) {
        const { ref } = t.spec.subscriber;
        const entry = bySubscriber.get(ref.name) ?? { ref, filters: [] };
        entry.filters.push(...triggerFilters(t.spec));
        bySubscriber.set(ref.name, entry);
      }
      return [...bySubscriber].map(([subscriber, { ref, filters }]) => ({ name: subscriber, url: urlOf(ref), filters }));
    };
    const targetUrl = (broker: string, target: string) => {
      const t = triggers.find((x) => x.spec.broker === broker && triggerFilters(x.spec).some((f) => f[TargetExtension] === target));
      if (!t) throw new Error(`no Trigger on Broker ${broker} delivers to target ${target}`);
      return urlOf(t.spec.subscriber.ref);
    };
    const sinkOf = (ref: Ref): { sinks: Sink[] } | { kSink: string } => (ref.kind === "Broker" ? { sinks: brokerSinks(ref.name) } : { kSink: urlOf(ref) });

    for (const cs of containerSources) {
      const pod = cs.spec.template.spec;
      const container = pod.containers[0]!;
      const env = envOf(container, `ContainerSource ${name(cs)}`);
      const file = await identity(pod.serviceAccountName ?? "default", join(dirFor(name(cs)), "identity.kubeconfig"));
      const config = relayConfigs.get(name(cs))!;
      // in-cluster credentials are the pod's service account: here, the same identity from a file
      for (const [cluster, creds] of Object.entries(config.clusters)) if ("inCluster" in creds) config.clusters[cluster] = { kubeconfigFile: file };
      // a sink the render addressed by a function Service's cluster-local name: that function's process
      config.sinks = (config.sinks ?? []).map((s) => {
        const m = /^http:\/\/([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local\/?$/.exec(s.url);
        return m && m[2] === o.namespace ? { ...s, url: urlOf({ apiVersion: "serving.knative.dev/v1", kind: "Service", name: m[1]! }) } : s;
      });
      const sink = sinkOf(cs.spec.sink.ref);
      // A Broker's targets (components/relay/config.ts kSinkTargets), each straight to the function its
      // Trigger names for it; other Broker sources fan out as the Triggers filter.
      if (config.kSinkTargets && cs.spec.sink.ref.kind === "Broker") {
        const broker = cs.spec.sink.ref.name;
        config.sinks = [...config.sinks, ...targetSinks(config.kSinkTargets, (target) => targetUrl(broker, target))];
        delete config.kSinkTargets;
      } else if ("sinks" in sink) config.sinks = [...config.sinks, ...sink.sinks];
      if (config.rechecks) config.rechecks = { ...config.rechecks, host: "127.0.0.1", port: rechecks.get(name(cs))! };
      // the kubelet probes the pod's address; here a loopback port of its own
      if (config.heartbeat?.health) config.heartbeat = { ...config.heartbeat, health: { host: "127.0.0.1", port: await unpickedPort() } };
      start(name(cs), bundleOf(container.image), { ...env, OCM_RELAY_CONFIG: JSON.stringify(config), ...recording(name(cs)), ...("kSink" in sink ? { K_SINK: sink.kSink } : {}) });
    }

    for (const d of deployments) {
      const pod = d.spec.template.spec;
      const container = pod.containers[0]!;
      const env = envOf(container, `Deployment ${name(d)}`);
      const file = await identity(pod.serviceAccountName ?? "default", join(dirFor(name(d)), "identity.kubeconfig"));
      start(name(d), bundleOf(container.image), { ...env, KUBECONFIG: file });
    }
  } catch (err) {
    await stop();
    admin.close();
    throw err;
  }
  admin.close();
  return { functions, processes, halt, resume, stop };
}
