// The objects both sides are made of: a function's identity (ServiceAccount and its manifests/rbac
// roles), its workload (a Knative Service, or a Deployment and a Service), the Broker and the Triggers
// of its subscriptions, all as plain objects.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import type { FunctionDeployment } from "./func-yaml.ts";
import { RecheckDueType, RecheckType, TargetExtension } from "../../shared/events.ts";
import { RechecksVariable } from "../../shared/sdk.ts";

export type Manifest = {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  [field: string]: unknown;
};

// Every object we render carries it, so an uninstall finds them all with one selector.
export const PartOfLabel = "app.kubernetes.io/part-of";
export const PartOf = "ocm-functions";
export const partOfSelector = `${PartOfLabel}=${PartOf}`;

export const BrokerClassAnnotation = "eventing.knative.dev/broker.class";
export const DefaultBrokerClass = "MTChannelBasedBroker";

// How a function runs: a Knative Service, or (for clusters with Eventing but no Serving) a Deployment
// and a core Service.
export type Workloads = "knative" | "deployments";

export type Resources = { requests?: { cpu?: string; memory?: string }; limits?: { cpu?: string; memory?: string } };

// What both renders share.
export type CommonOptions = {
  registry?: string; // images are <registry>/ocm-functions/<name>:<tag>; default dev.local, which Knative does not resolve to digests
  tag?: string; // default latest
  brokerClass?: string; // the Brokers' eventing.knative.dev/broker.class; default MTChannelBasedBroker
  containerConcurrency?: number; // per function pod, unless its func.yaml sets limits.concurrency; default 10
  timeoutSeconds?: number; // per request; unset leaves it to Knative's config-defaults (300 s, capped by max-revision-timeout-seconds)
  resources?: Resources; // per function container, under what its func.yaml sets; default below
  // Values for func.yaml's run.envs: fills {{ env:NAME }} placeholders and replaces the value of any
  // variable of that name (e.g. OCM_CLUSTER_AUTO_APPROVAL_USERS).
  env?: Readonly<Record<string, string>>;
  workloads?: Workloads; // default knative
};

export const defaultResources: Required<Resources> = { requests: { cpu: "25m", memory: "96Mi" }, limits: { memory: "256Mi" } };

export const imageOf = (o: CommonOptions, name: string) => `${o.registry ?? "dev.local"}/ocm-functions/${name}:${o.tag ?? "latest"}`;

export function withPartOf(o: Manifest): Manifest {
  return { ...o, metadata: { ...o.metadata, labels: { ...o.metadata.labels, [PartOfLabel]: PartOf } } };
}

export function readManifests(...path: string[]): Manifest[] {
  const file = join(import.meta.dirname, "..", "..", "manifests", ...path);
  return parseAllDocuments(readFileSync(file, "utf8"))
    .map((d) => d.toJS() as Manifest | null)
    .filter((d): d is Manifest => d !== null);
}

// The CRDs as generated into manifests/crds (OCM's and our AgentConfig). A spoke serves ClusterClaims and
// AppliedManifestWorks (OCM's klusterlet installs them there); every other kind is the hub's.
export function ocmCrds(): Manifest[] {
  const dir = join(import.meta.dirname, "..", "..", "manifests", "crds");
  return readdirSync(dir)
    .filter((f) => f.endsWith(".crd.yaml"))
    .sort()
    .flatMap((f) => readManifests("crds", f));
}
const spokeCrdKinds: readonly string[] = ["ClusterClaim", "AppliedManifestWork"];
export const isSpokeCrd = (crd: Manifest) => spokeCrdKinds.includes((crd.spec as { names: { kind: string } }).names.kind);

export const namespace = (name: string): Manifest => ({ apiVersion: "v1", kind: "Namespace", metadata: { name } });

const rbacApi = "rbac.authorization.k8s.io/v1";

// A ServiceAccount and its roles bound to it (a function's from its definition, cli/render/rbac.ts; a
// component's from manifests/rbac/<component>.yaml): a ClusterRoleBinding per ClusterRole, a RoleBinding
// per Role (in the Role's namespace), each named after its role. `relocate` moves Roles written for a
// default namespace to the one being rendered.
export function identity(o: { account: string; namespace: string; roles: readonly Manifest[]; relocate?: Readonly<Record<string, string>> }): Manifest[] {
  const subjects = [{ kind: "ServiceAccount", name: o.account, namespace: o.namespace }];
  const out: Manifest[] = [{ apiVersion: "v1", kind: "ServiceAccount", metadata: { name: o.account, namespace: o.namespace } }];
  for (const doc of o.roles) {
    const roleRef = { apiGroup: "rbac.authorization.k8s.io", kind: doc.kind, name: doc.metadata.name };
    if (doc.kind === "ClusterRole") {
      out.push(doc, { apiVersion: rbacApi, kind: "ClusterRoleBinding", metadata: { name: doc.metadata.name }, roleRef, subjects });
    } else if (doc.kind === "Role") {
      const ns = o.relocate?.[doc.metadata.namespace!] ?? doc.metadata.namespace!;
      out.push({ ...doc, metadata: { ...doc.metadata, namespace: ns } });
      out.push({ apiVersion: rbacApi, kind: "RoleBinding", metadata: { name: doc.metadata.name, namespace: ns }, roleRef, subjects });
    } else throw new Error(`the roles of ${o.account}: unexpected kind ${doc.kind}`);
  }
  return out;
}

// func.yaml's values with {{ env:NAME }} filled from `values`; a value given for a variable's own name
// replaces what func.yaml says.
const envPlaceholder = /^\{\{\s*env:([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$/;
export function functionEnv(f: FunctionDeployment, values: Readonly<Record<string, string>>): { name: string; value: string }[] {
  return f.run.envs.map(({ name, value }) => {
    const placeholder = envPlaceholder.exec(value)?.[1];
    if (placeholder) {
      const filled = values[placeholder];
      if (filled === undefined) throw new Error(`functions/${f.name}/func.yaml: ${name} needs ${placeholder}; give it in the options' env`);
      return { name, value: filled };
    }
    if (value.includes("{{")) throw new Error(`functions/${f.name}/func.yaml: ${name}: only {{ env:NAME }} placeholders can be rendered`);
    return { name, value: values[name] ?? value };
  });
}

export const envValue = (env: { name: string; value: string }[], name: string) => env.find((e) => e.name === name)?.value;

// The function's server (shared/cloudevents-server.ts) listens on 8080 and serves these two health paths.
const FUNCTION_PORT = 8080;

// kubeconfigs: a Secret's keys mounted as kubeconfig files in one folder (OCM_KUBECONFIG_DIR).
type ContainerOptions = CommonOptions & { containerEnv: { name: string; value: string }[]; kubeconfigs?: KubeconfigFiles };
export type KubeconfigFiles = { secretName: string; dir: string; files: { key: string; path: string }[] };

const KubeconfigVolume = "kubeconfigs";
const kubeconfigVolumes = (k?: KubeconfigFiles) => (k ? { volumes: [{ name: KubeconfigVolume, secret: { secretName: k.secretName, items: k.files } }] } : {});
const kubeconfigMounts = (k?: KubeconfigFiles) => (k ? { volumeMounts: [{ name: KubeconfigVolume, mountPath: k.dir, readOnly: true }] } : {});

// A function's container as both workload forms run it: the image, env, resources and health paths.
export function functionContainer(f: FunctionDeployment, o: ContainerOptions) {
  const own = f.deploy.options?.resources;
  const base = o.resources ?? defaultResources;
  const resources = {
    requests: { ...base.requests, ...own?.requests },
    limits: { ...base.limits, cpu: own?.limits?.cpu ?? base.limits?.cpu, memory: own?.limits?.memory ?? base.limits?.memory },
  };
  for (const side of [resources.requests, resources.limits]) for (const k of ["cpu", "memory"] as const) if (side[k] === undefined) delete side[k];
  return {
    image: imageOf(o, f.name),
    ports: [{ containerPort: FUNCTION_PORT }],
    env: o.containerEnv,
    ...kubeconfigMounts(o.kubeconfigs),
    resources,
    readinessProbe: { httpGet: { path: "/health/readiness" } },
    livenessProbe: { httpGet: { path: "/health/liveness" } },
  };
}

// Knative's label that keeps a route off the public ingress: only cluster-local hosts reach it.
export const VisibilityLabel = "networking.knative.dev/visibility";

// The Knative Service of one function: scale to zero unless func.yaml's scale says otherwise. Cluster-
// local, since its callers (the Broker's filter, a relay) are in the cluster, and a public route would
// let whoever reaches the ingress hand the function events.
export function knativeService(f: FunctionDeployment, o: ContainerOptions & { namespace: string }): Manifest {
  const scale = f.deploy.options?.scale;
  return {
    apiVersion: "serving.knative.dev/v1",
    kind: "Service",
    metadata: { name: f.name, namespace: o.namespace, labels: { [VisibilityLabel]: "cluster-local" } },
    spec: {
      template: {
        metadata: {
          annotations: {
            "autoscaling.knative.dev/min-scale": String(scale?.min ?? 0),
            ...(scale?.max !== undefined ? { "autoscaling.knative.dev/max-scale": String(scale.max) } : {}),
          },
        },
        spec: {
          serviceAccountName: f.deploy.serviceAccountName,
          containerConcurrency: f.deploy.options?.resources?.limits?.concurrency ?? o.containerConcurrency ?? 10,
          ...(o.timeoutSeconds !== undefined ? { timeoutSeconds: o.timeoutSeconds } : {}),
          containers: [functionContainer(f, o)],
          ...kubeconfigVolumes(o.kubeconfigs),
        },
      },
    },
  };
}

// Without Serving: a Deployment (func.yaml's scale.min replicas, at least one: nothing scales from zero)
// and a core Service on port 80 in front of it. Knative infers the probes' port; a Deployment cannot.
export function functionDeployment(f: FunctionDeployment, o: ContainerOptions & { namespace: string }): Manifest[] {
  const labels = { "app.kubernetes.io/name": f.name };
  const min = f.deploy.options?.scale?.min ?? 0;
  const c = functionContainer(f, o);
  const container = {
    name: "function",
    ...c,
    ports: [{ name: "http", containerPort: FUNCTION_PORT }],
    readinessProbe: { httpGet: { ...c.readinessProbe.httpGet, port: FUNCTION_PORT } },
    livenessProbe: { httpGet: { ...c.livenessProbe.httpGet, port: FUNCTION_PORT } },
    imagePullPolicy: "IfNotPresent",
  };
  return [
    {
      apiVersion: "apps/v1",
      kind: "Deployment",
      metadata: { name: f.name, namespace: o.namespace, labels },
      spec: {
        replicas: min > 0 ? min : 1,
        selector: { matchLabels: labels },
        template: { metadata: { labels: { ...labels } }, spec: { serviceAccountName: f.deploy.serviceAccountName, containers: [container], ...kubeconfigVolumes(o.kubeconfigs) } },
      },
    },
    {
      apiVersion: "v1",
      kind: "Service",
      metadata: { name: f.name, namespace: o.namespace, labels },
      spec: { selector: labels, ports: [{ name: "http", port: 80, targetPort: FUNCTION_PORT }] },
    },
  ];
}

const workloadsOf = (o: CommonOptions): Workloads => {
  const w = o.workloads ?? "knative";
  if (w !== "knative" && w !== "deployments") throw new Error(`workloads: give knative or deployments, not ${String(w)}`);
  return w;
};

// A function's workload in the form the options ask for.
export function functionWorkload(f: FunctionDeployment, o: ContainerOptions & { namespace: string }): Manifest[] {
  return workloadsOf(o) === "deployments" ? functionDeployment(f, o) : [knativeService(f, o)];
}

// What a Trigger or source sinks to for a function; Eventing resolves a core Service to its cluster-local URL.
export const functionRef = (name: string, o: CommonOptions) =>
  workloadsOf(o) === "deployments" ? { apiVersion: "v1", kind: "Service", name } : { apiVersion: "serving.knative.dev/v1", kind: "Service", name };

export function broker(name: string, ns: string, o: CommonOptions): Manifest {
  return {
    apiVersion: "eventing.knative.dev/v1",
    kind: "Broker",
    metadata: { name, namespace: ns, annotations: { [BrokerClassAnnotation]: o.brokerClass ?? DefaultBrokerClass } },
    // Functions answer 503 to be called again (conflicts, throttling); the dispatcher retries 5xx.
    spec: { delivery: { retry: 10, backoffPolicy: "exponential", backoffDelay: "PT0.2S" } },
  };
}

export const brokerRef = (name: string) => ({ ref: { apiVersion: "eventing.knative.dev/v1", kind: "Broker", name } });

// A Trigger's filter in either of Knative's forms: `filter.attributes` (one exact match) or `filters`
// (here one `any` of `exact` matches). As a list of attribute maps, any of which lets an event through;
// an empty map lets everything through.
export type TriggerSpec = { filter?: { attributes?: Record<string, string> }; filters?: { any?: { exact?: Record<string, string> }[] }[] };
export function triggerFilters(spec: TriggerSpec): Record<string, string>[] {
  if (spec.filters?.length) return spec.filters.flatMap((f) => (f.any ?? []).map((a) => a.exact ?? {}));
  return [spec.filter?.attributes ?? {}];
}

// One Trigger per function and Broker, letting through what any of its func.yaml subscriptions to that
// Broker names. Not one per subscription: with the channel-based Broker each Trigger is a Subscription
// on the Broker's channel, so every event goes to the filter once per Trigger (76 times for our hub).
// Each also lets through the function's own due rechecks (recheckRoute). `targeted`: the Broker's source
// sends each function its own events, naming it in ocmftarget (components/relay/config.ts kSinkTargets),
// so every filter also asks for that name: an event meant for another function (with another observed
// state, or none) never reaches this one.
export function triggers(f: FunctionDeployment, ns: string, o: CommonOptions = {}, how: { targeted?: boolean } = {}): Manifest[] {
  const bySource = new Map<string, Record<string, string>[]>();
  for (const { source, filters } of f.deploy.subscriptions) {
    if (how.targeted && Object.keys(filters).length === 0) throw new Error(`functions/${f.name}/func.yaml: a subscription without filters would also take the function's own recheck requests`);
    bySource.set(source, [...(bySource.get(source) ?? []), how.targeted ? { ...filters, [TargetExtension]: f.name } : filters]);
  }
  for (const [source, list] of bySource) bySource.set(source, [...list, { type: RecheckDueType, [TargetExtension]: f.name }]);
  return [...bySource.entries()].map(([source, list]) => {
    const name = bySource.size === 1 ? f.name : `${f.name}-${source}`;
    if (!/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(name)) throw new Error(`functions/${f.name}/func.yaml: Trigger name ${name} is not a DNS label`);
    // A subscription without filters wants every event: then so does the Trigger.
    const filter = list.some((x) => Object.keys(x).length === 0) ? {} : list.length === 1 ? { filter: { attributes: list[0] } } : { filters: [{ any: list.map((exact) => ({ exact })) }] };
    return {
      apiVersion: "eventing.knative.dev/v1",
      kind: "Trigger",
      metadata: { name, namespace: ns },
      spec: { broker: source, ...filter, subscriber: { ref: functionRef(f.name, o) } },
    };
  });
}

// The Brokers the functions subscribe to (func.yaml's subscriptions[].source names one).
export const brokerNames = (fns: readonly FunctionDeployment[]) => [...new Set(fns.flatMap((f) => f.deploy.subscriptions.map((s) => s.source)))].sort();

// Rechecks through a Broker (docs/relay.md, "Rechecks through a Broker"): a function a Broker feeds
// answers a recheck with a CloudEvent (RechecksEnv), the Broker takes it back, and this Trigger routes
// it to a relay pod in recheck mode, reached on a Service of the same name, which sends it to the Broker
// again when it is due; the function's own Trigger (triggers) lets that through to it alone.
export const RechecksEnv = { name: RechecksVariable, value: "event" } as const;
export const RECHECKS_PORT = 8080;
export const rechecksLabels = (name: string) => ({ "app.kubernetes.io/name": name });
export function recheckRoute(name: string, ns: string, brokerName: string): Manifest[] {
  return [
    {
      apiVersion: "v1",
      kind: "Service",
      metadata: { name, namespace: ns, labels: rechecksLabels(name) },
      spec: { selector: rechecksLabels(name), ports: [{ name: "http", port: 80, targetPort: RECHECKS_PORT }] },
    },
    {
      apiVersion: "eventing.knative.dev/v1",
      kind: "Trigger",
      metadata: { name, namespace: ns },
      spec: { broker: brokerName, filter: { attributes: { type: RecheckType } }, subscriber: { ref: { apiVersion: "v1", kind: "Service", name } } },
    },
  ];
}
