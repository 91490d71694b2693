// OCM's own CLI, clusteradm v1.3.1 (built from its Go module by scripts/build-tools.sh clusteradm), run
// for real against a local hub with two joined spokes: the join token it prints, the cluster table,
// cluster sets and their bindings, placements and the decisions our placement-scheduler writes, work
// sent through a placement and applied by the spokes' work-applier, and an add-on installed on exactly
// the clusters a placement decides on.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findClusteradm } from "../dev/control-plane/binaries.ts";
import { startClusters, type LocalClusters } from "../dev/control-plane/clusters.ts";
import { startFleet, type Fleet } from "../dev/local/fleet.ts";
import { applyAll } from "../cli/apply.ts";
import { createBootstrapToken } from "../cli/bootstrap-token.ts";
import { bootstrapServiceAccount, BootstrapServiceAccount } from "../cli/render/hub.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { KubeError } from "../shared/kube/errors.ts";
import { buildKubeconfig } from "../shared/kube/kubeconfig.ts";
import { createCertificateRequest, generateKeyPair } from "../shared/pki.ts";
import { findCondition } from "../shared/conditions.ts";
import { CertificateSigningRequestResource, ClusterRoleBindingResource, ClusterRoleResource, ConfigMapResource, KubeAPIServerClientSignerName, NamespaceResource, SecretResource } from "../shared/api/kube.ts";
import {
  ClusterLabel,
  ManagedClusterResource,
  ManagedClusterSetBindingResource,
  ManagedClusterSetResource,
  PlacementDecisionResource,
  type ManagedCluster,
  type ManagedClusterSet,
  type ManagedClusterSetBinding,
  type PlacementDecision,
} from "../shared/api/cluster.ts";
import { ClusterManagementAddOnV1alpha1Resource, ManagedClusterAddOnV1alpha1Resource } from "../shared/api/addon.ts";
import { ManifestWorkResource, type ManifestWork } from "../shared/api/work.ts";
import type { ApiResource } from "../shared/api/meta.ts";
import { ClusterProfileResource, type ClusterProfile } from "../shared/api/inventory.ts";
import { request as httpsRequest } from "node:https";
import { eventually } from "./support/eventually.ts";

// Starting three control planes and the functions takes up to a few minutes on a loaded 2-core machine;
// each test waits on relays and functions several times (up to 60 s each).
const FLEET_START_MS = 300_000;
const TEST_MS = 240_000;
const WAIT = { timeoutMs: 60_000 };
const SPOKES = ["cluster1", "cluster2"] as const;
const BOOTSTRAP_GROUP = "system:bootstrappers:managedcluster";
const SA_USER = `system:serviceaccount:${BootstrapServiceAccount.namespace}:${BootstrapServiceAccount.name}`;

let clusters: LocalClusters | undefined;
let fleet: Fleet | undefined;
let clusteradm = "";
let work = "";
let hubKubeconfig = "";

beforeAll(async () => {
  clusteradm = findClusteradm();
  work = mkdtempSync(join(tmpdir(), "ocmf-clusteradm-"));
  // Our own control planes, handed to the fleet, so they are stopped even when the fleet fails to start.
  clusters = await startClusters({ names: ["hub", ...SPOKES] });
  fleet = await startFleet({ clusters, spokes: SPOKES.map((name) => ({ name, autoApprove: true })), resyncMs: 2_000 });
  hubKubeconfig = join(work, "hub.kubeconfig");
  writeFileSync(hubKubeconfig, clusters.get("hub").adminKubeconfig, { mode: 0o600 });
  for (const name of SPOKES) await eventually(async () => expect(findCondition((await cluster(name))?.status?.conditions, "ManagedClusterJoined")?.status).toBe("True"), { timeoutMs: 90_000 });
}, FLEET_START_MS);

afterAll(async () => {
  await fleet?.stop();
  await clusters?.stop();
  if (work) rmSync(work, { recursive: true, force: true });
});

type Run = { code: number; stdout: string; stderr: string };
const described = (r: Run) => `exit ${r.code}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`;

// clusteradm with the hub admin's kubeconfig, and a home of its own for kubectl's discovery cache.
function run(...args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(clusteradm, args, { env: { PATH: process.env.PATH, HOME: work, KUBECONFIG: hubKubeconfig }, timeout: 60_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === "number" ? err.code : -1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

async function ok(...args: string[]): Promise<string> {
  const r = await run(...args);
  expect(r.code, described(r)).toBe(0);
  return r.stdout;
}

type Cluster = ManagedCluster & KubeObject;
const ServiceAccountResource = { group: "", version: "v1", kind: "ServiceAccount", plural: "serviceaccounts", namespaced: true } as const satisfies ApiResource;
const hub = () => fleet!.hub;
const cluster = (name: string) => hub().get<Cluster>(ManagedClusterResource, name);
const setLabels = (name: string, labels: Record<string, string | null>) => hub().patch(ManagedClusterResource, name, { metadata: { labels } });

// `clusteradm get clusters -o table`: kubectl's table, its cells found by where each heading starts.
async function clusterTable(): Promise<Record<string, string>[]> {
  const [header, ...rows] = (await ok("get", "clusters", "-o", "table")).trimEnd().split("\n");
  const headings = ["NAME", "ACCEPTED", "AVAILABLE", "CLUSTERSET", "CPU", "MEMORY", "KUBERNETES VERSION"];
  const starts = headings.map((h) => header!.indexOf(h));
  expect(starts.every((s) => s >= 0), header).toBe(true);
  return rows.map((line) => Object.fromEntries(headings.map((h, i) => [h, line.slice(starts[i], starts[i + 1]).trim()])));
}

async function decided(namespace: string, placement: string): Promise<string[]> {
  const { items } = await hub().list<PlacementDecision & KubeObject>(PlacementDecisionResource, { namespace, labelSelector: `${ClusterLabel.Placement}=${placement}` });
  return items.flatMap((d) => d.status?.decisions?.map((x) => x.clusterName) ?? []).sort();
}

// A namespace for placements, with the set bound to it by clusteradm (once the hub has made that set).
async function workspace(namespace: string, set: string): Promise<void> {
  await hub().create(NamespaceResource, { metadata: { name: namespace } });
  await eventually(async () => expect(await ok("clusterset", "bind", set, "--namespace", namespace)).toBe(`Clusterset ${set} is bound to Namespace ${namespace}\n`), WAIT);
}

describe("clusteradm against our hub", { timeout: TEST_MS }, () => {
  it("get token prints a token of open-cluster-management/agent-registration-bootstrap, which may do what a bootstrap token may and no more", async () => {
    // Without the account (`ocmf install hub` creates it; the fleet applies only the bootstrap RBAC)
    // clusteradm has nothing to ask a token of.
    await hub().delete(ServiceAccountResource, BootstrapServiceAccount.name, BootstrapServiceAccount.namespace);
    const before = await run("get", "token");
    expect(before.code, described(before)).not.toBe(0);
    expect(before.stderr).toContain(`failed to get token from sa ${BootstrapServiceAccount.namespace}/${BootstrapServiceAccount.name}`);
    await applyAll(hub(), bootstrapServiceAccount(), { waitForCrds: false, deadline: Date.now() + 30_000, print: () => {} });

    const hubUrl = clusters!.get("hub").url;
    const stdout = await ok("get", "token");
    const token = /^token=(\S+)$/m.exec(stdout)?.[1] ?? "";
    expect(token, stdout).not.toBe("");
    expect(stdout).toContain(`join --hub-token ${token} --hub-apiserver ${hubUrl} --cluster-name <cluster_name>`);

    const caPem = clusters!.get("hub").caPem;
    const asAccount = KubeClient.fromKubeconfig(buildKubeconfig({ server: hubUrl, caPem, credentials: { kind: "token", token } }));
    const bootstrapToken = await clusters!.get("hub").createBootstrapToken([BOOTSTRAP_GROUP]);
    const asBootstrap = KubeClient.fromKubeconfig(bootstrapToken.kubeconfig);
    let csr = "";
    try {
      const review = await asAccount.request<{ status: { userInfo: { username: string; groups: string[] } } }>("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", { apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" });
      expect(review.status.userInfo.username).toBe(SA_USER);

      // Exactly the rules of a bootstrap token's identity (the bootstrap ClusterRole and what every
      // authenticated user has), plus what Kubernetes itself gives every service account: reading its
      // issuer's public OIDC discovery documents (ClusterRole system:service-account-issuer-discovery,
      // bound by default to group system:serviceaccounts). Asked in namespaces, so RoleBindings count too.
      type Rules = { status: { resourceRules: unknown[]; nonResourceRules: unknown[] } };
      const rulesOf = async (client: KubeClient, namespace: string) => {
        const r = await client.request<Rules>("POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", { apiVersion: "authorization.k8s.io/v1", kind: "SelfSubjectRulesReview", spec: { namespace } });
        return [...r.status.resourceRules, ...r.status.nonResourceRules].map((x) => JSON.stringify(x));
      };
      const issuerDiscovery = "system:service-account-issuer-discovery";
      const discoveryBinding = await hub().get<KubeObject & { subjects: { kind: string; name: string }[] }>(ClusterRoleBindingResource, issuerDiscovery);
      expect(discoveryBinding?.subjects).toEqual([{ apiGroup: "rbac.authorization.k8s.io", kind: "Group", name: "system:serviceaccounts" }]);
      const discoveryRole = await hub().get<KubeObject & { rules: { verbs: string[]; nonResourceURLs: string[] }[] }>(ClusterRoleResource, issuerDiscovery);
      for (const namespace of ["default", "kube-system", BootstrapServiceAccount.namespace, "open-cluster-management-hub"]) {
        const [mine, bootstrap] = [await rulesOf(asAccount, namespace), await rulesOf(asBootstrap, namespace)];
        expect(mine.some((r) => r.includes("certificatesigningrequests")), namespace).toBe(true);
        expect(bootstrap.filter((r) => !mine.includes(r)), namespace).toEqual([]);
        const extra = mine.filter((r) => !bootstrap.includes(r)).map((r) => JSON.parse(r) as unknown);
        expect(extra, namespace).toEqual(discoveryRole!.rules.map((r) => ({ verbs: r.verbs, nonResourceURLs: r.nonResourceURLs })));
      }

      // What a bootstrap identity does: request a client certificate.
      const request = await createCertificateRequest({ commonName: "clusteradm-token-probe" }, await generateKeyPair());
      type Csr = KubeObject & { spec: { request: string; signerName: string; usages: string[]; username?: string } };
      const created = await asAccount.create<Csr>(CertificateSigningRequestResource, {
        metadata: { generateName: "clusteradm-token-probe-" },
        spec: { request: Buffer.from(request).toString("base64"), signerName: KubeAPIServerClientSignerName, usages: ["digital signature", "key encipherment", "client auth"] },
      });
      csr = created.metadata.name!;
      expect(created.spec.username).toBe(SA_USER);

      // And nothing a hub admin does.
      for (const list of [() => asAccount.list(SecretResource), () => asAccount.list(SecretResource, { namespace: BootstrapServiceAccount.namespace })]) {
        const denied = await list().then(() => undefined, (e: unknown) => e);
        expect(denied).toBeInstanceOf(KubeError);
        expect((denied as KubeError).code).toBe(403);
      }
    } finally {
      asAccount.close();
      asBootstrap.close();
      if (csr) await hub().delete(CertificateSigningRequestResource, csr);
      await hub().delete(SecretResource, `bootstrap-token-${bootstrapToken.user.split(":").pop()}`, "kube-system");
    }
  });

  it("get token --use-bootstrap-token prints the bootstrap token `ocmf install hub` made", async () => {
    const made = await createBootstrapToken(hub(), { now: new Date(), ttlMs: 3_600_000 });
    const stdout = await ok("get", "token", "--use-bootstrap-token");
    expect(/^token=(\S+)$/m.exec(stdout)?.[1], stdout).toBe(made.token);
    await hub().delete(SecretResource, `bootstrap-token-${made.id}`, "kube-system");
  });

  it("get clusters lists both clusters, accepted and available, in the cluster set default", async () => {
    const rows = await eventually(async () => {
      const table = await clusterTable();
      expect(table.map((r) => [r.NAME, r.ACCEPTED, r.AVAILABLE, r.CLUSTERSET])).toEqual(SPOKES.map((name) => [name, "true", "True", "default"]));
      return table;
    }, WAIT);
    for (const r of rows) {
      expect(r.CPU, JSON.stringify(r)).not.toBe("");
      expect(r["KUBERNETES VERSION"], JSON.stringify(r)).toMatch(/^v1\.\d+\.\d+/);
    }
    // --clusterset selects by the set label the hub put on them
    expect((await ok("get", "clusters", "--clusterset", "default", "-o", "table")).split("\n").filter((l) => SPOKES.some((s) => l.startsWith(`${s} `)))).toHaveLength(2);
  });

// The status code of GET url, the server verified against `caData` (base64 PEM) alone.
function verifiedStatus(url: string, caData: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(url, { ca: Buffer.from(caData, "base64").toString("utf8"), timeout: 10_000 }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on("error", reject);
    req.end();
  });
}

  it("create clusterset and clusterset bind make a set and a bound binding; a placement on that set decides on the cluster put in it, and the cluster is published there as a ClusterProfile whose access provider reaches its API server, verified by its CA; moved out, the profile goes", async () => {
    const set = "clusteradm-e2e";
    const ns = "clusteradm-sets";
    expect(await ok("create", "clusterset", set)).toBe(`Clusterset ${set} is created\n`);
    expect((await hub().get<ManagedClusterSet & KubeObject>(ManagedClusterSetResource, set))?.spec?.clusterSelector?.selectorType).toBe("ExclusiveClusterSetLabel");
    await eventually(async () => {
      const s = await hub().get<ManagedClusterSet & KubeObject>(ManagedClusterSetResource, set);
      expect(findCondition(s?.status?.conditions, "ClusterSetEmpty")).toMatchObject({ status: "True", reason: "NoClusterMatched" });
    }, WAIT);

    await hub().create(NamespaceResource, { metadata: { name: ns } });
    expect(await ok("clusterset", "bind", set, "--namespace", ns)).toBe(`Clusterset ${set} is bound to Namespace ${ns}\n`);
    const binding = await hub().get<ManagedClusterSetBinding & KubeObject>(ManagedClusterSetBindingResource, set, ns);
    expect(binding?.spec?.clusterSet).toBe(set);
    await eventually(async () => {
      const b = await hub().get<ManagedClusterSetBinding & KubeObject>(ManagedClusterSetBindingResource, set, ns);
      expect(findCondition(b?.status?.conditions, "Bound")).toMatchObject({ status: "True", reason: "ClusterSetBound" });
    }, WAIT);

    try {
      expect(await ok("clusterset", "set", set, "--clusters", "cluster2")).toBe(`Cluster cluster2 is set, from ClusterSet default to Clusterset ${set}\n`);
      await eventually(async () => expect((await clusterTable()).map((r) => [r.NAME, r.CLUSTERSET])).toEqual([["cluster1", "default"], ["cluster2", set]]), WAIT);
      await eventually(async () => {
        const s = await hub().get<ManagedClusterSet & KubeObject>(ManagedClusterSetResource, set);
        expect(findCondition(s?.status?.conditions, "ClusterSetEmpty")).toMatchObject({ status: "False", reason: "ClustersSelected" });
      }, WAIT);
      expect(await ok("create", "placement", "in-set", "--namespace", ns, "--clustersets", set)).toBe(`Placement 'in-set' has been created in '${ns}' namespace\n`);
      await eventually(async () => expect(await decided(ns, "in-set")).toEqual(["cluster2"]), WAIT);
      const profile = await eventually(async () => {
        const { items } = await hub().list<ClusterProfile>(ClusterProfileResource, { namespace: ns });
        expect(items.map((p) => [p.metadata.name, p.metadata.labels?.["multicluster.x-k8s.io/clusterset"]])).toEqual([["cluster2", set]]);
        expect(items[0]!.status?.accessProviders?.length).toBe(1);
        return items[0]!;
      }, WAIT);
      const provider = profile.status!.accessProviders![0]!;
      expect(provider.name).toBe("open-cluster-management");
      expect(provider.cluster?.server).toBe((await cluster("cluster2"))?.spec?.managedClusterClientConfigs?.[0]?.url);
      // anonymous: the spoke's API server answers, over TLS verified by the profile's CA alone
      expect([200, 401, 403]).toContain(await verifiedStatus(`${provider.cluster!.server}/livez`, provider.cluster!["certificate-authority-data"]!));
    } finally {
      // back to default for the other tests
      await run("clusterset", "set", "default", "--clusters", "cluster2");
    }
    await eventually(async () => expect((await cluster("cluster2"))?.metadata.labels?.[ClusterLabel.ClusterSet]).toBe("default"), WAIT);
    await eventually(async () => expect((await hub().list(ClusterProfileResource, { namespace: ns })).items).toEqual([]), WAIT);
  });

  it("create placement with a label selector or a number of clusters gets PlacementDecisions naming the clusters it selects", async () => {
    const ns = "clusteradm-placement";
    await workspace(ns, "global");
    await setLabels("cluster1", { tier: "gold" });
    try {
      expect(await ok("create", "placement", "gold", "--namespace", ns, "--label-selectors", "tier=gold")).toBe(`Placement 'gold' has been created in '${ns}' namespace\n`);
      await ok("create", "placement", "any-two", "--namespace", ns, "--count", "2");
      await ok("create", "placement", "any-one", "--namespace", ns, "--count", "1");
      await ok("create", "placement", "none", "--namespace", ns, "--label-selectors", "tier=platinum");
      await eventually(async () => {
        expect(await decided(ns, "gold")).toEqual(["cluster1"]);
        expect(await decided(ns, "any-two")).toEqual(["cluster1", "cluster2"]);
        expect(await decided(ns, "any-one")).toHaveLength(1);
        expect(SPOKES).toContain((await decided(ns, "any-one"))[0]);
      }, WAIT);
      expect(await decided(ns, "none")).toEqual([]);

      // A cluster that gains the label is decided on too.
      await setLabels("cluster2", { tier: "gold" });
      await eventually(async () => expect(await decided(ns, "gold")).toEqual(["cluster1", "cluster2"]), WAIT);
    } finally {
      await setLabels("cluster1", { tier: null });
      await setLabels("cluster2", { tier: null });
    }
  });

  it("create work --placement puts a ManifestWork in each decided cluster's namespace, and each spoke applies it", async () => {
    const ns = "clusteradm-work";
    const name = "clusteradm-hello";
    await workspace(ns, "global");
    await ok("create", "placement", "everywhere", "--namespace", ns);
    await eventually(async () => expect(await decided(ns, "everywhere")).toEqual([...SPOKES]), WAIT);
    const file = join(work, "hello.yaml");
    writeFileSync(file, `apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${name}\n  namespace: default\ndata:\n  from: clusteradm\n`);

    const stdout = await ok("create", "work", name, "-f", file, "--placement", `${ns}/everywhere`);
    expect(stdout.trimEnd().split("\n").sort()).toEqual(SPOKES.map((c) => `create work ${name} in cluster ${c}`));
    const { items } = await hub().list<KubeObject>(ManifestWorkResource);
    expect(items.filter((w) => w.metadata.name === name).map((w) => w.metadata.namespace).sort()).toEqual([...SPOKES]);

    for (const spoke of SPOKES) {
      const admin = KubeClient.fromKubeconfig(clusters!.get(spoke).adminKubeconfig);
      try {
        await eventually(async () => {
          const cm = await admin.get<KubeObject & { data?: Record<string, string> }>(ConfigMapResource, name, "default");
          expect(cm?.data).toEqual({ from: "clusteradm" });
          const w = await hub().get<ManifestWork & KubeObject>(ManifestWorkResource, name, spoke);
          expect(findCondition(w?.status?.conditions, "Applied")?.status).toBe("True");
        }, WAIT);
      } finally {
        admin.close();
      }
    }
  });

  it("a ClusterManagementAddOn with installStrategy Placements gets ManagedClusterAddOns on exactly the clusters a clusteradm placement decides on", async () => {
    const ns = "clusteradm-addon";
    const addon = "clusteradm-e2e-addon";
    const installed = async () => (await hub().list<KubeObject>(ManagedClusterAddOnV1alpha1Resource)).items.filter((a) => a.metadata.name === addon).map((a) => a.metadata.namespace!).sort();
    await workspace(ns, "global");
    await setLabels("cluster1", { "addon-e2e": "yes" });
    try {
      await ok("create", "placement", "addon-targets", "--namespace", ns, "--label-selectors", "addon-e2e=yes");
      await eventually(async () => expect(await decided(ns, "addon-targets")).toEqual(["cluster1"]), WAIT);
      await hub().create(ClusterManagementAddOnV1alpha1Resource, {
        metadata: { name: addon },
        spec: { installStrategy: { type: "Placements", placements: [{ namespace: ns, name: "addon-targets" }] } },
      } as KubeObject);
      await eventually(async () => expect(await installed()).toEqual(["cluster1"]), WAIT);

      // The decisions move, and the add-on with them.
      await setLabels("cluster2", { "addon-e2e": "yes" });
      await eventually(async () => expect(await installed()).toEqual(["cluster1", "cluster2"]), WAIT);
      await setLabels("cluster1", { "addon-e2e": null });
      await eventually(async () => expect(await decided(ns, "addon-targets")).toEqual(["cluster2"]), WAIT);
      await eventually(async () => expect(await installed()).toEqual(["cluster2"]), WAIT);
    } finally {
      await hub().delete(ClusterManagementAddOnV1alpha1Resource, addon);
      await setLabels("cluster1", { "addon-e2e": null });
      await setLabels("cluster2", { "addon-e2e": null });
    }
  });
});
