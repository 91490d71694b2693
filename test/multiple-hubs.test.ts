// Multiple hubs end to end (OCM's MultipleHubs): two hubs of ours, each with every hub function under its
// own identity behind its own relay, and two agents with both hubs' bootstrap kubeconfigs, hub A first.
// - OCM v1.2.0's own registration agent (--feature-gates=MultipleHubs=true, restarted whenever it exits,
//   as its Deployment would be) moves from A to B when A stops accepting it and back when B does: our
//   hubs serve what it needs for that.
// - Our agent (functions, relay and heartbeat) does the same, and after each move renews its lease and
//   applies ManifestWorks of the new hub only.
// - Last, hub A's API server stops: both agents move to B once the timeout has passed.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { startClusters, freePort, type LocalClusters } from "../dev/control-plane/clusters.ts";
import { findOcm } from "../dev/control-plane/binaries.ts";
import { startProcess, stopProcess, logTail, type Managed } from "../dev/control-plane/processes.ts";
import { startApiserver, stopApiserver } from "../dev/control-plane/restart.ts";
import { startFleet, type Fleet } from "../dev/local/fleet.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { LeaseResource, NamespaceResource, SecretResource } from "../shared/api/kube.ts";
import { ManagedClusterConditionType, ManagedClusterLeaseName, ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { AgentNamespaceDefault, HubKubeconfigSecretName } from "../shared/api/registration.ts";
import { hubEndpoint, secretText, type Secret } from "../shared/hub-credentials.ts";
import { isTrue } from "../shared/conditions.ts";
import { manifestWorkApplied } from "./support/joined-spoke.ts";
import { eventually } from "./support/eventually.ts";

const OURS = "roamer"; // our agent's cluster, on fleet A's control plane of that name
const THEIRS = "ocm-roamer"; // OCM's agent's cluster, on a control plane of its own
const TIMEOUT_SECONDS = 20;
const LEASE_SECONDS = 5;
const START_MS = 300_000;
const MOVE_MS = 120_000;
const BOOTSTRAP_GROUP = "system:bootstrappers:managedcluster";

let planesA: LocalClusters;
let planesB: LocalClusters;
let fleetA: Fleet;
let fleetB: Fleet;
let work: string;
let theirAgent: { stop(): Promise<void>; restarts(): number; log(): string } | undefined;
const clients: KubeClient[] = [];

const hubs = () => ({ A: fleetA.hub, B: fleetB.hub });
type HubName = "A" | "B";
const urlOf = (h: HubName) => (h === "A" ? planesA : planesB).get("hub").url;

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "multiple-hubs-"));
  planesA = await startClusters({ names: ["hub", OURS, THEIRS] });
  planesB = await startClusters({ names: ["hub"] });
  // Tokens first, so each hub's auto-approval can name their users: every agent joins both hubs by itself.
  const token = (planes: LocalClusters) => planes.get("hub").createBootstrapToken([BOOTSTRAP_GROUP]);
  const [oursOnB, theirsOnA, theirsOnB] = [await token(planesB), await token(planesA), await token(planesB)];
  fleetB = await startFleet({ clusters: planesB, spokes: [], resyncMs: 2_000, autoApprovalUsers: [`${oursOnB.user}=${OURS}`, `${theirsOnB.user}=${THEIRS}`] });
  fleetA = await startFleet({
    clusters: planesA,
    spokes: [{ name: OURS, autoApprove: true, moreHubs: [oursOnB.kubeconfig], hubConnectionTimeoutSeconds: TIMEOUT_SECONDS }],
    resyncMs: 2_000,
    leaseDurationSeconds: LEASE_SECONDS,
    autoApprovalUsers: [`${theirsOnA.user}=${THEIRS}`],
  });
  theirAgent = await startTheirAgent([theirsOnA.kubeconfig, theirsOnB.kubeconfig]);
}, START_MS);

afterAll(async () => {
  await theirAgent?.stop();
  await fleetA?.stop();
  await fleetB?.stop();
  for (const c of clients) c.close();
  await planesA?.stop();
  await planesB?.stop();
  if (work) rmSync(work, { recursive: true, force: true });
});

// OCM's agent as its Deployment runs it: started again whenever it exits (it exits to reselect a hub).
async function startTheirAgent(bootstrapKubeconfigs: string[]) {
  const plane = planesA.get(THEIRS);
  const admin = KubeClient.fromKubeconfig(plane.adminKubeconfig);
  clients.push(admin);
  await admin.create(NamespaceResource, { metadata: { name: AgentNamespaceDefault } }).catch(() => undefined);
  const kubeconfigFile = join(work, "managed.kubeconfig");
  writeFileSync(kubeconfigFile, plane.adminKubeconfig, { mode: 0o600 });
  const files = bootstrapKubeconfigs.map((k, i) => {
    const file = join(work, `bootstrap-${i}.kubeconfig`);
    writeFileSync(file, k, { mode: 0o600 });
    return file;
  });
  const hubDir = join(work, "hub-kubeconfig");
  mkdirSync(hubDir, { recursive: true });
  const { registration } = findOcm(["registration"]);
  let current: Managed | undefined;
  let stopping = false;
  let restarts = 0;
  const run = async () => {
    const port = await freePort();
    // in the control planes' run folder, whose guard kills it should this process die first
    current = startProcess(dirname(plane.dir), `ocm-registration-${restarts}`, registration, [
      "agent",
      "--feature-gates=MultipleHubs=true",
      `--kubeconfig=${kubeconfigFile}`,
      `--namespace=${AgentNamespaceDefault}`,
      `--spoke-cluster-name=${THEIRS}`,
      ...files.map((f) => `--bootstrap-kubeconfigs=${f}`),
      `--hub-connection-timeout-seconds=${TIMEOUT_SECONDS}`,
      `--hub-kubeconfig-secret=${HubKubeconfigSecretName}`,
      `--hub-kubeconfig-dir=${hubDir}`,
      `--spoke-external-server-urls=${plane.url}`,
      "--disable-leader-election",
      `--listen=127.0.0.1:${port}`,
    ]);
    const ended = current;
    void ended.exited.then(async () => {
      if (stopping) return;
      restarts++;
      await new Promise((r) => setTimeout(r, 1_000));
      if (!stopping) await run();
    });
  };
  await run();
  return {
    async stop() {
      stopping = true;
      if (current) await stopProcess(current);
    },
    restarts: () => restarts,
    log: () => (current ? logTail(current, 40) : ""),
  };
}

type Cluster = ManagedCluster & KubeObject;
const clusterOn = (h: HubName, name: string) => hubs()[h].get<Cluster>(ManagedClusterResource, name);

async function setAccepted(h: HubName, name: string, accepted: boolean) {
  await hubs()[h].patch(ManagedClusterResource, name, { spec: { hubAcceptsClient: accepted } });
}

// The hub a spoke's agent holds a certificate for: the server of its hub kubeconfig secret.
async function hubOf(spokeAdmin: KubeClient): Promise<HubName | undefined> {
  const text = secretText(await spokeAdmin.get<Secret>(SecretResource, HubKubeconfigSecretName, AgentNamespaceDefault), "kubeconfig");
  if (!text) return undefined;
  const server = hubEndpoint(text).server;
  return server === urlOf("A") ? "A" : server === urlOf("B") ? "B" : undefined;
}

const renewTime = async (h: HubName, name: string) => (await hubs()[h].get<KubeObject & { spec?: { renewTime?: string } }>(LeaseResource, ManagedClusterLeaseName, name))?.spec?.renewTime;

// Joined there: the agent holds that hub's certificate, the hub says Joined, and the lease renews there.
async function joinedOn(h: HubName, name: string, spokeAdmin: KubeClient, why: () => string) {
  await eventually(
    async () => {
      expect(await hubOf(spokeAdmin), why()).toBe(h);
      expect(isTrue((await clusterOn(h, name))?.status?.conditions, ManagedClusterConditionType.Joined), why()).toBe(true);
    },
    { timeoutMs: MOVE_MS, intervalMs: 500 },
  );
  const first = await eventually(async () => {
    const t = await renewTime(h, name);
    expect(t, why()).toBeDefined();
    return t;
  });
  await eventually(async () => expect(await renewTime(h, name), why()).not.toBe(first), { timeoutMs: MOVE_MS, intervalMs: 500 });
}

const spokeAdmin = (plane: string) => {
  const c = KubeClient.fromKubeconfig(planesA.get(plane).adminKubeconfig);
  clients.push(c);
  return c;
};

describe("OCM's registration agent with two of our hubs", () => {
  it("joins hub A, moves to hub B when A stops accepting it, and back to A when B does", async () => {
    const spoke = spokeAdmin(THEIRS);
    const why = () => `OCM's agent, ${theirAgent!.restarts()} restarts:\n${theirAgent!.log()}`;
    // Its lease is renewed every leaseDurationSeconds; shorter than the timeout, so a quiet hub is not a dead one.
    const shortLease = async (h: HubName) => {
      await eventually(async () => expect(await clusterOn(h, THEIRS), why()).toBeDefined(), { timeoutMs: MOVE_MS, intervalMs: 500 });
      await hubs()[h].patch(ManagedClusterResource, THEIRS, { spec: { leaseDurationSeconds: LEASE_SECONDS } });
    };
    await shortLease("A");
    await joinedOn("A", THEIRS, spoke, why);

    await setAccepted("A", THEIRS, false);
    await shortLease("B");
    await joinedOn("B", THEIRS, spoke, why);

    await setAccepted("A", THEIRS, true);
    await setAccepted("B", THEIRS, false);
    await joinedOn("A", THEIRS, spoke, why);
    await setAccepted("B", THEIRS, true); // usable again, for the outage below
  }, 4 * MOVE_MS);
});

describe("our agent with two hubs", () => {
  it("joins hub A, moves to hub B when A stops accepting it and works there, and back to A when B does", async () => {
    const spoke = spokeAdmin(OURS);
    const why = () => `our agent on ${OURS}`;
    await joinedOn("A", OURS, spoke, why);

    await setAccepted("A", OURS, false);
    await joinedOn("B", OURS, spoke, why);
    // The relay follows: a ManifestWork of hub B is applied.
    await manifestWorkApplied(fleetB.hub, spoke, OURS);

    await setAccepted("A", OURS, true);
    await setAccepted("B", OURS, false);
    await joinedOn("A", OURS, spoke, why);
    await setAccepted("B", OURS, true);
  }, 4 * MOVE_MS);
});

// Last: hub A's API server is stopped, and started again however the test ends.
describe("hub A's API server stopped", () => {
  it("moves both agents to hub B once A has not answered for the hub connection timeout", async () => {
    const ours = spokeAdmin(OURS);
    const theirs = spokeAdmin(THEIRS);
    expect(await hubOf(ours)).toBe("A");
    expect(await hubOf(theirs)).toBe("A");
    await stopApiserver(planesA.get("hub"));
    try {
      await joinedOn("B", OURS, ours, () => "our agent after A stopped");
      await joinedOn("B", THEIRS, theirs, () => `OCM's agent after A stopped:\n${theirAgent!.log()}`);
    } finally {
      await startApiserver(planesA.get("hub"));
    }
  }, 3 * MOVE_MS);
});
