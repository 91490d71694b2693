// The cluster-taints function against a real hub, under its own RBAC: taints follow the Available
// condition, keep their timeAdded, and nothing is written when nothing changes.
import { describe, it, expect } from "vitest";
import { KubeClient } from "../../shared/kube/client.ts";
import { ManagedClusterConditionType, ManagedClusterReason, ManagedClusterResource, TaintEffect, TaintKey, type ManagedCluster, type Taint } from "../../shared/api/cluster.ts";
import type { NewCondition } from "../../shared/conditions.ts";
import { setCondition } from "../../shared/conditions.ts";
import { manualClock, rfc3339 } from "../../shared/clock.ts";
import { handleEvent, serve, type Io } from "../../shared/harness.ts";
import fn, { type Config } from "../../functions/cluster-taints/reconcile.ts";
import { objectEvent, postEvent, startFunctionServer, testIo, tickEvent } from "../support/functions.ts";
import { functionHub } from "../support/fixtures.ts";

const HUB = "hub";
const suffix = () => Math.random().toString(36).slice(2, 7);
const HOLD = "test.ocm-functions.io/hold";

let admin: KubeClient;
let kubeconfig: string;
functionHub(fn.spec.name, [ManagedClusterResource], (h) => ({ admin, kubeconfig } = h));

type Scene = { c: string; clock: ReturnType<typeof manualClock>; io: Io<Config> };
function scene(): Scene {
  const clock = manualClock();
  return { c: `cluster-${suffix()}`, clock, io: testIo({ [HUB]: kubeconfig }, { hubCluster: HUB }, clock) };
}

type Availability = "True" | "False" | "Unknown" | "missing";
const availableCondition: Record<Exclude<Availability, "missing">, NewCondition> = {
  True: { type: ManagedClusterConditionType.Available, status: "True", reason: ManagedClusterReason.ManagedClusterAvailable, message: "Managed cluster is available" },
  False: { type: ManagedClusterConditionType.Available, status: "False", reason: ManagedClusterReason.ManagedClusterKubeAPIServerUnavailable, message: "The kube-apiserver is not ok, status code: 500, boom" },
  Unknown: { type: ManagedClusterConditionType.Available, status: "Unknown", reason: ManagedClusterReason.ManagedClusterLeaseUpdateStopped, message: "Registration agent stopped updating its lease." },
};

async function seed(s: Scene, g: { taints?: Taint[]; available: Availability; deleting?: boolean }): Promise<ManagedCluster> {
  await admin.create(ManagedClusterResource, { metadata: { name: s.c, finalizers: g.deleting ? [HOLD] : undefined }, spec: { hubAcceptsClient: true, taints: g.taints } });
  await setAvailable(s, g.available);
  if (g.deleting) await admin.delete(ManagedClusterResource, s.c);
  return (await readCluster(s.c))!;
}

async function setAvailable(s: Scene, a: Availability): Promise<void> {
  if (a === "missing") return;
  const mc = (await readCluster(s.c))!;
  await admin.patch(ManagedClusterResource, s.c, { status: { conditions: setCondition(mc.status?.conditions, availableCondition[a], s.clock.now()) } }, { subresource: "status" });
}

const readCluster = (c: string) => admin.get<ManagedCluster>(ManagedClusterResource, c);
const reconcile = (s: Scene) => fn.spec.reconcile(s.io, { cluster: HUB, name: s.c });
const taintsOf = async (c: string) => (await readCluster(c))?.spec?.taints ?? [];
const clusterEvent = (mc: ManagedCluster) => objectEvent({ cluster: HUB, object: { apiVersion: "cluster.open-cluster-management.io/v1", kind: "ManagedCluster", ...mc } });

const EARLIER = "2026-01-01T00:00:00Z";
const unreachable = { key: TaintKey.Unreachable, effect: TaintEffect.NoSelect };
const unavailable = { key: TaintKey.Unavailable, effect: TaintEffect.NoSelect };
const custom = { key: "example.com/maintenance", value: "planned", effect: TaintEffect.NoSelect, timeAdded: EARLIER };
const NOW = "now"; // stands for the scene clock's time in expected taints

describe("taints follow Available", () => {
  const rows: { name: string; given: { taints?: Taint[]; available: Availability }; then: (Taint & { timeAdded?: string })[] }[] = [
    { name: "adds unreachable while Available is missing", given: { available: "missing" }, then: [{ ...unreachable, timeAdded: NOW }] },
    { name: "swaps unavailable for unreachable when Available is Unknown", given: { available: "Unknown", taints: [{ ...unavailable, timeAdded: EARLIER }] }, then: [{ ...unreachable, timeAdded: NOW }] },
    { name: "swaps unreachable for unavailable when Available is False", given: { available: "False", taints: [{ ...unreachable, timeAdded: EARLIER }] }, then: [{ ...unavailable, timeAdded: NOW }] },
    { name: "removes both when Available is True and keeps everyone else's taints", given: { available: "True", taints: [{ ...unreachable, timeAdded: EARLIER }, custom, { ...unavailable, timeAdded: EARLIER }] }, then: [custom] },
    {
      name: "matches taints by key, value and effect: another effect or value is not ours to remove",
      given: { available: "True", taints: [{ ...unreachable, effect: TaintEffect.PreferNoSelect, timeAdded: EARLIER }, { ...unavailable, value: "x", timeAdded: EARLIER }] },
      then: [{ ...unreachable, effect: TaintEffect.PreferNoSelect, timeAdded: EARLIER }, { ...unavailable, value: "x", timeAdded: EARLIER }],
    },
    { name: "keeps the timeAdded of a taint that stays and of other taints", given: { available: "Unknown", taints: [custom, { ...unreachable, timeAdded: EARLIER }] }, then: [custom, { ...unreachable, timeAdded: EARLIER }] },
  ];
  it.each(rows)("$name", async ({ given, then }) => {
    const s = scene();
    await seed(s, given);
    await reconcile(s);
    const now = rfc3339(s.clock.now());
    expect(await taintsOf(s.c)).toEqual(then.map((t) => (t.timeAdded === NOW ? { ...t, timeAdded: now } : t)));
  });

  it("moves with Available through Unknown, False and True, writing only on change", async () => {
    const s = scene();
    await seed(s, { available: "Unknown" });
    await reconcile(s);
    const added = rfc3339(s.clock.now());
    const first = (await readCluster(s.c))!;
    expect(first.spec?.taints).toEqual([{ ...unreachable, timeAdded: added }]);

    // nothing to change: no write, and the taint keeps the time it was added
    s.clock.advance(60_000);
    await reconcile(s);
    expect((await readCluster(s.c))!.metadata.resourceVersion).toBe(first.metadata.resourceVersion);

    await setAvailable(s, "False");
    await reconcile(s);
    expect(await taintsOf(s.c)).toEqual([{ ...unavailable, timeAdded: rfc3339(s.clock.now()) }]);

    await setAvailable(s, "True");
    await reconcile(s);
    const cleared = (await readCluster(s.c))!;
    expect(cleared.spec?.taints ?? []).toEqual([]);
    await reconcile(s);
    expect((await readCluster(s.c))!.metadata.resourceVersion).toBe(cleared.metadata.resourceVersion);
  });

  it("leaves a deleting cluster alone", async () => {
    const s = scene();
    const before = await seed(s, { available: "Unknown", deleting: true });
    await reconcile(s);
    expect(await readCluster(s.c)).toMatchObject({ metadata: { resourceVersion: before.metadata.resourceVersion }, spec: { hubAcceptsClient: true } });
    expect(await taintsOf(s.c)).toEqual([]);
  });
});

describe("event delivery", () => {
  it("taints the cluster named by a ManagedCluster event, through our CloudEvents HTTP server (shared/cloudevents-server.ts)", async () => {
    const s = scene();
    const mc = await seed(s, { available: "False" });
    const server = await startFunctionServer(serve(fn.spec, () => s.io));
    try {
      const reply = await postEvent(server.url, clusterEvent(mc));
      expect(reply.status, reply.body).toBe(204);
      expect(await taintsOf(s.c)).toEqual([{ ...unavailable, timeAdded: rfc3339(s.clock.now()) }]);
    } finally {
      await server.close();
    }
  });

  it("looks at every cluster on a resync tick", async () => {
    const [a, b] = [scene(), scene()];
    await Promise.all([seed(a, { available: "Unknown" }), seed(b, { available: "False" })]);
    const reply = await handleEvent(fn.spec, a.io, tickEvent(HUB));
    expect(reply.statusCode, reply.body).toBe(204);
    expect((await taintsOf(a.c)).map((t) => t.key)).toEqual([TaintKey.Unreachable]);
    expect((await taintsOf(b.c)).map((t) => t.key)).toEqual([TaintKey.Unavailable]);
  });

  it("wakes no reconcile for a cluster that, as the event carries it or a tick lists it, has its taints", async () => {
    const [settled, off] = [scene(), scene()];
    const [settledMc, offMc] = await Promise.all([seed(settled, { available: "True" }), seed(off, { available: "False" })]);
    // an io that fails any read: a reconcile would answer 500
    const noReads: Io<Config> = { ...settled.io, cluster: () => { throw new Error("read attempted"); } };
    expect((await handleEvent(fn.spec, noReads, clusterEvent(settledMc))).statusCode).toBe(204);
    expect((await handleEvent(fn.spec, noReads, clusterEvent(offMc))).statusCode).toBe(500); // control: not settled, so read
    const keys = await fn.spec.keys({ type: "tick", cluster: HUB }, settled.io);
    if (!Array.isArray(keys)) throw new Error(`skipped: ${keys.skip}`);
    expect(keys.map((k) => k.name)).toContain(off.c);
    expect(keys.map((k) => k.name)).not.toContain(settled.c);
  });

  it("answers a malformed event with 400 and changes nothing", async () => {
    const s = scene();
    const mc = await seed(s, { available: "Unknown" });
    const event = clusterEvent(mc);
    for (const bad of [{ ...event, cluster: undefined }, { ...event, data: { metadata: { name: "someone-else" } } }]) {
      expect((await handleEvent(fn.spec, s.io, bad)).statusCode).toBe(400);
    }
    expect((await readCluster(s.c))!.metadata.resourceVersion).toBe(mc.metadata.resourceVersion);
    // control: the same event, well formed, does taint the cluster
    expect((await handleEvent(fn.spec, s.io, event)).statusCode).toBe(204);
    expect((await taintsOf(s.c)).map((t) => t.key)).toEqual([TaintKey.Unreachable]);
  });
});
