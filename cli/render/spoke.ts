// A spoke on Knative: the agent's namespace and CRDs, per spoke function its identity, workload (a
// Knative Service, or a Deployment and Service) and Triggers, one Broker fed by the event relay (a
// ContainerSource watching the spoke and, with the agent's credentials, the hub, which keeps the
// heartbeat in the same process), and the bootstrap kubeconfig when given.
import { DefaultAddOnInstallNamespace } from "../../shared/api/addon.ts";
import { DeployModeAnnotation } from "../../shared/api/cluster.ts";
import { stringify } from "yaml";
import { AgentNamespaceDefault, BootstrapSecretName, HubSecretKey } from "../../shared/api/registration.ts";
import { watchRules } from "../../shared/sdk.ts";
import { RelayConfigSchema, agentSettingsCheckpoint, hubCredentialsFromAgentSecrets, type RelayConfigInput } from "../../components/relay/config.ts";
import { isSpokeRelayFed, readFunctions, type FunctionDeployment } from "./func-yaml.ts";
import { watchesOf } from "./definitions.ts";
import { deployedRoles } from "./rbac.ts";
import { mergeWatches } from "./sources.ts";
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
  functionWorkload,
  namespace,
  ocmCrds,
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

export type SpokeOptions = CommonOptions & {
  clusterName?: string; // the ManagedCluster's name (OCM's --spoke-cluster-name); default cluster1
  externalServerUrls?: readonly string[]; // the spoke API server's URLs the hub is told (--spoke-external-server-urls)
  bootstrapKubeconfig?: string; // a kubeconfig for the hub: rendered as the bootstrap-hub-kubeconfig Secret
  // several hubs, in the order they are tried (OCM's MultipleHubs): each rendered as a Secret of its own
  // (multipleHubSecretName); spoke-registration copies the chosen one into bootstrap-hub-kubeconfig
  bootstrapKubeconfigs?: readonly string[];
  hubConnectionTimeoutSeconds?: number; // with bootstrapKubeconfigs: OCM's --hub-connection-timeout-seconds
  // Hosted mode: a kubeconfig for the managed cluster (OCM's external-managed-kubeconfig). The render is
  // then for the management cluster, every object in hostedAgentNamespace(clusterName); renderManaged
  // is what the managed cluster gets.
  managedKubeconfig?: string;
  resyncSeconds?: number; // the relay's resync ticks; default 60
};

// Hosted mode, as OCM's hosted klusterlet lays it out: the agent's namespace on the management cluster is
// named after the klusterlet (OCM's chart: klusterlet-<cluster>), the managed cluster's kubeconfig is the
// Secret external-managed-kubeconfig there, and the managed cluster is "managed" in events.
export const hostedAgentNamespace = (cluster: string) => `klusterlet-${cluster}`;
export const ExternalManagedKubeconfigSecret = "external-managed-kubeconfig";
export const ManagedClusterEventName = "managed";
// On every object of one hosted agent but the shared CRDs: which managed cluster it is for, so uninstall
// takes that agent's objects and no other's.
export const HostedClusterLabel = "ocm-functions.io/hosted-cluster";
export const hostedSelector = (cluster: string) => `${HostedClusterLabel}=${cluster}`;
const KubeconfigDir = "/var/run/ocm-functions/kubeconfigs";

export const RelayName = "ocm-relay";
export const RelayAccount = "relay-spoke";
const HEARTBEAT_HEALTH_PORT = 8000;

// The Secret of the i-th hub (from 0, as the agent's log lines count them) when there are several.
export const multipleHubSecretName = (i: number) => `${BootstrapSecretName}-${i}`;

// What fills the spoke functions' {{ env:NAME }} placeholders.
export const spokeEnvValues = (o: SpokeOptions): Record<string, string> => ({
  SPOKE_CLUSTER_NAME: o.clusterName ?? "cluster1",
  SPOKE_EXTERNAL_SERVER_URLS: (o.externalServerUrls ?? []).join(","),
  BOOTSTRAP_KUBECONFIG_SECRETS: (o.bootstrapKubeconfigs ?? []).map((_, i) => multipleHubSecretName(i)).join(","),
  HUB_CONNECTION_TIMEOUT_SECONDS: o.hubConnectionTimeoutSeconds === undefined ? "" : String(o.hubConnectionTimeoutSeconds),
  ...o.env,
});

type Deployed = FunctionDeployment & { env: { name: string; value: string }[] };

// The relay's configuration: one source per kind and cluster the spoke functions watch (their
// definitions' watches with their settings, merged by cli/render/sources.ts), the hub reached with the
// agent's own credentials.
export function relayConfig(fns: readonly Deployed[], o: { spoke: string; hub: string; managed?: string; agentNamespace: string; resyncSeconds: number; clusterName: string }): RelayConfigInput {
  const sources = mergeWatches(fns.flatMap((f) => watchesOf(f.name, f.env).watches));
  for (const s of sources) {
    if (s.cluster !== o.spoke && s.cluster !== o.hub && s.cluster !== o.managed) throw new Error(`a spoke function watches cluster ${s.cluster}, neither the spoke (${o.spoke}) nor the hub (${o.hub})${o.managed ? ` nor the managed cluster (${o.managed})` : ""}`);
  }
  // Hosted: the managed cluster with the kubeconfig its Secret holds, read as the relay's own identity.
  const managed = o.managed ? { [o.managed]: { secret: { cluster: o.spoke, namespace: o.agentNamespace, name: ExternalManagedKubeconfigSecret, key: HubSecretKey.Kubeconfig } } } : {};
  // Functions that ask to be called again at a given time get their events from the relay itself, with
  // their subscriptions' filters; every other one through the Broker (K_SINK) and its Triggers.
  const direct = fns.filter(isSpokeRelayFed).map((f) => ({ name: f.name, url: `http://${f.name}.${o.agentNamespace}.svc.cluster.local`, filters: f.deploy.subscriptions.map((s) => s.filters) }));
  const config: RelayConfigInput = {
    clusters: { [o.spoke]: { inCluster: true }, [o.hub]: hubCredentialsFromAgentSecrets(o.spoke, o.agentNamespace), ...managed },
    sources,
    ...(direct.length ? { sinks: direct } : {}),
    resync: { intervalMs: o.resyncSeconds * 1000 },
    // the Broker-fed functions' rechecks (cli/render/objects.ts recheckRoute)
    rechecks: { port: RECHECKS_PORT },
    // relayResyncSeconds of the active AgentConfig settings, when one is assigned (docs/agent-config.md)
    agentSettings: agentSettingsCheckpoint(o.spoke, o.agentNamespace),
    // the heartbeat in the same process: the agent's secrets read as the relay reads the spoke; the
    // kubelet probes the pod's address, not loopback
    heartbeat: { cluster: o.spoke, clusterName: o.clusterName, agentNamespace: o.agentNamespace, health: { port: HEARTBEAT_HEALTH_PORT, host: "0.0.0.0" } },
  };
  RelayConfigSchema.parse(config); // a configuration the relay would refuse is not rendered
  return config;
}

function relay(o: SpokeOptions & { ns: string; config: RelayConfigInput; brokerName: string }): Manifest {
  return {
    apiVersion: "sources.knative.dev/v1",
    kind: "ContainerSource",
    metadata: { name: RelayName, namespace: o.ns },
    spec: {
      template: {
        metadata: { labels: rechecksLabels(RelayName) },
        spec: {
          serviceAccountName: RelayAccount,
          containers: [
            {
              name: "relay",
              image: imageOf(o, "relay"),
              // K_SINK (the Broker) is injected; the relay names each event's cluster itself, so no
              // ceOverrides: their extensions would replace that `cluster` on every event.
              env: [
                { name: "OCM_RELAY_CONFIG", value: stringify(o.config, { lineWidth: 0 }) },
                // a young generation of 1 MiB: this process allocates little and often, and keeps 2 MiB
                // less private memory so, at no measurable CPU per renewal (npm run bench -- heartbeat)
                { name: "NODE_OPTIONS", value: "--max-semi-space-size=1" },
              ],
              ports: [
                { name: "http", containerPort: RECHECKS_PORT },
                { name: "health", containerPort: HEARTBEAT_HEALTH_PORT },
              ],
              // fails once the hub client certificate has expired: the restart re-bootstraps
              livenessProbe: { httpGet: { path: "/healthz", port: "health" }, periodSeconds: 10, failureThreshold: 3 },
              resources: { requests: { cpu: "10m", memory: "96Mi" }, limits: { memory: defaultResources.limits.memory } },
            },
          ],
        },
      },
      sink: brokerRef(o.brokerName),
    },
  };
}

export function renderSpoke(o: SpokeOptions = {}): Manifest[] {
  const hubs = o.bootstrapKubeconfigs ?? [];
  if (hubs.length === 1 || (hubs.length > 0 && o.bootstrapKubeconfig !== undefined)) throw new Error("several hubs take at least two bootstrap kubeconfigs, and no single one beside them");
  if (o.hubConnectionTimeoutSeconds !== undefined && hubs.length === 0) throw new Error("a hub connection timeout needs several hubs");
  const clusterName = o.clusterName ?? "cluster1";
  const hosted = o.managedKubeconfig !== undefined;
  const hostedNs = hosted ? hostedAgentNamespace(clusterName) : undefined;
  const values = { ...spokeEnvValues(o), ...(hostedNs ? { AGENT_NAMESPACE: hostedNs, CLUSTER_ANNOTATIONS: [o.env?.CLUSTER_ANNOTATIONS, `${DeployModeAnnotation}=Hosted`].filter(Boolean).join(",") } : {}) };
  // Hosted: each function also reaches the managed cluster, with the kubeconfig its Secret holds as a file.
  const hostedEnv = hosted ? [{ name: "OCM_MANAGED_CLUSTER_NAME", value: ManagedClusterEventName }, { name: "OCM_KUBECONFIG_DIR", value: KubeconfigDir }] : [];
  const kubeconfigs = hosted ? { secretName: ExternalManagedKubeconfigSecret, dir: KubeconfigDir, files: [{ key: HubSecretKey.Kubeconfig, path: `${ManagedClusterEventName}.kubeconfig` }] } : undefined;
  const fns: Deployed[] = readFunctions()
    .filter((f) => f.side === "spoke")
    .map((f) => ({ ...f, env: [...functionEnv(f, values), ...hostedEnv, ...(isSpokeRelayFed(f) ? [] : [RechecksEnv])] }));
  const envs = new Map(fns.map((f) => [f.name, f.env]));
  const one = (what: string, values: (string | undefined)[]) => {
    const set = new Set(values.filter((v) => v !== undefined));
    if (set.size !== 1) throw new Error(`the spoke functions disagree on ${what}: ${[...set].join(", ") || "none given"}`);
    return [...set][0]!;
  };
  const ns = hostedNs ?? one("deploy.namespace", fns.map((f) => f.deploy.namespace));
  const spoke = one("OCM_CLUSTER_NAME", fns.map((f) => envValue(envs.get(f.name)!, "OCM_CLUSTER_NAME")));
  const hub = one("OCM_HUB_CLUSTER_NAME", fns.map((f) => envValue(envs.get(f.name)!, "OCM_HUB_CLUSTER_NAME")));
  const brokerName = one("the Broker they subscribe to", brokerNames(fns.filter((f) => !isSpokeRelayFed(f))));
  const config = relayConfig(fns, { spoke, hub, ...(hosted ? { managed: ManagedClusterEventName } : {}), agentNamespace: ns, resyncSeconds: o.resyncSeconds ?? 60, clusterName });

  // and the add-on namespace, as OCM's klusterlet makes it (managed-serviceaccount's ServiceAccounts live
  // there): on the managed cluster, so in Hosted mode renderManaged has it
  const objects: Manifest[] = [namespace(ns), ...(hosted ? [] : [namespace(DefaultAddOnInstallNamespace)]), ...ocmCrds().filter(isSpokeCrd), broker(brokerName, ns, o)];
  const secret = (name: string, kubeconfig: string): Manifest => ({
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name, namespace: ns },
    type: "Opaque",
    data: { [HubSecretKey.Kubeconfig]: Buffer.from(kubeconfig).toString("base64") },
  });
  if (o.bootstrapKubeconfig !== undefined) objects.push(secret(BootstrapSecretName, o.bootstrapKubeconfig));
  hubs.forEach((kubeconfig, i) => objects.push(secret(multipleHubSecretName(i), kubeconfig)));
  if (o.managedKubeconfig !== undefined) objects.push(secret(ExternalManagedKubeconfigSecret, o.managedKubeconfig));
  // The static roles name the Default namespace; Hosted moves them into the agent's own.
  const relocate = hostedNs ? { [AgentNamespaceDefault]: hostedNs } : undefined;
  for (const f of fns) {
    objects.push(
      ...identity({ account: f.deploy.serviceAccountName, namespace: ns, roles: deployedRoles(f) }),
      ...functionWorkload(f, { ...o, namespace: ns, containerEnv: envs.get(f.name)!, kubeconfigs }),
      ...(isSpokeRelayFed(f) ? [] : triggers(f, ns, o)),
    );
  }
  objects.push(
    // the relay keeps the heartbeat too, so its identity holds the heartbeat's role beside its own
    ...identity({ account: RelayAccount, namespace: ns, roles: [...(hosted ? hostedRelayRoles(config, spoke, ns) : readManifests("rbac", "relay-spoke.yaml")), ...readManifests("rbac", "heartbeat.yaml")], relocate }),
    relay({ ...o, ns, config, brokerName }),
    ...recheckRoute(RelayName, ns, brokerName),
  );
  return (hosted ? objects.map((m) => perCluster(m, clusterName)) : objects).map(withPartOf);
}

// Hosted: the relay's identity on the management cluster reads what its sources there read (the
// managed cluster's kinds are read with the managed kubeconfig): a Role per namespace, a ClusterRole
// for the rest, and always the agent's secrets and settings, which its credentials and checkpoint are.
function hostedRelayRoles(config: RelayConfigInput, spoke: string, ns: string): Manifest[] {
  const name = `open-cluster-management:functions:${RelayAccount}`;
  const own = (config.sources ?? []).filter((s) => s.cluster === spoke);
  const byNamespace = new Map<string, typeof own>([[ns, [{ cluster: spoke, resource: { group: "", version: "v1", kind: "Secret", plural: "secrets", namespaced: true } }, { cluster: spoke, resource: { group: "", version: "v1", kind: "ConfigMap", plural: "configmaps", namespaced: true } }]]]);
  for (const s of own) byNamespace.set(s.namespace ?? "", [...(byNamespace.get(s.namespace ?? "") ?? []), s]);
  return [...byNamespace].map(([namespace, sources]) => ({
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: namespace ? "Role" : "ClusterRole",
    metadata: namespace ? { name, namespace } : { name },
    rules: watchRules(sources).get(spoke) ?? [],
  }));
}

// One hosted agent's objects, labelled with its cluster, and its cluster-scoped roles named after it:
// several agents share a management cluster. The CRDs are shared and stay as they are.
function perCluster(m: Manifest, cluster: string): Manifest {
  if (m.kind === "CustomResourceDefinition") return m;
  const ours = (name: unknown) => typeof name === "string" && name.startsWith("open-cluster-management:functions:");
  const labelled = { ...m, metadata: { ...m.metadata, labels: { ...(m.metadata.labels as Record<string, string> | undefined), [HostedClusterLabel]: cluster } } };
  if ((m.kind !== "ClusterRole" && m.kind !== "ClusterRoleBinding") || !ours(m.metadata.name)) return labelled;
  const roleRef = m.roleRef as { kind: string; name: string } | undefined;
  return {
    ...labelled,
    metadata: { ...labelled.metadata, name: `${m.metadata.name}:${cluster}` },
    ...(roleRef?.kind === "ClusterRole" && ours(roleRef.name) ? { roleRef: { ...roleRef, name: `${roleRef.name}:${cluster}` } } : {}),
  };
}

// What the managed cluster gets in Hosted mode: the kinds the agent records there (AppliedManifestWorks,
// ClusterClaims) and the add-on namespace, as OCM's hosted klusterlet puts them there; no workload, no
// identity, no secret (the agent acts there as the managed kubeconfig's identity).
export function renderManaged(): Manifest[] {
  return [namespace(DefaultAddOnInstallNamespace), ...ocmCrds().filter(isSpokeCrd)].map(withPartOf);
}
