// The hub's functions as pods on a real node, invoked by Knative Eventing itself: Knative Eventing
// v0.50.0 runs in pods (controller, webhook, MT channel-based Broker over the in-memory channel, all
// built from their Go modules), the Broker fed by our relay as a ContainerSource, and `ocmf install hub
// --workloads deployments --wait all` puts every hub function there as a Deployment and a Service,
// subscribed by its rendered Triggers (dev/local/eventing-hub.ts). No hub function runs anywhere else,
// so every hub reconcile below is a function pod answering a Broker delivery (cluster-lease-monitor's
// through its relay pod, a ContainerSource). The spoke is local processes, as `ocmf join` applied it.
//
// Needs root (the node); fails, never skips, when the node or Eventing cannot start.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { join } from "node:path";
import { parse, stringify } from "yaml";
import { readFileSync } from "node:fs";
import { startEventingHub, IMAGE_TAG, type EventingHub } from "../dev/local/eventing-hub.ts";
import { EVENTING_DEPLOYMENTS, EventingNamespace } from "../dev/control-plane/eventing.ts";
import { runDeployed, type Deployed } from "../dev/local/deployed.ts";
import { joinSpoke } from "../cli/join.ts";
import { acceptCluster } from "../cli/accept.ts";
import type { KubeObject } from "../shared/kube/client.ts";
import { DeploymentResource, NamespaceResource, PodResource } from "../shared/api/kube.ts";
import { ClusterLabel, ManagedClusterConditionType, ManagedClusterResource, ManagedClusterSetBindingResource, ManagedClusterSetResource, PlacementDecisionResource, PlacementResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { HubSourceName } from "../cli/render/hub.ts";
import { readFunctions } from "../cli/render/func-yaml.ts";
import { RecheckDueType, RecheckType, TargetExtension } from "../shared/events.ts";
import { rfc3339 } from "../shared/clock.ts";
import { AgentNamespaceDefault } from "../shared/api/registration.ts";
import { findCondition } from "../shared/conditions.ts";
import { eventually } from "./support/eventually.ts";
import { leaseRenewsAndHeartbeatCounts, manifestWorkApplied } from "./support/joined-spoke.ts";

const CLUSTER = "cluster1";

type Pod = KubeObject & {
  metadata: { labels?: Record<string, string>; deletionTimestamp?: string };
  spec: { nodeName?: string; containers: { image: string }[] };
  status?: { phase?: string; conditions?: { type: string; status: string }[] };
};
type Deployment = KubeObject & { status?: { conditions?: { type: string; status: string }[] } };

const ready = (p: Pod) => p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false;
const statusOf = (mc: ManagedCluster | undefined, type: string) => findCondition(mc?.status?.conditions, type)?.status;

let env: EventingHub;
let spokeRun: Deployed | undefined;

async function podsOf(fn: string): Promise<Pod[]> {
  const { items } = await env.hubAdmin.list<Pod>(PodResource, { namespace: env.namespace, labelSelector: `app.kubernetes.io/name=${fn}` });
  return items;
}

async function cluster(): Promise<ManagedCluster | undefined> {
  return env.hubAdmin.get<ManagedCluster & KubeObject>(ManagedClusterResource, CLUSTER);
}

beforeAll(async () => {
  expect(process.getuid?.(), "a node needs root").toBe(0);
  env = await startEventingHub();
}, 900_000);

afterAll(async () => {
  await spokeRun?.stop();
  await env?.stop();
}, 180_000);

describe("the hub's functions as pods on a node, invoked through Knative Eventing's Broker", () => {
  it("Knative Eventing runs in pods from our images, and install --wait all left every hub function Available as a pod of its image", async () => {
    // The controllers turn Ready 20 s or more after they start (their probes' initial delay).
    await eventually(
      async () => {
        for (const name of EVENTING_DEPLOYMENTS) {
          const d = await env.hubAdmin.get<Deployment>(DeploymentResource, name, EventingNamespace);
          expect(d?.status?.conditions?.find((c) => c.type === "Available")?.status, name).toBe("True");
        }
      },
      { timeoutMs: 60_000, intervalMs: 1_000 },
    );
    const { items: knative } = await env.hubAdmin.list<Pod>(PodResource, { namespace: EventingNamespace });
    expect(knative.filter(ready).map((p) => p.spec.containers[0]!.image).every((i) => i.startsWith("dev.local/knative-eventing/") && i.endsWith(`:${env.eventing.version}`))).toBe(true);
    expect(env.functions.length).toBe(readFunctions().filter((f) => f.side === "hub").length);
    for (const fn of env.functions) {
      const pods = (await podsOf(fn)).filter(ready);
      expect(pods.length, fn).toBe(1);
      expect(pods[0]!.spec.nodeName).toBe(env.node.name);
      expect(pods[0]!.spec.containers[0]!.image).toBe(`dev.local/ocm-functions/${fn}:${IMAGE_TAG}`);
    }
    // The Broker's source: our relay, in the pod Knative's controller made from the rendered ContainerSource.
    const [source] = (await podsOf(HubSourceName)).filter(ready);
    expect(source?.spec.containers[0]!.image).toBe(`dev.local/ocm-functions/relay:${IMAGE_TAG}`);
    expect(source?.spec.nodeName).toBe(env.node.name);
  }, 60_000);

  it("a spoke joins: it registers, a function pod deleted mid-join comes back, the cluster is accepted, Joined and Available", async () => {
    await joinSpoke(env.spokeAdmin, { bootstrapKubeconfigs: [readFileSync(env.bootstrapKubeconfig, "utf8")], render: { clusterName: CLUSTER }, wait: { level: "crds", timeoutMs: 120_000, timeoutText: "2 minutes" } }, () => {});
    spokeRun = await runDeployed({ cluster: env.spoke, namespace: AgentNamespaceDefault, dist: env.dist, runDir: join(env.work, "run-spoke") });
    await eventually(async () => expect(await cluster()).toBeDefined(), { timeoutMs: 60_000 });
    // A short lease, as an admin may set it (the heartbeat reads it before each renewal, so before the
    // first one): renewals every 2 s, and the hub's grace is 10 s.
    await env.hubAdmin.request("PATCH", `/apis/cluster.open-cluster-management.io/v1/managedclusters/${CLUSTER}`, JSON.stringify({ spec: { leaseDurationSeconds: 2 } }), "application/merge-patch+json");

    // Mid-join: the acceptor's pod goes while the acceptance it must act on is being made.
    const [gone] = await podsOf("cluster-acceptor");
    await Promise.all([
      env.hubAdmin.request("DELETE", `/api/v1/namespaces/${env.namespace}/pods/${gone!.metadata.name}`),
      // as an admin does once the agent's request is there: accept the cluster and approve its CSR
      eventually(
        async () => {
          const r = await acceptCluster(env.hubAdmin, CLUSTER);
          // (an earlier try may have approved it and then failed on the cluster's update)
          expect(r.csrs.some((v) => v.result === "approved" || v.result === "already approved"), JSON.stringify(r)).toBe(true);
          expect(r.accepted, JSON.stringify(r)).toMatch(/^(set|already)$/);
        },
        { timeoutMs: 60_000, intervalMs: 1_000 },
      ),
    ]);
    const mc = await eventually(
      async () => {
        const got = await cluster();
        for (const type of [ManagedClusterConditionType.HubAccepted, ManagedClusterConditionType.Joined, ManagedClusterConditionType.Available]) expect(statusOf(got, type), type).toBe("True");
        return got!;
      },
      { timeoutMs: 240_000, intervalMs: 500 },
    );
    expect(mc.spec?.hubAcceptsClient).toBe(true);
    // the deleted pod may still be terminating when the join is this quick; it goes, and one new pod is Ready
    await eventually(
      async () => {
        const pods = await podsOf("cluster-acceptor");
        expect(pods.map((p) => p.metadata.name)).not.toContain(gone!.metadata.name);
        expect(pods.filter(ready).length).toBe(1);
      },
      { timeoutMs: 60_000, intervalMs: 500 },
    );
    // What reached the functions came through the Broker: the recorder, subscribed to it without a
    // filter, saw the cluster's registration and its CSR as the hub's relay sent them, each to one function.
    // (The recorder is one more subscriber: its copy of the last update may come after the functions'.)
    await eventually(() => {
      const seen = env.deliveries.map((d) => `${d.event.type} ${d.event.kind}`);
      expect(seen).toEqual(expect.arrayContaining(["dev.knative.apiserver.resource.add ManagedCluster", "dev.knative.apiserver.resource.update ManagedCluster", "dev.knative.apiserver.resource.add CertificateSigningRequest"]));
    }, { timeoutMs: 30_000, intervalMs: 250 });
    expect(env.deliveries.every((d) => d.event.cluster === "hub")).toBe(true);
    expect(env.deliveries.every((d) => env.functions.includes(String(d.event[TargetExtension])))).toBe(true);
  }, 360_000);

  it("its lease renews; the cluster turns Unknown when the heartbeat stops and Available again when it returns", async () => {
    await leaseRenewsAndHeartbeatCounts(env.hubAdmin, spokeRun!, CLUSTER);
  }, 300_000);

  it("a ManifestWork on the hub is applied on the spoke", async () => {
    await manifestWorkApplied(env.hubAdmin, env.spokeAdmin, CLUSTER);
  }, 150_000);

  // The hub's relays tick every 30 minutes, so none comes during this file. A Broker drops the
  // x-recheck-after-ms answer, so the scheduler's recheck at the toleration's end must travel as events:
  // its reply to the Broker, the relay in recheck mode, and the due recheck back through the Broker to it alone.
  it("a toleration that runs out in 5 s takes the cluster out of a Placement through the Broker's recheck, with no resync tick and the cluster unchanged since its taint", async () => {
    const ns = "recheck-through-broker";
    const taintKey = "ocm-functions.io/brief";
    const since = new Date().toISOString();
    await env.hubAdmin.create(NamespaceResource, { metadata: { name: ns } });
    await env.hubAdmin.create(ManagedClusterSetResource, { metadata: { name: ns }, spec: { clusterSelector: { selectorType: "LabelSelector", labelSelector: {} } } });
    await env.hubAdmin.create(ManagedClusterSetBindingResource, { metadata: { name: ns, namespace: ns }, spec: { clusterSet: ns } });
    await env.hubAdmin.create(PlacementResource, { metadata: { name: "brief", namespace: ns }, spec: { tolerations: [{ key: taintKey, operator: "Exists", tolerationSeconds: 5 }] } });
    const decided = async () => {
      const { items } = await env.hubAdmin.list<KubeObject & { status?: { decisions?: { clusterName: string }[] } }>(PlacementDecisionResource, { namespace: ns, labelSelector: `${ClusterLabel.Placement}=brief` });
      return items.flatMap((d) => d.status?.decisions ?? []).map((d) => d.clusterName);
    };
    await eventually(async () => expect(await decided()).toEqual([CLUSTER]), { timeoutMs: 60_000, intervalMs: 250 });
    const tainted = await env.hubAdmin.request("PATCH", `/apis/cluster.open-cluster-management.io/v1/managedclusters/${CLUSTER}`, JSON.stringify({ spec: { taints: [{ key: taintKey, effect: "NoSelect", timeAdded: rfc3339(new Date()) }] } }), "application/merge-patch+json");
    const taintedVersion = (tainted as KubeObject).metadata.resourceVersion;
    await eventually(async () => expect(await decided()).toEqual([]), { timeoutMs: 60_000, intervalMs: 250 });
    // Nothing else could have done it: the cluster has not changed since its taint, and no tick came.
    expect((await cluster())!.metadata.resourceVersion).toBe(taintedVersion);
    const after = env.deliveries.filter((d) => d.time >= since);
    expect(after.filter((d) => d.event.type === "dev.knative.sources.ping")).toEqual([]);
    // The recorder, subscribed to the Broker without a filter, saw the scheduler's reply and the due recheck.
    expect(after.some((d) => d.event.type === RecheckType && d.event[TargetExtension] === "placement-scheduler")).toBe(true);
    expect(after.some((d) => d.event.type === RecheckDueType && d.event[TargetExtension] === "placement-scheduler")).toBe(true);
    const [rechecks] = (await podsOf(HubSourceName)).filter(ready);
    expect(rechecks?.spec.containers[0]!.image).toBe(`dev.local/ocm-functions/relay:${IMAGE_TAG}`);
  }, 180_000);

  // Last: it restarts the Broker's relay with a short resync.
  it("the hub relay's resync tick comes through the Broker to every function that sweeps, each its own", async () => {
    const since = new Date().toISOString();
    const path = `/apis/sources.knative.dev/v1/namespaces/${env.namespace}/containersources/${HubSourceName}`;
    const source = (await env.hubAdmin.request("GET", path)) as { spec: { template: { spec: { containers: { env: { name: string; value: string }[] }[] } } } };
    const env0 = source.spec.template.spec.containers[0]!.env;
    const i = env0.findIndex((e) => e.name === "OCM_RELAY_CONFIG");
    const config = parse(env0[i]!.value) as { resync: { intervalMs: number }; kSinkTargets: { name: string; filters: Record<string, string>[] }[] };
    expect(config.resync.intervalMs).toBe(1_800_000);
    config.resync.intervalMs = 5_000;
    const patch = [{ op: "replace", path: `/spec/template/spec/containers/0/env/${i}/value`, value: stringify(config) }];
    await env.hubAdmin.request("PATCH", path, JSON.stringify(patch), "application/json-patch+json");
    const sweeping = config.kSinkTargets.filter((t) => t.filters.some((f) => f.type === "dev.knative.sources.ping")).map((t) => t.name).sort();
    expect(sweeping.length).toBeGreaterThan(1);
    await eventually(
      () => {
        const ticked = env.deliveries.filter((d) => d.time >= since && d.event.type === "dev.knative.sources.ping" && d.event.cluster === "hub").map((d) => String(d.event[TargetExtension]));
        expect([...new Set(ticked)].sort()).toEqual(sweeping);
      },
      { timeoutMs: 120_000, intervalMs: 1_000 },
    );
  }, 180_000);
});
