// The cluster-lease-monitor function against a real hub, under its own RBAC. Grace periods are
// crossed by moving the injected clock; leases are renewed by writing renewTime as an agent would.
import { describe, it, expect } from "vitest";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { EventResource, LeaseResource, NamespaceResource } from "../../shared/api/kube.ts";
import {
  ClusterAnnotation,
  ClusterLabel,
  ManagedClusterConditionType,
  ManagedClusterLeaseName,
  ManagedClusterReason,
  ManagedClusterResource,
  type ManagedCluster,
} from "../../shared/api/cluster.ts";
import { ClusterEventReason, LeaseDurationTimes, ManagedClusterMessage, availableUnknownEventMessage } from "../../shared/api/health.ts";
import { findCondition, setCondition } from "../../shared/conditions.ts";
import { manualClock, microTime } from "../../shared/clock.ts";
import { handleEvent, serve, type Io, type Outcome } from "../../shared/harness.ts";
import fn, { type Config, type Lease } from "../../functions/cluster-lease-monitor/reconcile.ts";
import { objectEvent, postEvent, startFunctionServer, testIo, tickEvent } from "../support/functions.ts";
import { functionHub } from "../support/fixtures.ts";
import { recordingRequests } from "../support/requests.ts";

const HUB = "hub";
const S = 1000;
const suffix = () => Math.random().toString(36).slice(2, 7);
// keeps a deleted cluster in place with its deletionTimestamp set
const HOLD = "test.ocm-functions.io/hold";

let admin: KubeClient;
let kubeconfig: string;
functionHub(fn.spec.name, [ManagedClusterResource, LeaseResource], (h) => ({ admin, kubeconfig } = h));

type Scene = { c: string; clock: ReturnType<typeof manualClock>; io: Io<Config> };

// A clock per scene, started now, so the objects written at its time look fresh to the API server;
// scenes judged together share one, so their leases are exactly as old as written.
function scene(multiplier = LeaseDurationTimes, clock = manualClock()): Scene {
  return { c: `cluster-${suffix()}`, clock, io: testIo({ [HUB]: kubeconfig }, { hubCluster: HUB, leaseGraceMultiplier: multiplier }, clock) };
}

type Given = {
  accepted?: boolean; // the HubAccepted condition (default: present and True)
  leaseDurationSeconds?: number;
  annotations?: Record<string, string>;
  renewedAgoS?: number | "no lease"; // renewTime relative to the scene's clock (default 0)
  deleting?: boolean;
};

const acceptedCondition = { type: ManagedClusterConditionType.HubAccepted, status: "True", reason: ManagedClusterReason.HubClusterAdminAccepted, message: "Accepted by hub cluster admin" } as const;

async function seed(s: Scene, g: Given = {}): Promise<void> {
  await admin.create(NamespaceResource, { metadata: { name: s.c } });
  const mc = await admin.create<ManagedCluster>(ManagedClusterResource, {
    metadata: { name: s.c, annotations: g.annotations, finalizers: g.deleting ? [HOLD] : undefined },
    spec: { hubAcceptsClient: true, ...(g.leaseDurationSeconds === undefined ? {} : { leaseDurationSeconds: g.leaseDurationSeconds }) },
  });
  if (g.accepted !== false) await admin.patch(ManagedClusterResource, s.c, { status: { conditions: setCondition([], acceptedCondition, s.clock.now()) } }, { subresource: "status" });
  if (g.renewedAgoS !== "no lease") await writeLease(s, new Date(s.clock.now().getTime() - (g.renewedAgoS ?? 0) * S));
  if (g.deleting) await admin.delete(ManagedClusterResource, mc.metadata.name!);
}

// Creates the lease, or renews it as the agent does: GET, set renewTime, PUT.
async function writeLease(s: Scene, renewTime: Date): Promise<void> {
  const lease = await admin.get<Lease>(LeaseResource, ManagedClusterLeaseName, s.c);
  if (lease) await admin.update(LeaseResource, { ...lease, spec: { ...lease.spec, renewTime: microTime(renewTime) } });
  else await admin.create(LeaseResource, { metadata: { name: ManagedClusterLeaseName, namespace: s.c, labels: { [ClusterLabel.ClusterName]: s.c } }, spec: { holderIdentity: ManagedClusterLeaseName, renewTime: microTime(renewTime) } });
}

// The agent's status sync setting Available=True after it came back.
async function agentReportsAvailable(s: Scene): Promise<void> {
  const mc = (await readCluster(s.c))!;
  const available = { type: ManagedClusterConditionType.Available, status: "True", reason: ManagedClusterReason.ManagedClusterAvailable, message: "Managed cluster is available" } as const;
  await admin.patch(ManagedClusterResource, s.c, { status: { conditions: setCondition(mc.status?.conditions, available, s.clock.now()) } }, { subresource: "status" });
}

const readCluster = (c: string) => admin.get<ManagedCluster>(ManagedClusterResource, c);
const reconcile = (s: Scene): Promise<Outcome> => fn.spec.reconcile(s.io, { cluster: HUB, name: s.c });

type EventObject = KubeObject & { type?: string; reason?: string; message?: string; involvedObject?: { kind?: string; name?: string; uid?: string } };

async function stateOf(c: string) {
  const [mc, events, lease] = await Promise.all([readCluster(c), admin.list<EventObject>(EventResource, { namespace: c }), admin.get<Lease>(LeaseResource, ManagedClusterLeaseName, c)]);
  const show = (type: string) => {
    const cond = findCondition(mc?.status?.conditions, type);
    return cond ? `${cond.status}/${cond.reason}` : "none";
  };
  return {
    available: show(ManagedClusterConditionType.Available),
    clock: show(ManagedClusterConditionType.ClockSynced),
    unknownEvents: events.items.filter((e) => e.reason === ClusterEventReason.AvailableUnknown).length,
    lease: lease ? "present" : "none",
    resourceVersion: mc?.metadata.resourceVersion,
  };
}

const unknown = `Unknown/${ManagedClusterReason.ManagedClusterLeaseUpdateStopped}`;
const synced = `True/${ManagedClusterReason.ManagedClusterClockSynced}`;
const outOfSync = `False/${ManagedClusterReason.ManagedClusterClockOutOfSync}`;

describe("lease expiry", () => {
  const rows = [
    { name: "marks the cluster Unknown once the lease is five durations old", leaseDurationSeconds: 60, multiplier: 5, graceS: 300 },
    { name: "honours a short lease duration: 10 s leases expire after 50 s", leaseDurationSeconds: 10, multiplier: 5, graceS: 50 },
    { name: "treats a lease duration of 0 as OCM's 60 s", leaseDurationSeconds: 0, multiplier: 5, graceS: 300 },
    { name: "with a multiplier of 2, expires after two durations", leaseDurationSeconds: 60, multiplier: 2, graceS: 120 },
  ];
  it.each(rows)("$name", async ({ leaseDurationSeconds, multiplier, graceS }) => {
    const s = scene(multiplier);
    await seed(s, { leaseDurationSeconds });

    // one second before expiry: nothing is marked, and the next look is due exactly at expiry
    s.clock.advance((graceS - 1) * S);
    expect(await reconcile(s)).toEqual({ recheckInMs: 1 * S });
    expect(await stateOf(s.c)).toMatchObject({ available: "none", clock: synced, unknownEvents: 0 });

    s.clock.advance(1 * S);
    expect(await reconcile(s)).toEqual({ recheckInMs: graceS * S });
    const after = await stateOf(s.c);
    // a dead agent is not a skewed clock: ClockSynced keeps what the last renewal said
    expect(after).toMatchObject({ available: unknown, clock: synced, unknownEvents: 1 });
    const condition = findCondition((await readCluster(s.c))?.status?.conditions, ManagedClusterConditionType.Available);
    expect(condition).toMatchObject({ message: ManagedClusterMessage.LeaseUpdateStopped, lastTransitionTime: expect.any(String) });

    // looking again writes nothing and records no second event
    s.clock.advance(graceS * S);
    await reconcile(s);
    expect(await stateOf(s.c)).toEqual(after);
  });

  it("records the hub event AvailableUnknown about the cluster in its namespace", async () => {
    const s = scene();
    await seed(s, { renewedAgoS: 300 });
    await reconcile(s);
    const mc = (await readCluster(s.c))!;
    const { items } = await admin.list<EventObject>(EventResource, { namespace: s.c });
    expect(items).toHaveLength(1);
    expect(items[0]).toMatchObject({
      type: "Warning",
      reason: ClusterEventReason.AvailableUnknown,
      message: availableUnknownEventMessage(s.c),
      involvedObject: { kind: ManagedClusterResource.kind, name: s.c, uid: mc.metadata.uid },
    });
  });

  it("leaves recovery to the agent: a renewed lease is fresh again and the agent's Available=True stays", async () => {
    const s = scene();
    await seed(s);
    s.clock.advance(300 * S);
    await reconcile(s);
    expect((await stateOf(s.c)).available).toBe(unknown);

    await writeLease(s, s.clock.now());
    // fresh: the next look is a whole grace period away, and the monitor does not claim availability
    expect(await reconcile(s)).toEqual({ recheckInMs: 300 * S });
    expect(await stateOf(s.c)).toMatchObject({ available: unknown, clock: synced });

    await agentReportsAvailable(s);
    s.clock.advance(299 * S);
    const reply = await handleEvent(fn.spec, s.io, objectEvent({ cluster: HUB, object: { apiVersion: "cluster.open-cluster-management.io/v1", kind: "ManagedCluster", ...(await readCluster(s.c))! } }));
    expect(reply.statusCode, reply.body).toBe(204);
    expect(await stateOf(s.c)).toMatchObject({ available: `True/${ManagedClusterReason.ManagedClusterAvailable}`, unknownEvents: 1 });
  });

  it("creates a missing lease the way OCM's hub does, and expects it renewed within the grace period", async () => {
    const s = scene();
    await seed(s, { renewedAgoS: "no lease" });
    expect(await reconcile(s)).toEqual({ recheckInMs: 300 * S });
    const lease = await admin.get<Lease>(LeaseResource, ManagedClusterLeaseName, s.c);
    expect(lease).toMatchObject({
      metadata: { labels: { [ClusterLabel.ClusterName]: s.c } },
      spec: { holderIdentity: ManagedClusterLeaseName, renewTime: microTime(s.clock.now()) },
    });
    expect((await stateOf(s.c)).available).toBe("none");
  });

  it("marks a deleting cluster without a lease Unknown at once, and makes no lease for it", async () => {
    const s = scene();
    await seed(s, { renewedAgoS: "no lease", deleting: true });
    expect(await reconcile(s)).toEqual({ done: true });
    expect(await stateOf(s.c)).toMatchObject({ available: unknown, unknownEvents: 1, lease: "none" });
  });

  it("writes nothing for a cluster that was never accepted", async () => {
    const s = scene();
    await seed(s, { accepted: false, renewedAgoS: "no lease" });
    const before = await stateOf(s.c);
    s.clock.advance(3600 * S);
    expect(await reconcile(s)).toEqual({ done: true });
    expect(await stateOf(s.c)).toEqual(before);
    expect(before).toMatchObject({ available: "none", clock: "none", lease: "none", unknownEvents: 0 });
    // control: once accepted, the same reconcile makes the cluster's lease
    await admin.patch(ManagedClusterResource, s.c, { status: { conditions: setCondition([], acceptedCondition, s.clock.now()) } }, { subresource: "status" });
    await reconcile(s);
    expect((await stateOf(s.c)).lease).toBe("present");
  });
});

describe("clock sync", () => {
  const rows = [
    { name: "is out of sync when renewTime is 301 s behind the hub with 60 s leases", given: { renewedAgoS: 301 }, then: { clock: outOfSync, available: unknown } },
    { name: "is out of sync when renewTime is 301 s ahead of the hub", given: { renewedAgoS: -301 }, then: { clock: outOfSync, available: "none" } },
    { name: "is synced when the lease was just renewed", given: { renewedAgoS: 0 }, then: { clock: synced, available: "none" } },
    { name: "is synced whatever the skew when the cluster opts out of the check", given: { renewedAgoS: 301, annotations: { [ClusterAnnotation.SkipClockSyncCheck]: "true" } }, then: { clock: synced, available: unknown } },
    { name: "uses the cluster's lease duration: 10 s leases allow 50 s", given: { renewedAgoS: 51, leaseDurationSeconds: 10 }, then: { clock: outOfSync, available: unknown } },
  ];
  it.each(rows)("$name", async ({ given, then }) => {
    const s = scene();
    await seed(s, given);
    await reconcile(s);
    expect(await stateOf(s.c)).toMatchObject(then);
    const condition = findCondition((await readCluster(s.c))?.status?.conditions, ManagedClusterConditionType.ClockSynced);
    expect(condition?.message).toBe(then.clock === synced ? ManagedClusterMessage.ClockSynced : ManagedClusterMessage.ClockOutOfSync);
  });

  it("turns synced again with a fresh renewal, and writes nothing while it stays so", async () => {
    const s = scene();
    await seed(s, { renewedAgoS: 301 });
    await reconcile(s);
    expect((await stateOf(s.c)).clock).toBe(outOfSync);
    await writeLease(s, s.clock.now());
    await reconcile(s);
    const after = await stateOf(s.c);
    expect(after.clock).toBe(synced);
    s.clock.advance(10 * S);
    await reconcile(s);
    expect(await stateOf(s.c)).toEqual(after);
  });
});

describe("event delivery", () => {
  it("judges the cluster named by a new lease's namespace, through our CloudEvents HTTP server (shared/cloudevents-server.ts)", async () => {
    const s = scene();
    await seed(s, { renewedAgoS: 300 });
    const server = await startFunctionServer(serve(fn.spec, () => s.io));
    try {
      const lease = (await admin.get<Lease>(LeaseResource, ManagedClusterLeaseName, s.c))!;
      const reply = await postEvent(server.url, objectEvent({ cluster: HUB, verb: "add", object: { apiVersion: "coordination.k8s.io/v1", kind: "Lease", ...lease } }));
      expect(reply.status, reply.body).toBe(204);
      expect(await stateOf(s.c)).toMatchObject({ available: unknown, unknownEvents: 1 });
    } finally {
      await server.close();
    }
  });

  it("looks at every cluster on a resync tick", async () => {
    const a = scene();
    const b = scene(LeaseDurationTimes, a.clock);
    await Promise.all([seed(a, { renewedAgoS: 300 }), seed(b, { renewedAgoS: 300 })]);
    const reply = await handleEvent(fn.spec, a.io, tickEvent(HUB));
    expect(reply.statusCode, reply.body).toBe(204);
    expect((await stateOf(a.c)).available).toBe(unknown);
    expect((await stateOf(b.c)).available).toBe(unknown);
  });

  it("on a resync tick, reconciles only the clusters that need a look", async () => {
    const clock = manualClock();
    const [fresh, expired, noLease, marked] = [scene(LeaseDurationTimes, clock), scene(LeaseDurationTimes, clock), scene(LeaseDurationTimes, clock), scene(LeaseDurationTimes, clock)];
    await Promise.all([seed(fresh, { renewedAgoS: 10 }), seed(expired, { renewedAgoS: 300 }), seed(noLease, { renewedAgoS: "no lease" }), seed(marked, { renewedAgoS: 300 })]);
    // Looked at once already: fresh has its ClockSynced condition, marked is Unknown; nothing is left to change.
    await reconcile(fresh);
    await reconcile(marked);
    const keys = await fn.definition.resync!(fresh.io, { type: "tick", cluster: HUB });
    if (!Array.isArray(keys)) throw new Error(`skipped: ${keys.skip}`);
    const names = keys.map((k) => k.name);
    expect(names).toEqual(expect.arrayContaining([expired.c, noLease.c]));
    expect(names).not.toContain(fresh.c);
    expect(names).not.toContain(marked.c);
    // and a tick for another cluster wakes nothing
    expect(await fn.definition.resync!(fresh.io, { type: "tick", cluster: "spoke" })).toHaveProperty("skip");
  });

  it("skips leases that are not cluster leases, events from other clusters, and a renewal (an update wakes nothing)", async () => {
    const s = scene();
    await seed(s, { renewedAgoS: 300 });
    const before = await stateOf(s.c);
    const other = { apiVersion: "coordination.k8s.io/v1", kind: "Lease", metadata: { name: "kube-scheduler", namespace: s.c } };
    const lease = { apiVersion: "coordination.k8s.io/v1", kind: "Lease", metadata: { name: ManagedClusterLeaseName, namespace: s.c } };
    for (const event of [objectEvent({ cluster: HUB, verb: "add", object: other }), objectEvent({ cluster: "spoke", verb: "add", object: lease }), objectEvent({ cluster: HUB, object: lease }), tickEvent("spoke")]) {
      const reply = await handleEvent(fn.spec, s.io, event);
      expect(reply.statusCode, reply.body).toBe(204);
    }
    expect(await stateOf(s.c)).toEqual(before);
    // control: the cluster's own lease from the hub is judged, and it has expired
    expect((await handleEvent(fn.spec, s.io, objectEvent({ cluster: HUB, verb: "add", object: lease }))).statusCode).toBe(204);
    expect((await stateOf(s.c)).available).toBe(unknown);
  });

  it("answers a malformed event with 400 and changes nothing", async () => {
    const s = scene();
    await seed(s, { renewedAgoS: "no lease" });
    const before = await stateOf(s.c);
    const { cluster: _dropped, ...withoutCluster } = objectEvent({ cluster: HUB, verb: "add", object: { apiVersion: "coordination.k8s.io/v1", kind: "Lease", metadata: { name: ManagedClusterLeaseName, namespace: s.c } } });
    for (const event of [withoutCluster, { ...withoutCluster, cluster: HUB, type: "dev.knative.apiserver.resource.rename" }]) {
      expect((await handleEvent(fn.spec, s.io, event)).statusCode).toBe(400);
    }
    expect(await stateOf(s.c)).toEqual(before);
    // control: well formed, the same event makes the accepted cluster's missing lease
    expect((await handleEvent(fn.spec, s.io, { ...withoutCluster, cluster: HUB })).statusCode).toBe(204);
    expect((await stateOf(s.c)).lease).toBe("present");
  });
});

// needsLook is a second statement of what the reconcile writes; this holds the two together. Many
// clusters with seeded random leases, conditions and settings, some already judged once, are judged by
// the resync at several moments of one clock (fresh, just before and after expiry, long after); each
// one passed over is then reconciled on its own at that moment, and must send no write.
describe("resync ticks pass over only what the reconcile would leave alone", () => {
  const random = (seed: number) => () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const COUNT = 36;
  type Shape = {
    accepted: "True" | "False" | "none";
    leaseDurationSeconds?: number;
    renewedAgoS: number | "no lease";
    available: "True" | "False" | "Unknown" | "none";
    clock: "True" | "False" | "none";
    skipClockCheck: boolean;
    deleting: boolean;
    judgedOnce: boolean;
  };

  function shapes(): Shape[] {
    const r = random(25_6);
    const pick = <T,>(xs: readonly T[]) => xs[Math.floor(r() * xs.length)]!;
    return Array.from({ length: COUNT }, () => ({
      accepted: pick(["True", "True", "True", "False", "none"] as const),
      leaseDurationSeconds: pick([undefined, undefined, 10, 40]),
      renewedAgoS: pick(["no lease", 0, 0, 30, 49, 51, 250, 299, 301, 2000] as const),
      available: pick(["True", "False", "Unknown", "none"] as const),
      clock: pick(["True", "False", "none"] as const),
      skipClockCheck: r() < 0.2,
      deleting: r() < 0.15,
      judgedOnce: r() < 0.5,
    }));
  }

  const condition = (type: string, status: "True" | "False" | "Unknown", now: Date) => ({ type, status, reason: `Test${status}`, message: `set by the test to ${status}`, lastTransitionTime: microTime(now).replace(/\.\d+Z$/, "Z") });

  async function make(s: Scene, shape: Shape): Promise<void> {
    const now = s.clock.now();
    const conditions = [
      ...(shape.accepted === "none" ? [] : [{ ...acceptedCondition, status: shape.accepted, lastTransitionTime: microTime(now).replace(/\.\d+Z$/, "Z") }]),
      ...(shape.available === "none" ? [] : [condition(ManagedClusterConditionType.Available, shape.available, now)]),
      ...(shape.clock === "none" ? [] : [condition(ManagedClusterConditionType.ClockSynced, shape.clock, now)]),
    ];
    await seed(s, {
      accepted: false,
      renewedAgoS: shape.renewedAgoS,
      leaseDurationSeconds: shape.leaseDurationSeconds,
      annotations: shape.skipClockCheck ? { [ClusterAnnotation.SkipClockSyncCheck]: "true" } : undefined,
    });
    if (conditions.length > 0) await admin.patch(ManagedClusterResource, s.c, { status: { conditions } }, { subresource: "status" });
    if (shape.judgedOnce) await reconcile(s);
    if (shape.deleting) {
      await admin.patch(ManagedClusterResource, s.c, { metadata: { finalizers: [HOLD] } });
      await admin.delete(ManagedClusterResource, s.c);
    }
  }

  it(`for every one of ${COUNT} varied clusters a resync passes over (needsLook false) at each of four moments, the reconcile of that cluster sends no write`, async () => {
    const clock = manualClock();
    const made = shapes().map((shape) => ({ s: scene(LeaseDurationTimes, clock), shape }));
    for (const { s, shape } of made) await make(s, shape);
    const io = made[0]!.s.io;
    const wrong: unknown[] = [];
    let passedOver = 0;
    let looked = 0;
    // now, then past a 50 s grace (10 s leases), past 300 s (the default), and long after
    for (const step of [0, 55 * S, 250 * S, 3000 * S]) {
      clock.advance(step);
      const keys = await fn.definition.resync!(io, { type: "tick", cluster: HUB });
      if (!Array.isArray(keys)) throw new Error(`skipped: ${keys.skip}`);
      const listed = new Set(keys.map((k) => k.name));
      for (const { s, shape } of made) {
        if (listed.has(s.c)) {
          looked++;
          continue;
        }
        passedOver++;
        const rec = recordingRequests(io);
        const outcome = await fn.definition.reconcile(rec.io, { cluster: HUB, name: s.c }).catch((err: unknown) => ({ error: String(err) }));
        if (rec.writes().length > 0 || "error" in outcome) wrong.push({ c: s.c, at: clock.now().toISOString(), shape, writes: rec.writes(), outcome });
      }
    }
    expect(wrong).toEqual([]);
    // not vacuous: the tick both looks at some and passes over some
    expect(passedOver).toBeGreaterThanOrEqual(COUNT);
    expect(looked).toBeGreaterThanOrEqual(COUNT);
  });
});
