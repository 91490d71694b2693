// Records one join through Knative Eventing into test/fixtures/join-broker/, in the shape of
// scripts/record-join.ts's recording so test/replay.test.ts replays both: the hub's functions run as
// pods on a real node (dev/local/eventing-hub.ts, needs root) and the hub auto-approves cluster1; the
// spoke is local processes whose relay records what it delivers.
//   hub.jsonl       every event Knative's Broker delivered to the recorder's filterless Trigger, once
//                   per hub function whose Trigger filters match it (what the Broker delivers to
//                   that function), sink hub/<function>; status is null: the function's answer went
//                   to the Broker, not to the recorder
//   cluster1.jsonl  the spoke relay's own recording, sink cluster1/<function>
//   node scripts/record-join-broker.ts     (as root, through scripts/run.sh so the binaries are there)
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { startEventingHub, RECORDER_TRIGGER } from "../dev/local/eventing-hub.ts";
import { runDeployed } from "../dev/local/deployed.ts";
import { joinSpoke } from "../cli/join.ts";
import { ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { AgentNamespaceDefault } from "../shared/api/registration.ts";
import { isTrue } from "../shared/conditions.ts";
import type { KubeObject } from "../shared/kube/client.ts";
import { triggerFilters, type TriggerSpec } from "../cli/render/objects.ts";

const CLUSTER = "cluster1";
const dir = join(import.meta.dirname, "..", "test", "fixtures", "join-broker");
type Trigger = KubeObject & { spec: TriggerSpec & { subscriber: { ref?: { name: string } } } };
const TriggerResource = { group: "eventing.knative.dev", version: "v1", kind: "Trigger", plural: "triggers", namespaced: true } as const;

// ticks every minute (not the deployed 30), so that the recording can end on one
const env = await startEventingHub({ autoApprove: CLUSTER, resyncSeconds: 60, log: (l) => console.log(l) });
try {
  const records = join(env.work, "records");
  mkdirSync(records, { recursive: true });
  await joinSpoke(env.spokeAdmin, { bootstrapKubeconfigs: [readFileSync(env.bootstrapKubeconfig, "utf8")], render: { clusterName: CLUSTER }, wait: { level: "crds", timeoutMs: 120_000, timeoutText: "2 minutes" } }, console.log);
  const spoke = await runDeployed({ cluster: env.spoke, namespace: AgentNamespaceDefault, dist: env.dist, runDir: join(env.work, "run-spoke"), recordDir: records });
  try {
    const deadline = Date.now() + 180_000;
    for (;;) {
      const mc = await env.hubAdmin.get<ManagedCluster & KubeObject>(ManagedClusterResource, CLUSTER);
      if (isTrue(mc?.status?.conditions, "ManagedClusterJoined")) break;
      if (Date.now() > deadline) throw new Error(`${CLUSTER} did not join within 180 s`);
      await new Promise((r) => setTimeout(r, 200));
    }
    // until a resync tick (every minute) has come through the Broker after the join, so the
    // Broker has delivered what the join changed and the stream ends as a real one goes on
    const joined = new Date().toISOString();
    const ticks = Date.now() + 75_000;
    while (!env.deliveries.some((d) => d.event.type === "dev.knative.sources.ping" && d.time > joined)) {
      if (Date.now() > ticks) throw new Error("no resync tick came through the Broker within 75 s of the join");
      await new Promise((r) => setTimeout(r, 500));
    }
  } finally {
    await spoke.stop();
  }

  const { items } = await env.hubAdmin.list<Trigger>(TriggerResource, { namespace: env.namespace });
  const triggers = items.filter((t) => t.metadata.name !== RECORDER_TRIGGER && t.spec.subscriber.ref);
  const hub = env.deliveries.flatMap((d) => {
    const sinks = new Set(triggers.filter((t) => triggerFilters(t.spec).some((f) => Object.entries(f).every(([k, v]) => d.event[k] === v))).map((t) => t.spec.subscriber.ref!.name));
    return [...sinks].sort().map((fn) => ({ time: d.time, sink: `hub/${fn}`, status: null, outcome: "delivered", attempts: 1, event: d.event }));
  });
  const relayFiles = readdirSync(records).filter((f) => f.endsWith(".jsonl"));
  const cluster = relayFiles.flatMap((f) =>
    readFileSync(join(records, f), "utf8")
      .trim()
      .split("\n")
      .filter(Boolean)
      .map((l) => {
        const r = JSON.parse(l) as { sink: string };
        return { ...r, sink: `${CLUSTER}/${r.sink}` };
      }),
  );
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "hub.jsonl"), hub.map((r) => JSON.stringify(r)).join("\n") + "\n");
  writeFileSync(join(dir, `${CLUSTER}.jsonl`), cluster.map((r) => JSON.stringify(r)).join("\n") + "\n");
  console.log(`recorded ${hub.length} hub and ${cluster.length} ${CLUSTER} deliveries into ${dir}`);
} finally {
  await env.stop();
}
