// The hub on Knative: OCM's CRDs and admission policies, the bootstrap RBAC, and per hub function its
// identity, workload (a Knative Service, or a Deployment and Service) and Triggers, fed by one Broker
// from an ApiServerSource and a PingSource.
import type { ApiResource } from "../../shared/api/meta.ts";
import { PingSourceType } from "../../shared/events.ts";
import { stringify } from "yaml";
import { isRelayFed, readFunctions, type FunctionDeployment } from "./func-yaml.ts";
import { watchesOf } from "./definitions.ts";
import { deployedRoles } from "./rbac.ts";
import { labelSelectorObject, mergeWatches } from "./sources.ts";
import { stateOf } from "../../shared/sdk.ts";
import type { RelayConfigInput } from "../../components/relay/config.ts";
import {
  broker,
  brokerNames,
  brokerRef,
  defaultResources,
  envValue,
  functionEnv,
  identity,
  imageOf,
  isSpokeCrd,
  functionRef,
  functionWorkload,
  ocmCrds,
  namespace,
  readManifests,
  recheckRoute,
  RechecksEnv,
  RECHECKS_PORT,
  rechecksLabels,
  triggers,
  withPartOf,
  type CommonOptions,
  type Manifest,
} from "./objects.ts";

export const HubNamespaceDefault = "open-cluster-management-hub";

export type HubOptions = CommonOptions & {
  namespace?: string; // default open-cluster-management-hub
  resyncSchedule?: string; // the PingSource's cron; default every minute (it bounds how late a silent lease is noticed)
};

const apiVersionOf = (r: ApiResource) => (r.group ? `${r.group}/${r.version}` : r.version);

type Watch = { resource: ApiResource; selector?: string };
type Deployed = FunctionDeployment & { env: { name: string; value: string }[] };

// The hub's watches of these functions (their definitions' watches, with their settings), one per kind
// unless every function watching it wants only labelled objects: then one per label selector. A kind
// some function wants whole is watched whole (a second, labelled watch would only send the same events
// twice). An ApiServerSource filters by label only, so a field selector or a namespace cannot be asked
// of it: the function skips what is outside its scope.
export function hubWatches(fns: readonly Deployed[]): Watch[] {
  const wanted = new Map<string, { resource: ApiResource; selectors: Set<string | undefined> }>();
  for (const f of fns)
    for (const w of watchesOf(f.name, f.env).watches) {
      const entry = wanted.get(w.resource.kind) ?? { resource: w.resource, selectors: new Set() };
      entry.selectors.add(w.labelSelector);
      wanted.set(w.resource.kind, entry);
    }
  return [...wanted.values()].flatMap(({ resource, selectors }) => {
    if (selectors.has(undefined)) return [{ resource }];
    return [...selectors].sort().map((selector) => ({ resource, selector }));
  });
}

// One ApiServerSource has one mode: Resource when any of its functions needs the object in the event
// (the payload carries the labels some functions key on), else Reference (cli/render/sources.ts).
const modeOf = (fns: readonly Deployed[]) =>
  mergeWatches(fns.flatMap((f) => watchesOf(f.name, f.env).watches)).some((s) => s.mode === "Resource") ? "Resource" : "Reference";

export const ApiServerSourceName = "ocm-hub";
export const ApiServerSourceAccount = "ocm-hub-apiserversource";
export const PingSourceName = "ocm-hub-resync";

// A source's identity: get, list and watch on exactly the watched resources (Knative's controller
// checks these three with SubjectAccessReviews before it runs the ApiServerSource adapter).
function sourceIdentity(ns: string, watches: readonly Watch[], account = ApiServerSourceAccount): Manifest[] {
  const role = `open-cluster-management:functions:${account}`;
  const byGroup = new Map<string, Set<string>>();
  for (const { resource } of watches) byGroup.set(resource.group, (byGroup.get(resource.group) ?? new Set()).add(resource.plural));
  const rules = [...byGroup.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([group, plurals]) => ({ apiGroups: [group], resources: [...plurals].sort(), verbs: ["get", "list", "watch"] }));
  return [
    { apiVersion: "v1", kind: "ServiceAccount", metadata: { name: account, namespace: ns } },
    { apiVersion: "rbac.authorization.k8s.io/v1", kind: "ClusterRole", metadata: { name: role }, rules },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRoleBinding",
      metadata: { name: role },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: role },
      subjects: [{ kind: "ServiceAccount", name: account, namespace: ns }],
    },
  ];
}

export const hubRelayName = (fn: string) => `ocm-hub-relay-${fn}`;

// The relay's configuration for one relay-fed function: the function's watches on the hub, named as its
// events must name the cluster, ticks only if it subscribes to them; K_SINK (the function) is injected.
export function hubRelayConfig(f: Deployed, cluster: string, o: { resyncSeconds?: number } = {}): RelayConfigInput {
  const { fn, watches } = watchesOf(f.name, f.env);
  return {
    clusters: { [cluster]: { inCluster: true } },
    sources: mergeWatches(watches).map((source) => ({ ...source, cluster })),
    resync: { intervalMs: fn.ticks ? (o.resyncSeconds ?? 60) * 1000 : 0 },
    // the state the function's watches ask to be handed with each event (shared/observed.ts)
    kSinkState: { watches: stateOf(watches).watches.map((w) => ({ ...w, cluster })) },
  };
}

function hubRelay(f: Deployed, ns: string, cluster: string, o: HubOptions): Manifest[] {
  const name = hubRelayName(f.name);
  return [
    ...sourceIdentity(ns, hubWatches([f]), name),
    {
      apiVersion: "sources.knative.dev/v1",
      kind: "ContainerSource",
      metadata: { name, namespace: ns },
      spec: {
        template: {
          spec: {
            serviceAccountName: name,
            containers: [
              {
                name: "relay",
                image: imageOf(o, "relay"),
                env: [{ name: "OCM_RELAY_CONFIG", value: stringify(hubRelayConfig(f, cluster), { lineWidth: 0 }) }],
                resources: { requests: { cpu: "10m", memory: "96Mi" }, limits: { memory: defaultResources.limits.memory } },
              },
            ],
          },
        },
        sink: { ref: functionRef(f.name, o) },
      },
    },
  ];
}

export const HubRechecksName = "ocm-hub-rechecks";

// The relay in recheck mode for the functions the Broker feeds (cli/render/objects.ts recheckRoute): it
// watches nothing, so its identity has no role and no token.
function hubRechecks(ns: string, brokerName: string, o: HubOptions): Manifest[] {
  const name = HubRechecksName;
  const config: RelayConfigInput = { clusters: {}, resync: { intervalMs: 0 }, rechecks: { port: RECHECKS_PORT } };
  return [
    { apiVersion: "v1", kind: "ServiceAccount", metadata: { name, namespace: ns }, automountServiceAccountToken: false },
    {
      apiVersion: "sources.knative.dev/v1",
      kind: "ContainerSource",
      metadata: { name, namespace: ns },
      spec: {
        template: {
          metadata: { labels: rechecksLabels(name) },
          spec: {
            serviceAccountName: name,
            containers: [
              {
                name: "relay",
                image: imageOf(o, "relay"),
                env: [{ name: "OCM_RELAY_CONFIG", value: stringify(config, { lineWidth: 0 }) }],
                ports: [{ name: "http", containerPort: RECHECKS_PORT }],
                readinessProbe: { httpGet: { path: "/health/readiness", port: RECHECKS_PORT } },
                resources: { requests: { cpu: "5m", memory: "48Mi" }, limits: { memory: defaultResources.limits.memory } },
              },
            ],
          },
        },
        sink: brokerRef(brokerName),
      },
    },
    ...recheckRoute(name, ns, brokerName),
  ];
}

// What `clusteradm get token` reads: it asks for a token (TokenRequest) of the ServiceAccount
// open-cluster-management/agent-registration-bootstrap (clusteradm:pkg/helpers/client.go,
// GetBootstrapTokenFromSA), which OCM's cluster-manager creates for `clusteradm init`. We create the
// same; manifests/hub/bootstrap-rbac.yaml binds it to the bootstrap ClusterRole, and to nothing else.
export const SharedNamespaceAnnotation = "ocm-functions.io/shared-namespace";
export const BootstrapServiceAccount = { namespace: "open-cluster-management", name: "agent-registration-bootstrap" } as const;

// The namespace (unless the hub's own namespace is that one) and the ServiceAccount. The account is
// labelled as ours; the namespace is not: OCM, or the user, may own open-cluster-management already, and
// an uninstall must never delete a namespace it did not make. It stays behind, empty.
export function bootstrapServiceAccount(hubNamespace: string = HubNamespaceDefault): Manifest[] {
  const { namespace: ns, name } = BootstrapServiceAccount;
  // The annotation says why it stays, and gives the apply a field of its own (an apply that owns no field
  // is recorded by no manager and rewrites the object each time).
  const shared = { ...namespace(ns), metadata: { name: ns, annotations: { [SharedNamespaceAnnotation]: "ocmf uninstall leaves this namespace: OCM or its users may own it" } } };
  return [...(hubNamespace === ns ? [] : [shared]), withPartOf({ apiVersion: "v1", kind: "ServiceAccount", metadata: { name, namespace: ns } })];
}

export function renderHub(o: HubOptions = {}): Manifest[] {
  const ns = o.namespace ?? HubNamespaceDefault;
  const fns: Deployed[] = readFunctions()
    .filter((f) => f.side === "hub")
    .map((f) => ({ ...f, env: [...functionEnv(f, o.env ?? {}), ...(isRelayFed(f) ? [] : [RechecksEnv])] }));
  const envs = new Map(fns.map((f) => [f.name, f.env]));
  // The `cluster` extension every event needs (shared/events.ts): the hub's name as its functions know it.
  const names = new Set(fns.map((f) => envValue(envs.get(f.name)!, "OCM_CLUSTER_NAME") ?? "hub"));
  if (names.size !== 1) throw new Error(`the hub functions disagree on OCM_CLUSTER_NAME: ${[...names].join(", ")}`);
  const [cluster] = names;
  const brokers = brokerNames(fns.filter((f) => !isRelayFed(f)));
  if (brokers.length !== 1) throw new Error(`the hub's sources feed one Broker; the functions subscribe to ${brokers.join(", ")}`);
  const [brokerName] = brokers as [string];
  const brokerFed = fns.filter((f) => !isRelayFed(f));
  const watches = hubWatches(brokerFed);
  const subscribesToTicks = brokerFed.some((f) => f.deploy.subscriptions.some((s) => s.filters.type === PingSourceType));

  const objects: Manifest[] = [
    namespace(ns),
    ...ocmCrds().filter((c) => !isSpokeCrd(c)),
    ...readManifests("hub", "admission-policies.yaml"),
    ...readManifests("hub", "bootstrap-rbac.yaml"),
    broker(brokerName, ns, o),
  ];
  for (const f of fns) {
    objects.push(
      ...identity({ account: f.deploy.serviceAccountName, namespace: ns, roles: deployedRoles(f), relocate: { [HubNamespaceDefault]: ns } }),
      ...functionWorkload(f, { ...o, namespace: ns, containerEnv: envs.get(f.name)! }),
      ...(isRelayFed(f) ? hubRelay(f, ns, cluster!, o) : triggers(f, ns, o)),
    );
  }
  objects.push(...hubRechecks(ns, brokerName, o), ...sourceIdentity(ns, watches), {
    apiVersion: "sources.knative.dev/v1",
    kind: "ApiServerSource",
    metadata: { name: ApiServerSourceName, namespace: ns },
    spec: {
      mode: modeOf(brokerFed),
      serviceAccountName: ApiServerSourceAccount,
      namespaceSelector: {}, // empty: every namespace (cluster namespaces come and go)
      resources: watches.map(({ resource, selector }) => ({
        apiVersion: apiVersionOf(resource),
        kind: resource.kind,
        ...(selector ? { selector: labelSelectorObject(selector) } : {}),
      })),
      ceOverrides: { extensions: { cluster } },
      sink: brokerRef(brokerName),
    },
  });
  // ApiServerSource sends nothing for changes made while its watch was down, nor when a lease merely
  // gets old: the tick makes every function look again.
  if (subscribesToTicks)
    objects.push({
      apiVersion: "sources.knative.dev/v1beta2",
      kind: "PingSource",
      metadata: { name: PingSourceName, namespace: ns },
      spec: { schedule: o.resyncSchedule ?? "* * * * *", ceOverrides: { extensions: { cluster } }, sink: brokerRef(brokerName) },
    });
  // after the labelling: bootstrapServiceAccount labels what is ours of it
  return [...objects.map(withPartOf), ...bootstrapServiceAccount(ns)];
}
