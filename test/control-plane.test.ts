// The control-plane harness gives real clusters: OCM API installed, identities enforced by RBAC,
// CSRs signed by kube-controller-manager, bootstrap tokens, and no process left behind.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { execFile, spawn } from "node:child_process";
import { promisify } from "node:util";
import { writeFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  ApiException,
  AuthenticationV1Api,
  CertificatesV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  RbacAuthorizationV1Api,
  PatchStrategy,
  setHeaderOptions,
} from "@kubernetes/client-node";
import { ocmCrds, startClusters, type LocalClusters } from "../dev/control-plane/clusters.ts";
import { startApiserver, stopApiserver } from "../dev/control-plane/restart.ts";
import { buildKubeconfig } from "../shared/kube/kubeconfig.ts";
import { createCertificateRequest, generateKeyPair, privateKeyToPem } from "../shared/pki.ts";
import { eventually } from "./support/eventually.ts";

const run = promisify(execFile);
const MC = { group: "cluster.open-cluster-management.io", version: "v1", plural: "managedclusters" } as const;
const suffix = () => Math.random().toString(36).slice(2, 8);
const statusOf = (err: unknown) => (err instanceof ApiException ? err.code : undefined);
// This file drives the clusters through client-node's typed APIs, as any Kubernetes client would.
function kubeConfigFrom(text: string): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromString(text);
  return kc;
}

let local: LocalClusters;
beforeAll(async () => {
  local = await startClusters({ names: ["hub", "spoke"] });
});
afterAll(async () => {
  await local?.stop();
});

async function whoAmI(kubeconfig: string) {
  const review = await kubeConfigFrom(kubeconfig).makeApiClient(AuthenticationV1Api).createSelfSubjectReview({ body: {} });
  return review.status?.userInfo;
}

describe("the OCM API on a real apiserver", () => {
  it("creates a ManagedCluster and patches its status through the status subresource", async () => {
    const api = local.get("hub").admin().makeApiClient(CustomObjectsApi);
    const name = `cluster-${suffix()}`;
    await api.createClusterCustomObject({
      ...MC,
      body: {
        apiVersion: "cluster.open-cluster-management.io/v1",
        kind: "ManagedCluster",
        metadata: { name },
        spec: { hubAcceptsClient: true, managedClusterClientConfigs: [{ url: "https://127.0.0.1:6443", caBundle: Buffer.from("ca").toString("base64") }] },
      },
    });
    const created = await api.getClusterCustomObject({ ...MC, name });
    expect(created.spec.leaseDurationSeconds).toBe(60); // CRD default, as OCM's
    const conditions = [
      { type: "ManagedClusterJoined", status: "True", reason: "ManagedClusterJoined", message: "Managed cluster joined", lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, "Z") },
      { type: "ManagedClusterConditionAvailable", status: "True", reason: "ManagedClusterAvailable", message: "Managed cluster is available", lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, "Z") },
    ];
    await api.patchClusterCustomObjectStatus(
      { ...MC, name, body: { metadata: { resourceVersion: created.metadata.resourceVersion }, status: { conditions, version: { kubernetes: "v1.35.4" } } } },
      setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
    );
    const read = await api.getClusterCustomObject({ ...MC, name });
    expect(read.status.conditions.map((c: { type: string }) => c.type)).toEqual(["ManagedClusterJoined", "ManagedClusterConditionAvailable"]);
    expect(read.status.version.kubernetes).toBe("v1.35.4");
    // spec changes through /status are ignored, status changes through the main resource too
    await api.patchClusterCustomObject({ ...MC, name, body: { status: { version: { kubernetes: "other" } } } }, setHeaderOptions("Content-Type", PatchStrategy.MergePatch));
    expect((await api.getClusterCustomObject({ ...MC, name })).status.version.kubernetes).toBe("v1.35.4");

    const kubeconfig = join(mkdtempSync(join(tmpdir(), "kc-")), "hub.kubeconfig");
    writeFileSync(kubeconfig, local.get("hub").adminKubeconfig);
    const { stdout } = await run("kubectl", ["--kubeconfig", kubeconfig, "get", "managedclusters", name]);
    const [header, row] = stdout.trim().split("\n");
    expect(header!.split(/\s{2,}/)).toEqual(["NAME", "HUB ACCEPTED", "MANAGED CLUSTER URLS", "JOINED", "AVAILABLE", "AGE"]);
    expect(row!.split(/\s+/).slice(0, 5)).toEqual([name, "true", "https://127.0.0.1:6443", "True", "True"]);
  });

  it("installs the spoke-side kinds on every cluster", async () => {
    const api = local.get("spoke").admin().makeApiClient(CustomObjectsApi);
    const name = `claim-${suffix()}`;
    await api.createClusterCustomObject({
      group: "cluster.open-cluster-management.io", version: "v1alpha1", plural: "clusterclaims",
      body: { apiVersion: "cluster.open-cluster-management.io/v1alpha1", kind: "ClusterClaim", metadata: { name }, spec: { value: "x" } },
    });
    const got = await api.getClusterCustomObject({ group: "cluster.open-cluster-management.io", version: "v1alpha1", plural: "clusterclaims", name });
    expect(got.spec.value).toBe("x");
  });
});

describe("identities", () => {
  it("forbids a minted user to list ManagedClusters until a binding grants it", async () => {
    const hub = local.get("hub");
    const user = `viewer-${suffix()}`;
    const client = kubeConfigFrom(await hub.kubeconfigFor({ user, groups: ["viewers"] })).makeApiClient(CustomObjectsApi);
    const denied = await client.listClusterCustomObject({ ...MC }).catch((e: unknown) => e);
    expect(statusOf(denied)).toBe(403);

    const rbac = hub.admin().makeApiClient(RbacAuthorizationV1Api);
    await rbac.createClusterRole({ body: { metadata: { name: user }, rules: [{ apiGroups: [MC.group], resources: [MC.plural], verbs: ["list"] }] } });
    await rbac.createClusterRoleBinding({
      body: { metadata: { name: user }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: user }, subjects: [{ kind: "User", name: user, apiGroup: "rbac.authorization.k8s.io" }] },
    });
    const list = await eventually(() => client.listClusterCustomObject({ ...MC }));
    expect(Array.isArray(list.items)).toBe(true);
  });

  it("signs an approved CSR with a certificate that authenticates as the requesting user", async () => {
    const hub = local.get("hub");
    const user = `agent-${suffix()}`;
    const rbac = hub.admin().makeApiClient(RbacAuthorizationV1Api);
    await rbac.createClusterRoleBinding({
      body: {
        metadata: { name: `${user}-csr` },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "system:node-bootstrapper" }, // create/get CSRs
        subjects: [{ kind: "User", name: user, apiGroup: "rbac.authorization.k8s.io" }],
      },
    });
    const keys = await generateKeyPair();
    const requested = { commonName: user, organizations: ["group-a"] };
    const csrPem = await createCertificateRequest(requested, keys);
    const asUser = kubeConfigFrom(await hub.kubeconfigFor({ user })).makeApiClient(CertificatesV1Api);
    const name = `csr-${suffix()}`;
    await asUser.createCertificateSigningRequest({
      body: { metadata: { name }, spec: { request: Buffer.from(csrPem).toString("base64"), signerName: "kubernetes.io/kube-apiserver-client", usages: ["client auth", "digital signature"], expirationSeconds: 3600 } },
    });
    const admin = hub.admin().makeApiClient(CertificatesV1Api);
    const csr = await admin.readCertificateSigningRequest({ name });
    expect(csr.spec.username).toBe(user);
    csr.status = { conditions: [{ type: "Approved", status: "True", reason: "Test", message: "approved by the test" }] };
    await admin.replaceCertificateSigningRequestApproval({ name, body: csr });

    const signed = await eventually(async () => {
      const c = await admin.readCertificateSigningRequest({ name });
      if (!c.status?.certificate) throw new Error("not signed yet");
      return c;
    });
    const certPem = Buffer.from(signed.status!.certificate!, "base64").toString();
    const kubeconfig = buildKubeconfig({ server: hub.url, caPem: hub.caPem, credentials: { kind: "certificate", certPem, keyPem: await privateKeyToPem(keys.privateKey) } });
    const info = await whoAmI(kubeconfig);
    expect(info?.username).toBe(user);
    expect(info?.groups).toContain("group-a");
  });

  it("authenticates bootstrap tokens as system:bootstrap users in their extra groups", async () => {
    const spoke = local.get("spoke");
    const token = await spoke.createBootstrapToken(["system:bootstrappers:managedcluster"]);
    const info = await whoAmI(token.kubeconfig);
    expect(info?.username).toBe(token.user);
    expect(info?.groups).toEqual(expect.arrayContaining(["system:bootstrappers", "system:bootstrappers:managedcluster"]));
  });
});

describe("controllers that make it a real cluster", () => {
  it("finishes namespace deletion and collects owned objects", async () => {
    const core = local.get("spoke").admin().makeApiClient(CoreV1Api);
    const ns = `ns-${suffix()}`;
    await core.createNamespace({ body: { metadata: { name: ns } } });
    const owner = await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: "owner" } } });
    await core.createNamespacedConfigMap({
      namespace: ns,
      body: { metadata: { name: "owned", ownerReferences: [{ apiVersion: "v1", kind: "ConfigMap", name: "owner", uid: owner.metadata!.uid! }] } },
    });
    await core.deleteNamespacedConfigMap({ namespace: ns, name: "owner" });
    await eventually(async () => {
      const gone = await core.readNamespacedConfigMap({ namespace: ns, name: "owned" }).catch((e: unknown) => e);
      expect(statusOf(gone)).toBe(404);
    });
    await core.deleteNamespace({ name: ns });
    await eventually(async () => {
      const gone = await core.readNamespace({ name: ns }).catch((e: unknown) => e);
      expect(statusOf(gone)).toBe(404);
    });
  });
});

describe("our Kubernetes client", () => {
  it("keeps one connection working across every verb, a DELETE with a body included", async () => {
    const { KubeClient } = await import("../shared/kube/client.ts");
    const { SecretResource, NamespaceResource } = await import("../shared/api/kube.ts");
    const client = KubeClient.fromKubeconfig(local.get("spoke").adminKubeconfig);
    try {
      const name = `s-${suffix()}`;
      expect(await client.delete(SecretResource, name, "default")).toBe(false); // 404 answered, body sent
      expect((await client.get(NamespaceResource, "default"))?.metadata.name).toBe("default");
      await client.create(SecretResource, { metadata: { name, namespace: "default" } });
      expect(await client.delete(SecretResource, name, "default")).toBe(true);
      expect((await client.get(NamespaceResource, "default"))?.metadata.name).toBe("default");
      expect(await client.get(SecretResource, name, "default")).toBeUndefined();
    } finally {
      client.close();
    }
  });
});

describe("CRDs from the kept seed", () => {
  // The second start of a set is planted with what the first left in etcd: its CRD was established
  // before that start began, so the 2 s the API server sleeps in a create right after an Established
  // CRD never comes. A different set is not mixed in: the cluster serves the CRDs it was given and no more.
  it("a cluster started again with the same CRDs serves them established before its start, and only them, and creates a custom resource", async () => {
    const crd = ocmCrds().find((c) => (c as { metadata: { name: string } }).metadata.name === "placements.cluster.open-cluster-management.io")!;
    expect(crd).toBeDefined();
    const first = await startClusters({ names: ["seeded"], crds: [crd], admission: false, controllers: false, log: () => {} });
    await first.stop();
    const began = Date.now();
    const again = await startClusters({ names: ["seeded"], crds: [crd], admission: false, controllers: false, log: () => {} });
    try {
      const api = kubeConfigFrom(again.get("seeded").adminKubeconfig).makeApiClient(CustomObjectsApi);
      const crds = (await api.listClusterCustomObject({ group: "apiextensions.k8s.io", version: "v1", plural: "customresourcedefinitions" })) as {
        items: { metadata: { name: string }; status: { conditions: { type: string; status: string; lastTransitionTime: string }[] } }[];
      };
      expect(crds.items.map((c) => c.metadata.name)).toEqual(["placements.cluster.open-cluster-management.io"]);
      const established = crds.items[0]!.status.conditions.find((c) => c.type === "Established")!;
      expect(established.status).toBe("True");
      expect(Date.parse(established.lastTransitionTime)).toBeLessThanOrEqual(began - 1000);
      await api.createNamespacedCustomObject({ group: "cluster.open-cluster-management.io", version: "v1beta1", namespace: "default", plural: "placements", body: { apiVersion: "cluster.open-cluster-management.io/v1beta1", kind: "Placement", metadata: { name: "p" }, spec: {} } });
      const got = (await api.getNamespacedCustomObject({ group: "cluster.open-cluster-management.io", version: "v1beta1", namespace: "default", plural: "placements", name: "p" })) as { metadata: { name: string } };
      expect(got.metadata.name).toBe("p");
    } finally {
      await again.stop();
    }
  }, 120_000);
});

describe("process hygiene", () => {
  it("leaves no process behind when the process that started the clusters is killed", async () => {
    const script = join(mkdtempSync(join(tmpdir(), "cp-")), "start.ts");
    writeFileSync(
      script,
      `import { startClusters } from ${JSON.stringify(join(import.meta.dirname, "..", "dev", "control-plane", "clusters.ts"))};
const c = await startClusters({ names: ["solo"], crds: false, controllers: false, log: () => {} });
console.log(JSON.stringify(c.clusters.map((x) => x.apiserver!.child.pid)));
setInterval(() => {}, 1000);`,
    );
    const child = spawn(process.execPath, [script], { stdio: ["ignore", "pipe", "inherit"] });
    const pids: number[] = await new Promise((resolve, reject) => {
      child.stdout.once("data", (d: Buffer) => resolve(JSON.parse(d.toString())));
      child.once("exit", (code) => reject(new Error(`exited ${code}`)));
    });
    const alive = (pid: number) => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    expect(pids.every(alive)).toBe(true);
    child.kill("SIGKILL");
    await eventually(() => expect(pids.filter(alive)).toEqual([]), { timeoutMs: 15_000 });
  });

  it("stops an apiserver that was started again along with the rest", async () => {
    const c = await startClusters({ names: ["again"], crds: false, controllers: false, log: () => {} });
    const cluster = c.get("again");
    await stopApiserver(cluster);
    await startApiserver(cluster);
    const restarted = cluster.apiserver!.child;
    expect(restarted.exitCode).toBeNull();
    await c.stop();
    expect(restarted.exitCode !== null || restarted.signalCode !== null).toBe(true);
  });
});
