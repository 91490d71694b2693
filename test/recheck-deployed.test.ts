// Rechecks in the deployed form: a silent lease produces no event, so cluster-lease-monitor asks to
// look again when the lease would expire (x-recheck-after-ms). A Broker drops that answer, and the
// PingSource ticks only every minute; `ocmf render hub` therefore feeds the monitor from a relay of its
// own that delivers straight to it. This runs exactly that rendered relay configuration (credentials
// swapped for the relay's own identity, since no pod runs here) against a real hub: a cluster whose
// agent stops renewing turns Unknown within the grace plus 10 s with no tick. The control is the same
// delivery through a hop that drops the answer, as a Broker does: that cluster stays Available.
import { createServer, request, type Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse, stringify } from "yaml";
import type { LocalCluster } from "../dev/control-plane/clusters.ts";
import { identityFor } from "../dev/control-plane/identities.ts";
import { startFunctionServer, type FunctionServer } from "../dev/local/functions.ts";
import { hubRelayName } from "../cli/render/hub.ts";
import { renderHub } from "../cli/render/index.ts";
import { configFromEnvironment, type RelayConfigInput } from "../components/relay/config.ts";
import { startRelay, type Relay } from "../components/relay/relay.ts";
import { LeaseResource, NamespaceResource } from "../shared/api/kube.ts";
import { ClusterLabel, ManagedClusterConditionType, ManagedClusterLeaseName, ManagedClusterReason, ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { findCondition, setCondition } from "../shared/conditions.ts";
import { microTime } from "../shared/clock.ts";
import { serve } from "../shared/harness.ts";
import { KubeClient } from "../shared/kube/client.ts";
import leaseMonitor from "../functions/cluster-lease-monitor/reconcile.ts";
import { testIo } from "./support/functions.ts";
import { eventually } from "./support/eventually.ts";
import { startHub, type Hub } from "./support/fixtures.ts";

const HUB = "hub";
const LEASE_SECONDS = 1;
const suffix = () => Math.random().toString(36).slice(2, 7);

type Env = { name: string; value: string }[];
type Container = { env: Env };

let plane: Hub;
let hub: LocalCluster;
let admin: KubeClient;
let fn: FunctionServer;
let dropper: Server;
const relays: Relay[] = [];

// What `ocmf render hub` gives the monitor: its Knative Service's env and its relay's configuration.
function rendered(): { env: Env; relayConfig: RelayConfigInput } {
  const objects = renderHub();
  const service = objects.find((o) => o.kind === "Service" && o.metadata.name === leaseMonitor.spec.name)!;
  const source = objects.find((o) => o.kind === "ContainerSource" && o.metadata.name === hubRelayName(leaseMonitor.spec.name));
  if (!source) throw new Error(`the render has no ContainerSource ${hubRelayName(leaseMonitor.spec.name)}`);
  const env = (service.spec as { template: { spec: { containers: Container[] } } }).template.spec.containers[0]!.env;
  const relayEnv = (source.spec as { template: { spec: { containers: Container[] } } }).template.spec.containers[0]!.env;
  return { env, relayConfig: parse(relayEnv.find((e) => e.name === "OCM_RELAY_CONFIG")!.value) as RelayConfigInput };
}

// A hop that forwards each event and answers 202 without the function's headers, as a Broker's ingress does.
function startDropper(target: string): Promise<Server> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const forward = request(target, { method: "POST", headers: req.headers }, (answer) => {
        answer.resume();
        answer.on("end", () => res.writeHead(answer.statusCode && answer.statusCode < 300 ? 202 : 503).end());
      });
      forward.on("error", () => res.writeHead(503).end());
      forward.end(Buffer.concat(chunks));
    });
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

beforeAll(async () => {
  plane = await startHub(HUB);
  ({ cluster: hub, admin } = plane);
  const { env } = rendered();
  const config = leaseMonitor.configFromEnv(Object.fromEntries(env.map((e) => [e.name, e.value])));
  const io = testIo({ [HUB]: await identityFor(hub, leaseMonitor.spec.name) }, config);
  fn = await startFunctionServer(serve(leaseMonitor.spec, () => io));
  dropper = await startDropper(fn.url);
});

afterAll(async () => {
  await Promise.all(relays.map((r) => r.stop()));
  dropper?.close();
  await fn?.close();
  await plane?.stop();
});

// The rendered relay, its in-cluster credentials replaced by a kubeconfig of the same rights, delivering
// to `sink` (K_SINK, as the ContainerSource injects it) and watching only cluster `c`'s objects.
async function startRenderedRelay(sink: string, c: string): Promise<void> {
  const { relayConfig } = rendered();
  const kubeconfig = await identityFor(hub, "relay-hub", `-${c}`);
  const doc: RelayConfigInput = { ...relayConfig, clusters: { [HUB]: { kubeconfig } } };
  doc.sources = (doc.sources ?? []).map((s) => (s.resource.kind === "ManagedCluster" ? { ...s, fieldSelector: `metadata.name=${c}` } : { ...s, labelSelector: `${ClusterLabel.ClusterName}=${c}` }));
  relays.push(startRelay(configFromEnvironment(stringify(doc), { K_SINK: sink })));
}

async function acceptedCluster(c: string): Promise<void> {
  await admin.create(NamespaceResource, { metadata: { name: c } });
  await admin.create(ManagedClusterResource, { metadata: { name: c }, spec: { hubAcceptsClient: true, leaseDurationSeconds: LEASE_SECONDS } });
  const now = new Date();
  const conditions = [
    { type: ManagedClusterConditionType.HubAccepted, status: "True", reason: ManagedClusterReason.HubClusterAdminAccepted, message: "Accepted by hub cluster admin" },
    { type: ManagedClusterConditionType.Available, status: "True", reason: ManagedClusterReason.ManagedClusterAvailable, message: "Managed cluster is available" },
  ] as const;
  await admin.patch(ManagedClusterResource, c, { status: { conditions: conditions.reduce((acc, x) => setCondition(acc, x, now), [] as ReturnType<typeof setCondition>) } }, { subresource: "status" });
  // the agent's last renewal, never repeated
  await admin.create(LeaseResource, { metadata: { name: ManagedClusterLeaseName, namespace: c, labels: { [ClusterLabel.ClusterName]: c } }, spec: { holderIdentity: ManagedClusterLeaseName, renewTime: microTime(now) } });
}

const availability = async (c: string) => findCondition((await admin.get<ManagedCluster>(ManagedClusterResource, c))?.status?.conditions, ManagedClusterConditionType.Available)?.status;

describe("a silent lease in the deployed form", () => {
  it("turns the cluster Unknown within the grace plus 10 s through the rendered relay, and not through a hop that drops the recheck (control)", async () => {
    const grace = Number(rendered().env.find((e) => e.name === "OCM_LEASE_GRACE_MULTIPLIER")!.value) * LEASE_SECONDS * 1000;
    const [direct, viaBroker] = [`direct-${suffix()}`, `broker-${suffix()}`];
    await Promise.all([acceptedCluster(direct), acceptedCluster(viaBroker)]);
    await Promise.all([startRenderedRelay(fn.url, direct), startRenderedRelay(`http://127.0.0.1:${(dropper.address() as { port: number }).port}`, viaBroker)]);
    // No tick comes in this window: the rendered resync is a minute. Only the recheck can do it.
    await eventually(async () => expect(await availability(direct)).toBe("Unknown"), { timeoutMs: grace + 10_000 });
    expect(await availability(viaBroker)).toBe("True");
  });
});
