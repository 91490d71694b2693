// `ocmf install hub`, `ocmf join`, `ocmf accept` and `ocmf uninstall` as an admin runs them: the bundled
// CLI (a fresh `npm run build` in a temporary folder outside the checkout) against a real hub and spoke
// that serve Knative's kinds (Knative's CRDs from the Go module cache; no Knative controller or webhook
// runs, so installs wait with --wait crds). What install and join applied is then run as Knative would
// run it (dev/local/deployed.ts): every function, relay and the heartbeat a bundle process under its
// own ServiceAccount. The spoke registers, is accepted, turns Joined and Available; uninstall removes
// everything labelled as ours.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { execFile, type ChildProcess } from "node:child_process";
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { bundle } from "../dev/build/bundle.ts";
import { startClusters, type LocalCluster, type LocalClusters } from "../dev/control-plane/clusters.ts";
import { knativeCrds } from "../dev/control-plane/knative.ts";
import { runDeployed, type Deployed } from "../dev/local/deployed.ts";
import { Discovery, type TypeRef } from "../cli/discovery.ts";
import { flattenKubeconfig } from "../cli/kubeconfig-file.ts";
import { HubNamespaceDefault, partOfSelector, PartOf, PartOfLabel, renderHub, renderSpoke, toYaml, type Manifest } from "../cli/render/index.ts";
import { hostedAgentNamespace, hostedSelector, renderManaged } from "../cli/render/spoke.ts";
import { createNodes } from "../dev/local/nodes.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { ClusterRoleResource, ConfigMapResource, CustomResourceDefinitionResource, NamespaceResource, SecretResource } from "../shared/api/kube.ts";
import { ManifestWorkResource } from "../shared/api/work.ts";
import { ManagedClusterConditionType, ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { AgentNamespaceDefault, BootstrapSecretName, HubKubeconfigSecretName, HubSecretKey } from "../shared/api/registration.ts";
import { HubRbacName } from "../shared/api/register.ts";
import { clientWithSecretFiles, hubEndpoint, judgeHubSecret, secretText, type Secret } from "../shared/hub-credentials.ts";
import { findCondition } from "../shared/conditions.ts";
import { KubeError } from "../shared/kube/errors.ts";
import { readFunctions } from "../cli/render/func-yaml.ts";
import { SharedApiAnnotation } from "../cli/render/hub.ts";
import { ClusterProfileResource } from "../shared/api/inventory.ts";
import { eventually } from "./support/eventually.ts";

const CLUSTER = "edge1";
const HOSTED = "edge2"; // joined in Hosted mode: its agent on the spoke (the management cluster), for the managed cluster
const BOOTSTRAP_GROUP = "system:bootstrappers:managedcluster";

let work: string;
let ocmfBundle: string;
let dist: string;
let local: LocalClusters;
let hub: LocalCluster;
let spoke: LocalCluster;
let hubAdmin: KubeClient;
let spokeAdmin: KubeClient;
let hubKubeconfig: string;
let spokeKubeconfig: string;
let managed: LocalCluster;
let managedAdmin: KubeClient;
let managedKubeconfig: string;
const deployed: Deployed[] = [];
const running = new Set<ChildProcess>(); // ocmf processes not yet finished
let spokeRun: Deployed | undefined;
let joinCommand: string;

type Result = { code: number; stdout: string; stderr: string };

// The bundled CLI as a user runs it: in a folder of its own outside the checkout, only PATH and `env`.
function ocmf(args: string[], env: Record<string, string> = {}): Promise<Result> {
  return new Promise((resolve) => {
    const child = execFile(process.execPath, [ocmfBundle, ...args], { cwd: work, env: { PATH: process.env.PATH ?? "", ...env }, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      running.delete(child);
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
    running.add(child);
  });
}

const described = (r: Result) => `exit ${r.code}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`;

type Crd = KubeObject & { status?: { conditions?: { type: string; status: string }[] } };

async function installKnativeCrds(cluster: LocalCluster): Promise<void> {
  const admin = KubeClient.fromKubeconfig(cluster.adminKubeconfig);
  try {
    const crds = knativeCrds();
    await Promise.all(crds.map((crd) => admin.create(CustomResourceDefinitionResource, crd as unknown as KubeObject)));
    await eventually(
      async () => {
        for (const crd of crds) {
          const got = await admin.get<Crd>(CustomResourceDefinitionResource, crd.metadata.name);
          expect(got?.status?.conditions?.some((c) => c.type === "Established" && c.status === "True"), crd.metadata.name).toBe(true);
        }
      },
      { timeoutMs: 60_000 },
    );
  } finally {
    admin.close();
  }
}

// Every object of the rendered kinds labelled as ours, on a cluster, as "Kind namespace/name".
async function labelled(client: KubeClient, kinds: readonly TypeRef[]): Promise<string[]> {
  const discovery = new Discovery(client);
  const out: string[] = [];
  for (const t of new Map(kinds.map((k) => [`${k.apiVersion} ${k.kind}`, k])).values()) {
    if (!(await discovery.isServed(t))) continue;
    const { items } = await client.list(await discovery.resourceOf(t), { labelSelector: partOfSelector });
    out.push(...items.map((i) => `${t.kind} ${i.metadata.namespace ? `${i.metadata.namespace}/` : ""}${i.metadata.name}`));
  }
  return out;
}

type Applied = KubeObject & { metadata: { labels?: Record<string, string>; managedFields?: { manager: string; operation: string }[] } };

async function readBack(client: KubeClient, objects: readonly Manifest[]): Promise<Map<string, Applied | undefined>> {
  const discovery = new Discovery(client);
  const out = new Map<string, Applied | undefined>();
  for (const o of objects) out.set(`${o.kind} ${o.metadata.namespace ?? ""}/${o.metadata.name}`, await client.get<Applied>(await discovery.resourceOf(o), o.metadata.name, o.metadata.namespace));
  return out;
}

const appliedByOcmf = (o: Applied | undefined) => ({
  labelled: o?.metadata.labels?.[PartOfLabel] === PartOf,
  manager: o?.metadata.managedFields?.some((f) => f.manager === "ocmf" && f.operation === "Apply") ?? false,
});

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "install-join-"));
  dist = join(work, "dist");
  // No OCM CRDs or policies: install brings them.
  const [built, clusters] = await Promise.all([bundle({ outdir: dist }), startClusters({ names: ["hub", "spoke", "managed"], crds: false })]);
  ocmfBundle = built.bundles.find((b) => b.name === "ocmf")!.file;
  local = clusters;
  hub = local.get("hub");
  spoke = local.get("spoke");
  hubAdmin = KubeClient.fromKubeconfig(hub.adminKubeconfig);
  spokeAdmin = KubeClient.fromKubeconfig(spoke.adminKubeconfig);
  managed = local.get("managed");
  managedAdmin = KubeClient.fromKubeconfig(managed.adminKubeconfig);
  managedKubeconfig = join(work, "managed.kubeconfig");
  writeFileSync(managedKubeconfig, managed.adminKubeconfig, { mode: 0o600 });
  hubKubeconfig = join(work, "hub.kubeconfig");
  spokeKubeconfig = join(work, "spoke.kubeconfig");
  writeFileSync(hubKubeconfig, hub.adminKubeconfig, { mode: 0o600 });
  writeFileSync(spokeKubeconfig, spoke.adminKubeconfig, { mode: 0o600 });
  await Promise.all([installKnativeCrds(hub), installKnativeCrds(spoke)]);
}, 600_000);

afterAll(async () => {
  for (const child of running) child.kill("SIGKILL");
  for (const d of deployed) await d.stop();
  hubAdmin?.close();
  spokeAdmin?.close();
  managedAdmin?.close();
  await local?.stop();
  if (work) rmSync(work, { recursive: true, force: true });
}, 120_000);

describe("ocmf render from the bundle, outside the checkout", () => {
  it("prints what cli/render makes of func.yaml, for the hub and for a spoke with a bootstrap kubeconfig", async () => {
    const r = await ocmf(["render", "hub", "--registry", "registry.example/ocm", "--tag", "v1"]);
    expect(r.code, described(r)).toBe(0);
    expect(r.stdout).toBe(`${toYaml(renderHub({ registry: "registry.example/ocm", tag: "v1" })).trimEnd()}\n`);
    const file = join(work, "render-bootstrap.kubeconfig");
    writeFileSync(file, (await hub.createBootstrapToken([BOOTSTRAP_GROUP])).kubeconfig);
    const s = await ocmf(["render", "spoke", "--cluster-name", "render1", "--bootstrap-kubeconfig", file]);
    expect(s.code, described(s)).toBe(0);
    const bootstrapKubeconfig = flattenKubeconfig(readFileSync(file, "utf8"), work);
    expect(s.stdout).toBe(`${toYaml(renderSpoke({ clusterName: "render1", bootstrapKubeconfig })).trimEnd()}\n`);
  });
});

describe("install, join, accept, uninstall", () => {
  it("install hub applies every rendered object server-side as ocmf, makes a bootstrap token and prints the join command", async () => {
    // an old file there, readable by everyone: the token must not land in it as it is
    writeFileSync(join(work, "bootstrap.kubeconfig"), "old\n");
    chmodSync(join(work, "bootstrap.kubeconfig"), 0o644);
    const r = await ocmf(["install", "hub", "--kubeconfig", hubKubeconfig, "--wait", "crds", "--output-bootstrap-kubeconfig", join(work, "bootstrap.kubeconfig")]);
    expect(r.code, described(r)).toBe(0);
    expect(r.stderr).toBe("");
    expect(r.stdout).toMatch(/^applied \d+ CustomResourceDefinitions\n\d+ CRDs Established\napplied 2 Namespaces\n/m);
    joinCommand = /^ {4}(ocmf join --hub-token \S+ --hub-apiserver \S+ --hub-ca-data \S+ --cluster-name <cluster_name>)$/m.exec(r.stdout)?.[1] ?? "";
    expect(joinCommand, r.stdout).not.toBe("");
    expect(r.stdout).toContain(`ocmf join --hub-kubeconfig ${join(work, "bootstrap.kubeconfig")} --cluster-name <cluster_name>`);

    const objects = renderHub();
    const applied = await readBack(hubAdmin, objects);
    // open-cluster-management is applied but not labelled as ours: OCM or the user may own it; so are
    // SIG-Multicluster's CRDs, every cluster manager's (cli/render/hub.ts)
    const sharedCrds = new Set(objects.filter((o) => o.metadata.annotations?.[SharedApiAnnotation]).map((o) => `CustomResourceDefinition /${o.metadata.name}`));
    const shared = (k: string) => k === "Namespace /open-cluster-management" || sharedCrds.has(k);
    expect(sharedCrds.size).toBe(2);
    const notApplied = [...applied].filter(([k, o]) => !appliedByOcmf(o).manager || (!appliedByOcmf(o).labelled && !shared(k))).map(([k]) => k);
    expect(notApplied).toEqual([]);
    expect([...applied].filter(([k, o]) => shared(k) && appliedByOcmf(o).labelled)).toEqual([]);

    // the token: a bootstrap token Secret for the group the bootstrap RBAC binds, and it authenticates so
    const token = /--hub-token (\S+)/.exec(joinCommand)![1]!;
    const [id] = token.split(".");
    const secret = await hubAdmin.get<Secret>(SecretResource, `bootstrap-token-${id}`, "kube-system");
    expect(secret?.type).toBe("bootstrap.kubernetes.io/token");
    expect(secretText(secret, "auth-extra-groups")).toBe(BOOTSTRAP_GROUP);
    expect(secretText(secret, "usage-bootstrap-authentication")).toBe("true");
    const asBootstrap = KubeClient.fromKubeconfig(readFileSync(join(work, "bootstrap.kubeconfig"), "utf8"));
    try {
      const review = await asBootstrap.request<{ status: { userInfo: { username: string; groups: string[] } } }>("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", { apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" });
      expect(review.status.userInfo.username).toBe(`system:bootstrap:${id}`);
      expect(review.status.userInfo.groups).toContain(BOOTSTRAP_GROUP);
    } finally {
      asBootstrap.close();
    }
  }, 180_000);

  it("install hub writes the bootstrap kubeconfig over a world-readable file as a new file only its owner can read", () => {
    const file = join(work, "bootstrap.kubeconfig");
    expect((statSync(file).mode & 0o777).toString(8)).toBe("600");
    expect(readFileSync(file, "utf8")).toContain("token: ");
    // written aside and renamed into place: nothing of the temporary file is left
    expect(readdirSync(work).filter((f) => f.startsWith(".bootstrap.kubeconfig"))).toEqual([]);
  });

  it("install hub's bootstrap token expires 24 hours after it is made, as kubeadm's does, and says so", async () => {
    const token = /--hub-token (\S+)/.exec(joinCommand)![1]!;
    const [id] = token.split(".");
    const secret = await hubAdmin.get<Secret & KubeObject>(SecretResource, `bootstrap-token-${id}`, "kube-system");
    const expiration = secretText(secret, "expiration");
    expect(expiration, "the token secret's expiration").toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    const made = new Date(String(secret!.metadata.creationTimestamp)).getTime();
    const ttlMs = new Date(expiration!).getTime() - made;
    expect(Math.abs(ttlMs - 24 * 3_600_000), `expires ${expiration}, made ${secret!.metadata.creationTimestamp}`).toBeLessThanOrEqual(60_000);
  });

  it("the bootstrap identity reads the hub's CA where clusteradm join looks for it (kube-public cluster-info, kube-root-ca.crt) and no other ConfigMap", async () => {
    type ConfigMap = KubeObject & { data?: Record<string, string> };
    await hubAdmin.create<ConfigMap>(ConfigMapResource, { metadata: { name: "hub-settings", namespace: HubNamespaceDefault }, data: { password: "s3cret" } });
    await hubAdmin.create<ConfigMap>(ConfigMapResource, { metadata: { name: "other", namespace: "kube-public" }, data: { a: "b" } });
    const asBootstrap = KubeClient.fromKubeconfig(readFileSync(join(work, "bootstrap.kubeconfig"), "utf8"));
    try {
      // without kubeadm there is no cluster-info: the answer must be "not found", not "forbidden", so
      // clusteradm goes on to kube-root-ca.crt
      expect(await asBootstrap.get<ConfigMap>(ConfigMapResource, "cluster-info", "kube-public")).toBeUndefined();
      // what kubeadm and kube-controller-manager's root-ca-cert-publisher (not run here) would publish
      await hubAdmin.create<ConfigMap>(ConfigMapResource, { metadata: { name: "cluster-info", namespace: "kube-public" }, data: { kubeconfig: "apiVersion: v1\nkind: Config\n" } });
      await hubAdmin.create<ConfigMap>(ConfigMapResource, { metadata: { name: "kube-root-ca.crt", namespace: "kube-public" }, data: { "ca.crt": hub.caPem } });
      expect((await asBootstrap.get<ConfigMap>(ConfigMapResource, "cluster-info", "kube-public"))?.data?.kubeconfig).toContain("kind: Config");
      expect((await asBootstrap.get<ConfigMap>(ConfigMapResource, "kube-root-ca.crt", "kube-public"))?.data?.["ca.crt"]).toBe(hub.caPem);
      const refused = async (read: () => Promise<unknown>) => {
        const err = await read().then(() => undefined, (e: unknown) => e);
        return err instanceof KubeError ? err.code : err;
      };
      expect(await refused(() => asBootstrap.get(ConfigMapResource, "hub-settings", HubNamespaceDefault))).toBe(403);
      expect(await refused(() => asBootstrap.get(ConfigMapResource, "other", "kube-public"))).toBe(403);
      expect(await refused(() => asBootstrap.get(ConfigMapResource, "extension-apiserver-authentication", "kube-system"))).toBe(403);
      expect(await refused(() => asBootstrap.get(ConfigMapResource, "kube-root-ca.crt", "kube-system"))).toBe(403);
      expect(await refused(() => asBootstrap.list(ConfigMapResource, { namespace: "kube-public" }))).toBe(403);
    } finally {
      asBootstrap.close();
      await hubAdmin.delete(ConfigMapResource, "hub-settings", HubNamespaceDefault);
      for (const name of ["other", "cluster-info", "kube-root-ca.crt"]) await hubAdmin.delete(ConfigMapResource, name, "kube-public");
    }
  });

  it("install hub again changes nothing, and with --wait all ends after --wait-timeout naming what no Knative controller made Ready", async () => {
    const objects = renderHub();
    const before = await readBack(hubAdmin, objects);
    const r = await ocmf(["install", "hub", "--wait", "all", "--wait-timeout", "2s"], { KUBECONFIG: hubKubeconfig });
    expect(r.code, described(r)).toBe(1);
    const services = readFunctions().filter((f) => f.side === "hub").length;
    expect(r.stdout).toMatch(new RegExp(`^waiting \\(--wait all\\): Broker 0/1 Ready, Service 0/${services} Ready, Trigger 0/\\d+ Ready, ContainerSource 0/2 Ready`, "m"));
    expect(r.stderr.trimEnd().split("\n")).toEqual([expect.stringMatching(/^error: not ready after 2s: eventing\.knative\.dev\/v1 Broker open-cluster-management-hub\/\S+ \(no status yet \(is its controller running\?\)\); .* and \d+ more$/)]);
    const after = await readBack(hubAdmin, objects);
    const changed = [...after].filter(([k, o]) => o?.metadata.resourceVersion !== before.get(k)?.metadata.resourceVersion).map(([k]) => k);
    expect(changed).toEqual([]);
  }, 120_000);

  it("join with the printed command applies the spoke with the bootstrap credentials and says to accept the cluster on the hub", async () => {
    expect(joinCommand).not.toBe("");
    const args = joinCommand.replace("<cluster_name>", CLUSTER).split(" ").slice(1);
    const r = await ocmf([...args, "--wait", "crds"], { KUBECONFIG: spokeKubeconfig });
    expect(r.code, described(r)).toBe(0);
    expect(r.stderr).toBe("");
    expect(r.stdout).toContain(`    ocmf accept --clusters ${CLUSTER}`);

    const objects = renderSpoke({ clusterName: CLUSTER, bootstrapKubeconfig: "x" });
    const applied = await readBack(spokeAdmin, objects);
    const notApplied = [...applied].filter(([, o]) => !appliedByOcmf(o).labelled || !appliedByOcmf(o).manager).map(([k]) => k);
    expect(notApplied).toEqual([]);
    // the token form and the file install wrote are one and the same bootstrap kubeconfig
    const bootstrap = await spokeAdmin.get<Secret>(SecretResource, BootstrapSecretName, AgentNamespaceDefault);
    expect(secretText(bootstrap, HubSecretKey.Kubeconfig)).toBe(readFileSync(join(work, "bootstrap.kubeconfig"), "utf8"));
  }, 120_000);

  it("the applied functions, run as their Knative objects say under their own ServiceAccounts, register the cluster; after ocmf accept it is Joined and Available with a valid hub kubeconfig, and work reaches it", async () => {
    deployed.push(await runDeployed({ cluster: hub, namespace: HubNamespaceDefault, dist, runDir: join(work, "run-hub") }));
    spokeRun = await runDeployed({ cluster: spoke, namespace: AgentNamespaceDefault, dist, runDir: join(work, "run-spoke") });
    deployed.push(spokeRun);
    expect([...deployed[0]!.functions.keys()].length).toBe(readFunctions().filter((f) => f.side === "hub").length);
    expect([...spokeRun.functions.keys()].length).toBe(readFunctions().filter((f) => f.side === "spoke").length);

    await eventually(async () => expect(await hubAdmin.get(ManagedClusterResource, CLUSTER)).toBeDefined(), { timeoutMs: 60_000 });
    const accept = await eventually(
      async () => {
        const r = await ocmf(["accept", "--clusters", CLUSTER], { KUBECONFIG: hubKubeconfig });
        expect(r.code, described(r)).toBe(0);
        return r;
      },
      { timeoutMs: 60_000, intervalMs: 1_000 },
    );
    expect(accept.stdout).toContain(`${CLUSTER}: hubAcceptsClient set`);

    const mc = await eventually(
      async () => {
        const got = await hubAdmin.get<ManagedCluster & KubeObject>(ManagedClusterResource, CLUSTER);
        for (const type of [ManagedClusterConditionType.HubAccepted, ManagedClusterConditionType.Joined, ManagedClusterConditionType.Available]) {
          expect(findCondition(got?.status?.conditions, type)?.status, type).toBe("True");
        }
        return got!;
      },
      { timeoutMs: 120_000, intervalMs: 500 },
    );
    expect(mc.spec?.hubAcceptsClient).toBe(true);

    // the agent's hub kubeconfig, as OCM judges it, and it works: the cluster reads itself as itself
    const [bootstrap, hubSecret] = await Promise.all([
      spokeAdmin.get<Secret>(SecretResource, BootstrapSecretName, AgentNamespaceDefault),
      spokeAdmin.get<Secret>(SecretResource, HubKubeconfigSecretName, AgentNamespaceDefault),
    ]);
    const judged = judgeHubSecret({ hubSecret, bootstrap: hubEndpoint(secretText(bootstrap, HubSecretKey.Kubeconfig)!), clusterName: CLUSTER, now: new Date() });
    expect(judged.valid, JSON.stringify(judged)).toBe(true);
    const asCluster = clientWithSecretFiles(secretText(hubSecret, HubSecretKey.Kubeconfig)!, hubSecret!);
    try {
      expect((await asCluster.get<ManagedCluster & KubeObject>(ManagedClusterResource, CLUSTER))?.metadata.name).toBe(CLUSTER);
    } finally {
      asCluster.close();
    }

    // work goes through the rendered relay and Triggers to the spoke's work applier
    await hubAdmin.create(ManifestWorkResource, { metadata: { name: "hello", namespace: CLUSTER }, spec: { workload: { manifests: [{ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "hello-from-hub", namespace: "default" }, data: { from: "hub" } }] } } });
    await eventually(async () => expect(await spokeAdmin.get(ConfigMapResource, "hello-from-hub", "default")).toBeDefined(), { timeoutMs: 60_000 });
  }, 300_000);

  it("uninstall spoke removes every labelled object of the spoke render's kinds, CRDs last, and finds nothing the second time", async () => {
    // Knative would stop the agent's pods with their Services; here their processes stop first.
    await spokeRun?.stop();
    const r = await ocmf(["uninstall", "spoke", "--kubeconfig", spokeKubeconfig]);
    expect(r.code, described(r)).toBe(0);
    expect(r.stdout.trimEnd().split("\n").at(-1)).toBe(`The spoke is uninstalled: nothing labelled ${partOfSelector} is left.`);
    const deletions = r.stdout.split("\n").filter((l) => l.startsWith("deleted "));
    expect(deletions.at(-1)).toMatch(/^deleted \d+ CustomResourceDefinitions$/);
    // the AppliedManifestWork's finalizer, which no work applier will release now; what it applied goes
    // with it, as the garbage collector follows the owner references, and uninstall waits for that
    // before the CRD goes (after it, the collector could no longer look the owner up)
    expect(r.stdout).toContain("released the OCM finalizers of 1 object whose functions are gone");
    expect(r.stdout).toContain("deleted 1 AppliedManifestWork and, by their owner references, what they applied");
    expect(await spokeAdmin.get(ConfigMapResource, "hello-from-hub", "default")).toBeUndefined();
    expect(await labelled(spokeAdmin, renderSpoke())).toEqual([]);
    expect(await spokeAdmin.get(NamespaceResource, AgentNamespaceDefault)).toBeUndefined();

    const again = await ocmf(["uninstall", "spoke", "--kubeconfig", spokeKubeconfig]);
    expect(again.code, described(again)).toBe(0);
    expect(again.stdout).toBe(`nothing of ocm-functions on the spoke at ${spoke.url}\n`);
  }, 360_000);

  it("join --mode hosted puts the agent on the management cluster in klusterlet-<cluster> and on the managed cluster only the kinds it records there; run and accepted, it is Joined and Available, reports the managed cluster's capacity, applies work there, and get clusters says Hosted", async () => {
    const r = await ocmf(["join", "--hub-kubeconfig", join(work, "bootstrap.kubeconfig"), "--cluster-name", HOSTED, "--mode", "hosted", "--managed-kubeconfig", managedKubeconfig, "--wait", "crds"], { KUBECONFIG: spokeKubeconfig });
    expect(r.code, described(r)).toBe(0);
    const hostedRender = renderSpoke({ clusterName: HOSTED, bootstrapKubeconfig: "x", managedKubeconfig: "x" });
    const ns = hostedAgentNamespace(HOSTED);
    expect(hostedRender.filter((o) => o.metadata.namespace && o.metadata.namespace !== ns)).toEqual([]);
    // the managed cluster: the add-on namespace and the CRDs of what the agent records there, nothing else
    const onManaged = await labelled(managedAdmin, [...hostedRender, ...renderManaged(), { apiVersion: "v1", kind: "Secret" }, { apiVersion: "v1", kind: "ServiceAccount" }]);
    expect(onManaged.sort()).toEqual(renderManaged().map((m) => `${m.kind} ${m.metadata.name}`).sort());

    await createNodes(managedAdmin); // no kubelet runs there: capacity can come only from these
    const hostedRun = await runDeployed({ cluster: spoke, namespace: ns, dist, runDir: join(work, "run-hosted") });
    deployed.push(hostedRun);
    await eventually(async () => expect(await hubAdmin.get(ManagedClusterResource, HOSTED)).toBeDefined(), { timeoutMs: 60_000 });
    const accept = await eventually(async () => {
      const a = await ocmf(["accept", "--clusters", HOSTED], { KUBECONFIG: hubKubeconfig });
      expect(a.code, described(a)).toBe(0);
      return a;
    }, { timeoutMs: 60_000, intervalMs: 1_000 });
    expect(accept.stdout).toContain(`${HOSTED}: hubAcceptsClient set`);
    await eventually(async () => {
      const got = await hubAdmin.get<ManagedCluster & KubeObject>(ManagedClusterResource, HOSTED);
      for (const type of [ManagedClusterConditionType.Joined, ManagedClusterConditionType.Available]) expect(findCondition(got?.status?.conditions, type)?.status, type).toBe("True");
      expect(got?.status?.capacity?.cpu).toBeDefined();
    }, { timeoutMs: 120_000, intervalMs: 500 });
    // its secrets in its own namespace on the management cluster, none on the managed one
    expect(await spokeAdmin.get(SecretResource, HubKubeconfigSecretName, ns)).toBeDefined();
    expect(await managedAdmin.get(NamespaceResource, AgentNamespaceDefault)).toBeUndefined();

    await hubAdmin.create(ManifestWorkResource, { metadata: { name: "hello", namespace: HOSTED }, spec: { workload: { manifests: [{ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "hello-hosted", namespace: "default" }, data: { from: "hub" } }] } } });
    await eventually(async () => expect(await managedAdmin.get(ConfigMapResource, "hello-hosted", "default")).toBeDefined(), { timeoutMs: 60_000 });
    expect(await spokeAdmin.get(ConfigMapResource, "hello-hosted", "default")).toBeUndefined();

    const table = await ocmf(["get", "clusters"], { KUBECONFIG: hubKubeconfig });
    expect(table.code, described(table)).toBe(0);
    expect(table.stdout).toMatch(new RegExp(`^${HOSTED}\\s+Hosted\\s`, "m"));
    expect(table.stdout).toMatch(new RegExp(`^${CLUSTER}\\s+Default\\s`, "m"));

    // the work goes while the agent runs, so nothing waits on an agent that is gone
    await hubAdmin.delete(ManifestWorkResource, "hello", HOSTED);
    await eventually(async () => expect(await hubAdmin.get(ManifestWorkResource, "hello", HOSTED)).toBeUndefined(), { timeoutMs: 60_000 });
    await hostedRun.stop();
  }, 300_000);

  it("uninstall spoke (Default) on that management cluster leaves the hosted agent and the CRDs it uses; uninstall spoke --mode hosted then removes that agent and what it recorded on the managed cluster", async () => {
    const def = await ocmf(["uninstall", "spoke", "--kubeconfig", spokeKubeconfig]);
    expect(def.code, described(def)).toBe(0);
    expect(def.stdout).toMatch(/^left \d+ CustomResourceDefinitions: the hosted agents in klusterlet-edge2 use them/m);
    expect(await spokeAdmin.get(NamespaceResource, hostedAgentNamespace(HOSTED))).toBeDefined();
    expect(await spokeAdmin.get(CustomResourceDefinitionResource, "appliedmanifestworks.work.open-cluster-management.io")).toBeDefined();

    const r = await ocmf(["uninstall", "spoke", "--mode", "hosted", "--cluster-name", HOSTED, "--managed-kubeconfig", managedKubeconfig], { KUBECONFIG: spokeKubeconfig });
    expect(r.code, described(r)).toBe(0);
    expect(await spokeAdmin.get(NamespaceResource, hostedAgentNamespace(HOSTED))).toBeUndefined();
    const { items } = await spokeAdmin.list(ClusterRoleResource, { labelSelector: hostedSelector(HOSTED) });
    expect(items).toEqual([]);
    expect(await labelled(managedAdmin, [...renderManaged(), { apiVersion: "v1", kind: "Secret" }])).toEqual([]);
    // the hub admin detaches it, as after any uninstall
    await hubAdmin.delete(ManagedClusterResource, HOSTED);
    await eventually(async () => expect(await hubAdmin.get(ManagedClusterResource, HOSTED)).toBeUndefined(), { timeoutMs: 60_000 });
  }, 300_000);

  it("uninstall hub refuses while a ManagedCluster is registered; with --purge-clusters the running hub functions release it and the rest goes, but for SIG-Multicluster's CRDs and what another cluster manager published in them", async () => {
    // a profile of ours (as cluster-profiles labels them; for no cluster, so the running function or the
    // uninstall removes it) and one of another cluster manager
    await hubAdmin.create(NamespaceResource, { metadata: { name: "inventory-consumer" } });
    const profile = (name: string, manager: string) => ({ metadata: { name, namespace: "inventory-consumer", labels: { "x-k8s.io/cluster-manager": manager } }, spec: { clusterManager: { name: manager } } });
    await hubAdmin.create(ClusterProfileResource, profile("ours", "open-cluster-management"));
    await hubAdmin.create(ClusterProfileResource, profile("theirs", "someone-else"));
    const refused = await ocmf(["uninstall", "hub"], { KUBECONFIG: hubKubeconfig });
    expect(refused.code, described(refused)).toBe(1);
    expect(refused.stderr.trimEnd().split("\n")).toEqual([expect.stringContaining(`error: 1 ManagedCluster still registered (${CLUSTER})`)]);

    const r = await ocmf(["uninstall", "hub", "--purge-clusters"], { KUBECONFIG: hubKubeconfig });
    expect(r.code, described(r)).toBe(0);
    // its ManifestWork, whose finalizer the uninstalled spoke's work applier would never release
    expect(r.stdout).toContain("deleted 1 ManifestWork of those clusters without waiting for their agents");
    expect(r.stdout).toContain(`deleted 1 ManagedCluster (${CLUSTER})`);
    expect(await labelled(hubAdmin, [...renderHub(), { apiVersion: "v1", kind: "Secret" }])).toEqual([]);
    expect(await hubAdmin.get(CustomResourceDefinitionResource, "managedclusters.cluster.open-cluster-management.io")).toBeUndefined();
    // SIG-Multicluster's CRDs are every cluster manager's: they stay
    expect(await hubAdmin.get(CustomResourceDefinitionResource, "clusterprofiles.multicluster.x-k8s.io")).toBeDefined();
    expect((await hubAdmin.list(ClusterProfileResource, { namespace: "inventory-consumer" })).items.map((p) => p.metadata.name)).toEqual(["theirs"]);
    // released by the cluster-acceptor before the functions went
    expect(await hubAdmin.get(ClusterRoleResource, HubRbacName.cluster(CLUSTER))).toBeUndefined();
    expect((await hubAdmin.list(SecretResource, { namespace: "kube-system", labelSelector: partOfSelector })).items).toEqual([]);

    const again = await ocmf(["uninstall", "hub"], { KUBECONFIG: hubKubeconfig });
    expect(again.code, described(again)).toBe(0);
    expect(again.stdout).toBe(`nothing of ocm-functions on the hub at ${hub.url}\n`);
  }, 360_000);
});
