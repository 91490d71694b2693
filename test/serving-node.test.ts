// The hub's functions as Knative Services on a real node: Knative Serving v0.50.0 and Traefik v3.6.12
// (its Knative provider as the ingress) run in pods beside Eventing, all built from their Go modules,
// and `ocmf install hub --wait all` puts every hub function there with its default workloads: a Knative
// Service, delivered to by its Triggers through subscriber.ref. No hub function runs anywhere else, so
// every hub reconcile below is done by a pod of a Knative revision, started by Knative when an event
// came. The autoscaler's windows are short (6 s, Knative's least), so functions go to zero between
// steps and come back for the next; the hub's relays tick once a day, so the fleet can be quiet.
//
// Needs root (the node); fails, never skips, when the node, Eventing or Serving cannot start.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { join } from "node:path";
import { readFileSync } from "node:fs";
import { startEventingHub, requestEachKnativeService, IMAGE_TAG, type EventingHub } from "../dev/local/eventing-hub.ts";
import { SERVING_DEPLOYMENTS, ServingNamespace, TraefikNamespace } from "../dev/control-plane/serving.ts";
import { runDeployed, type Deployed } from "../dev/local/deployed.ts";
import { joinSpoke } from "../cli/join.ts";
import { acceptCluster } from "../cli/accept.ts";
import { renderHub } from "../cli/render/index.ts";
import { HubSourceName } from "../cli/render/hub.ts";
import { readFunctions } from "../cli/render/func-yaml.ts";
import { TargetExtension } from "../shared/events.ts";
import { triggerFilters, type TriggerSpec } from "../cli/render/objects.ts";
import type { KubeObject } from "../shared/kube/client.ts";
import { DeploymentResource, LeaseResource, PodResource } from "../shared/api/kube.ts";
import type { ApiResource } from "../shared/api/meta.ts";
import { ClusterLabel, ManagedClusterConditionType, ManagedClusterLeaseName, ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { AgentNamespaceDefault } from "../shared/api/registration.ts";
import { findCondition } from "../shared/conditions.ts";
import { eventually } from "./support/eventually.ts";
import { leaseRenewsAndHeartbeatCounts, manifestWorkApplied } from "./support/joined-spoke.ts";

const CLUSTER = "cluster1";
// The function whose events keep arriving on a quiet fleet: its relay hands it every renewal of a
// joined cluster's lease (every 2 s here), and each is a reconcile that judges that lease. It stays warm
// by design; every other hub function has nothing to do once the cluster is joined.
const LEASE_PATH = "cluster-lease-monitor";

type Pod = KubeObject & {
  metadata: { labels?: Record<string, string>; deletionTimestamp?: string; ownerReferences?: { kind: string }[] };
  spec: { nodeName?: string; containers: { name: string; image: string }[] };
  status?: { phase?: string; conditions?: { type: string; status: string }[] };
};
type Deployment = KubeObject & {
  metadata: { ownerReferences?: { apiVersion: string; kind: string }[] };
  status?: { conditions?: { type: string; status: string }[] };
};
type Lease = KubeObject & { spec?: { renewTime?: string } };
type Condition = { type: string; status: string };
type KService = KubeObject & { status?: { conditions?: Condition[]; address?: { url?: string }; latestReadyRevisionName?: string } };

const KServiceResource = { group: "serving.knative.dev", version: "v1", kind: "Service", plural: "services", namespaced: true } as const satisfies ApiResource;
const TriggerResource = { group: "eventing.knative.dev", version: "v1", kind: "Trigger", plural: "triggers", namespaced: true } as const satisfies ApiResource;

const ready = (p: { status?: { conditions?: Condition[] } }) => p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false;
const statusOf = (mc: ManagedCluster | undefined, type: string) => findCondition(mc?.status?.conditions, type)?.status;

let env: EventingHub;
let spokeRun: Deployed | undefined;

// The pods of a function's Knative Service (every revision), terminating ones included.
async function podsOf(fn: string): Promise<Pod[]> {
  const { items } = await env.hubAdmin.list<Pod>(PodResource, { namespace: env.namespace, labelSelector: `serving.knative.dev/service=${fn}` });
  return items;
}

// Each function's pods (of every revision, terminating ones included), and how many of them are Ready.
async function podCounts(): Promise<Record<string, { pods: number; ready: number }>> {
  const { items } = await env.hubAdmin.list<Pod>(PodResource, { namespace: env.namespace, labelSelector: "serving.knative.dev/service" });
  return Object.fromEntries(
    env.functions.map((fn) => {
      const pods = items.filter((p) => p.metadata.labels?.["serving.knative.dev/service"] === fn);
      return [fn, { pods: pods.length, ready: pods.filter(ready).length }];
    }),
  );
}

async function cluster(name = CLUSTER): Promise<ManagedCluster | undefined> {
  return env.hubAdmin.get<ManagedCluster & KubeObject>(ManagedClusterResource, name);
}

// The Broker-fed hub functions whose Triggers let an event of this type and kind through.
// The functions whose Triggers pass an event with these attributes (a due recheck names its function in
// ocmftarget; the relay in recheck mode, a subscriber too, is no function).
function subscribedTo(event: Record<string, string>): string[] {
  const triggers = renderHub({ tag: IMAGE_TAG }).filter((o) => o.kind === "Trigger") as unknown as { spec: TriggerSpec & { subscriber: { ref: { name: string } } } }[];
  const passes = (filter: Record<string, string>) => Object.entries(filter).every(([k, v]) => event[k] === v);
  return [...new Set(triggers.filter((t) => triggerFilters(t.spec).some(passes)).map((t) => t.spec.subscriber.ref.name))].filter((name) => name !== HubSourceName).sort();
}

beforeAll(async () => {
  expect(process.getuid?.(), "a node needs root").toBe(0);
  env = await startEventingHub({
    workloads: "knative",
    serving: { autoscaler: { "stable-window": "6s", "scale-to-zero-grace-period": "6s" } },
    resyncSeconds: 86_400,
  });
}, 1_200_000);

afterAll(async () => {
  await spokeRun?.stop();
  await env?.stop();
}, 180_000);

describe("the hub's functions as Knative Services on a node, with Knative Serving and Traefik", () => {
  it("Serving and Traefik run in pods from our images, and install --wait all left every hub function a Ready Knative Service that answers through Traefik", async () => {
    const images = async (ns: string) => (await env.hubAdmin.list<Pod>(PodResource, { namespace: ns })).items.filter(ready).flatMap((p) => p.spec.containers.map((c) => c.image));
    for (const name of SERVING_DEPLOYMENTS) {
      const d = await env.hubAdmin.get<Deployment>(DeploymentResource, name, ServingNamespace);
      expect(d?.status?.conditions?.find((c) => c.type === "Available")?.status, name).toBe("True");
    }
    expect((await images(ServingNamespace)).sort()).toEqual(SERVING_DEPLOYMENTS.map((c) => `dev.local/knative-serving/${c}:${env.serving!.version}`).sort());
    expect(await images(TraefikNamespace)).toEqual([`dev.local/traefik/traefik:${env.serving!.traefikVersion}`]);
    expect(env.serving!.traefikVersion).toBe("v3.6.12");

    console.log(
      `[serving-node] node Ready ${(env.node.readyMs / 1000).toFixed(1)} s; Eventing ${(env.eventing.readyMs / 1000).toFixed(1)} s and Serving with Traefik ${(env.serving!.readyMs / 1000).toFixed(1)} s (side by side); install --wait all ${(env.installMs / 1000).toFixed(1)} s`,
    );
    expect(env.functions.length).toBe(readFunctions().filter((f) => f.side === "hub").length);
    for (const fn of env.functions) {
      const ksvc = await env.hubAdmin.get<KService>(KServiceResource, fn, env.namespace);
      expect(ksvc?.status?.conditions?.find((c) => c.type === "Ready")?.status, fn).toBe("True");
      expect(ksvc?.status?.address?.url).toBe(`http://${fn}.${env.namespace}.svc.cluster.local`);
      // and no Deployment of ours: the only ones are Knative's, one per revision
      const d = await env.hubAdmin.get<Deployment>(DeploymentResource, fn, env.namespace);
      expect(d, `Deployment ${fn}`).toBeUndefined();
    }
    // Ready proves no route: each answers a request the way a Trigger's delivery goes.
    await requestEachKnativeService({ serving: env.serving!, namespace: env.namespace, functions: env.functions, deadline: Date.now() + 60_000 });
    // Each revision pod runs the function's image beside Knative's queue-proxy, on the node. A function
    // that answered first may be back at zero by the time it is looked at (the windows are 6 s): asked
    // again, it is up when the answer comes.
    for (const fn of env.functions) {
      const pods = await eventually(async () => {
        let got = (await podsOf(fn)).filter((p) => !p.metadata.deletionTimestamp);
        if (got.length === 0) {
          await requestEachKnativeService({ serving: env.serving!, namespace: env.namespace, functions: [fn], deadline: Date.now() + 30_000 });
          got = (await podsOf(fn)).filter((p) => !p.metadata.deletionTimestamp);
        }
        expect(got.length, fn).toBeGreaterThan(0);
        return got;
      });
      expect(pods[0]!.spec.nodeName).toBe(env.node.name);
      expect(pods[0]!.spec.containers.map((c) => c.image)).toEqual([`dev.local/ocm-functions/${fn}:${IMAGE_TAG}`, `dev.local/knative-serving/queue:${env.serving!.version}`]);
    }
  }, 120_000);

  it("every Broker-fed function's Trigger delivers to its Knative Service by subscriber.ref, and the recheck requests' Trigger to the relay in recheck mode's core Service", async () => {
    const { items } = await env.hubAdmin.list<KubeObject & { spec: { subscriber: { ref?: { apiVersion: string; kind: string; name: string } } }; status?: { conditions?: Condition[]; subscriberUri?: string } }>(
      TriggerResource,
      { namespace: env.namespace },
    );
    const ours = items.filter((t) => t.spec.subscriber.ref);
    expect(ours.length).toBeGreaterThan(0);
    for (const t of ours) {
      const apiVersion = t.metadata.name === HubSourceName ? "v1" : "serving.knative.dev/v1";
      expect(t.spec.subscriber.ref, t.metadata.name).toMatchObject({ apiVersion, kind: "Service" });
      expect(ready(t), t.metadata.name).toBe(true);
      expect(t.status?.subscriberUri).toBe(`http://${t.spec.subscriber.ref!.name}.${env.namespace}.svc.cluster.local`);
    }
  }, 30_000);

  it("a spoke joins: it registers, is accepted, Joined and Available, every hub reconcile done by a Knative revision's pod", async () => {
    await joinSpoke(env.spokeAdmin, { bootstrapKubeconfigs: [readFileSync(env.bootstrapKubeconfig, "utf8")], render: { clusterName: CLUSTER }, wait: { level: "crds", timeoutMs: 120_000, timeoutText: "2 minutes" } }, () => {});
    spokeRun = await runDeployed({ cluster: env.spoke, namespace: AgentNamespaceDefault, dist: env.dist, runDir: join(env.work, "run-spoke") });
    await eventually(async () => expect(await cluster()).toBeDefined(), { timeoutMs: 60_000 });
    // A short lease, as an admin may set it: renewals every 2 s, and the hub's grace is 10 s.
    await env.hubAdmin.request("PATCH", `/apis/cluster.open-cluster-management.io/v1/managedclusters/${CLUSTER}`, JSON.stringify({ spec: { leaseDurationSeconds: 2 } }), "application/merge-patch+json");
    await eventually(
      async () => {
        const r = await acceptCluster(env.hubAdmin, CLUSTER);
        expect(r.csrs.some((v) => v.result === "approved" || v.result === "already approved"), JSON.stringify(r)).toBe(true);
        expect(r.accepted, JSON.stringify(r)).toMatch(/^(set|already)$/);
      },
      { timeoutMs: 120_000, intervalMs: 1_000 },
    );
    const mc = await eventually(
      async () => {
        const got = await cluster();
        for (const type of [ManagedClusterConditionType.HubAccepted, ManagedClusterConditionType.Joined, ManagedClusterConditionType.Available]) expect(statusOf(got, type), type).toBe("True");
        return got!;
      },
      { timeoutMs: 240_000, intervalMs: 500 },
    );
    expect(mc.spec?.hubAcceptsClient).toBe(true);
    // The acceptor's work is there (the cluster's namespace and its lease on the hub), and the only
    // workloads in the hub's namespace that run function images are Knative's revision Deployments.
    expect(await env.hubAdmin.get<Lease>(LeaseResource, ManagedClusterLeaseName, CLUSTER)).toBeDefined();
    const { items: deployments } = await env.hubAdmin.list<Deployment & { spec: { template: { spec: { containers: { image: string }[] } } } }>(DeploymentResource, { namespace: env.namespace });
    const running = deployments.filter((d) => d.spec.template.spec.containers.some((c) => c.image.startsWith("dev.local/ocm-functions/") && !c.image.includes("/relay:")));
    expect(running.length).toBeGreaterThan(0);
    for (const d of running) expect(d.metadata.ownerReferences?.map((r) => `${r.apiVersion} ${r.kind}`), d.metadata.name).toEqual(["serving.knative.dev/v1 Revision"]);
    // What reached the functions came through the Broker, from the hub's relay, each event naming its function.
    await eventually(
      () => {
        const seen = env.deliveries.map((d) => `${d.event.type} ${d.event.kind}`);
        expect(seen).toEqual(expect.arrayContaining(["dev.knative.apiserver.resource.add ManagedCluster", "dev.knative.apiserver.resource.update ManagedCluster", "dev.knative.apiserver.resource.add CertificateSigningRequest"]));
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    );
  }, 480_000);

  it("its lease renews; the cluster turns Unknown when the heartbeat stops and Available again when it returns", async () => {
    await leaseRenewsAndHeartbeatCounts(env.hubAdmin, spokeRun!, CLUSTER);
  }, 300_000);

  it("a ManifestWork on the hub is applied on the spoke", async () => {
    await manifestWorkApplied(env.hubAdmin, env.spokeAdmin, CLUSTER);
  }, 150_000);

  it(`with the fleet quiet every hub function but ${LEASE_PATH} goes to zero pods, and a new ManagedCluster brings back exactly the functions its events are for, whose reconcile completes`, async () => {
    const quiet = env.functions.filter((fn) => fn !== LEASE_PATH);
    await eventually(
      async () => {
        const counts = await podCounts();
        expect(Object.fromEntries(quiet.map((fn) => [fn, counts[fn]!.pods]))).toEqual(Object.fromEntries(quiet.map((fn) => [fn, 0])));
        // the lease path is warm: the renewals keep coming
        expect(counts[LEASE_PATH]!.pods).toBeGreaterThan(0);
      },
      { timeoutMs: 240_000, intervalMs: 1_000 },
    );

    // A new ManagedCluster: its add, then the updates the woken functions' own writes make. Every
    // function whose Trigger passes one of the events the Broker got from then on is woken from zero
    // (the recorder, a Trigger without a filter, sees them all); no other one is. The watch keeps what
    // it saw: a function woken early may be back at zero (its windows are 6 s) before the last is up.
    const seen = new Set<string>();
    const seenReady = new Set<string>();
    let watching = true;
    const watch = (async () => {
      while (watching) {
        for (const [fn, n] of Object.entries(await podCounts())) {
          if (fn === LEASE_PATH) continue;
          if (n.pods > 0) seen.add(fn);
          if (n.ready > 0) seenReady.add(fn);
        }
        await new Promise((r) => setTimeout(r, 250));
      }
    })();
    const name = "cluster-from-zero";
    const since = new Date().toISOString();
    const t0 = performance.now();
    const subscribedSince = () => {
      const events = env.deliveries.filter((d) => d.time >= since).map((d) => Object.fromEntries(["type", "kind", TargetExtension].map((a) => [a, String(d.event[a])])));
      return [...new Set(events.flatMap((e) => subscribedTo(e)))].sort();
    };
    try {
      await env.hubAdmin.create(ManagedClusterResource, { metadata: { name }, spec: { hubAcceptsClient: false } });
      // cluster-sets' reconcile: a cluster without a set joins "default"
      await eventually(async () => expect((await cluster(name))?.metadata.labels?.[ClusterLabel.ClusterSet]).toBe("default"), { timeoutMs: 120_000, intervalMs: 100 });
      console.log(`[serving-node] a new ManagedCluster to cluster-sets' label, from zero pods: ${((performance.now() - t0) / 1000).toFixed(2)} s`);
      // every function those events are for comes back: the watch saw a Ready pod of it
      await eventually(
        () => {
          for (const fn of subscribedSince()) if (fn !== LEASE_PATH) expect(seenReady.has(fn), fn).toBe(true);
        },
        { timeoutMs: 120_000, intervalMs: 500 },
      );
    } finally {
      watching = false;
      await watch;
    }
    // and no other: every function the watch saw with a pod is one those events are for
    const woken = subscribedSince().filter((fn) => fn !== LEASE_PATH);
    expect(woken).toContain("cluster-sets");
    expect(woken.length).toBeLessThan(quiet.length);
    for (const fn of seen) expect(woken, `${fn} came back from zero`).toContain(fn);
  }, 480_000);
});
