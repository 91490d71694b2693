// Real local Kubernetes clusters for tests and `npm start`: one etcd, and per cluster a
// kube-apiserver and kube-controller-manager on loopback with certificate authorities of its own.
import { mkdtempSync, mkdirSync, writeFileSync, readFileSync, readdirSync, renameSync, rmSync, existsSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { createServer } from "node:net";
import { request } from "node:https";
import { request as httpRequest } from "node:http";
import { randomBytes, createHash } from "node:crypto";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { parseAllDocuments } from "yaml";
import { createCertificateAuthority, issueCertificate, generateKeyPair, privateKeyToPem, publicKeyToPem, type CertificateAuthority } from "../../shared/pki.ts";
import { buildKubeconfig } from "../../shared/kube/kubeconfig.ts";
import { KubeClient, resourcePath, type KubeObject } from "../../shared/kube/client.ts";
import { KubeError } from "../../shared/kube/errors.ts";
import { CustomResourceDefinitionResource } from "../../shared/api/kube.ts";
import type { ApiResource } from "../../shared/api/meta.ts";
import { ManagedClusterResource, ManagedClusterSetBindingResource } from "../../shared/api/cluster.ts";
import { ManifestWorkResource } from "../../shared/api/work.ts";
import { cacheRoot, findBinaries, type Binaries } from "./binaries.ts";
import { exitedEarly, poller, startGuard, startProcess, stopProcess, type Managed } from "./processes.ts";

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

// Controllers a test cluster needs so it behaves like a real one: approved CSRs get signed,
// deleted namespaces empty and go, owned objects are collected.
export const DEFAULT_CONTROLLERS = ["csrsigning", "csrcleaner", "namespace", "garbagecollector"] as const;

export type StartOptions = {
  names: readonly string[];
  controllers?: readonly string[] | false; // false: no kube-controller-manager
  crds?: readonly object[] | false; // default: every CRD in manifests/crds
  // OCM's admission rules (manifests/hub/admission-policies.yaml), enforced before start returns.
  // Default: on whenever the OCM CRDs are installed; false opts out.
  admission?: boolean;
  apiserverFlags?: readonly string[]; // extra kube-apiserver flags, after ours (e.g. --enable-aggregator-routing=true)
  // For clusters with a node (dev/control-plane/node.ts): addresses pods reach the API server at, added
  // to its serving certificate, and the ServiceAccount admission plugin kept on so pods get tokens
  // (then run the serviceaccount-controller, or pods are refused for want of a default ServiceAccount).
  servingHosts?: readonly string[];
  serviceAccountAdmission?: boolean;
  log?: (line: string) => void;
};

export type User = { user: string; groups?: readonly string[]; notAfter?: Date };

export class LocalCluster {
  readonly name: string;
  readonly url: string;
  readonly dir: string;
  readonly servingCa: CertificateAuthority;
  readonly clientCa: CertificateAuthority;
  adminKubeconfig = "";
  apiserver?: Managed;
  controllerManager?: Managed;

  constructor(o: { name: string; port: number; dir: string; servingCa: CertificateAuthority; clientCa: CertificateAuthority }) {
    this.name = o.name;
    this.url = `https://127.0.0.1:${o.port}`;
    this.dir = o.dir;
    this.servingCa = o.servingCa;
    this.clientCa = o.clientCa;
  }

  get caPem(): string {
    return this.servingCa.certPem;
  }

  // A kubeconfig for any user and groups, with a client certificate from this cluster's client CA,
  // as envtest's AddUser does. Tests run functions under such identities, not system:masters.
  async kubeconfigFor(u: User): Promise<string> {
    const cert = await issueCertificate(this.clientCa, { subject: { commonName: u.user, organizations: u.groups }, usage: "client", notAfter: u.notAfter });
    return buildKubeconfig({
      server: this.url,
      caPem: this.caPem,
      clusterName: this.name,
      userName: u.user,
      credentials: { kind: "certificate", certPem: cert.certPem, keyPem: cert.keyPem },
    });
  }

  // client-node's config, for its typed APIs (dev and tests only: nothing that ships loads client-node).
  admin(): KubeConfig {
    const kc = new KubeConfig();
    kc.loadFromString(this.adminKubeconfig);
    return kc;
  }

  // A bootstrap token (kube-system/bootstrap-token-<id>) that authenticates as
  // system:bootstrap:<id> in system:bootstrappers plus the extra groups.
  async createBootstrapToken(extraGroups: readonly string[] = []): Promise<{ token: string; user: string; kubeconfig: string }> {
    const id = randomBytes(3).toString("hex");
    const secret = randomBytes(8).toString("hex");
    await this.admin()
      .makeApiClient(CoreV1Api)
      .createNamespacedSecret({
        namespace: "kube-system",
        body: {
          metadata: { name: `bootstrap-token-${id}` },
          type: "bootstrap.kubernetes.io/token",
          stringData: {
            "token-id": id,
            "token-secret": secret,
            "usage-bootstrap-authentication": "true",
            ...(extraGroups.length ? { "auth-extra-groups": extraGroups.join(",") } : {}),
          },
        },
      });
    const token = `${id}.${secret}`;
    const kubeconfig = buildKubeconfig({ server: this.url, caPem: this.caPem, clusterName: this.name, userName: `bootstrap-${id}`, credentials: { kind: "token", token } });
    // The API server's token authenticator reads the Secret from its informer: until that has it, the
    // token is 401 Unauthorized. A test that used it at once failed that way under load; hand it out
    // only once the server says who it is.
    const client = KubeClient.fromKubeconfig(kubeconfig);
    try {
      await poll(`bootstrap token ${id} authenticates on ${this.name}`, async () => {
        await client.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", { apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" });
        return true;
      }, 30_000);
    } finally {
      client.close();
    }
    return { token, user: `system:bootstrap:${id}`, kubeconfig };
  }
}

export type LocalClusters = {
  clusters: LocalCluster[];
  etcd: Managed;
  get(name: string): LocalCluster;
  stop(): Promise<void>;
  startupMs: number;
};

// A port no address of this machine listens on now: our servers listen on every interface, and on the
// node's machine other programs hold ports on addresses other than loopback.
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

// A control plane's parts start in a few seconds: looked at often.
const poll = poller({ firstMs: 20, maxMs: 250 });

// ca "self-signed": a loopback health endpoint whose serving certificate the process made itself.
function httpOk(url: string, ca?: string | "self-signed"): Promise<boolean> {
  const tls = ca === "self-signed" ? { rejectUnauthorized: false } : { ca };
  return new Promise((resolve) => {
    const req = (url.startsWith("https:") ? request : httpRequest)(url, { ...tls, timeout: 2_000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on("error", () => resolve(false));
    req.on("timeout", () => req.destroy());
    req.end();
  });
}

export function ocmCrds(): object[] {
  const dir = join(repoRoot, "manifests", "crds");
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => f.endsWith(".yaml"))
    .sort()
    .flatMap((f) => parseAllDocuments(readFileSync(join(dir, f), "utf8")).map((d) => d.toJS() as object));
}

type Crd = KubeObject & { status?: { conditions?: { type: string; status: string }[] } };

// Through our raw client: client-node's typed serializer drops the x-kubernetes-* schema keys.
async function installCrds(cluster: LocalCluster, crds: readonly object[]): Promise<void> {
  const client = KubeClient.fromKubeconfig(cluster.adminKubeconfig);
  try {
    await Promise.all(crds.map((body) => client.create<Crd>(CustomResourceDefinitionResource, body as Crd)));
  } finally {
    client.close();
  }
  await untilEstablished(cluster, crds);
}

async function untilEstablished(cluster: LocalCluster, crds: readonly object[]): Promise<void> {
  const client = KubeClient.fromKubeconfig(cluster.adminKubeconfig);
  try {
    for (const crd of crds as Crd[]) {
      const name = crd.metadata.name!;
      await poll(`CRD ${name} on ${cluster.name}`, async () => {
        const got = await client.get<Crd>(CustomResourceDefinitionResource, name);
        return got?.status?.conditions?.some((c) => c.type === "Established" && c.status === "True") ?? false;
      }, 30_000);
    }
  } finally {
    client.close();
  }
}

export function ocmAdmissionPolicies(): object[] {
  const text = readFileSync(join(repoRoot, "manifests", "hub", "admission-policies.yaml"), "utf8");
  return parseAllDocuments(text).map((d) => d.toJS() as object);
}

// A cluster's CRDs and admission policies, as one start's API server stored them in etcd, put under the
// next cluster's etcd prefix before its API server starts. The API server sleeps 2 s in every create
// of a custom resource whose CRD turned Established less than 2 s before (an HA safeguard in
// apiextensions-apiserver's handler); a seeded CRD was established long ago, and is not created again.
// Kept by what decides the stored bytes: the API server binary (path, size, time), the CRDs and the
// policies, if they go in.
// The first start of each such set stores them as usual and keeps what etcd then holds.
const seededKinds = ["apiextensions.k8s.io/customresourcedefinitions/", "validatingadmissionpolicies/", "validatingadmissionpolicybindings/"];
type Seed = { key: string; value: string }[]; // key: after the cluster's prefix; value: base64, as etcd's JSON API gives it

function seedPath(bin: Binaries, crds: readonly object[], admission: boolean): string {
  const { size, mtimeMs } = statSync(bin.apiserver);
  const apiserver = { path: bin.apiserver, size, mtimeMs };
  const hash = createHash("sha256").update(JSON.stringify({ apiserver, crds, policies: admission ? ocmAdmissionPolicies() : [] })).digest("hex").slice(0, 16);
  return join(cacheRoot(), "control-plane-seeds", `${hash}.json`);
}

async function etcdCall<T>(etcdUrl: string, path: string, body: object): Promise<T> {
  const res = await fetch(`${etcdUrl}/v3/kv/${path}`, { method: "POST", body: JSON.stringify(body) });
  if (!res.ok) throw new Error(`etcd ${path}: HTTP ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

const b64 = (text: string) => Buffer.from(text).toString("base64");

async function keepSeed(etcdUrl: string, name: string, path: string): Promise<void> {
  const seed: Seed = [];
  for (const kind of seededKinds) {
    const prefix = `/${name}/${kind}`;
    const end = prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1);
    const { kvs = [] } = await etcdCall<{ kvs?: { key: string; value: string }[] }>(etcdUrl, "range", { key: b64(prefix), range_end: b64(end) });
    for (const kv of kvs) seed.push({ key: Buffer.from(kv.key, "base64").toString().slice(name.length + 2), value: kv.value });
  }
  mkdirSync(dirname(path), { recursive: true });
  const partial = `${path}.${process.pid}`;
  writeFileSync(partial, JSON.stringify(seed));
  renameSync(partial, path); // whole or not at all, when two starts keep the same set at once
}

// One put a key: a transaction would meet etcd's limits on operations and bytes a request.
async function plantSeed(etcdUrl: string, name: string, seed: Seed): Promise<void> {
  await Promise.all(seed.map(({ key, value }) => etcdCall(etcdUrl, "put", { key: b64(`/${name}/${key}`), value })));
}

const admissionGroup = { group: "admissionregistration.k8s.io", version: "v1", namespaced: false } as const;
const admissionResources: Record<string, ApiResource> = {
  ValidatingAdmissionPolicy: { ...admissionGroup, kind: "ValidatingAdmissionPolicy", plural: "validatingadmissionpolicies" },
  ValidatingAdmissionPolicyBinding: { ...admissionGroup, kind: "ValidatingAdmissionPolicyBinding", plural: "validatingadmissionpolicybindings" },
};

// One write per policy that it refuses even to system:masters, sent as a server-side dry run. The API
// server loads policies and bindings asynchronously, so a policy is in force once its probe is refused.
const admissionProbes: { policy: string; resource: ApiResource; body: KubeObject }[] = [
  {
    policy: "managedclustervalidators.admission.cluster.open-cluster-management.io",
    resource: ManagedClusterResource,
    body: { metadata: { name: "admission.probe" }, spec: { hubAcceptsClient: false } }, // not a namespace name
  },
  {
    policy: "managedclustersetbindingvalidators.admission.cluster.open-cluster-management.io",
    resource: ManagedClusterSetBindingResource,
    body: { metadata: { name: "admission-probe", namespace: "default" }, spec: { clusterSet: "another-set" } },
  },
  {
    policy: "manifestworkvalidators.admission.work.open-cluster-management.io",
    resource: ManifestWorkResource,
    body: { metadata: { name: "admission-probe", namespace: "default" }, spec: { workload: { manifests: [] } } },
  },
];

async function isRefusedBy(client: KubeClient, probe: (typeof admissionProbes)[number]): Promise<boolean> {
  const { resource: r, body } = probe;
  const path = `${resourcePath(r, { namespace: body.metadata.namespace })}?dryRun=All`;
  try {
    await client.request("POST", path, { apiVersion: r.group ? `${r.group}/${r.version}` : r.version, kind: r.kind, ...body });
    return false;
  } catch (err) {
    if (err instanceof KubeError && err.message.includes(`ValidatingAdmissionPolicy '${probe.policy}'`)) return true;
    throw err;
  }
}

async function createAdmissionPolicies(cluster: LocalCluster): Promise<void> {
  const client = KubeClient.fromKubeconfig(cluster.adminKubeconfig);
  try {
    for (const doc of ocmAdmissionPolicies() as KubeObject[]) {
      const r = admissionResources[doc.kind ?? ""];
      if (!r) throw new Error(`admission-policies.yaml: unexpected kind ${doc.kind}`);
      await client.create(r, doc);
    }
  } finally {
    client.close();
  }
}

async function untilAdmissionEnforced(cluster: LocalCluster): Promise<void> {
  const client = KubeClient.fromKubeconfig(cluster.adminKubeconfig);
  try {
    await Promise.all(admissionProbes.map((p) => poll(`admission policy ${p.policy} on ${cluster.name}`, () => isRefusedBy(client, p), 30_000)));
  } finally {
    client.close();
  }
}

async function startEtcd(bin: Binaries, runDir: string): Promise<{ url: string; process: Managed }> {
  const [client, peer] = [await freePort(), await freePort()];
  const data = join(runDir, "etcd");
  const url = `http://127.0.0.1:${client}`;
  const p = startProcess(runDir, "etcd", bin.etcd, [
    "--name=local",
    `--data-dir=${data}`,
    `--listen-client-urls=${url}`,
    `--advertise-client-urls=${url}`,
    `--listen-peer-urls=http://127.0.0.1:${peer}`,
    `--initial-advertise-peer-urls=http://127.0.0.1:${peer}`,
    `--initial-cluster=local=http://127.0.0.1:${peer}`,
    "--unsafe-no-fsync=true",
    "--logger=zap",
    "--log-level=warn",
  ]);
  await poll("etcd", () => httpOk(`${url}/health`), 30_000, exitedEarly(p));
  return { url, process: p };
}

type Run = { bin: Binaries; runDir: string; etcdUrl: string; started: Managed[] };

async function startCluster(run: Run, name: string, o: StartOptions): Promise<LocalCluster> {
  const { bin, runDir, etcdUrl } = run;
  const dir = join(runDir, name);
  mkdirSync(dir, { recursive: true });
  const [servingCa, clientCa, saKeys, port] = await Promise.all([
    createCertificateAuthority(`${name}-serving-ca`),
    createCertificateAuthority(`${name}-client-ca`),
    generateKeyPair(),
    freePort(),
  ]);
  const cluster = new LocalCluster({ name, port, dir, servingCa, clientCa });
  const serving = await issueCertificate(servingCa, { subject: { commonName: "kube-apiserver" }, usage: "server", hosts: ["127.0.0.1", "localhost", "::1", ...(o.servingHosts ?? [])] });
  const files: Record<string, string> = {
    "serving.crt": serving.certPem,
    "serving.key": serving.keyPem,
    "client-ca.crt": clientCa.certPem,
    "client-ca.key": clientCa.keyPem,
    "sa.key": await privateKeyToPem(saKeys.privateKey),
    "sa.pub": await publicKeyToPem(saKeys.publicKey),
  };
  for (const [f, text] of Object.entries(files)) writeFileSync(join(dir, f), text, { mode: 0o600 });

  // The policies match OCM kinds, and their probes need them served.
  const crds = o.crds ?? ocmCrds();
  const admission = o.admission ?? crds !== false;
  if (admission && crds === false) throw new Error("admission policies need the OCM CRDs (crds: false was given)");
  const seed = crds !== false && crds.length ? seedPath(bin, crds, admission) : undefined;
  const seeded = seed && existsSync(seed) ? (JSON.parse(readFileSync(seed, "utf8")) as Seed) : undefined;
  if (seeded) await plantSeed(etcdUrl, name, seeded);

  cluster.apiserver = startProcess(runDir, `${name}-apiserver`, bin.apiserver, [
    `--etcd-servers=${etcdUrl}`,
    `--etcd-prefix=/${name}`,
    "--bind-address=127.0.0.1",
    "--advertise-address=127.0.0.1",
    `--secure-port=${port}`,
    `--tls-cert-file=${join(dir, "serving.crt")}`,
    `--tls-private-key-file=${join(dir, "serving.key")}`,
    `--client-ca-file=${join(dir, "client-ca.crt")}`,
    `--service-account-issuer=${cluster.url}`,
    `--service-account-key-file=${join(dir, "sa.pub")}`,
    `--service-account-signing-key-file=${join(dir, "sa.key")}`,
    "--service-cluster-ip-range=10.0.0.0/24",
    "--authorization-mode=RBAC",
    "--enable-bootstrap-token-auth",
    ...(o.serviceAccountAdmission ? [] : ["--disable-admission-plugins=ServiceAccount"]),
    "--enable-priority-and-fairness=false",
    "--endpoint-reconciler-type=none",
    "--profiling=false",
    ...(o.apiserverFlags ?? []),
  ]);
  run.started.push(cluster.apiserver);
  await poll(`kube-apiserver ${name}`, () => httpOk(`${cluster.url}/readyz`, cluster.caPem), 60_000, exitedEarly(cluster.apiserver));

  cluster.adminKubeconfig = await cluster.kubeconfigFor({ user: "admin", groups: ["system:masters"] });
  writeFileSync(join(dir, "admin.kubeconfig"), cluster.adminKubeconfig, { mode: 0o600 });

  // Created now, they are loaded while the controller manager starts and the CRDs are established.
  const policiesCreated = admission && !seeded ? createAdmissionPolicies(cluster) : Promise.resolve();
  policiesCreated.catch(() => {}); // awaited below; this only keeps an early failure from going unhandled

  const controllers = o.controllers ?? DEFAULT_CONTROLLERS;
  if (controllers !== false) {
    const healthPort = await freePort();
    cluster.controllerManager = startProcess(runDir, `${name}-controller-manager`, bin.controllerManager, [
      `--kubeconfig=${join(dir, "admin.kubeconfig")}`,
      `--controllers=${controllers.join(",")}`,
      `--cluster-signing-cert-file=${join(dir, "client-ca.crt")}`,
      `--cluster-signing-key-file=${join(dir, "client-ca.key")}`,
      "--use-service-account-credentials=false",
      "--leader-elect=false",
      "--bind-address=127.0.0.1",
      `--secure-port=${healthPort}`,
      `--cert-dir=${join(dir, "controller-manager")}`,
    ]);
    run.started.push(cluster.controllerManager);
    await poll(`kube-controller-manager ${name}`, () => httpOk(`https://127.0.0.1:${healthPort}/healthz`, "self-signed"), 60_000, exitedEarly(cluster.controllerManager));
  }
  if (crds !== false && crds.length) await (seeded ? untilEstablished(cluster, crds) : installCrds(cluster, crds));
  await policiesCreated;
  if (admission) await untilAdmissionEnforced(cluster);
  if (seed && !seeded) await keepSeed(etcdUrl, name, seed);
  return cluster;
}

export async function startClusters(o: StartOptions): Promise<LocalClusters> {
  const log = o.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const t0 = Date.now();
  const bin = findBinaries();
  // tmpfs when there is one: etcd's writes are the slowest part of a test apiserver.
  const runDir = mkdtempSync(join(existsSync("/dev/shm") ? "/dev/shm" : tmpdir(), "ocm-functions-"));
  startGuard(runDir);
  const started: Managed[] = [];
  let clusters: LocalCluster[] = [];
  let etcd: Managed | undefined;
  const stop = async () => {
    // An apiserver started again (restart.ts) is not among those started here: it goes first.
    for (const c of clusters) if (c.apiserver && !started.includes(c.apiserver)) await stopProcess(c.apiserver);
    // Reverse start order: controller managers and apiservers before the etcd they use.
    for (const m of [...started].reverse()) await stopProcess(m);
    rmSync(runDir, { recursive: true, force: true });
  };
  try {
    const e = await startEtcd(bin, runDir);
    etcd = e.process;
    started.push(etcd);
    const run = { bin, runDir, etcdUrl: e.url, started };
    const settled = await Promise.allSettled(o.names.map((name) => startCluster(run, name, o)));
    clusters = settled.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
    const failure = settled.find((s) => s.status === "rejected");
    if (failure) throw (failure as PromiseRejectedResult).reason;
  } catch (err) {
    await stop();
    throw err;
  }
  const startupMs = Date.now() - t0;
  log(`[control-plane] ${o.names.join(", ")} ready in ${(startupMs / 1000).toFixed(1)} s`);
  return {
    clusters,
    etcd: etcd!,
    startupMs,
    get(name) {
      const c = clusters.find((x) => x.name === name);
      if (!c) throw new Error(`no local cluster named ${name}`);
      return c;
    },
    stop,
  };
}
