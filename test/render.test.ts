// The Knative manifests rendered from func.yaml: the committed files are a fresh render (as
// manifests/crds/ are of the schemas), and what a render holds follows func.yaml and the options.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { renderedManifests } from "../cli/render/files.ts";
import { isRelayFed, isSpokeRelayFed, readFunctions } from "../cli/render/func-yaml.ts";
import { BootstrapServiceAccount, HubSourceName, hubRelayName, localHubRelayRole, SharedApiAnnotation } from "../cli/render/hub.ts";
import { triggerFilters, VisibilityLabel, type TriggerSpec } from "../cli/render/objects.ts";
import { PartOf, PartOfLabel, renderHub, renderSpoke, type Manifest } from "../cli/render/index.ts";
import { configFromEnvironment } from "../components/relay/config.ts";
import { derivedSubscriptions } from "../cli/render/subscriptions.ts";
import { watchesOf } from "../cli/render/definitions.ts";
import { mergeWatches } from "../cli/render/sources.ts";
import { functionEnv, readManifests } from "../cli/render/objects.ts";
import { spokeEnvValues } from "../cli/render/spoke.ts";
import { RecheckDueType, RecheckType, TargetExtension } from "../shared/events.ts";
import { RechecksVariable } from "../shared/sdk.ts";

const root = join(import.meta.dirname, "..");

describe("manifests/{hub,spoke}/knative.yaml", () => {
  it.each(renderedManifests())("$file is what cli/render makes of func.yaml now (run `npm run gen:manifests` to fix)", ({ file, yaml }) => {
    expect(readFileSync(join(root, file), "utf8")).toBe(yaml);
  });
});

type Container = { image: string; env: { name: string; value: string }[] };
type KService = Manifest & { spec: { template: { metadata: { annotations: Record<string, string> }; spec: { serviceAccountName: string; containers: Container[] } } } };
type Trigger = Manifest & { spec: TriggerSpec & { broker: string; subscriber: { ref: { kind: string; name: string } } } };

const hub = renderHub();
const spoke = renderSpoke({ clusterName: "edge-7", externalServerUrls: ["https://edge-7.example:6443"] });
const of = <T extends Manifest>(objects: Manifest[], kind: string) => objects.filter((o) => o.kind === kind) as T[];
const functions = readFunctions().map((f) => ({ name: f.name, side: f.side, f, objects: f.side === "hub" ? hub : spoke }));

// The definitions (shared/sdk.ts) are the one source: func.yaml's subscriptions are derived from their
// watches, and so are the event sources and the identities that watch for them.
describe("functions/*/func.yaml", () => {
  it.each(functions)("$name's subscriptions are its definition's (run `npm run gen:manifests` to fix)", ({ f }) => {
    expect(f.deploy.subscriptions).toEqual(derivedSubscriptions(f));
  });
});

// Each relay identity may get, list and watch what the functions it feeds watch (watchRules, the RBAC
// skeleton of a definition): the spoke's relay on the spoke (the hub it reads as the agent), and the hub
// relay local mode runs (dev/local/fleet.ts) on the hub. A Role counts for its own namespace only.
describe("the relay identities' RBAC", () => {
  type Rule = { apiGroups: string[]; resources: string[]; verbs: string[] };
  const grants = (file: string | undefined, namespace: string | undefined) =>
    (file ? readManifests("rbac", file) : [localHubRelayRole()]).flatMap((d) => (d.kind === "ClusterRole" || (d.kind === "Role" && d.metadata.namespace === namespace) ? ((d as unknown as { rules: Rule[] }).rules ?? []) : []));
  const allows = (rules: Rule[], group: string, resource: string, verb: string) =>
    rules.some((r) => r.apiGroups.includes(group) && r.resources.includes(resource) && r.verbs.includes(verb));
  const sides = [
    // derived from the hub functions' watches (cli/render/hub.ts), as the Broker's source's is
    { side: "hub", file: undefined, cluster: "hub" },
    { side: "spoke", file: "relay-spoke.yaml", cluster: "spoke" },
  ];
  it.each(sides)("lets the $side relay watch every kind its functions watch there", ({ side, file, cluster }) => {
    const watches = functions
      .filter((f) => f.side === side)
      .flatMap(({ f }) => watchesOf(f.name, functionEnv(f, spokeEnvValues({}))).watches.filter((w) => w.cluster === cluster));
    const missing = mergeWatches(watches).flatMap((s) => {
      const rules = grants(file, s.namespace);
      return ["get", "list", "watch"].filter((verb) => !allows(rules, s.resource.group, s.resource.plural, verb)).map((verb) => `${verb} ${s.resource.plural}${s.namespace ? ` in ${s.namespace}` : ""}`);
    });
    expect(watches.length).toBeGreaterThan(0);
    expect(missing).toEqual([]);
  });

  it("gives the local hub relay only reads, each of a kind some hub function watches", () => {
    const watched = new Set(functions.filter((f) => f.side === "hub").flatMap(({ f }) => watchesOf(f.name, functionEnv(f, {})).watches.map((w) => `${w.resource.group}/${w.resource.plural}`)));
    const rules = grants(undefined, undefined);
    expect(new Set(rules.flatMap((r) => r.verbs))).toEqual(new Set(["get", "list", "watch"]));
    expect(rules.flatMap((r) => r.resources.map((p) => `${r.apiGroups[0]}/${p}`)).filter((k) => !watched.has(k))).toEqual([]);
    expect(rules.flatMap((r) => r.resources)).toContain("clusterprofiles");
  });
});

describe("a render", () => {
  it("applies exactly SIG-Multicluster's CRDs unlabelled, marked shared", () => {
    const sharedCrds = hub.filter((o) => o.kind === "CustomResourceDefinition" && o.metadata.labels?.[PartOfLabel] !== PartOf);
    expect(sharedCrds.map((o) => o.metadata.name).sort()).toEqual(["clusterprofiles.multicluster.x-k8s.io", "placementdecisions.multicluster.x-k8s.io"]);
    expect(sharedCrds.every((o) => o.metadata.annotations?.[SharedApiAnnotation])).toBe(true);
  });

  it.each([
    { side: "hub", objects: hub },
    { side: "spoke", objects: spoke },
  ])("labels every $side object part-of ocm-functions, so an uninstall finds them", ({ objects }) => {
    // open-cluster-management is shared with OCM and users: an uninstall leaves it (cli/render/hub.ts)
    // OCM's namespace, and SIG-Multicluster's CRDs (every cluster manager's): applied unlabelled, so uninstall leaves them
    const shared = (o: Manifest) => (o.kind === "Namespace" && o.metadata.name === "open-cluster-management") || (o.kind === "CustomResourceDefinition" && o.metadata.annotations?.[SharedApiAnnotation] !== undefined);
    expect(objects.filter((o) => o.metadata.labels?.[PartOfLabel] !== PartOf && !shared(o)).map((o) => `${o.kind}/${o.metadata.name}`)).toEqual([]);
  });

  it("has every function of functions/ on its own side only", () => {
    const kservices = (objects: Manifest[]) => of(objects, "Service").filter((s) => s.apiVersion === "serving.knative.dev/v1");
    expect(kservices(hub).map((s) => s.metadata.name)).toEqual(functions.filter((f) => f.side === "hub").map((f) => f.name));
    expect(kservices(spoke).map((s) => s.metadata.name)).toEqual(functions.filter((f) => f.side === "spoke").map((f) => f.name));
    expect(kservices(hub).length + kservices(spoke).length).toBe(readdirSync(join(import.meta.dirname, "..", "functions")).length);
  });

  it.each(functions.filter(({ f }) => !isRelayFed(f) && !isSpokeRelayFed(f)))("gives $name one Trigger whose filters are exactly its func.yaml subscriptions (on the hub, each naming it as the target) and its own due rechecks", ({ name, f, side, objects }) => {
    const mine = of<Trigger>(objects, "Trigger").filter((t) => t.spec.subscriber.ref.name === name);
    expect(mine.map((t) => t.metadata.name)).toEqual([name]);
    const ownRechecks = { source: mine[0]!.spec.broker, filters: { type: RecheckDueType, [TargetExtension]: name } };
    const subscriptions = f.deploy.subscriptions.map((s) => (side === "hub" ? { ...s, filters: { ...s.filters, [TargetExtension]: name } } : s));
    expect(triggerFilters(mine[0]!.spec).map((filters) => ({ source: mine[0]!.spec.broker, filters }))).toEqual([...subscriptions, ownRechecks]);
    expect(new Set(mine.map((t) => t.spec.subscriber.ref.kind))).toEqual(new Set(["Service"]));
  });

  it("feeds the hub's Broker from one relay that sends each Broker-fed function its own events with its observed state, and renders no ApiServerSource or PingSource", () => {
    expect(hub.filter((o) => o.kind === "ApiServerSource" || o.kind === "PingSource")).toEqual([]);
    const source = hub.find((o) => o.kind === "ContainerSource" && o.metadata.name === HubSourceName)! as Manifest & { spec: { sink: { ref: { kind: string } }; template: { spec: { containers: { env: { name: string; value: string }[] }[] } } } };
    expect(source.spec.sink.ref.kind).toBe("Broker");
    const config = configFromEnvironment(source.spec.template.spec.containers[0]!.env.find((e) => e.name === "OCM_RELAY_CONFIG")!.value, { K_SINK: "http://broker.example" });
    const fed = functions.filter(({ f, side }) => side === "hub" && !isRelayFed(f));
    expect(config.sinks.map((s) => [s.name, s.url, s.extensions])).toEqual(fed.map(({ name }) => [name, "http://broker.example", { [TargetExtension]: name }]));
    for (const { name, f } of fed) {
      const sink = config.sinks.find((s) => s.name === name)!;
      expect(sink.filters).toEqual([...f.deploy.subscriptions.map((s) => s.filters), { type: RecheckDueType, [TargetExtension]: name }]);
      expect(sink.state?.watches.length).toBeGreaterThan(0);
    }
    // every kind a Broker-fed function subscribes to is watched on the hub, each kind of each group once
    // (a subscription names a kind alone: OCM's and SIG's PlacementDecision share one)
    const subscribed = new Set(fed.flatMap(({ f }) => f.deploy.subscriptions.flatMap((s) => (s.filters.kind ? [s.filters.kind] : []))));
    expect(new Set(config.sources.map((s) => s.resource.kind))).toEqual(subscribed);
    const watched = config.sources.map((s) => `${s.resource.group}/${s.resource.kind}`);
    expect(watched).toEqual([...new Set(watched)]);
    expect(new Set(config.sources.map((s) => s.cluster))).toEqual(new Set(["hub"]));
    // ticks as OCM's hub informers resync
    expect(config.resync.intervalMs).toBe(1_800_000);
  });

  it("routes the Broker's recheck requests, on the hub and on the spoke, to a relay pod in recheck mode whose due rechecks go back to that Broker", () => {
    for (const [objects, name] of [[hub, HubSourceName], [spoke, "ocm-relay"]] as const) {
      const trigger = of<Trigger>(objects, "Trigger").find((t) => t.metadata.name === name)!;
      expect(trigger.spec).toMatchObject({ filter: { attributes: { type: RecheckType } }, subscriber: { ref: { apiVersion: "v1", kind: "Service", name } } });
      const service = of<Manifest & { spec: { selector: Record<string, string>; ports: { targetPort: number }[] } }>(objects, "Service").find((s) => s.apiVersion === "v1" && s.metadata.name === name)!;
      const source = objects.find((o) => o.kind === "ContainerSource" && o.metadata.name === name)! as Manifest & { spec: { sink: { ref: { kind: string; name: string } }; template: { metadata: { labels: Record<string, string> }; spec: { containers: { env: { name: string; value: string }[]; ports: { containerPort: number }[] }[] } } } };
      // the Service reaches the ContainerSource's pods, on the port the relay takes rechecks on
      expect(source.spec.template.metadata.labels).toMatchObject(service.spec.selector);
      const config = configFromEnvironment(source.spec.template.spec.containers[0]!.env.find((e) => e.name === "OCM_RELAY_CONFIG")!.value, { K_SINK: "http://broker.example" });
      expect(config.rechecks?.port).toBe(service.spec.ports[0]!.targetPort);
      expect(source.spec.template.spec.containers[0]!.ports.map((p) => p.containerPort)).toContain(config.rechecks!.port);
      expect(source.spec.sink.ref).toMatchObject({ kind: "Broker", name: trigger.spec.broker });
    }
  });

  // The lease monitor asks to look again when a lease would expire; a Broker drops that answer.
  it("feeds cluster-lease-monitor from a relay of its own that delivers straight to it, handing each lease with its cluster, and gives it no Trigger", () => {
    const hub = renderHub();
    expect(of<Trigger>(hub, "Trigger").filter((t) => t.spec.subscriber.ref.name === "cluster-lease-monitor")).toEqual([]);
    const source = hub.find((o) => o.kind === "ContainerSource" && o.metadata.name === hubRelayName("cluster-lease-monitor"))!;
    expect(source.spec).toMatchObject({ sink: { ref: { apiVersion: "serving.knative.dev/v1", kind: "Service", name: "cluster-lease-monitor" } } });
    const container = (source.spec as { template: { spec: { containers: { env: { name: string; value: string }[] }[] } } }).template.spec.containers[0]!;
    const config = configFromEnvironment(container.env.find((e) => e.name === "OCM_RELAY_CONFIG")!.value, { K_SINK: "http://cluster-lease-monitor.example" });
    expect(config.sources.map((s) => [s.resource.kind, s.labelSelector ?? ""])).toEqual([["ManagedCluster", ""], ["Lease", "open-cluster-management.io/cluster-name"]]);
    expect(config.sinks.map(({ name, url }) => ({ name, url }))).toEqual([{ name: "k-sink", url: "http://cluster-lease-monitor.example" }]);
    // the state its watches ask for, handed with each event (shared/observed.ts)
    const related = config.sinks[0]!.state!.watches.map((w) => [w.kind, w.related.map((r) => `${r.kind} ${r.namespace ?? ""}/${r.name ?? ""}`), w.onTick]);
    expect(related).toEqual([["ManagedCluster", ["Lease {name}/managed-cluster-lease"], true], ["Lease", ["ManagedCluster /{namespace}"], true]]);
    // the Broker's relay watches leases for no one
    const brokerSource = hub.find((o) => o.kind === "ContainerSource" && o.metadata.name === HubSourceName)! as Manifest & { spec: { template: { spec: { containers: { env: { name: string; value: string }[] }[] } } } };
    const brokerConfig = configFromEnvironment(brokerSource.spec.template.spec.containers[0]!.env.find((e) => e.name === "OCM_RELAY_CONFIG")!.value, {});
    expect(brokerConfig.sources.map((s) => s.resource.kind)).not.toContain("Lease");
  });

  // agent-config asks to look again when a trial ends; a Broker drops that answer.
  it("has the spoke's relay deliver straight to agent-config with its subscriptions' filters, and gives it no Trigger", () => {
    expect(functions.filter(({ f }) => isSpokeRelayFed(f)).map((f) => f.name)).toEqual(["agent-config"]);
    expect(of<Trigger>(spoke, "Trigger").filter((t) => t.spec.subscriber.ref.name === "agent-config")).toEqual([]);
    const source = spoke.find((o) => o.kind === "ContainerSource")!;
    const container = (source.spec as { template: { spec: { containers: { env: { name: string; value: string }[] }[] } } }).template.spec.containers[0]!;
    const config = configFromEnvironment(container.env.find((e) => e.name === "OCM_RELAY_CONFIG")!.value, { K_SINK: "http://broker.example" });
    const f = functions.find((x) => x.name === "agent-config")!.f;
    expect(config.sinks).toEqual([
      { name: "agent-config", url: "http://agent-config.open-cluster-management-agent.svc.cluster.local", filters: f.deploy.subscriptions.map((x) => x.filters) },
      { name: "k-sink", url: "http://broker.example" },
    ]);
    // and the Service that URL names is in the render
    expect(of(spoke, "Service").map((x) => x.metadata.name)).toContain("agent-config");
  });

  it.each(functions)("runs $name with func.yaml's env, its placeholders filled, under its own service account", ({ name, f, objects }) => {
    const service = of<KService>(objects, "Service").find((s) => s.metadata.name === name)!;
    const { spec } = service.spec.template;
    expect(spec.serviceAccountName).toBe(f.deploy.serviceAccountName);
    const filled: Record<string, string> = { "{{ env:SPOKE_CLUSTER_NAME }}": "edge-7", "{{ env:SPOKE_EXTERNAL_SERVER_URLS }}": "https://edge-7.example:6443" };
    // a function a Broker feeds answers a recheck with a CloudEvent (shared/harness.ts Rechecks)
    const rechecks = isRelayFed(f) || isSpokeRelayFed(f) ? [] : [{ name: RechecksVariable, value: "event" }];
    expect(spec.containers[0]!.env).toEqual([...f.run.envs.map((e) => ({ name: e.name, value: filled[e.value] ?? e.value })), ...rechecks]);
    expect(spec.containers[0]!.image).toBe(`dev.local/ocm-functions/${name}:latest`);
    expect(service.spec.template.metadata.annotations["autoscaling.knative.dev/min-scale"]).toBe(String(f.deploy.options?.scale?.min ?? 0));
    const bindings = objects.filter((o) => o.kind.endsWith("Binding") && (o.subjects as { name: string }[] | undefined)?.some((s) => s.name === f.deploy.serviceAccountName));
    expect(bindings.length).toBeGreaterThan(0);
  });

  it.each(functions)("keeps $name's Knative Service cluster-local, off the public ingress", ({ name, objects }) => {
    const service = of<KService>(objects, "Service").find((s) => s.metadata.name === name && s.apiVersion === "serving.knative.dev/v1")!;
    expect(service.metadata.labels?.[VisibilityLabel]).toBe("cluster-local");
  });

  it.each([HubSourceName, hubRelayName("cluster-lease-monitor")])("lets the hub relay %s's account get, list and watch exactly what the relay watches", (name) => {
    const source = hub.find((o) => o.kind === "ContainerSource" && o.metadata.name === name)! as Manifest & { spec: { template: { spec: { serviceAccountName: string; containers: { env: { name: string; value: string }[] }[] } } } };
    const account = source.spec.template.spec.serviceAccountName;
    const role = of<Manifest & { rules: { apiGroups: string[]; resources: string[]; verbs: string[] }[] }>(hub, "ClusterRole").find((r) => r.metadata.name === `open-cluster-management:functions:${account}`)!;
    const granted = role.rules.flatMap((r) => r.resources.map((p) => `${r.apiGroups[0]}/${p}:${r.verbs.join(",")}`)).sort();
    const config = configFromEnvironment(source.spec.template.spec.containers[0]!.env.find((e) => e.name === "OCM_RELAY_CONFIG")!.value, {});
    const watched = [...new Set(config.sources.map((s) => `${s.resource.group}/${s.resource.plural}:get,list,watch`))].sort();
    expect(watched.length).toBeGreaterThan(0);
    expect(granted).toEqual(watched);
  });

  it("configures the spoke's relay as the relay itself parses it: the Broker as K_SINK, each source's cluster its own", () => {
    type Source = Manifest & { spec: { template: { spec: { containers: Container[] } } } };
    const [relay] = of<Source>(spoke, "ContainerSource");
    const text = relay!.spec.template.spec.containers[0]!.env.find((e) => e.name === "OCM_RELAY_CONFIG")!.value;
    const config = configFromEnvironment(text, { K_SINK: "http://broker-ingress.example/ns/default" });
    expect(config.sinks.map((s) => [s.name, s.url])).toEqual([["agent-config", "http://agent-config.open-cluster-management-agent.svc.cluster.local"], ["k-sink", "http://broker-ingress.example/ns/default"]]);
    expect(config.ceOverrides.extensions).toEqual({}); // a `cluster` override would rename every source's cluster
    const subscribed = new Set(functions.filter((f) => f.side === "spoke").flatMap((f) => f.f.deploy.subscriptions.flatMap((s) => (s.filters.kind ? [s.filters.kind] : []))));
    expect(new Set(config.sources.map((s) => s.resource.kind))).toEqual(subscribed);
    const onHub = config.sources.filter((s) => s.cluster === "hub");
    expect(Object.fromEntries(onHub.map((s) => [s.resource.kind, s.namespace ?? s.labelSelector ?? s.fieldSelector]))).toEqual({
      ManagedClusterAddOn: "edge-7",
      CertificateSigningRequest: "open-cluster-management.io/cluster-name=edge-7",
      ManagedCluster: "metadata.name=edge-7",
      ManifestWork: "edge-7",
      AgentConfig: "edge-7",
      ManagedServiceAccount: "edge-7",
    });
  });

  it("runs the spoke's heartbeat in its relay: no other Deployment, the relay's liveness probe on the heartbeat's health port, a young generation of 1 MiB, its identity bound to the heartbeat's role", () => {
    type Source = Manifest & { spec: { template: { spec: { serviceAccountName: string; containers: (Container & { ports: { name: string; containerPort: number }[]; livenessProbe: { httpGet: { path: string; port: string } } })[] } } } };
    expect(of(spoke, "Deployment")).toEqual([]);
    const [relay] = of<Source>(spoke, "ContainerSource");
    const container = relay!.spec.template.spec.containers[0]!;
    const config = configFromEnvironment(container.env.find((e) => e.name === "OCM_RELAY_CONFIG")!.value, {});
    expect(config.heartbeat).toEqual({ cluster: "spoke", clusterName: "edge-7", agentNamespace: "open-cluster-management-agent", bootstrapSecret: "bootstrap-hub-kubeconfig", hubSecret: "hub-kubeconfig-secret", health: { port: 8000, host: "0.0.0.0" } });
    expect(container.livenessProbe.httpGet).toEqual({ path: "/healthz", port: "health" });
    expect(container.env).toContainEqual({ name: "NODE_OPTIONS", value: "--max-semi-space-size=1" });
    expect(container.ports.find((p) => p.name === "health")?.containerPort).toBe(8000);
    type Binding = Manifest & { roleRef: { name: string }; subjects: { name: string }[] };
    const bound = of<Binding>(spoke, "RoleBinding").filter((b) => b.subjects.some((s) => s.name === relay!.spec.template.spec.serviceAccountName)).map((b) => b.roleRef.name);
    expect(bound).toEqual(expect.arrayContaining(["open-cluster-management:functions:relay-spoke", "open-cluster-management:functions:heartbeat"]));
    expect(of<Manifest>(spoke, "ServiceAccount").map((a) => a.metadata.name)).not.toContain("heartbeat");
  });

  // `clusteradm get token` asks for a token of this account (OCM's cluster-manager makes it).
  it("gives clusteradm's join-token ServiceAccount the bootstrap roles bootstrap tokens get, and nothing else", () => {
    type Binding = Manifest & { roleRef: { kind: string; name: string }; subjects?: { kind: string; name: string; namespace?: string }[] };
    const { namespace, name } = BootstrapServiceAccount;
    expect([namespace, name]).toEqual(["open-cluster-management", "agent-registration-bootstrap"]);
    expect(of(hub, "Namespace").map((n) => n.metadata.name)).toContain(namespace);
    // not labelled as ours: an uninstall must not delete a namespace OCM or the user may already own
    expect(of(hub, "Namespace").find((n) => n.metadata.name === namespace)!.metadata.labels?.[PartOfLabel]).toBeUndefined();
    expect(of(hub, "ServiceAccount").filter((a) => a.metadata.namespace === namespace).map((a) => a.metadata.name)).toEqual([name]);
    const bindings = hub.filter((o): o is Binding => o.kind.endsWith("Binding"));
    const ofAccount = bindings.filter((b) => b.subjects?.some((s) => s.kind === "ServiceAccount" && s.name === name && s.namespace === namespace));
    expect(ofAccount.map((b) => [b.kind, b.metadata.name, b.roleRef.kind, b.roleRef.name])).toEqual([
      ["ClusterRoleBinding", "open-cluster-management:bootstrap:agent-registration", "ClusterRole", "open-cluster-management:bootstrap"],
      ["RoleBinding", "open-cluster-management:bootstrap:hub-ca", "Role", "open-cluster-management:bootstrap:hub-ca"],
    ]);
    const ofTokens = bindings.filter((b) => b.subjects?.some((s) => s.kind === "Group" && s.name === "system:bootstrappers:managedcluster"));
    expect(ofTokens.map((b) => b.roleRef.name)).toEqual(["open-cluster-management:bootstrap", "open-cluster-management:bootstrap:hub-ca"]);
  });

  it("renders that namespace once when it is also the hub's", () => {
    const objects = renderHub({ namespace: BootstrapServiceAccount.namespace });
    expect(of(objects, "Namespace").map((n) => n.metadata.name)).toEqual([BootstrapServiceAccount.namespace]);
  });

  it("takes images, the broker class and the bootstrap kubeconfig from the options", () => {
    const custom = renderSpoke({ registry: "registry.example/team", tag: "v1", brokerClass: "Kafka", timeoutSeconds: 60, containerConcurrency: 2, bootstrapKubeconfig: "apiVersion: v1\nkind: Config\n" });
    const [service] = of<KService & { spec: { template: { spec: { timeoutSeconds?: number; containerConcurrency: number } } } }>(custom, "Service");
    expect(service!.spec.template.spec.containers[0]!.image).toMatch(/^registry\.example\/team\/ocm-functions\/[a-z-]+:v1$/);
    expect([service!.spec.template.spec.timeoutSeconds, service!.spec.template.spec.containerConcurrency]).toEqual([60, 2]);
    expect(of(custom, "Broker")[0]!.metadata.annotations).toEqual({ "eventing.knative.dev/broker.class": "Kafka" });
    const secret = of<Manifest & { data: Record<string, string> }>(custom, "Secret")[0]!;
    expect([secret.metadata.name, Buffer.from(secret.data.kubeconfig!, "base64").toString()]).toEqual(["bootstrap-hub-kubeconfig", "apiVersion: v1\nkind: Config\n"]);
    expect(of(renderSpoke(), "Secret")).toEqual([]);
  });

  it("renders a hosted agent for the management cluster: every object in klusterlet-<cluster>, labelled and with cluster-wide roles named after it, none of them reading secrets or leases in every namespace or granting the managed cluster's kinds; the functions and the relay reach the managed cluster with external-managed-kubeconfig", () => {
    const objects = renderSpoke({ clusterName: "edge-9", managedKubeconfig: "kind: Config # managed\n" });
    const ns = "klusterlet-edge-9";
    expect(objects.filter((o) => o.metadata.namespace !== undefined && o.metadata.namespace !== ns).map((o) => `${o.kind} ${o.metadata.namespace}/${o.metadata.name}`)).toEqual([]);
    expect(of(objects, "Namespace").map((n) => n.metadata.name)).toEqual([ns]);
    expect(objects.filter((o) => o.kind !== "CustomResourceDefinition" && (o.metadata.labels as Record<string, string>)["ocm-functions.io/hosted-cluster"] !== "edge-9")).toEqual([]);
    const clusterWide = objects.filter((o) => o.kind === "ClusterRole" || o.kind === "ClusterRoleBinding").map((o) => o.metadata.name);
    expect(clusterWide.length).toBeGreaterThan(0);
    expect(clusterWide.filter((n) => !n.endsWith(":edge-9"))).toEqual([]);
    // the shared management cluster holds every hosted agent's kubeconfigs: nothing cluster-wide reads secrets
    const notClusterWide = new Set(["secrets", "leases", "nodes", "clusterclaims", "appliedmanifestworks", "serviceaccounts", "*"]);
    const granted = of<Manifest & { rules: { resources?: string[] }[] }>(objects, "ClusterRole").flatMap((r) => r.rules.flatMap((rule) => rule.resources ?? []));
    expect(granted.filter((r) => notClusterWide.has(r))).toEqual([]);
    const secret = of<Manifest & { data: Record<string, string> }>(objects, "Secret").find((s) => s.metadata.name === "external-managed-kubeconfig")!;
    expect(Buffer.from(secret.data.kubeconfig!, "base64").toString()).toBe("kind: Config # managed\n");
    type Mounted = KService & { spec: { template: { spec: { volumes?: { secret?: { secretName: string } }[]; containers: (Container & { volumeMounts?: { mountPath: string }[] })[] } } } };
    for (const s of of<Mounted>(objects, "Service").filter((o) => o.apiVersion === "serving.knative.dev/v1")) {
      const c = s.spec.template.spec.containers[0]!;
      const env = Object.fromEntries(c.env!.map((e) => [e.name, e.value]));
      expect([env.OCM_MANAGED_CLUSTER_NAME, env.AGENT_NAMESPACE, s.spec.template.spec.volumes?.[0]?.secret?.secretName, c.volumeMounts?.[0]?.mountPath], s.metadata.name).toEqual(["managed", ns, "external-managed-kubeconfig", env.OCM_KUBECONFIG_DIR]);
    }
    const registration = of<Mounted>(objects, "Service").find((s) => s.metadata.name === "spoke-registration")!;
    expect(registration.spec.template.spec.containers[0]!.env).toContainEqual({ name: "CLUSTER_ANNOTATIONS", value: "agent.open-cluster-management.io/klusterlet-deploy-mode=Hosted" });
    const source = objects.find((o) => o.kind === "ContainerSource")! as Manifest & { spec: { template: { spec: { containers: { env: { name: string; value: string }[] }[] } } } };
    const config = configFromEnvironment(source.spec.template.spec.containers[0]!.env.find((e) => e.name === "OCM_RELAY_CONFIG")!.value, {});
    expect(config.clusters.managed).toEqual({ secret: { cluster: "spoke", namespace: ns, name: "external-managed-kubeconfig", key: "kubeconfig" } });
    expect(config.sources.filter((s) => s.cluster === "managed").map((s) => s.resource.plural).sort()).toEqual(expect.arrayContaining(["appliedmanifestworks", "clusterclaims", "nodes"]));
  });

  it("renders two hosted agents for one management cluster without a name in common but the shared CRDs", () => {
    const key = (o: Manifest) => `${o.apiVersion} ${o.kind} ${o.metadata.namespace ?? ""}/${o.metadata.name}`;
    const [a, b] = ["edge-9", "edge-10"].map((clusterName) => renderSpoke({ clusterName, managedKubeconfig: "kind: Config\n" }).filter((o) => o.kind !== "CustomResourceDefinition").map(key));
    expect(a!.length).toBeGreaterThan(40);
    expect(a!.filter((k) => b!.includes(k))).toEqual([]);
  });

  it("renders several hubs as one bootstrap kubeconfig Secret each, in order, named in spoke-registration's list with the timeout", () => {
    const objects = renderSpoke({ bootstrapKubeconfigs: ["kind: Config # A\n", "kind: Config # B\n"], hubConnectionTimeoutSeconds: 300 });
    const secrets = of<Manifest & { data: Record<string, string> }>(objects, "Secret");
    expect(secrets.map((s) => [s.metadata.name, Buffer.from(s.data.kubeconfig!, "base64").toString()])).toEqual([
      ["bootstrap-hub-kubeconfig-0", "kind: Config # A\n"],
      ["bootstrap-hub-kubeconfig-1", "kind: Config # B\n"],
    ]);
    const env = (fn: string) => of<KService>(objects, "Service").find((s) => s.metadata.name === fn)!.spec.template.spec.containers[0]!.env!;
    expect(env("spoke-registration")).toEqual(expect.arrayContaining([
      { name: "BOOTSTRAP_KUBECONFIG_SECRETS", value: "bootstrap-hub-kubeconfig-0,bootstrap-hub-kubeconfig-1" },
      { name: "HUB_CONNECTION_TIMEOUT_SECONDS", value: "300" },
    ]));
    expect(() => renderSpoke({ bootstrapKubeconfigs: ["kind: Config\n"] })).toThrow("several hubs take at least two bootstrap kubeconfigs");
    expect(() => renderSpoke({ hubConnectionTimeoutSeconds: 300 })).toThrow("a hub connection timeout needs several hubs");
  });
});

// --workloads deployments: clusters with Eventing but no Serving.
describe("a render with workloads deployments", () => {
  type Ref = { apiVersion: string; kind: string; name: string };
  type PodContainer = Container & { name: string; resources: unknown; ports: { containerPort: number }[]; readinessProbe: { httpGet: { path: string; port: number } } };
  type Deployment = Manifest & { spec: { replicas: number; selector: { matchLabels: Record<string, string> }; template: { metadata: { labels: Record<string, string> }; spec: { serviceAccountName: string; containers: PodContainer[] } } } };
  type CoreService = Manifest & { spec: { selector: Record<string, string>; ports: { port: number; targetPort: number }[] } };
  const options = { registry: "registry.example", tag: "v2", env: { OCM_CLUSTER_AUTO_APPROVAL_USERS: "system:bootstrap:abc" } };
  const sides = [
    { side: "hub", knative: renderHub(options), plain: renderHub({ ...options, workloads: "deployments" }) },
    {
      side: "spoke",
      knative: renderSpoke({ ...options, clusterName: "edge-7" }),
      plain: renderSpoke({ ...options, clusterName: "edge-7", workloads: "deployments" }),
    },
  ] as const;
  const refsOf = (objects: readonly Manifest[]): Ref[] => [
    ...of<Trigger>([...objects], "Trigger").map((t) => t.spec.subscriber.ref as Ref),
    ...objects.filter((o) => o.kind === "ContainerSource").flatMap((o) => ((o.spec as { sink: { ref: Ref } }).sink.ref.kind === "Service" ? [(o.spec as { sink: { ref: Ref } }).sink.ref] : [])),
  ];

  it.each(sides)("renders nothing of Knative Serving on the $side", ({ plain }) => {
    expect(plain.filter((o) => o.apiVersion.startsWith("serving.knative.dev/")).map((o) => `${o.kind}/${o.metadata.name}`)).toEqual([]);
  });

  it.each(sides)("runs every $side function as a Deployment behind a Service, its container the Knative form's", ({ side, knative, plain }) => {
    const names = functions.filter((f) => f.side === side).map((f) => f.name);
    expect(names.length).toBeGreaterThan(0);
    for (const name of names) {
      const f = functions.find((x) => x.name === name)!.f;
      const deployment = plain.find((o) => o.apiVersion === "apps/v1" && o.kind === "Deployment" && o.metadata.name === name) as Deployment | undefined;
      const service = plain.find((o) => o.apiVersion === "v1" && o.kind === "Service" && o.metadata.name === name) as CoreService | undefined;
      expect(deployment, name).toBeDefined();
      expect(service, name).toBeDefined();
      const labels = { "app.kubernetes.io/name": name };
      expect(deployment!.spec.selector.matchLabels).toEqual(labels);
      expect(deployment!.spec.template.metadata.labels).toEqual(labels);
      expect(service!.spec.selector).toEqual(labels);
      expect(service!.spec.ports).toEqual([{ name: "http", port: 80, targetPort: 8080 }]);
      expect(deployment!.spec.replicas).toBe(Math.max(f.deploy.options?.scale?.min ?? 0, 1));
      expect(deployment!.spec.template.spec.serviceAccountName).toBe(f.deploy.serviceAccountName);
      const kservice = of<KService>([...knative], "Service").find((s) => s.metadata.name === name)!;
      const expected = kservice.spec.template.spec.containers[0]! as PodContainer;
      const [container] = deployment!.spec.template.spec.containers;
      expect(container!.name).toBe("function");
      expect({ image: container!.image, env: container!.env, resources: container!.resources }).toEqual({ image: expected.image, env: expected.env, resources: expected.resources });
      expect(container!.image).toBe(`registry.example/ocm-functions/${name}:v2`);
      expect(container!.readinessProbe.httpGet.port).toBe(container!.ports[0]!.containerPort);
    }
  });

  it.each(sides)("points every $side Trigger and relay sink at a v1 Service of the render", ({ plain }) => {
    const refs = refsOf(plain);
    expect(refs.length).toBeGreaterThan(0);
    const services = new Set(plain.filter((o) => o.apiVersion === "v1" && o.kind === "Service").map((o) => o.metadata.name));
    for (const ref of refs) {
      expect(ref.apiVersion, ref.name).toBe("v1");
      expect(services.has(ref.name), ref.name).toBe(true);
    }
  });

  it("sinks the hub's cluster-lease-monitor relay to its v1 Service", () => {
    const [hubSide] = sides;
    const source = hubSide.plain.find((o) => o.kind === "ContainerSource" && o.metadata.name === hubRelayName("cluster-lease-monitor"))!;
    expect(source.spec).toMatchObject({ sink: { ref: { apiVersion: "v1", kind: "Service", name: "cluster-lease-monitor" } } });
  });

  it.each(sides)("leaves every other $side object as the Knative form has it", ({ knative, plain }) => {
    const names = new Set(functions.map((f) => f.name));
    const isWorkload = (o: Manifest) => (o.kind === "Service" || o.kind === "Deployment") && names.has(o.metadata.name);
    const rest = (objects: readonly Manifest[]) =>
      objects
        .filter((o) => !isWorkload(o))
        .map((o) => (o.kind === "Trigger" || o.kind === "ContainerSource" ? { ...o, spec: JSON.parse(JSON.stringify(o.spec).replaceAll('"apiVersion":"serving.knative.dev/v1"', '"apiVersion":"v1"')) } : o));
    expect(rest(plain)).toEqual(rest(knative));
  });

  it("refuses a workload form it does not know", () => {
    expect(() => renderHub({ workloads: "bogus" as "knative" })).toThrow(/workloads: give knative or deployments/);
  });
});
