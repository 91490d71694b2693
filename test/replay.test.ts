// Recorded join streams (test/fixtures/join/, made by scripts/record-join.ts) replayed into the functions
// on fresh control planes: in order, duplicated, shuffled and partly dropped. The events are hints, the
// functions read fresh state, and the resync ticks in the stream carry what a lost event would have.
import { describe, it, expect, afterEach } from "vitest";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { startFleet, type Fleet } from "../dev/local/fleet.ts";
import { ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { AgentNamespaceDefault, HubKubeconfigSecretName } from "../shared/api/registration.ts";
import { SecretResource } from "../shared/api/kube.ts";
import { findCondition } from "../shared/conditions.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { postEvent } from "./support/functions.ts";
import { eventually } from "./support/eventually.ts";

type Recorded = { sink: string; status: number | null; event: Record<string, unknown> };

const fixtures = join(import.meta.dirname, "fixtures", "join");
const stream: Recorded[] = readdirSync(fixtures)
  .filter((f) => f.endsWith(".jsonl"))
  .flatMap((f) => readFileSync(join(fixtures, f), "utf8").trim().split("\n").map((l) => JSON.parse(l) as Recorded))
  .sort((a, b) => String((a as { time?: string }).time).localeCompare(String((b as { time?: string }).time)));
const isTick = (r: Recorded) => r.event.type === "dev.knative.sources.ping";

// A deterministic shuffle, so a failure can be replayed exactly.
function shuffled<T>(items: readonly T[], seed: number): T[] {
  const out = [...items];
  let x = seed;
  const next = () => ((x = (x * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

type EndState = { accepted: string; joined: string; hubAcceptsClient: boolean; secretKeys: string[] };

async function endState(fleet: Fleet): Promise<EndState | undefined> {
  const mc = await fleet.hub.get<ManagedCluster & KubeObject>(ManagedClusterResource, "cluster1");
  if (!mc) return undefined;
  const spoke = KubeClient.fromKubeconfig(fleet.clusters.get("cluster1").adminKubeconfig);
  const secret = await spoke.get<KubeObject & { data?: Record<string, string> }>(SecretResource, HubKubeconfigSecretName, AgentNamespaceDefault);
  spoke.close();
  return {
    accepted: findCondition(mc.status?.conditions, "HubAcceptedManagedCluster")?.status ?? "",
    joined: findCondition(mc.status?.conditions, "ManagedClusterJoined")?.status ?? "",
    hubAcceptsClient: mc.spec?.hubAcceptsClient ?? false,
    secretKeys: Object.keys(secret?.data ?? {}).sort(),
  };
}

const JOINED: EndState = { accepted: "True", joined: "True", hubAcceptsClient: true, secretKeys: ["agent-name", "cluster-name", "kubeconfig", "tls.crt", "tls.key"] };

async function deliver(fleet: Fleet, events: readonly Recorded[]): Promise<number[]> {
  const statuses: number[] = [];
  for (const r of events) {
    const url = fleet.functions.get(r.sink);
    if (!url) throw new Error(`the recording names a sink no function serves: ${r.sink}`);
    statuses.push((await postEvent(url, r.event)).status);
  }
  return statuses;
}

// Replays, then keeps delivering the stream's resync ticks (as the sources would go on sending them)
// until the fleet reaches the end state.
async function replayUntilJoined(fleet: Fleet, events: readonly Recorded[]): Promise<EndState | undefined> {
  await deliver(fleet, events);
  const ticks = stream.filter(isTick);
  return eventually(async () => {
    const state = await endState(fleet);
    if (JSON.stringify(state) === JSON.stringify(JOINED)) return state;
    await deliver(fleet, ticks);
    throw new Error(`not joined yet: ${JSON.stringify(state)}`);
  }, { timeoutMs: 60_000 });
}

let fleet: Fleet | undefined;
afterEach(async () => {
  await fleet?.stop();
  fleet = undefined;
});

describe("replaying a recorded join", () => {
  it("the recording is a real join: both sides, object events and resync ticks", () => {
    const sinks = new Set(stream.map((r) => r.sink));
    expect(sinks).toEqual(new Set(["hub/cluster-acceptor", "hub/csr-approver", "cluster1/spoke-registration", "cluster1/spoke-cluster-status"]));
    expect(stream.some(isTick)).toBe(true);
    expect(new Set(stream.map((r) => r.event.kind).filter(Boolean))).toEqual(new Set(["ManagedCluster", "CertificateSigningRequest", "Secret"]));
  });

  const variants: { name: string; events: () => Recorded[] }[] = [
    { name: "in order", events: () => stream },
    { name: "every event twice", events: () => stream.flatMap((r) => [r, r]) },
    { name: "shuffled", events: () => shuffled(stream, 7) },
    { name: "duplicated and shuffled with a third of the object events dropped", events: () => shuffled([...stream, ...stream], 11).filter((r, i) => isTick(r) || i % 3 !== 0) },
  ];

  it.each(variants)("reaches the joined state on fresh control planes: $name", async ({ events }) => {
    fleet = await startFleet({ spokes: [{ name: "cluster1", autoApprove: true }], relays: false });
    const state = await replayUntilJoined(fleet, events());
    expect(state).toEqual(JOINED);
  });

  it("answers every replayed event with 204 or a retry (503), never a leaked Kubernetes status or a 500", async () => {
    fleet = await startFleet({ spokes: [{ name: "cluster1", autoApprove: true }], relays: false });
    const statuses = await deliver(fleet, stream);
    expect(statuses.filter((s) => s !== 204 && s !== 503)).toEqual([]);
    expect(statuses.filter((s) => s === 204).length).toBeGreaterThan(statuses.length / 2);
  });
});
