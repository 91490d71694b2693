// The hub on Knative: OCM's CRDs and admission policies, the bootstrap RBAC, and per hub function its
// identity, workload (a Knative Service, or a Deployment and Service) and Trigger, fed by one Broker
// from the hub's event relay (a ContainerSource that watches for every function, hands each its
// observed state, ticks and holds rechecks).
import { stringify } from "yaml";
import { isRelayFed, readFunctions, type FunctionDeployment } from "./func-yaml.ts";
import { watchesOf } from "./definitions.ts";
import { deployedRoles } from "./rbac.ts";
import { mergeWatches } from "./sources.ts";
import { watchRules } from "../../shared/sdk.ts";
import { InventoryGroup } from "../../shared/api/inventory.ts";
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
  resyncSeconds?: number; // the relays' resync ticks; default HubResyncSecondsDefault
};

// How often the hub's relays tick every function that sweeps: OCM's hub informers resync every 30
// minutes (registration's hub manager). A tick is for convergence only: every change reaches a function
// through its relay's watch, and every time a function waits for comes as its recheck. A quiet hub's
// functions therefore sit at zero pods between ticks.
export const HubResyncSecondsDefault = 1800;
const resyncMs = (ticks: boolean, o: { resyncSeconds?: number }) => (ticks ? (o.resyncSeconds ?? HubResyncSecondsDefault) * 1000 : 0);

type Deployed = FunctionDeployment & { env: { name: string; value: string }[] };

export const HubSourceName = "ocm-hub-relay";

// A relay's identity on `cluster`: a ServiceAccount whose ClusterRole may get, list and watch exactly
// what the functions it feeds watch there (shared/sdk.ts watchRules, as every function's own RBAC).
function sourceIdentity(ns: string, sources: RelayConfigInput["sources"], cluster: string, account: string): Manifest[] {
  const role = `open-cluster-management:functions:${account}`;
  return [
    { apiVersion: "v1", kind: "ServiceAccount", metadata: { name: account, namespace: ns } },
    { apiVersion: "rbac.authorization.k8s.io/v1", kind: "ClusterRole", metadata: { name: role }, rules: watchRules(sources ?? []).get(cluster) ?? [] },
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

// The ClusterRole of the one relay local mode runs on the hub (dev/local/fleet.ts): what every hub
// function watches there, as the Broker's source gets, so a new function's kinds need no file edited.
export const LocalHubRelayIdentity = "relay-hub";
export function localHubRelayRole(cluster = "hub"): Manifest {
  const watches = readFunctions()
    .filter((f) => f.side === "hub")
    .flatMap((f) => watchesOf(f.name, functionEnv(f, {})).watches.filter((w) => w.cluster === cluster));
  return { apiVersion: "rbac.authorization.k8s.io/v1", kind: "ClusterRole", metadata: { name: `open-cluster-management:functions:${LocalHubRelayIdentity}` }, rules: watchRules(watches).get(cluster) ?? [] };
}

// The relay's configuration for one relay-fed function: the function's watches on the hub, named as its
// events must name the cluster, ticks only if it subscribes to them; K_SINK (the function) is injected.
export function hubRelayConfig(f: Deployed, cluster: string, o: { resyncSeconds?: number } = {}): RelayConfigInput {
  const { fn, config, watches } = watchesOf(f.name, f.env);
  return {
    clusters: { [cluster]: { inCluster: true } },
    sources: mergeWatches(watches).map((source) => ({ ...source, cluster })),
    resync: { intervalMs: resyncMs(fn.ticks, o) },
    // the state the function's watches ask to be handed with each event (shared/observed.ts)
    kSinkState: { watches: fn.state(config).watches.map((w) => ({ ...w, cluster })) },
  };
}

function hubRelay(f: Deployed, ns: string, cluster: string, o: HubOptions): Manifest[] {
  const name = hubRelayName(f.name);
  const config = hubRelayConfig(f, cluster, o);
  return [
    ...sourceIdentity(ns, config.sources, cluster, name),
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
                env: [{ name: "OCM_RELAY_CONFIG", value: stringify(config, { lineWidth: 0 }) }],
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

// The Broker's source: one relay that watches what every Broker-fed function watches and sends each
// function, through the Broker, only the events its subscriptions and watches want, with the observed
// state they ask to be handed (components/relay/config.ts kSinkTargets); it ticks the functions that
// sweep, and in recheck mode holds their rechecks until due (docs/relay.md, "Rechecks through a Broker").
export function hubSourceConfig(fns: readonly Deployed[], cluster: string, o: { resyncSeconds?: number } = {}): RelayConfigInput {
  const fed = fns.map((f) => ({ f, ...watchesOf(f.name, f.env) }));
  return {
    clusters: { [cluster]: { inCluster: true } },
    sources: mergeWatches(fed.flatMap((x) => x.watches)).map((source) => ({ ...source, cluster })),
    kSinkTargets: fed.map(({ f, fn, config }) => ({
      name: f.name,
      filters: f.deploy.subscriptions.map((s) => s.filters),
      state: { watches: fn.state(config).watches.map((w) => ({ ...w, cluster })) },
    })),
    resync: { intervalMs: resyncMs(fed.some((x) => x.fn.ticks), o) },
    rechecks: { port: RECHECKS_PORT },
  };
}

function hubSource(fns: readonly Deployed[], ns: string, cluster: string, brokerName: string, o: HubOptions): Manifest[] {
  const name = HubSourceName;
  const config = hubSourceConfig(fns, cluster, o);
  return [
    ...sourceIdentity(ns, config.sources, cluster, name),
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
                // K_SINK (the Broker) is injected; each event names its cluster and its function itself
                env: [{ name: "OCM_RELAY_CONFIG", value: stringify(config, { lineWidth: 0 }) }],
                ports: [{ name: "http", containerPort: RECHECKS_PORT }],
                readinessProbe: { httpGet: { path: "/health/readiness", port: RECHECKS_PORT } },
                resources: { requests: { cpu: "10m", memory: "96Mi" }, limits: { memory: defaultResources.limits.memory } },
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

  const crds = ocmCrds().filter((c) => !isSpokeCrd(c));
  const objects: Manifest[] = [
    namespace(ns),
    ...crds.filter((c) => !isSharedCrd(c)),
    ...readManifests("hub", "admission-policies.yaml"),
    ...readManifests("hub", "bootstrap-rbac.yaml"),
    broker(brokerName, ns, o),
  ];
  for (const f of fns) {
    objects.push(
      ...identity({ account: f.deploy.serviceAccountName, namespace: ns, roles: deployedRoles(f), relocate: { [HubNamespaceDefault]: ns } }),
      ...functionWorkload(f, { ...o, namespace: ns, containerEnv: envs.get(f.name)! }),
      ...(isRelayFed(f) ? hubRelay(f, ns, cluster!, o) : triggers(f, ns, o, { targeted: true })),
    );
  }
  objects.push(...hubSource(brokerFed, ns, cluster!, brokerName, o));
  // after the labelling: bootstrapServiceAccount labels what is ours of it, and the shared CRDs are not ours
  return [...objects.map(withPartOf), ...crds.filter(isSharedCrd).map(sharedCrd), ...bootstrapServiceAccount(ns)];
}

// SIG-Multicluster's kinds are every cluster manager's on a hub (a GKE fleet, KubeFleet, OCM publish
// ClusterProfiles too): their CRDs are applied unlabelled, so `ocmf uninstall hub` leaves them, and
// removes only the objects our functions published in them (cli/uninstall.ts).
export const SharedApiAnnotation = "ocm-functions.io/shared-api";
export const isSharedCrd = (crd: Manifest) => (crd.spec as { group: string }).group === InventoryGroup;
const sharedCrd = (crd: Manifest): Manifest => ({ ...crd, metadata: { ...crd.metadata, annotations: { ...crd.metadata.annotations, [SharedApiAnnotation]: "ocmf uninstall leaves this CRD: other cluster managers publish in it too; it removes only what ocm-functions published" } } });
