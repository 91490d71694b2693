// Recorded join streams replayed into the functions on fresh control planes with no resync ticks at all:
// in order, shuffled, duplicated, reordered within each object, partly dropped, and several at once. Each must reach the
// whole end state of a clean in-order replay of the same recording. Two recordings of one join:
// test/fixtures/join/ (scripts/record-join.ts, our relays feeding every function) and
// test/fixtures/join-broker/ (scripts/record-join-broker.ts, the hub's events as Knative's Broker delivered
// them, the spoke's from our relay).
//
// How an event reaches a fresh world: a watch can only report an object that exists, so an event is held
// back until the object it names has existed in the fresh world (then delivered in the variant's order),
// and the CSRs it names are mapped to the fresh run's by order of creation (the spoke picks a random name
// each run). After each delivery the replay waits for kube-controller-manager to sign what is approved,
// the one actor that is not a function, so a variant's result depends on its order and nothing else. A 503
// is delivered again, as the source retries it; a function's recheck (x-recheck-after-ms) is not honoured.
import { describe, it, expect, afterEach } from "vitest";
import "reflect-metadata"; // @peculiar/x509 resolves its algorithms through tsyringe, which needs it
import * as x509 from "@peculiar/x509";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { startFleet, type Fleet } from "../dev/local/fleet.ts";
import { ClusterLabel, ManagedClusterLeaseName, ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { AddonNameLabel, AgentNamespaceDefault, HubKubeconfigSecretName, HubSecretKey } from "../shared/api/registration.ts";
import {
  CertificateSigningRequestResource,
  ClusterRoleBindingResource,
  ClusterRoleResource,
  LeaseResource,
  NamespaceResource,
  RoleBindingResource,
  RoleResource,
  SecretResource,
} from "../shared/api/kube.ts";
import type { CertificateSigningRequest } from "../shared/api/certificates.ts";
import { certificateRequest, createCsrOnce, encodeSecretData, newPrivateKeyPem, readIssuedCertificate, PendingKey } from "../shared/csr-flow.ts";
import { hubEndpoint, secretText, type Secret } from "../shared/hub-credentials.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { postEvent } from "./support/functions.ts";
import { eventually } from "./support/eventually.ts";

type Recorded = { time: string; sink: string; status: number | null; event: Record<string, unknown> };

const CLUSTER = "cluster1";
// The recording holds every function of the fleet; the join is these four, fed these kinds.
const joinSinks = new Set(["hub/cluster-acceptor", "hub/csr-approver", `${CLUSTER}/spoke-registration`, `${CLUSTER}/spoke-cluster-status`]);
const joinKinds = new Set(["ManagedCluster", "CertificateSigningRequest", "Secret"]);
const isTick = (r: Recorded) => r.event.type === "dev.knative.sources.ping";
const named = (r: Recorded) => ({ kind: String(r.event.kind), name: String(r.event.name) });

type Recording = { lines: Recorded[]; stream: Recorded[]; objectEvents: Recorded[]; ticks: Recorded[]; recordedCsrs: string[] };

// The recording in test/fixtures/<dir>/: every line, in the order it was delivered in (every event follows
// the change it reports), and the join's part of it.
function loadRecording(dir: string): Recording {
  const fixtures = join(import.meta.dirname, "fixtures", dir);
  const lines = readdirSync(fixtures)
    .filter((f) => f.endsWith(".jsonl"))
    .flatMap((f) => readFileSync(join(fixtures, f), "utf8").trim().split("\n").map((l) => JSON.parse(l) as Recorded))
    .sort((a, b) => a.time.localeCompare(b.time));
  const stream = lines.filter((r) => joinSinks.has(r.sink) && (isTick(r) || joinKinds.has(String(r.event.kind))));
  const objectEvents = stream.filter((r) => !isTick(r));
  const ticks = stream.filter(isTick);
  // The recording's CSRs in order of creation (the order their first events were delivered in).
  const recordedCsrs = [...new Set(objectEvents.filter((r) => r.event.kind === "CertificateSigningRequest").map((r) => named(r).name))];
  return { lines, stream, objectEvents, ticks, recordedCsrs };
}

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

// Each object's events (per sink) in reverse order, in the slots they had: an update before its add.
function reversedWithinEachObject(events: readonly Recorded[]): Recorded[] {
  const keyOf = (r: Recorded) => `${r.sink}|${r.event.kind}|${r.event.name}`;
  const groups = new Map<string, Recorded[]>();
  for (const r of events) groups.set(keyOf(r), [...(groups.get(keyOf(r)) ?? []), r]);
  return events.map((r) => groups.get(keyOf(r))!.pop()!);
}

// What the replay has seen exist in the fresh world: objects by kind/name, and the CSRs in order of creation;
// plane: the spoke's local cluster, the name its own events carry; recordedCsrs: the recording's, to map.
type World = { fleet: Fleet; spoke: KubeClient; plane: string; recordedCsrs: string[]; seen: Set<string>; csrs: string[] };

async function clusterCsrs(hub: KubeClient): Promise<CertificateSigningRequest[]> {
  const list = await hub.list<CertificateSigningRequest>(CertificateSigningRequestResource, { labelSelector: `${ClusterLabel.ClusterName}=${CLUSTER},!${AddonNameLabel}` });
  return list.items.sort((a, b) => String(a.metadata.creationTimestamp).localeCompare(String(b.metadata.creationTimestamp)) || a.metadata.name.localeCompare(b.metadata.name));
}

async function observe(w: World): Promise<void> {
  for (const csr of await clusterCsrs(w.fleet.hub)) if (csr.metadata.name && !w.csrs.includes(csr.metadata.name)) w.csrs.push(csr.metadata.name);
  if (await w.fleet.hub.get(ManagedClusterResource, CLUSTER)) w.seen.add(`ManagedCluster/${CLUSTER}`);
  for (const s of (await w.spoke.list(SecretResource, { namespace: AgentNamespaceDefault })).items) w.seen.add(`Secret/${s.metadata.name}`);
}

// The event as the fresh world would have it, or undefined while the object it names has not existed there.
function mapped(w: World, r: Recorded): Record<string, unknown> | undefined {
  const { kind, name } = named(r);
  if (kind === "CertificateSigningRequest") {
    const index = w.recordedCsrs.indexOf(name);
    if (index < 0) return w.csrs.includes(name) ? r.event : undefined; // already a fresh world's name
    const fresh = w.csrs[index];
    return fresh ? (JSON.parse(JSON.stringify(r.event).replaceAll(name, fresh)) as Record<string, unknown>) : undefined;
  }
  return isTick(r) || w.seen.has(`${kind}/${name}`) ? r.event : undefined;
}

// kube-controller-manager signs approved CSRs on its own: wait for it, so the next event meets a settled world.
async function settle(w: World): Promise<void> {
  await eventually(async () => {
    const unsigned = (await clusterCsrs(w.fleet.hub)).filter((c) => c.status?.conditions?.some((x) => x.type === "Approved") && !c.status?.certificate);
    if (unsigned.length) throw new Error(`not yet signed: ${unsigned.map((c) => c.metadata.name).join(", ")}`);
  });
  await observe(w);
}

type Replayed = { statuses: number[]; undelivered: Recorded[] };

// concurrency > 1: the events are sent that many at a time, all at once, in the order they are ready;
// the world settles after each batch.
async function replay(w: World, events: readonly Recorded[], concurrency = 1): Promise<Replayed> {
  const statuses: number[] = [];
  const held: Recorded[] = [];
  const send = async (r: Recorded, event: Record<string, unknown>) => {
    const url = w.fleet.functions.get(r.sink);
    if (!url) throw new Error(`the recording names a sink no function serves: ${r.sink}`);
    for (let attempt = 0; ; attempt++) {
      const { status } = await postEvent(url, event);
      statuses.push(status);
      if (status !== 503 || attempt === 3) break;
    }
  };
  const deliver = async (r: Recorded, event: Record<string, unknown>) => {
    await send(r, event);
    await settle(w);
  };
  await observe(w);
  if (concurrency > 1) {
    const queue = [...events];
    for (;;) {
      const batch: [Recorded, Record<string, unknown>][] = [];
      for (let i = 0; i < queue.length && batch.length < concurrency; ) {
        const ready = mapped(w, queue[i]!);
        if (ready) batch.push([queue.splice(i, 1)[0]!, ready]);
        else i++;
      }
      if (batch.length === 0) return { statuses, undelivered: queue };
      await Promise.all(batch.map(([r, event]) => send(r, event)));
      await settle(w);
    }
  }
  for (const r of events) {
    const event = mapped(w, r);
    if (!event) {
      held.push(r);
      continue;
    }
    await deliver(r, event);
    // Held events whose object now exists go out next, in the order they were due.
    for (let i = 0; i < held.length; ) {
      const ready = mapped(w, held[i]!);
      if (ready) {
        const [h] = held.splice(i, 1);
        await deliver(h!, ready);
        i = 0;
      } else i++;
    }
  }
  return { statuses, undelivered: held };
}

// The whole end state, normalized: no uids, timestamps, resourceVersions; random names as placeholders.
async function endState(w: World): Promise<unknown> {
  const { hub } = w.fleet;
  const selector = { labelSelector: `${ClusterLabel.ClusterName}=${CLUSTER}` };
  const mc = await hub.get<ManagedCluster & KubeObject>(ManagedClusterResource, CLUSTER);
  const csrs = await clusterCsrs(hub);
  const ns = await hub.get<KubeObject & { status?: { phase?: string } }>(NamespaceResource, CLUSTER);
  type RbacObject = KubeObject & { metadata: { labels?: Record<string, string>; ownerReferences?: { kind: string; name: string }[] }; rules?: unknown; subjects?: unknown; roleRef?: unknown; aggregationRule?: unknown };
  const rbac = (await Promise.all([RoleResource, RoleBindingResource, ClusterRoleResource, ClusterRoleBindingResource].map(async (r) => (await hub.list<RbacObject>(r, selector)).items.map((o) => ({ ...o, kind: r.kind })))))
    .flat()
    .map((o) => ({ kind: o.kind, namespace: o.metadata.namespace ?? "", name: o.metadata.name ?? "", labels: o.metadata.labels, owners: o.metadata.ownerReferences?.map((x) => `${x.kind}/${x.name}`), rules: o.rules, subjects: o.subjects, roleRef: o.roleRef, aggregationRule: o.aggregationRule }))
    .sort((a, b) => `${a.kind}/${a.namespace}/${a.name}`.localeCompare(`${b.kind}/${b.namespace}/${b.name}`));
  const lease = await hub.get<KubeObject & { spec?: Record<string, unknown> }>(LeaseResource, ManagedClusterLeaseName, CLUSTER);
  const secrets = (await w.spoke.list<Secret>(SecretResource, { namespace: AgentNamespaceDefault })).items.sort((a, b) => (a.metadata.name ?? "").localeCompare(b.metadata.name ?? ""));
  const hubSecret = secrets.find((s) => s.metadata.name === HubKubeconfigSecretName);
  const agentName = secretText(hubSecret, HubSecretKey.AgentName);
  const state = {
    managedCluster: mc && {
      labels: mc.metadata.labels,
      finalizers: [...(mc.metadata.finalizers ?? [])].sort(),
      spec: mc.spec,
      conditions: (mc.status?.conditions ?? []).map((c) => ({ type: c.type, status: c.status, reason: c.reason })).sort((a, b) => a.type.localeCompare(b.type)),
    },
    csrs: csrs.map((c) => ({
      name: c.metadata.name,
      labels: c.metadata.labels,
      signerName: c.spec.signerName,
      username: c.spec.username,
      subject: readRequestSubject(c.spec.request),
      conditions: (c.status?.conditions ?? []).map((x) => ({ type: x.type, status: x.status, reason: x.reason })),
      issued: Boolean(c.status?.certificate),
    })),
    namespace: ns && { labels: ns.metadata.labels, phase: ns.status?.phase },
    rbac,
    lease: lease && { namespace: lease.metadata.namespace, name: lease.metadata.name, labels: lease.metadata.labels, leaseDurationSeconds: lease.spec?.leaseDurationSeconds, holderIdentity: lease.spec?.holderIdentity },
    agentSecrets: secrets.map((s) => {
      const kubeconfig = secretText(s, HubSecretKey.Kubeconfig);
      const cert = secretText(s, HubSecretKey.TlsCert);
      const issued = s.metadata.name === HubKubeconfigSecretName && cert ? readIssuedCertificate(cert) : undefined;
      return {
        name: s.metadata.name,
        type: s.type,
        keys: Object.keys(s.data ?? {}).sort(),
        ...(s.metadata.name === HubKubeconfigSecretName
          ? { server: kubeconfig && hubEndpoint(kubeconfig).server, clusterName: secretText(s, HubSecretKey.ClusterName), agentName, subject: issued && { commonName: issued.commonName, organizations: [...issued.organizations].sort() } }
          : {}),
      };
    }),
  };
  let text = JSON.stringify(state)
    .replaceAll(w.fleet.clusters.get("hub").url, "<hub>")
    .replaceAll(w.fleet.clusters.get(w.plane).url, "<spoke>")
    .replace(/system:bootstrap:[0-9a-f]{6}/g, "system:bootstrap:<token>")
    .replace(/"caBundle":"[^"]*"/g, '"caBundle":"<spoke ca>"');
  csrs.forEach((c, i) => (text = text.replaceAll(c.metadata.name, `<csr ${i}>`)));
  if (agentName) text = text.replaceAll(`:${agentName}"`, `:<agent>"`).replaceAll(`"agentName":"${agentName}"`, `"agentName":"<agent>"`);
  return JSON.parse(text);
}

function readRequestSubject(requestB64: string): { commonName: string; organizations: string[] } {
  const request = new x509.Pkcs10CertificateRequest(Buffer.from(requestB64, "base64").toString());
  return { commonName: request.subjectName.getField("CN")[0] ?? "", organizations: [...request.subjectName.getField("O")].sort() };
}

// Every variant gets fresh control planes of its own (a hub and a spoke), started when its test starts and
// stopped when it ends: fourteen API servers at once do not come up on two cores.
let current: World | undefined;

async function freshWorld(plane: string, recordedCsrs: string[]): Promise<World> {
  const fleet = await startFleet({ spokes: [{ name: CLUSTER, controlPlane: plane, autoApprove: true }], relays: false, heartbeats: false });
  current = { fleet, spoke: KubeClient.fromKubeconfig(fleet.clusters.get(plane).adminKubeconfig), plane, recordedCsrs, seen: new Set(), csrs: [] };
  return current;
}

afterEach(async () => {
  current?.spoke.close();
  await current?.fleet.stop();
  current = undefined;
});

// The two recordings of one join. join/ (scripts/record-join.ts): our relays fed every function.
// join-broker/ (scripts/record-join-broker.ts): the hub's functions were fed what Knative's Broker
// delivered (ApiServerSource and PingSource events, fanned out by the Trigger filters), the spoke's by our
// relay. plane: the spoke's local cluster, the name its own events carry: the fleet's (cluster1) in the
// first, OCM_CLUSTER_NAME as the spoke functions' func.yaml set it (spoke) in the second, where the spoke
// was deployed as `ocmf join` renders it; a fresh world names it the same. The broker recording runs the structure check, the clean
// replay and the variants marked for it; the rest run on the first recording only.
const recordings = [
  { dir: "join", title: "replaying a recorded join with no resync ticks", plane: CLUSTER, broker: false },
  { dir: "join-broker", title: "replaying a recorded join whose hub events are the ones Knative's Broker delivered, with no resync ticks", plane: "spoke", broker: true },
];

for (const { dir, title, plane, broker } of recordings) {
  // Each test starts a fresh hub and spoke (about 20 s on 2 cores), hence its own time limit.
  describe(title, { timeout: 180_000 }, () => {
    const { lines, stream, objectEvents, ticks, recordedCsrs } = loadRecording(dir);

    it("the recording is one real join: both sides, object events and resync ticks, one CSR", () => {
      const sinks = new Set(stream.map((r) => r.sink));
      expect(sinks).toEqual(new Set(["hub/cluster-acceptor", "hub/csr-approver", `${CLUSTER}/spoke-registration`, `${CLUSTER}/spoke-cluster-status`]));
      expect(ticks.length).toBeGreaterThan(0);
      expect(new Set(objectEvents.map((r) => r.event.kind))).toEqual(new Set(["ManagedCluster", "CertificateSigningRequest", "Secret"]));
      expect(recordedCsrs).toHaveLength(1);
      // The hub's objects come named "hub", the spoke's own (its secrets) with its local cluster's name.
      expect(new Set(objectEvents.map((r) => `${r.event.kind} ${r.event.cluster}`))).toEqual(new Set(["ManagedCluster hub", "CertificateSigningRequest hub", `Secret ${plane}`]));
    });

    if (broker) {
      it("the hub's events came through the Broker: each has the knativearrivaltime it stamps and the cluster extension hub", () => {
        const hub = lines.filter((r) => r.sink.startsWith("hub/"));
        expect(hub.length).toBeGreaterThan(0);
        for (const r of hub) expect(r.event).toMatchObject({ knativearrivaltime: expect.any(String), cluster: "hub" });
        // The spoke's side is our relay's recording, which the Broker never saw.
        const spoke = lines.filter((r) => r.sink.startsWith(`${CLUSTER}/`));
        expect(spoke.length).toBeGreaterThan(0);
        expect(spoke.filter((r) => "knativearrivaltime" in r.event)).toEqual([]);
      });
    }

    let reference: unknown;
    it("a clean in-order replay joins, every event names an object of the fresh world, and each is answered 204 or a retry", async () => {
      const w = await freshWorld(plane, recordedCsrs);
      const { statuses, undelivered } = await replay(w, objectEvents);
      expect(undelivered).toEqual([]);
      expect(statuses.filter((s) => s !== 204 && s !== 503)).toEqual([]);
      reference = await endState(w);
      expect(reference).toMatchObject({
        managedCluster: { spec: { hubAcceptsClient: true }, conditions: expect.arrayContaining([{ type: "HubAcceptedManagedCluster", status: "True", reason: expect.any(String) }, { type: "ManagedClusterJoined", status: "True", reason: expect.any(String) }]) },
        csrs: [{ issued: true }],
        agentSecrets: expect.arrayContaining([expect.objectContaining({ name: HubKubeconfigSecretName, server: "<hub>", agentName: "<agent>", subject: { commonName: `system:open-cluster-management:${CLUSTER}:<agent>`, organizations: expect.any(Array) } })]),
      });
      expect(JSON.stringify(reference)).not.toContain("undefined");
    });

    // broker: whether the variant also runs on the broker recording. One variant is enough there: the
    // others try the same functions' idempotence the first recording already tries (and "every third event
    // dropped" cannot work on it: every event csr-approver got falls on a dropped slot, and with no ticks
    // nothing approves the CSR).
    const variants: { name: string; events: () => Recorded[]; broker: boolean; concurrency?: number }[] = [
      { name: "shuffled", events: () => shuffled(objectEvents, 7), broker: true },
      { name: "shuffled, and delivered four at a time concurrently", events: () => shuffled(objectEvents, 13), broker: true, concurrency: 4 },
      { name: "every event twice, the copies shuffled apart", events: () => shuffled([...objectEvents, ...objectEvents], 11), broker: false },
      { name: "each object's events in reverse order", events: () => reversedWithinEachObject(objectEvents), broker: false },
      { name: "every third event dropped", events: () => objectEvents.filter((_, i) => i % 3 !== 2), broker: false },
    ];

    it.each(variants.filter((v) => !broker || v.broker))("reaches the clean run's whole end state: $name", async ({ events, concurrency }) => {
      const sent = events();
      expect(sent.some(isTick)).toBe(false);
      const w = await freshWorld(plane, recordedCsrs);
      const { statuses, undelivered } = await replay(w, sent, concurrency);
      expect(undelivered).toEqual([]);
      expect(statuses.filter((s) => s !== 204 && s !== 503)).toEqual([]);
      expect(await endState(w)).toEqual(reference);
    });

    // The rest runs on the relays' recording only.
    if (broker) return;

    // The control: the same replay and comparison fed one resync round (each sink's first tick, in the
    // recorded order) and no object events fails, so the variants above pass on their object events and
    // could fail. (All of the recording's ticks, five rounds, do reach the join on their own: a tick wakes
    // every key, which is what a resync is for; a replay must therefore carry none of them.)
    it("one round of resync ticks alone does not reach that end state", async () => {
      expect(reference).toBeDefined();
      const w = await freshWorld(plane, recordedCsrs);
      const oneRound = [...new Map(ticks.map((r) => [r.sink, r] as const)).keys()].map((sink) => ticks.find((r) => r.sink === sink)!);
      const { undelivered } = await replay(w, oneRound);
      expect(undelivered).toEqual([]);
      expect(await endState(w)).not.toEqual(reference);
    });

    // The recording of 74c5531 held three CSRs for one join (agents e5f91, 6b99a, e5f91) and two rewrites
    // of hub-kubeconfig-secret: an invocation that had read "no hub secret, no pending request" wrote after
    // the join was done, so a request under a fresh random agent name was issued and stored under the hub
    // secret's agent name, a certificate the next invocation judged "for another agent" and replaced. Here
    // that stale invocation's writes are made by hand on a joined cluster.
    it("a request left by a stale invocation under another agent name leaves the joined agent's secret alone, and no third CSR follows", async () => {
      const w = await freshWorld(plane, recordedCsrs);
      await replay(w, objectEvents);
      const before = await w.spoke.get<Secret>(SecretResource, HubKubeconfigSecretName, AgentNamespaceDefault);
      expect(secretText(before, HubSecretKey.AgentName)).toBeTruthy();

      const bootstrap = KubeClient.fromKubeconfig(secretText(await w.spoke.get<Secret>(SecretResource, "bootstrap-hub-kubeconfig", AgentNamespaceDefault), HubSecretKey.Kubeconfig)!);
      const keyPem = await newPrivateKeyPem();
      const staleAgent = "0stale";
      const csrName = `${CLUSTER}-stale`;
      await w.spoke.create<Secret>(SecretResource, {
        metadata: { name: `${HubKubeconfigSecretName}-pending-csr`, namespace: AgentNamespaceDefault },
        type: "Opaque",
        data: encodeSecretData({ [HubSecretKey.TlsKey]: keyPem, [HubSecretKey.AgentName]: staleAgent, [HubSecretKey.ClusterName]: CLUSTER, [PendingKey.CsrName]: csrName }),
      });
      const subject = { commonName: `system:open-cluster-management:${CLUSTER}:${staleAgent}`, organizations: [`system:open-cluster-management:${CLUSTER}`, "system:open-cluster-management:managed-clusters"], organizationalUnits: [] };
      await createCsrOnce(bootstrap, { name: csrName, labels: { [ClusterLabel.ClusterName]: CLUSTER }, requestPem: await certificateRequest({ subject, keyPem }), signerName: "kubernetes.io/kube-apiserver-client" });
      bootstrap.close();

      // What the relays would deliver next: the new CSR to the hub, then the agent's secrets and the CSR to the spoke.
      const hubEvent = objectEvents.find((r) => r.sink === "hub/csr-approver" && r.event.kind === "CertificateSigningRequest")!;
      const csrEvent = JSON.parse(JSON.stringify(hubEvent).replaceAll(recordedCsrs[0]!, csrName)) as Recorded;
      const spokeEvents = objectEvents.filter((r) => r.sink === `${CLUSTER}/spoke-registration`);
      w.csrs.push(csrName);
      const { statuses } = await replay(w, [csrEvent, ...spokeEvents]);
      expect(statuses.filter((s) => s !== 204 && s !== 503)).toEqual([]);

      const after = await w.spoke.get<Secret>(SecretResource, HubKubeconfigSecretName, AgentNamespaceDefault);
      expect(after?.data).toEqual(before?.data);
      // creationTimestamp has whole seconds, so the two may tie: compare them as a set.
      expect((await clusterCsrs(w.fleet.hub)).map((c) => c.metadata.name).sort()).toEqual([w.csrs[0]!, csrName].sort());
      expect(await w.spoke.get(SecretResource, `${HubKubeconfigSecretName}-pending-csr`, AgentNamespaceDefault)).toBeUndefined();
    });
  });
}
