// The heartbeat sidecar (OCM §5.2): the one long-lived loop in the project. Each period it reads the
// agent's hub credentials and its ManagedCluster, and renews managed-cluster-lease while the cluster is
// accepted; it backs off while the hub is unreachable and serves the health endpoint.
import { ManagedClusterConditionType, ManagedClusterResource, type ManagedCluster } from "../../shared/api/cluster.ts";
import { systemClock, type Clock } from "../../shared/clock.ts";
import { isTrue } from "../../shared/conditions.ts";
import type { Log } from "../../shared/harness.ts";
import type { AgentSecrets } from "../../shared/hub-credentials.ts";
import type { KubeClient } from "../../shared/kube/client.ts";
import { classifyError } from "../../shared/kube/errors.ts";
import { RebootstrapRequiredMessage, serveHealth, type Health, type HealthEndpoint } from "./health.ts";
import { hubConnections, type ConnectionState } from "./hub-connection.ts";
import { renewLease, type Lease } from "./lease.ts";
import { jitteredPeriodMs, leaseDurationMs, NotReadyRecheckMs, realWait, retryDelayMs, type Wait } from "./schedule.ts";

export type HeartbeatOptions = {
  spoke: KubeClient; // the management cluster, where the agent's secrets live; the caller owns it
  secrets: AgentSecrets;
  log: Log;
  clock?: Clock;
  wait?: Wait;
  random?: () => number;
  health?: { port: number; host?: string }; // no endpoint when absent
  onBeat?: (status: HeartbeatStatus) => void;
};

// What one period did. "unreachable" is the only outcome retried before the period is over.
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
};

export type Heartbeat = {
  status(): HeartbeatStatus;
  health(): Health;
  // Cuts the current wait short; resolves once a beat that started after the call has finished.
  wake(): Promise<HeartbeatStatus>;
  stop(): Promise<void>;
  healthUrl?: string;
};

export async function startHeartbeat(o: HeartbeatOptions): Promise<Heartbeat> {
  const clock = o.clock ?? systemClock;
  const wait = o.wait ?? realWait;
  const random = o.random ?? Math.random;
  const cluster = o.secrets.clusterName;
  const connections = hubConnections(o.spoke, o.secrets);
  const endpoint: HealthEndpoint | undefined = o.health ? await serveHealth(o.health, health) : undefined;

  const s: HeartbeatStatus = { running: true, beats: 0, renewals: 0, failuresInARow: 0, leaseDurationMs: leaseDurationMs(undefined) };
  let connection: ConnectionState | undefined;
  let lease: Lease | undefined; // as last written: the next renewal writes on top of it
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

  async function beat(): Promise<Beat> {
    let where = "management cluster";
    try {
      const previous = connection?.ok ? connection.connection : undefined;
      connection = await connections.current(clock.now());
      where = "hub";
      if (!connection.ok) return { kind: "skipped", reason: `no usable hub credentials: ${connection.reason}` };
      const { hub, identity, notAfter } = connection.connection;
      if (connection.connection !== previous) {
        o.log.info({ cluster, identity, notAfter }, "hub credentials loaded");
        lease = undefined;
      }
      const mc = await hub.get<ManagedCluster>(ManagedClusterResource, cluster);
      // A cluster deleted while the sidecar runs may come back: keep looking every period.
      if (!mc) return { kind: "skipped", reason: `managed cluster ${cluster} not found` };
      s.leaseDurationMs = leaseDurationMs(mc);
      if (!isTrue(mc.status?.conditions, ManagedClusterConditionType.HubAccepted)) return { kind: "skipped", reason: "not accepted by the hub" };
      const renewal = await renewLease({ hub, cluster, now: clock.now(), known: lease });
      if (!renewal.renewed) return { kind: "skipped", reason: renewal.reason };
      lease = renewal.lease;
      return { kind: "renewed", renewTime: renewal.renewTime };
    } catch (err) {
      lease = undefined; // whatever happened, the next renewal starts from a fresh read
      const reason = `${where}: ${err instanceof Error ? err.message : String(err)}`;
      const kind = classifyError(err);
      if (kind === "unknown") o.log.error({ cluster, error: reason }, "unexpected error in a heartbeat");
      return kind === "transient" ? { kind: "unreachable", reason } : { kind: "skipped", reason };
    }
  }

  // The next wait: a jittered period after anything the hub answered; backoff while it does not.
  function record(b: Beat): number {
    const before = s.last;
    s.beats++;
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
    if (b.kind === "unreachable") o.log.warn({ cluster, reason: b.reason, retryInMs: s.nextWaitMs }, "unreachable: backing off");
    else if (b.kind !== before?.kind || ("reason" in b && "reason" in before && b.reason !== before.reason)) {
      if (b.kind === "renewed") o.log.info({ cluster, leaseDurationMs: s.leaseDurationMs }, "renewing the cluster lease");
      else o.log.info({ cluster, reason: b.reason }, "skipped: not renewing this period");
    }
    return s.nextWaitMs;
  }

  const loop = (async () => {
    while (!stopped) {
      const waiting = wakers;
      wakers = [];
      again = false;
      const waitMs = record(await beat());
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
        if (waking) waking.abort();
        else again = true;
      });
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      waking?.abort();
      connections.close(); // ends a request in flight to the hub
      await loop;
      connections.close();
      s.running = false;
      s.nextWaitMs = undefined;
      for (const w of wakers.splice(0)) w(status());
      await endpoint?.close();
    },
  };
}
