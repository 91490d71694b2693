// The heartbeat sidecar against a real hub and spoke: it renews managed-cluster-lease only while its
// cluster is accepted, follows the lease duration, picks up rotated credentials, survives the cluster
// being recreated and the hub going away, reports an expired certificate on /healthz and its counts on
// /metrics, and runs with the agent settings of the checkpoint (its proxy, its log level), recording its
// health on change only.
import { randomBytes } from "node:crypto";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createServer as createHttpServer } from "node:http";
import { connect, createServer as createTcpServer, type Socket } from "node:net";
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { startClusters, type LocalCluster, type LocalClusters } from "../dev/control-plane/clusters.ts";
import { identityFor } from "../dev/control-plane/identities.ts";
import { startApiserver, stopApiserver } from "../dev/control-plane/restart.ts";
import { KubeClient } from "../shared/kube/client.ts";
import { buildKubeconfig } from "../shared/kube/kubeconfig.ts";
import { clientsFromKubeconfigs } from "../shared/kube/clients.ts";
import { KubeError } from "../shared/kube/errors.ts";
import { jsonLog, type Io } from "../shared/harness.ts";
import { manualClock, microTime, systemClock, type Clock } from "../shared/clock.ts";
import { issueCertificate } from "../shared/pki.ts";
import { hubEndpoint, hubKubeconfig, type AgentSecrets, type Secret } from "../shared/hub-credentials.ts";
import { LeaseResource, SecretResource } from "../shared/api/kube.ts";
import { HealthKey, InstallTimeHash } from "../shared/agent-config.ts";
import { ManagedClusterConditionType, ManagedClusterLeaseName, ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { AgentNamespaceDefault, HubSecretKey, ManagedClustersGroup, agentUser, clusterGroup } from "../shared/api/registration.ts";
import { setCondition } from "../shared/conditions.ts";
import clusterAcceptor, * as clusterAcceptorModule from "../functions/cluster-acceptor/reconcile.ts";
import { startHeartbeat, type Heartbeat, type HeartbeatOptions } from "../components/relay/heartbeat/sidecar.ts";
import { jitteredPeriodMs, realWait, retryDelayMs, type Wait } from "../components/relay/heartbeat/schedule.ts";
import { leaseDurationMs } from "../shared/cluster-lease.ts";
import { RebootstrapRequiredMessage } from "../components/relay/heartbeat/health.ts";
import type { Lease } from "../components/relay/heartbeat/lease.ts";
import { activate, healthRecord, withoutAgentConfig } from "./support/agent-checkpoint.ts";
import { eventually } from "./support/eventually.ts";
import { reconcileAsRelay } from "./support/functions.ts";

let local: LocalClusters;
let hubCluster: LocalCluster;
let hubAdmin: KubeClient;
let spokeAdmin: KubeClient;
let spokeReader: KubeClient; // the sidecar's own identity on the spoke (manifests/rbac/heartbeat.yaml)
let acceptorIo: Io<clusterAcceptorModule.Config>;
const running = new Set<Heartbeat>();

beforeAll(async () => {
  // No controllers: the cluster acceptor is called directly, and nothing here needs CSR signing or GC.
  local = await startClusters({ names: ["hub", "spoke"], controllers: false, log: () => {} });
  hubCluster = local.get("hub");
  hubAdmin = KubeClient.fromKubeconfig(hubCluster.adminKubeconfig);
  spokeAdmin = KubeClient.fromKubeconfig(local.get("spoke").adminKubeconfig);
  spokeReader = KubeClient.fromKubeconfig(await identityFor(local.get("spoke"), "heartbeat"));
  acceptorIo = {
    clock: systemClock,
    config: clusterAcceptor.definition.config.parse({ hubCluster: "hub", autoApprovalUsers: [] }),
    log: jsonLog("cluster-acceptor", "quiet"),
    cluster: clientsFromKubeconfigs({ hub: await identityFor(hubCluster, "cluster-acceptor") }),
  };
});
afterAll(async () => {
  await Promise.all([...running].map((h) => h.stop()));
  for (const c of [hubAdmin, spokeAdmin, spokeReader]) c?.close();
  if (hubCluster) await stopApiserver(hubCluster); // it may have been restarted, which local.stop() does not know
  await local?.stop();
});

type Joined = { name: string; secrets: AgentSecrets; agent: string };
type Cert = { certPem: string; keyPem: string; notAfter: Date };

const suffix = () => randomBytes(3).toString("hex");

// A certificate for the cluster agent's identity, from the hub's client CA as the CSR signer issues them.
async function agentCertificate(c: Joined, notAfter = new Date(Date.now() + 3_600_000)): Promise<Cert> {
  const issued = await issueCertificate(hubCluster.clientCa, {
    subject: { commonName: agentUser(c.name, c.agent), organizations: [clusterGroup(c.name), ManagedClustersGroup] },
    usage: "client",
    notAfter,
  });
  return { certPem: issued.certPem, keyPem: issued.keyPem, notAfter };
}

const encode = (data: Record<string, string>) => Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString("base64")]));

// tls.crt/tls.key rewritten in place, as a rotation does.
async function writeCertificate(c: Joined, cert: Cert): Promise<void> {
  const secret = (await spokeAdmin.get<Secret>(SecretResource, c.secrets.hubSecret, c.secrets.agentNamespace))!;
  await spokeAdmin.update(SecretResource, { ...secret, data: { ...secret.data, ...encode({ [HubSecretKey.TlsCert]: cert.certPem, [HubSecretKey.TlsKey]: cert.keyPem }) } });
}

// An accepted cluster with the agent secrets of a joined spoke (§3.4): created on the hub, accepted by
// the cluster-acceptor function (namespace, RBAC, lease, condition), certificate from the hub's CA.
async function joinedCluster(o: { leaseDurationSeconds?: number; certNotAfter?: Date } = {}): Promise<Joined> {
  const s = suffix();
  const c: Joined = {
    name: `hb-${s}`,
    agent: "agent1",
    secrets: { clusterName: `hb-${s}`, agentNamespace: AgentNamespaceDefault, bootstrapSecret: `bootstrap-${s}`, hubSecret: `hub-kubeconfig-${s}` },
  };
  await createCluster(c, o.leaseDurationSeconds ?? 60);
  const bootstrap = buildKubeconfig({ server: hubCluster.url, caPem: hubCluster.caPem, clusterName: "hub", credentials: { kind: "token", token: "bootstrap.unused" } });
  const cert = await agentCertificate(c, o.certNotAfter);
  await spokeAdmin.create(SecretResource, { metadata: { name: c.secrets.bootstrapSecret, namespace: c.secrets.agentNamespace }, data: encode({ [HubSecretKey.Kubeconfig]: bootstrap }) });
  await spokeAdmin.create(SecretResource, {
    metadata: { name: c.secrets.hubSecret, namespace: c.secrets.agentNamespace },
    type: "Opaque",
    data: encode({
      [HubSecretKey.Kubeconfig]: hubKubeconfig(hubEndpoint(bootstrap)),
      [HubSecretKey.TlsCert]: cert.certPem,
      [HubSecretKey.TlsKey]: cert.keyPem,
      [HubSecretKey.ClusterName]: c.name,
      [HubSecretKey.AgentName]: c.agent,
    }),
  });
  return c;
}

async function createCluster(c: Joined, leaseDurationSeconds: number): Promise<void> {
  await hubAdmin.create(ManagedClusterResource, { metadata: { name: c.name }, spec: { hubAcceptsClient: true, leaseDurationSeconds } });
  await accept(c);
}

// The acceptor's reconcile, retried as its event source would retry a 503 (a fresh API server answers
// 429 while a CRD's storage initialises).
const accept = (c: Joined) => eventually(() => reconcileAsRelay(clusterAcceptorModule.reconcile, acceptorIo, { cluster: "hub", name: c.name }));

const lease = (c: Joined) => hubAdmin.get<Lease>(LeaseResource, ManagedClusterLeaseName, c.name);
const managedCluster = async (c: Joined) => (await hubAdmin.get<ManagedCluster>(ManagedClusterResource, c.name))!;

// Waits that never end on their own: every beat after the first is started by wake().
function heldWaits(): { wait: Wait; asked: number[] } {
  const asked: number[] = [];
  const wait: Wait = (ms, signal) => {
    asked.push(ms);
    return new Promise((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
  };
  return { wait, asked };
}

async function heartbeat(c: Joined, o: Partial<HeartbeatOptions> & { clock: Clock }): Promise<Heartbeat> {
  const hb = await startHeartbeat({ spoke: spokeReader, secrets: c.secrets, log: jsonLog("heartbeat", "quiet"), random: () => 0.5, wait: heldWaits().wait, ...o });
  running.add(hb);
  return hb;
}

async function stopped(hb: Heartbeat): Promise<void> {
  await hb.stop();
  running.delete(hb);
}

describe("the schedule", () => {
  it.each([
    { name: "a lease of 60 s waits 60 s to 75 s", seconds: 60, random: [0, 0.999_999], between: [60_000, 75_000] },
    { name: "a lease of 0 s means OCM's 60 s", seconds: 0, random: [0, 0.999_999], between: [60_000, 75_000] },
    { name: "a lease of 1 s waits 1 s to 1.25 s", seconds: 1, random: [0, 0.999_999], between: [1_000, 1_250] },
  ])("$name", ({ seconds, random, between }) => {
    const d = leaseDurationMs({ spec: { leaseDurationSeconds: seconds } } as ManagedCluster);
    for (const r of random) {
      const p = jitteredPeriodMs(d, () => r);
      expect(p).toBeGreaterThanOrEqual(between[0]!);
      expect(p).toBeLessThanOrEqual(between[1]!);
    }
  });

  it("backs off 1 s, 2 s, 4 s … and never longer than the lease", () => {
    expect([1, 2, 3, 4, 5, 6, 7, 8].map((n) => retryDelayMs(n, 60_000))).toEqual([1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000]);
    expect([1, 2, 3].map((n) => retryDelayMs(n, 2_000))).toEqual([1_000, 2_000, 2_000]);
  });
});

describe("renewing", () => {
  const rows: { name: string; given: (c: Joined) => Promise<void>; renews: boolean; reason?: RegExp; holder?: string }[] = [
    { name: "renews the lease of an accepted cluster", given: async () => {}, renews: true, holder: ManagedClusterLeaseName },
    {
      // The sidecar writes on top of the lease it last wrote; the changed resourceVersion sends it back to a read.
      name: "renews on top of someone else's change to the lease without undoing it",
      given: async (c) => {
        await hubAdmin.patch(LeaseResource, ManagedClusterLeaseName, { spec: { holderIdentity: "someone-else" } }, { namespace: c.name });
      },
      renews: true,
      holder: "someone-else",
    },
    {
      name: "does not renew while HubAcceptedManagedCluster is not True, even where RBAC would allow it",
      given: async (c) => {
        const mc = await managedCluster(c);
        const conditions = setCondition(mc.status?.conditions, { type: ManagedClusterConditionType.HubAccepted, status: "False", reason: "HubClusterAdminDenied", message: "Denied by hub cluster admin" }, new Date());
        await hubAdmin.patch(ManagedClusterResource, c.name, { status: { conditions } }, { subresource: "status" });
      },
      renews: false,
      reason: /not accepted/,
    },
    {
      name: "does not renew a cluster the hub admin denied",
      given: async (c) => {
        await hubAdmin.patch(ManagedClusterResource, c.name, { spec: { hubAcceptsClient: false } });
        await accept(c);
      },
      renews: false,
      reason: /not accepted/,
    },
    {
      name: "does not create a missing lease: the hub creates it",
      given: async (c) => {
        await hubAdmin.delete(LeaseResource, ManagedClusterLeaseName, c.name);
      },
      renews: false,
      reason: /does not exist/,
    },
  ];

  it.each(rows)("$name", async ({ given, renews, reason, holder }) => {
    const c = await joinedCluster();
    const clock = manualClock();
    const hb = await heartbeat(c, { clock });
    try {
      await hb.wake();
      await given(c);
      const before = (await lease(c))?.spec?.renewTime;
      clock.advance(10_000);
      const s = await hb.wake();
      const after = await lease(c);
      if (renews) {
        expect(s.last).toEqual({ kind: "renewed", renewTime: microTime(clock.now()) });
        expect(after?.spec?.renewTime).toBe(microTime(clock.now()));
        expect(after?.spec?.holderIdentity).toBe(holder); // renewTime is all the sidecar changes
      } else {
        expect(s.last).toMatchObject({ kind: "skipped", reason: expect.stringMatching(reason!) });
        expect(after?.spec?.renewTime).toBe(before);
      }
    } finally {
      await stopped(hb);
    }
  });
});

describe("the lease duration", () => {
  let c: Joined;
  let hb: Heartbeat;
  let asked: number[];
  beforeAll(async () => {
    c = await joinedCluster({ leaseDurationSeconds: 60 });
    const held = heldWaits();
    asked = held.asked;
    hb = await heartbeat(c, { clock: manualClock(), wait: held.wait });
  });
  afterAll(() => stopped(hb));

  // random() is 0.5, so every wait is 1.125 × the duration.
  it.each([
    { name: "a shorter duration takes effect on the next period", seconds: 5, waitMs: 5_625 },
    { name: "a longer one too", seconds: 120, waitMs: 135_000 },
    { name: "0 means OCM's default of 60 s", seconds: 0, waitMs: 67_500 },
    { name: "1 s, as OCM's own lease tests use", seconds: 1, waitMs: 1_125 },
  ])("$name", async ({ seconds, waitMs }) => {
    await hubAdmin.patch(ManagedClusterResource, c.name, { spec: { leaseDurationSeconds: seconds } });
    const s = await hb.wake();
    expect(s.last?.kind).toBe("renewed");
    expect(s.leaseDurationMs).toBe((seconds || 60) * 1_000);
    expect(s.nextWaitMs).toBe(waitMs);
    expect(asked.at(-1)).toBe(waitMs);
  });
});

describe("credentials", () => {
  it("picks up a rotated certificate without a restart, and keeps renewing once the old one has expired", async () => {
    // The first certificate expires in a few seconds; renewals after the hub rejects it can only be
    // made with the second.
    const c = await joinedCluster({ certNotAfter: new Date(Math.ceil(Date.now() / 1_000) * 1_000 + 4_000) });
    const first = (await spokeAdmin.get<Secret>(SecretResource, c.secrets.hubSecret, c.secrets.agentNamespace))!;
    const hb = await heartbeat(c, { clock: systemClock });
    try {
      expect((await hb.wake()).last?.kind).toBe("renewed");
      const rotated = await agentCertificate(c);
      await writeCertificate(c, rotated);

      const oldClient = KubeClient.fromKubeconfig(
        buildKubeconfig({
          server: hubCluster.url,
          caPem: hubCluster.caPem,
          credentials: { kind: "certificate", certPem: Buffer.from(first.data![HubSecretKey.TlsCert]!, "base64").toString(), keyPem: Buffer.from(first.data![HubSecretKey.TlsKey]!, "base64").toString() },
        }),
      );
      try {
        await eventually(async () => {
          const refused = await oldClient.get(ManagedClusterResource, c.name).then(() => undefined, (e: unknown) => e);
          expect([401, 403]).toContain((refused as KubeError | undefined)?.code);
        }, { timeoutMs: 15_000, intervalMs: 250 });
      } finally {
        oldClient.close();
      }
      const s = await hb.wake();
      expect(s.last?.kind).toBe("renewed");
      expect(s.identity).toBe(agentUser(c.name, c.agent));
      expect((await lease(c))?.spec?.renewTime).toBe(s.lastRenewTime);
    } finally {
      await stopped(hb);
    }
  });

  it.each([
    { name: "/healthz answers 200 ok while the certificate is valid", advanceMs: 0, code: 200, body: "ok", renews: true },
    { name: "/healthz answers 500 with OCM's message once the certificate has expired, and renewals stop", advanceMs: 2 * 3_600_000, code: 500, body: RebootstrapRequiredMessage, renews: false },
  ])("$name", async ({ advanceMs, code, body, renews }) => {
    const c = await joinedCluster({ certNotAfter: new Date(Date.now() + 3_600_000) });
    const clock = manualClock();
    const hb = await heartbeat(c, { clock, health: { port: 0 } });
    try {
      await hb.wake();
      clock.advance(advanceMs);
      const res = await fetch(`${hb.healthUrl}/healthz`);
      expect(res.status).toBe(code);
      expect(await res.text()).toBe(body);
      const s = await hb.wake();
      expect(s.last?.kind).toBe(renews ? "renewed" : "skipped");
      if (!renews) expect(s.last).toMatchObject({ reason: expect.stringContaining("the client certificate has expired") });
    } finally {
      await stopped(hb);
    }
    await expect(fetch(`${hb.healthUrl}/healthz`)).rejects.toThrow(); // stop() closed the endpoint
  });

  it("/metrics on the health endpoint counts each beat by cluster and result, and the lease renewals' requests to the hub by method and code", async () => {
    const c = await joinedCluster();
    const hb = await heartbeat(c, { clock: manualClock(), health: { port: 0 } });
    // One sample line of the Prometheus text format, its labels in the order the metric declares them.
    const sample = (text: string, name: string, labels: [string, string][]) => {
      const line = `${name}{${labels.map(([k, v]) => `${k}="${v}"`).join(",")}} `;
      const found = text.split("\n").filter((l) => l.startsWith(line));
      expect(found.length).toBeLessThanOrEqual(1);
      return found.length ? Number(found[0]!.slice(line.length)) : 0;
    };
    const scrape = async () => {
      const res = await fetch(`${hb.healthUrl}/metrics`);
      expect([res.status, res.headers.get("content-type")]).toEqual([200, "text/plain; version=0.0.4; charset=utf-8"]);
      return res.text();
    };
    try {
      const first = await hb.wake();
      expect(first.last?.kind).toBe("renewed");
      const hubHost = new URL(hubCluster.url).host;
      const puts = (text: string) => sample(text, "rest_client_requests_total", [["code", "200"], ["method", "PUT"], ["host", hubHost]]);
      const before = await scrape();
      expect(before).toContain("# TYPE ocmf_heartbeat_beats_total counter\n");
      expect(sample(before, "ocmf_heartbeat_beats_total", [["cluster", c.name], ["result", "renewed"]])).toBe(first.renewals);
      await hb.wake();
      const last = await hb.wake();
      expect(last.renewals).toBe(first.renewals + 2);
      const after = await scrape();
      expect(sample(after, "ocmf_heartbeat_beats_total", [["cluster", c.name], ["result", "renewed"]])).toBe(last.renewals);
      expect(sample(after, "ocmf_heartbeat_beats_total", [["cluster", c.name], ["result", "unreachable"]])).toBe(0);
      // each renewal is one PUT of the lease, answered 200
      expect(puts(after) - puts(before)).toBe(2);
    } finally {
      await stopped(hb);
    }
  });
});

// An HTTP CONNECT proxy in the test process: it counts the tunnels it opens and where they lead.
async function startConnectProxy(): Promise<{ url: string; tunnels: string[]; close(): Promise<void> }> {
  const tunnels: string[] = [];
  const sockets = new Set<Socket>();
  const server = createHttpServer((_req, res) => res.writeHead(405).end());
  server.on("connect", (req: { url?: string }, client: Socket, head: Buffer) => {
    const target = req.url ?? "";
    tunnels.push(target);
    const [host, port] = [target.slice(0, target.lastIndexOf(":")), Number(target.slice(target.lastIndexOf(":") + 1))];
    const upstream = connect(port, host, () => {
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      upstream.write(head);
      upstream.pipe(client).pipe(upstream);
    });
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("error", () => s.destroy());
      s.on("close", () => {
        sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    tunnels,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

// A loopback address nothing listens on any more: connections to it are refused.
async function closedPortURL(): Promise<string> {
  const server = createTcpServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `http://127.0.0.1:${port}`;
}

describe("agent settings", () => {
  it("renews through the proxy the active settings name, switches without a restart, and stops renewing when the proxy is gone", async () => {
    await withoutAgentConfig(spokeAdmin);
    const c = await joinedCluster();
    const clock = manualClock();
    const proxy = await startConnectProxy();
    const hb = await heartbeat(c, { clock });
    const renewed = async () => {
      clock.advance(10_000);
      const s = await hb.wake();
      expect(s.last).toEqual({ kind: "renewed", renewTime: microTime(clock.now()) });
      expect((await lease(c))?.spec?.renewTime).toBe(microTime(clock.now()));
      return s;
    };
    try {
      // install-time: straight to the hub
      expect(await renewed()).toMatchObject({ settings: { hash: InstallTimeHash }, proxyURL: "" });
      expect(proxy.tunnels).toEqual([]);

      const viaProxy = await activate(spokeAdmin, { heartbeat: { proxyURL: proxy.url } });
      expect(await renewed()).toMatchObject({ settings: { hash: viaProxy, proxyURL: proxy.url }, proxyURL: proxy.url });
      const hubAddress = new URL(hubCluster.url).host;
      expect(proxy.tunnels.length).toBeGreaterThan(0);
      const afterOne = proxy.tunnels.length;
      await renewed();
      expect(proxy.tunnels.length).toBeGreaterThan(afterOne); // every renewal goes through it
      expect(new Set(proxy.tunnels)).toEqual(new Set([hubAddress]));

      // a proxy nobody listens on: renewals stop, and the sidecar backs off as for any unreachable hub
      const closed = await closedPortURL();
      const broken = await activate(spokeAdmin, { heartbeat: { proxyURL: closed } });
      const before = (await lease(c))?.spec?.renewTime;
      clock.advance(10_000);
      const failing = await hb.wake();
      expect(failing).toMatchObject({ last: { kind: "unreachable", reason: expect.stringMatching(/^hub: .*ECONNREFUSED/) }, settings: { hash: broken, proxyURL: closed }, failuresInARow: 1 });
      expect(failing.nextWaitMs).toBe(1_000);
      expect((await lease(c))?.spec?.renewTime).toBe(before);

      // "" is no proxy at all, whatever the kubeconfig says
      const tunnels = proxy.tunnels.length;
      const direct = await activate(spokeAdmin, { heartbeat: { proxyURL: "" } });
      expect(await renewed()).toMatchObject({ settings: { hash: direct, proxyURL: "" }, proxyURL: "", failuresInARow: 0 });
      expect(proxy.tunnels.length).toBe(tunnels);
    } finally {
      await stopped(hb);
      await proxy.close();
      await withoutAgentConfig(spokeAdmin);
    }
  });

  it("a relay process keeping a heartbeat whose checkpoint names a proxy URL with undecodable credentials (http://%zz@127.0.0.1:9) stays alive, says why it ignores it, and renews straight to the hub (issue 23)", async () => {
    await withoutAgentConfig(spokeAdmin);
    const c = await joinedCluster({ leaseDurationSeconds: 1 });
    // As an agent-config function older than the schema's bounds would have written it.
    await activate(spokeAdmin, { heartbeat: { proxyURL: "http://%zz@127.0.0.1:9" } });
    const dir = mkdtempSync(join(tmpdir(), "heartbeat-proxy-"));
    writeFileSync(join(dir, "spoke.kubeconfig"), await identityFor(local.get("spoke"), "heartbeat"), { mode: 0o600 });
    // the relay process with only its heartbeat setting, as a spoke's relay runs it beside its watches
    const config = {
      clusters: { spoke: { kubeconfigFile: join(dir, "spoke.kubeconfig") } },
      heartbeat: { cluster: "spoke", clusterName: c.name, agentNamespace: c.secrets.agentNamespace, bootstrapSecret: c.secrets.bootstrapSecret, hubSecret: c.secrets.hubSecret, health: { port: 0 } },
    };
    const child = spawn(process.execPath, [join(import.meta.dirname, "..", "components", "relay", "main.ts")], {
      env: { ...process.env, OCM_RELAY_CONFIG: JSON.stringify(config) },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    try {
      // Lease renewals a second apart, each one a beat the process lived through.
      const renewTimes = new Set<string>();
      await eventually(
        async () => {
          expect(child.exitCode, stderr).toBeNull();
          const renewTime = (await lease(c))?.spec?.renewTime;
          if (renewTime) renewTimes.add(renewTime);
          expect(renewTimes.size).toBeGreaterThanOrEqual(4);
        },
        { timeoutMs: 30_000, intervalMs: 200 },
      );
      expect(child.exitCode, stderr).toBeNull();
      expect(stderr).toContain("active agent settings unreadable: running the install-time settings");
      expect(stderr).toContain("active.settings.heartbeat.proxyURL: must be an http, https or socks5 URL with well-formed % escapes");
      expect(stderr).not.toMatch(/Unhandled|URIError/);
      expect((await healthRecord(spokeAdmin, HealthKey.Heartbeat)).record).toMatchObject({ hash: InstallTimeHash, ok: true });
    } finally {
      if (child.exitCode === null) child.kill("SIGTERM");
      await exited;
      rmSync(dir, { recursive: true, force: true });
      await withoutAgentConfig(spokeAdmin);
    }
  });

  it("records the outcome of its renewals under each config only when the hash or the outcome changes", async () => {
    await withoutAgentConfig(spokeAdmin);
    const c = await joinedCluster();
    const clock = manualClock();
    const proxy = await startConnectProxy();
    let hb = await heartbeat(c, { clock });
    const beats = async (n: number) => {
      for (let i = 0; i < n; i++) {
        clock.advance(10_000);
        await hb.wake();
      }
    };
    try {
      await beats(1);
      const first = await healthRecord(spokeAdmin, HealthKey.Heartbeat);
      expect(first.record).toEqual({ hash: InstallTimeHash, ok: true, since: clock.now().toISOString() });
      await beats(3);
      expect(await healthRecord(spokeAdmin, HealthKey.Heartbeat)).toEqual(first); // same resourceVersion: nothing written

      const broken = await activate(spokeAdmin, { heartbeat: { proxyURL: await closedPortURL() } });
      await beats(1);
      const failing = await healthRecord(spokeAdmin, HealthKey.Heartbeat);
      expect(failing.record).toEqual({ hash: broken, ok: false, since: clock.now().toISOString(), error: expect.stringContaining("ECONNREFUSED") });
      expect(failing.resourceVersion).not.toBe(first.resourceVersion);
      await beats(3);
      expect(await healthRecord(spokeAdmin, HealthKey.Heartbeat)).toEqual(failing); // failing on: since stays the first failure

      const viaProxy = await activate(spokeAdmin, { heartbeat: { proxyURL: proxy.url } });
      await beats(1);
      const working = await healthRecord(spokeAdmin, HealthKey.Heartbeat);
      expect(working.record).toEqual({ hash: viaProxy, ok: true, since: clock.now().toISOString() });
      await beats(2);
      expect(await healthRecord(spokeAdmin, HealthKey.Heartbeat)).toEqual(working);

      // a restarted sidecar finds its record already says so, and leaves it
      await stopped(hb);
      hb = await heartbeat(c, { clock });
      await beats(2);
      expect(hb.status().last?.kind).toBe("renewed");
      expect(await healthRecord(spokeAdmin, HealthKey.Heartbeat)).toEqual(working);
    } finally {
      await stopped(hb);
      await proxy.close();
      await withoutAgentConfig(spokeAdmin);
    }
  });

  it("follows the log level of the active settings", async () => {
    await withoutAgentConfig(spokeAdmin);
    const c = await joinedCluster();
    const lines: { level: string; msg: string }[] = [];
    const log = jsonLog("heartbeat", (line) => lines.push(JSON.parse(line) as { level: string; msg: string }));
    const clock = manualClock();
    await activate(spokeAdmin, { logLevel: "warn" });
    const hb = await heartbeat(c, { clock, log });
    try {
      await hb.wake();
      expect(hb.status().last?.kind).toBe("renewed");
      expect(lines).toEqual([]); // no "hub credentials loaded", no "renewing the cluster lease"

      await activate(spokeAdmin, { logLevel: "debug" });
      for (let i = 0; i < 2; i++) {
        clock.advance(10_000);
        await hb.wake();
      }
      expect(lines.filter((l) => l.msg === "renewed").map((l) => l.level)).toEqual(["debug", "debug"]);
    } finally {
      await stopped(hb);
      await withoutAgentConfig(spokeAdmin);
    }
  });
});

describe("outages", () => {
  it("resumes renewing when its cluster is deleted and created again", async () => {
    const c = await joinedCluster();
    const clock = manualClock();
    const hb = await heartbeat(c, { clock });
    try {
      expect((await hb.wake()).last?.kind).toBe("renewed");
      await hubAdmin.delete(ManagedClusterResource, c.name);
      await accept(c); // releases its finalizer
      await eventually(async () => expect(await hubAdmin.get(ManagedClusterResource, c.name)).toBeUndefined());
      const before = (await lease(c))?.spec?.renewTime;

      clock.advance(10_000);
      const gone = await hb.wake();
      // Its RBAC went with it, so the hub answers 403 rather than 404; either way it keeps going.
      expect(gone.last?.kind).toBe("skipped");
      expect((await lease(c))?.spec?.renewTime).toBe(before);

      await createCluster(c, 60);
      clock.advance(10_000);
      const back = await hb.wake();
      expect(back.last).toEqual({ kind: "renewed", renewTime: microTime(clock.now()) });
      expect((await lease(c))?.spec?.renewTime).toBe(microTime(clock.now()));
    } finally {
      await stopped(hb);
    }
  });

  it("renews every lease on its own, backs off while the hub is down, and renews within one lease of its return", async () => {
    const seconds = 2;
    const c = await joinedCluster({ leaseDurationSeconds: seconds });
    const asked: number[] = [];
    const afterFailure: number[] = []; // the waits asked for while the last attempt had failed
    let failing = () => false;
    const wait: Wait = (ms, signal) => {
      asked.push(ms);
      if (failing()) afterFailure.push(ms);
      return realWait(ms, signal);
    };
    const hb = await heartbeat(c, { clock: systemClock, wait, random: Math.random });
    failing = () => hb.status().failuresInARow > 0;
    try {
      // Real time: three renewals a period apart.
      const seen = await eventually(() => {
        expect(hb.status().renewals).toBeGreaterThanOrEqual(3);
        return asked.slice(0, 2);
      }, { timeoutMs: 10_000 });
      for (const ms of seen) expect(ms).toBeGreaterThanOrEqual(seconds * 1_000);
      for (const ms of seen) expect(ms).toBeLessThan(seconds * 1_250);

      const outage = asked.length;
      await stopApiserver(hubCluster);
      await eventually(() => expect(hb.status().failuresInARow).toBeGreaterThanOrEqual(3), { timeoutMs: 15_000 });
      const firstRetry = asked.indexOf(1_000, outage);
      expect(asked.slice(firstRetry, firstRetry + 3)).toEqual([1_000, 2_000, 2_000]);
      await startApiserver(hubCluster);
      await eventually(() => expect(hb.status().last?.kind).toBe("renewed"), { timeoutMs: 10_000, intervalMs: 20 });
      // Within one lease of the hub's return: no wait the sidecar asked for after a failed attempt was
      // longer than a lease (the backoff is capped there), so its next attempt after the return is that soon.
      expect(Math.max(...afterFailure)).toBeLessThanOrEqual(seconds * 1_000);
      expect(afterFailure).toContain(seconds * 1_000); // control: the backoff did grow up to the cap
      expect(hb.status().failuresInARow).toBe(0);
      expect(hb.status().nextWaitMs).toBeGreaterThanOrEqual(seconds * 1_000); // a period again
      expect((await lease(c))?.spec?.renewTime).toBe(hb.status().lastRenewTime);
    } finally {
      await stopped(hb);
    }
  });
});
