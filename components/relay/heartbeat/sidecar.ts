// The heartbeat sidecar (OCM §5.2): the one long-lived loop in the project. It keeps the agent's settings
// (docs/agent-config.md), its hub credentials and its ManagedCluster by watches, and each period renews
// managed-cluster-lease while the cluster is accepted, through the proxy the settings name: one request
// per period, as OCM's lease updater makes. It backs off while the hub is unreachable, records when
// renewals start or stop succeeding under a config, and serves the health endpoint.
import { ManagedClusterConditionType } from "../../../shared/api/cluster-constants.ts";
import { systemClock, type Clock } from "../../../shared/clock.ts";
import { isTrue } from "../../../shared/conditions.ts";
import { leaseDurationMs } from "../../../shared/cluster-lease.ts";
import { InstallTimeHash } from "../../../shared/checkpoint.ts";
import type { AgentSettings } from "../../../shared/api/agent-settings.ts";
import type { Log } from "../../../shared/harness.ts";
import type { AgentSecrets } from "../../../shared/hub-credentials.ts";
import type { KubeClient } from "../../../shared/kube/client.ts";
import { classifyError } from "../../../shared/kube/errors.ts";
import { metrics } from "../../../shared/metrics.ts";
import { RebootstrapRequiredMessage, serveHealth, type Health, type HealthEndpoint } from "./health.ts";
import { healthRecorder } from "./health-record.ts";
import { hubConnections, type ConnectionState } from "./hub-connection.ts";
import { renewLease, type Lease } from "./lease.ts";
import { jitteredPeriodMs, NotReadyRecheckMs, realWait, retryDelayMs, type Wait } from "./schedule.ts";
import { InstallTimeSettings, levelledLog, settingsReader, sidecarSettings, type SidecarSettings } from "./settings.ts";

export type HeartbeatOptions = {
  spoke: KubeClient; // the management cluster, where the agent's secrets live; the caller owns it
  secrets: AgentSecrets;
  log: Log;
  clock?: Clock;
  wait?: Wait;
  random?: () => number;
  health?: { port: number; host?: string }; // no endpoint when absent
  installTime?: AgentSettings; // what an absent setting means; default: the kubeconfig's proxy, log level info
  onBeat?: (status: HeartbeatStatus) => void;
};

// What one period did. "unreachable" is the only outcome retried before the period is over.
// Each beat by what came of it (docs/metrics.md); the hub calls are counted by the Kubernetes client.
const beats = metrics.counter("ocmf_heartbeat_beats_total", "Heartbeats by cluster and result (renewed, skipped, unreachable)", ["cluster", "result"]);

export type Beat =
  | { kind: "renewed"; renewTime: string }
  | { kind: "skipped"; reason: string }
  | { kind: "unreachable"; reason: string };

export type HeartbeatStatus = {
  running: boolean;
  beats: number;
  renewals: number;
  failuresInARow: number;
  last?: Beat;
  lastRenewTime?: string;
  leaseDurationMs: number; // from the cluster as last read; OCM's default until then
  nextWaitMs?: number;
  identity?: string; // the hub client certificate's common name, while there is a usable one
  settings: SidecarSettings; // the agent settings of the last beat (the install-time ones until read)
  proxyURL?: string; // the proxy the last renewal went through ("" for none), while there is a connection
};

export type Heartbeat = {
  status(): HeartbeatStatus;
  health(): Health;
  // Cuts the current wait short; resolves once a beat that started after the call has finished. That
  // beat reads settings, secrets and cluster afresh, so a caller that has just changed one sees it used.
  wake(): Promise<HeartbeatStatus>;
  stop(): Promise<void>;
  healthUrl?: string;
};

export async function startHeartbeat(o: HeartbeatOptions): Promise<Heartbeat> {
  const clock = o.clock ?? systemClock;
  const wait = o.wait ?? realWait;
  const random = o.random ?? Math.random;
  const cluster = o.secrets.clusterName;
  const installTime = o.installTime ?? InstallTimeSettings;
  const s: HeartbeatStatus = { running: true, beats: 0, renewals: 0, failuresInARow: 0, leaseDurationMs: leaseDurationMs(undefined), settings: sidecarSettings(InstallTimeHash, installTime) };
  const log = levelledLog(o.log, () => s.settings.logLevel);
  const connections = hubConnections(o.spoke, o.secrets, log);
  const settings = settingsReader({ spoke: o.spoke, namespace: o.secrets.agentNamespace, installTime, log });
  const healthRecord = healthRecorder({ spoke: o.spoke, namespace: o.secrets.agentNamespace, log });
  const endpoint: HealthEndpoint | undefined = o.health ? await serveHealth(o.health, health) : undefined;

  let connection: ConnectionState | undefined;
  let lease: Lease | undefined; // as last written: the next renewal writes on top of it
  // The next beat reads with GETs, not from the watches: after wake(), or after a beat that failed (a
  // watch may be what is stale, e.g. the hub refusing a certificate the watch has not yet seen replaced).
  let fresh = true;
  let stopped = false;
  let waking: AbortController | undefined;
  let wakers: ((s: HeartbeatStatus) => void)[] = [];
  let again = false; // a wake() arrived while a beat was running: run another at once
  const status = (): HeartbeatStatus => ({ ...s });

  function health(): Health {
    const c = connection;
    const expired = c && (c.ok ? clock.now().getTime() >= c.connection.notAfter.getTime() : c.certificateExpired);
    return expired ? { ok: false, message: RebootstrapRequiredMessage } : { ok: true };
  }

  // `renewal`: whether talking to the hub worked, for the health record; absent when nothing was tried
  // there (no credentials yet, not accepted, no lease) or the management cluster failed: neither says
  // anything about the config.
  async function beat(): Promise<{ beat: Beat; renewal?: { ok: boolean; error?: string } }> {
    let where = "management cluster";
    const readFresh = fresh;
    fresh = false;
    try {
      s.settings = await settings.read(readFresh);
      const previous = connection?.ok ? connection.connection : undefined;
      connection = await connections.current(clock.now(), s.settings.proxyURL, readFresh);
      where = "hub";
      if (!connection.ok) return { beat: { kind: "skipped", reason: `no usable hub credentials: ${connection.reason}` } };
      const { hub, cluster: watchedCluster, identity, notAfter, proxyURL } = connection.connection;
      if (connection.connection !== previous) {
        log.info({ cluster, identity, notAfter, proxyURL, hash: s.settings.hash }, "hub credentials loaded");
        lease = undefined;
      }
      const mc = await watchedCluster.get({ fresh: readFresh });
      // A cluster deleted while the sidecar runs may come back: keep looking every period.
      if (!mc) return { beat: { kind: "skipped", reason: `managed cluster ${cluster} not found` } };
      s.leaseDurationMs = leaseDurationMs(mc);
      if (!isTrue(mc.status?.conditions, ManagedClusterConditionType.HubAccepted)) return { beat: { kind: "skipped", reason: "not accepted by the hub" } };
      const renewal = await renewLease({ hub, cluster, now: clock.now(), known: lease });
      if (!renewal.renewed) return { beat: { kind: "skipped", reason: renewal.reason } };
      lease = renewal.lease;
      return { beat: { kind: "renewed", renewTime: renewal.renewTime }, renewal: { ok: true } };
    } catch (err) {
      lease = undefined; // whatever happened, the next renewal starts from a fresh read
      fresh = true;
      const reason = `${where}: ${err instanceof Error ? err.message : String(err)}`;
      const kind = classifyError(err);
      if (kind === "unknown") log.error({ cluster, error: reason }, "unexpected error in a heartbeat");
      const beat: Beat = kind === "transient" ? { kind: "unreachable", reason } : { kind: "skipped", reason };
      return where === "hub" ? { beat, renewal: { ok: false, error: reason } } : { beat };
    }
  }

  // The next wait: a jittered period after anything the hub answered; backoff while it does not.
  function record(b: Beat): number {
    const before = s.last;
    s.beats++;
    beats.inc([cluster, b.kind]);
    s.last = b;
    s.identity = connection?.ok ? connection.connection.identity : undefined;
    if (b.kind === "renewed") {
      s.renewals++;
      s.lastRenewTime = b.renewTime;
    }
    s.failuresInARow = b.kind === "unreachable" ? s.failuresInARow + 1 : 0;
    const period = jitteredPeriodMs(s.leaseDurationMs, random);
    s.nextWaitMs = b.kind === "unreachable" ? retryDelayMs(s.failuresInARow, s.leaseDurationMs) : b.kind === "skipped" ? Math.min(period, NotReadyRecheckMs) : period;
    // Log what changed, not every period.
    if (b.kind === "unreachable") log.warn({ cluster, reason: b.reason, retryInMs: s.nextWaitMs }, "unreachable: backing off");
    else if (b.kind !== before?.kind || ("reason" in b && "reason" in before && b.reason !== before.reason)) {
      if (b.kind === "renewed") log.info({ cluster, leaseDurationMs: s.leaseDurationMs }, "renewing the cluster lease");
      else log.info({ cluster, reason: b.reason }, "skipped: not renewing this period");
    } else if (b.kind === "renewed") log.debug({ cluster, renewTime: b.renewTime, nextWaitMs: s.nextWaitMs }, "renewed");
    return s.nextWaitMs;
  }

  const loop = (async () => {
    while (!stopped) {
      const waiting = wakers;
      wakers = [];
      again = false;
      const { beat: b, renewal } = await beat();
      const waitMs = record(b);
      s.proxyURL = connection?.ok ? connection.connection.proxyURL : undefined;
      // Before anyone waiting on this beat hears of it, so what they read next includes the record.
      if (renewal) await healthRecord.observe({ hash: s.settings.hash, ...renewal }, clock.now());
      o.onBeat?.(status());
      for (const w of waiting) w(status());
      if (stopped || again) continue;
      waking = new AbortController();
      await wait(waitMs, waking.signal);
      waking = undefined;
    }
  })();

  return {
    status,
    health,
    healthUrl: endpoint?.url,
    wake() {
      if (stopped) return Promise.resolve(status());
      return new Promise((resolve) => {
        wakers.push(resolve);
        fresh = true;
        if (waking) waking.abort();
        else again = true;
      });
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      waking?.abort();
      connections.close(); // ends the watches and a request in flight to the hub
      settings.close();
      await loop;
      connections.close();
      s.running = false;
      s.nextWaitMs = undefined;
      for (const w of wakers.splice(0)) w(status());
      await endpoint?.close();
    },
  };
}
