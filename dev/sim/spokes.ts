// A simulator of many spoke agents against one hub, for the scale benchmarks (bench/scale.ts). Each
// simulated spoke is a real identity doing over the wire what OCM's registration agent does: it
// registers its ManagedCluster and a client CSR with the bootstrap token, waits for the certificate and
// for the hub's acceptance, reports Joined and Available with its capacity and version, and from then
// renews its cluster lease every period under its own certificate. Nothing else runs per spoke, so one
// process carries a thousand of them.
//
// Run as a child process: `node dev/sim/spokes.ts OPTIONS.json`. It writes one JSON line per joined spoke
// ({"joined": name, ...milestones}) and answers commands read as JSON lines on stdin:
//   {"renewSeconds": 10}   renew every 10 s from now on (each spoke at its own phase)
//   {"report": true}       → {"report": {renewals, conflicts, failures}} counted since the last report
import { generateKeyPairSync } from "node:crypto";
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { startReflector, type Reflector, type ReflectorLog } from "../../shared/kube/reflector.ts";
import { buildKubeconfig } from "../../shared/kube/kubeconfig.ts";
import { isAlreadyExists, isConflict, isNotFound } from "../../shared/kube/errors.ts";
import { CertificateSigningRequestResource, LeaseResource, KubeAPIServerClientSignerName } from "../../shared/api/kube.ts";
import { ClusterLabel, ManagedClusterConditionType, ManagedClusterLeaseName, ManagedClusterReason, ManagedClusterResource, type ManagedCluster } from "../../shared/api/cluster.ts";
import type { CertificateSigningRequest } from "../../shared/api/certificates.ts";
import { CsrUsages, JoinedCondition, ManagedClustersGroup, agentUser, clusterGroup } from "../../shared/api/registration.ts";
import { certificateRequest, generatedNameSuffix } from "../../shared/csr-flow.ts";
import { isTrue, setCondition } from "../../shared/conditions.ts";
import { microTime } from "../../shared/clock.ts";
import type { ApiResource } from "../../shared/api/meta.ts";
import type { Lease } from "../../shared/cluster-lease.ts";

export type SimOptions = {
  hubUrl: string;
  caPem: string;
  bootstrapKubeconfig: string; // one bootstrap token shared by every simulated spoke
  // One watch of CSRs and one of ManagedClusters for the whole simulator, in place of each agent's own
  // informers (a thousand informers would measure the simulator, not the hub).
  observerKubeconfig: string;
  names: string[];
  leaseDurationSeconds: number;
  renewSeconds: number;
};

// Milliseconds from the spoke's start to each step.
export type Milestones = { registered: number; certified: number; accepted: number; available: number };

type Spoke = { name: string; hub?: KubeClient; lease?: Lease; timer?: NodeJS.Timeout };

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

// The simulator's own failures (its reflectors') go to stderr as JSON lines: stdout carries its answers.
const stderrLog = (level: string) => (fields: object, msg: string) => void process.stderr.write(`${JSON.stringify({ level, msg, ...fields })}\n`);
const simLog: ReflectorLog = { info: stderrLog("info"), warn: stderrLog("warn"), error: stderrLog("error") };

// Calls back with every object of a kind as shared/kube/reflector.ts lists and watches it.
function follow(client: KubeClient, r: ApiResource, labelSelector: string | undefined, seen: (o: KubeObject) => void): Reflector<KubeObject> {
  return startReflector<KubeObject>({
    name: `sim ${r.plural}`,
    resource: r,
    labelSelector,
    client,
    timeoutSeconds: 120,
    backoff: { initialMs: 200, maxMs: 5_000 },
    log: simLog,
    onChange: (c) => {
      if (c.type !== "DELETED") seen(c.object);
    },
  });
}

export class SpokeSimulator {
  readonly counts = { renewals: 0, conflicts: 0, failures: 0 };
  private readonly o: SimOptions;
  private readonly bootstrap: KubeClient;
  private readonly observer: KubeClient;
  private readonly spokes = new Map<string, Spoke>();
  private readonly certificates = new Map<string, (certPem: string) => void>(); // CSR name → waiter
  private readonly acceptance = new Map<string, () => void>(); // cluster → waiter
  private readonly clusters = new Map<string, ManagedCluster>(); // the newest copy seen
  private renewSeconds: number;
  private stopped = false;
  private readonly watches: Reflector<KubeObject>[] = [];

  constructor(o: SimOptions) {
    this.o = o;
    this.renewSeconds = o.renewSeconds;
    this.bootstrap = KubeClient.fromKubeconfig(o.bootstrapKubeconfig);
    this.observer = KubeClient.fromKubeconfig(o.observerKubeconfig);
  }

  // Joins every spoke, calling back as each one is Available; resolves when all are.
  async run(joined: (name: string, m: Milestones) => void): Promise<void> {
    this.watches.push(
      follow(this.observer, CertificateSigningRequestResource, ClusterLabel.ClusterName, (o) => this.sawCsr(o as CertificateSigningRequest & KubeObject)),
      follow(this.observer, ManagedClusterResource, undefined, (o) => this.sawCluster(o as ManagedCluster & KubeObject)),
    );
    // every spoke registers at once, as a fleet does after a hub outage
    await Promise.all(this.o.names.map(async (name) => joined(name, await this.join(name))));
  }

  setRenewSeconds(seconds: number): void {
    this.renewSeconds = seconds;
    for (const s of this.spokes.values()) if (s.hub) this.schedule(s, Math.random() * seconds * 1_000);
  }

  report(): { renewals: number; conflicts: number; failures: number } {
    const r = { ...this.counts };
    this.counts.renewals = this.counts.conflicts = this.counts.failures = 0;
    return r;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all(this.watches.map((w) => w.stop()));
    for (const s of this.spokes.values()) {
      clearTimeout(s.timer);
      s.hub?.close();
    }
    this.bootstrap.close();
    this.observer.close();
  }

  private sawCsr(csr: CertificateSigningRequest & KubeObject) {
    const cert = csr.status?.certificate;
    const waiter = this.certificates.get(csr.metadata.name!);
    if (cert && waiter) waiter(Buffer.from(cert, "base64").toString());
  }

  private sawCluster(c: ManagedCluster & KubeObject) {
    const name = c.metadata.name!;
    this.clusters.set(name, c);
    if (isTrue(c.status?.conditions, ManagedClusterConditionType.HubAccepted)) this.acceptance.get(name)?.();
  }

  private async join(name: string): Promise<Milestones> {
    const t0 = performance.now();
    const since = () => performance.now() - t0;
    const spoke: Spoke = { name };
    this.spokes.set(name, spoke);
    const accepted = new Promise<void>((resolve) => this.acceptance.set(name, resolve));
    if (this.clusters.get(name) && isTrue(this.clusters.get(name)!.status?.conditions, ManagedClusterConditionType.HubAccepted)) this.acceptance.get(name)!();

    await this.retry(() =>
      this.bootstrap
        .create(ManagedClusterResource, {
          apiVersion: "cluster.open-cluster-management.io/v1",
          kind: "ManagedCluster",
          metadata: { name },
          spec: { hubAcceptsClient: false, leaseDurationSeconds: this.o.leaseDurationSeconds, managedClusterClientConfigs: [{ url: `https://${name}.sim.invalid:6443` }] },
        } as KubeObject)
        .catch((err) => {
          if (!isAlreadyExists(err)) throw err;
        }),
    );
    const registered = since();

    const keyPem = generateKeyPairSync("ec", { namedCurve: "prime256v1" }).privateKey.export({ type: "pkcs8", format: "pem" }) as string;
    const subject = { commonName: agentUser(name, "sim"), organizations: [clusterGroup(name), ManagedClustersGroup], organizationalUnits: [] };
    const csrName = `${name}-${generatedNameSuffix()}`;
    const issued = new Promise<string>((resolve) => this.certificates.set(csrName, resolve));
    const request = Buffer.from(await certificateRequest({ subject, keyPem })).toString("base64");
    await this.retry(() =>
      this.bootstrap.create(CertificateSigningRequestResource, {
        apiVersion: "certificates.k8s.io/v1",
        kind: "CertificateSigningRequest",
        metadata: { name: csrName, labels: { [ClusterLabel.ClusterName]: name } },
        spec: { request, signerName: KubeAPIServerClientSignerName, usages: [...CsrUsages] },
      } as KubeObject),
    );
    const certPem = await issued;
    this.certificates.delete(csrName);
    const certified = since();
    await accepted;
    this.acceptance.delete(name);
    const acceptedAt = since();

    spoke.hub = KubeClient.fromKubeconfig(
      buildKubeconfig({ server: this.o.hubUrl, caPem: this.o.caPem, clusterName: "hub", userName: name, credentials: { kind: "certificate", certPem, keyPem } }),
    );
    await this.reportStatus(spoke);
    const available = since();
    this.schedule(spoke, Math.random() * this.renewSeconds * 1_000);
    return { registered, certified, accepted: acceptedAt, available };
  }

  // Joined and Available, with capacity and version, as the agent's status controller reports them: a
  // merge patch on the newest copy seen, which its resourceVersion makes conditional.
  private async reportStatus(spoke: Spoke): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      let current = this.clusters.get(spoke.name);
      if (!current || attempt > 0) current = (await spoke.hub!.get<ManagedCluster & KubeObject>(ManagedClusterResource, spoke.name))!;
      const now = new Date();
      let conditions = setCondition(current.status?.conditions ?? [], JoinedCondition, now);
      conditions = setCondition(conditions, { type: ManagedClusterConditionType.Available, status: "True", reason: ManagedClusterReason.ManagedClusterAvailable, message: "Managed cluster is available" }, now);
      const resources = { cpu: "8", memory: "32Gi", pods: "220" };
      try {
        await spoke.hub!.patch(
          ManagedClusterResource,
          spoke.name,
          { metadata: { resourceVersion: current.metadata.resourceVersion }, status: { conditions, capacity: resources, allocatable: resources, version: { kubernetes: "v1.35.4" } } },
          { subresource: "status" },
        );
        return;
      } catch (err) {
        if (!isConflict(err) || attempt > 10) throw err;
      }
    }
  }

  private schedule(spoke: Spoke, delayMs: number) {
    clearTimeout(spoke.timer);
    if (this.stopped) return;
    spoke.timer = setTimeout(() => {
      this.renew(spoke).finally(() => this.schedule(spoke, this.renewSeconds * 1_000));
    }, delayMs);
  }

  // One PUT on the lease last written; a conflict or a missing copy costs a GET first.
  private async renew(spoke: Spoke): Promise<void> {
    try {
      spoke.lease ??= await spoke.hub!.get<Lease>(LeaseResource, ManagedClusterLeaseName, spoke.name);
      if (!spoke.lease) return; // the hub has not made it yet
      try {
        spoke.lease = await spoke.hub!.update<Lease>(LeaseResource, { ...spoke.lease, spec: { ...spoke.lease.spec, renewTime: microTime(new Date()) } });
      } catch (err) {
        if (!isConflict(err)) throw err;
        this.counts.conflicts++;
        const fresh = await spoke.hub!.get<Lease>(LeaseResource, ManagedClusterLeaseName, spoke.name);
        if (!fresh) return;
        spoke.lease = await spoke.hub!.update<Lease>(LeaseResource, { ...fresh, spec: { ...fresh.spec, renewTime: microTime(new Date()) } });
      }
      this.counts.renewals++;
    } catch (err) {
      if (isNotFound(err)) spoke.lease = undefined;
      this.counts.failures++;
    }
  }

  // Registration requests retried as the agent's controllers would, on anything but a stop.
  private async retry<T>(call: () => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await call();
      } catch (err) {
        if (this.stopped || attempt >= 20) throw err;
        await pause(Math.min(5_000, 100 * 2 ** attempt));
      }
    }
  }
}

if (import.meta.main) {
  const options = JSON.parse(readFileSync(process.argv[2]!, "utf8")) as SimOptions;
  const sim = new SpokeSimulator(options);
  const write = (o: unknown) => process.stdout.write(`${JSON.stringify(o)}\n`);
  createInterface({ input: process.stdin }).on("line", (line) => {
    const cmd = JSON.parse(line) as { renewSeconds?: number; report?: boolean };
    if (cmd.renewSeconds) sim.setRenewSeconds(cmd.renewSeconds);
    if (cmd.report) write({ report: sim.report() });
  });
  process.stdin.on("end", () => void sim.stop().then(() => process.exit(0)));
  process.on("SIGTERM", () => void sim.stop().then(() => process.exit(0)));
  await sim.run((name, m) => write({ joined: name, ...m }));
  write({ allJoined: true });
}
