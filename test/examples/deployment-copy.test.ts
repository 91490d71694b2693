// examples/deployment-copy end to end against three real clusters (a hub as the source, two targets),
// run as the SDK runs any function locally (dev/local/run-function.ts: its server and a relay built
// from its watches), under identities with only the example's RBAC.
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { startClusters, type LocalClusters } from "../../dev/control-plane/clusters.ts";
import { identityFor } from "../../dev/control-plane/identities.ts";
import { startApiserver, stopApiserver } from "../../dev/control-plane/restart.ts";
import { runFunction, type RunningFunction } from "../../dev/local/run-function.ts";
import { ClusterRoleBindingResource, ClusterRoleResource, DeploymentResource, NamespaceResource } from "../../shared/api/kube.ts";
import { ManagedClusterResource } from "../../shared/api/cluster.ts";
import { CopiesFinalizer, DeletePolicyAnnotation, OwnedLabel, OwnerAnnotation, ownedBy, ownerOf, SealAnnotation } from "../../shared/cross-cluster-owner.ts";
import { classifyError } from "../../shared/kube/errors.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import deploymentCopy, { CopiesAnnotation, CopyToAnnotation, type Config } from "../../examples/deployment-copy/function.ts";
import { eventually } from "../support/eventually.ts";

const HUB = "hub";
const TARGETS = ["t1", "t2"];
const dir = join(import.meta.dirname, "../../examples/deployment-copy");

let planes: LocalClusters;
let admin: Record<string, KubeClient>;
let running: RunningFunction;
let kubeconfigs: Record<string, string>;
const config: Config = { source: HUB, targets: TARGETS, copySealKey: randomBytes(32).toString("base64") };
const suffix = () => Math.random().toString(36).slice(2, 7);

type Deployment = KubeObject & { spec?: { replicas?: number; [k: string]: unknown } };

async function start(): Promise<void> {
  running = await runFunction(deploymentCopy, { config, kubeconfigs, log: { info() {}, warn() {}, error() {} } });
  await running.relay.ready;
}

beforeAll(async () => {
  planes = await startClusters({ names: [HUB, ...TARGETS], controllers: false });
  admin = Object.fromEntries([HUB, ...TARGETS].map((c) => [c, KubeClient.fromKubeconfig(planes.get(c).adminKubeconfig)]));
  kubeconfigs = {
    [HUB]: await identityFor(planes.get(HUB), "deployment-copy", "", join(dir, "rbac-source.yaml")),
    ...Object.fromEntries(await Promise.all(TARGETS.map(async (t) => [t, await identityFor(planes.get(t), "deployment-copy", "", join(dir, "rbac-target.yaml"))] as const))),
  };
  await admin[HUB]!.create(ManagedClusterResource, { metadata: { name: "t1", labels: { env: "prod" } }, spec: { hubAcceptsClient: true } });
  await admin[HUB]!.create(ManagedClusterResource, { metadata: { name: "t2", labels: { env: "dev" } }, spec: { hubAcceptsClient: true } });
  await start();
}, 120_000);

afterAll(async () => {
  await running?.stop();
  await planes?.stop();
});

async function source(copyTo: string | undefined, annotations: Record<string, string> = {}): Promise<Deployment> {
  const ns = `apps-${suffix()}`;
  await admin[HUB]!.create(NamespaceResource, { metadata: { name: ns } });
  const labels = { app: "web" };
  return admin[HUB]!.create<Deployment>(DeploymentResource, {
    metadata: { name: "web", namespace: ns, labels, annotations: { ...(copyTo ? { [CopyToAnnotation]: copyTo } : {}), ...annotations } },
    spec: { replicas: 2, selector: { matchLabels: labels }, template: { metadata: { labels }, spec: { containers: [{ name: "web", image: "registry.invalid/web:1" }] } } },
  });
}

const copyOn = (cluster: string, d: Deployment) => admin[cluster]!.get<Deployment>(DeploymentResource, d.metadata.name!, d.metadata.namespace);
const sourceNow = (d: Deployment) => admin[HUB]!.get<Deployment>(DeploymentResource, d.metadata.name!, d.metadata.namespace);
const summaryOf = async (d: Deployment) => JSON.parse(((await sourceNow(d))?.metadata.annotations as Record<string, string> | undefined)?.[CopiesAnnotation] ?? "{}") as Record<string, string>;

describe("copies", () => {
  it("copies to the clusters the annotation selects, follows their labels, and keeps each copy's status on the source", async () => {
    const d = await source("env=prod");
    await eventually(async () => expect(ownerOf((await copyOn("t1", d))!, "t1")).toMatchObject({ cluster: HUB, name: "web", uid: d.metadata.uid }));
    expect(await copyOn("t2", d)).toBeUndefined();
    expect((await sourceNow(d))!.metadata.finalizers).toContain(CopiesFinalizer);
    await eventually(async () => expect(await summaryOf(d)).toEqual({ t1: "0/0" }));

    // t2 joins the selection, and t1's copy reports its rollout (a deployment controller would)
    await admin[HUB]!.patch(ManagedClusterResource, "t2", { metadata: { labels: { env: "prod" } } });
    await eventually(async () => expect(await copyOn("t2", d)).toBeDefined());
    await admin.t1!.patch(DeploymentResource, "web", { status: { replicas: 2, readyReplicas: 2 } }, { namespace: d.metadata.namespace, subresource: "status" });
    await eventually(async () => expect(await summaryOf(d)).toEqual({ t1: "2/2", t2: "0/0" }));

    // a change on the source reaches both copies
    await admin[HUB]!.patch(DeploymentResource, "web", { spec: { replicas: 5 } }, { namespace: d.metadata.namespace });
    await eventually(async () => expect([(await copyOn("t1", d))?.spec?.replicas, (await copyOn("t2", d))?.spec?.replicas]).toEqual([5, 5]));

    // t2 leaves the selection: its copy goes, t1's stays
    await admin[HUB]!.patch(ManagedClusterResource, "t2", { metadata: { labels: { env: "dev" } } });
    await eventually(async () => expect(await copyOn("t2", d)).toBeUndefined());
    expect(await copyOn("t1", d)).toBeDefined();
    await eventually(async () => expect(await summaryOf(d)).toEqual({ t1: "2/2" }));
  });

  it("makes a deleted copy again", async () => {
    const d = await source("env=prod");
    const first = await eventually(async () => (await copyOn("t1", d)) ?? Promise.reject(new Error("no copy yet")));
    await admin.t1!.delete(DeploymentResource, "web", d.metadata.namespace);
    await eventually(async () => {
      const again = await copyOn("t1", d);
      expect(again?.metadata.uid).toBeDefined();
      expect(again?.metadata.uid).not.toBe(first.metadata.uid);
    });
  });
});

describe("garbage collection across clusters", () => {
  it("deletes the copies before the source goes", async () => {
    const d = await source("env=prod");
    await eventually(async () => expect(await copyOn("t1", d)).toBeDefined());
    await admin[HUB]!.delete(DeploymentResource, "web", d.metadata.namespace);
    await eventually(async () => expect(await sourceNow(d)).toBeUndefined());
    expect(await copyOn("t1", d)).toBeUndefined();
  });

  it("waits for a target that is unreachable during the deletion, and finishes when it is back", async () => {
    const d = await source("env=prod");
    await eventually(async () => expect(await copyOn("t1", d)).toBeDefined());
    await stopApiserver(planes.get("t1"));
    try {
      await admin[HUB]!.delete(DeploymentResource, "web", d.metadata.namespace);
      await new Promise((r) => setTimeout(r, 2_000));
      // the source waits, held by its finalizer, for the copy it cannot reach
      expect((await sourceNow(d))?.metadata.finalizers).toContain(CopiesFinalizer);
    } finally {
      await startApiserver(planes.get("t1"));
    }
    await eventually(async () => expect(await sourceNow(d)).toBeUndefined(), { timeoutMs: 60_000 });
    expect(await copyOn("t1", d)).toBeUndefined();
  }, 120_000);

  it("collects a copy whose source was deleted and recreated (a new uid) while the function was down", async () => {
    const d = await source("env=prod");
    const copy = await eventually(async () => (await copyOn("t1", d)) ?? Promise.reject(new Error("no copy yet")));
    await running.stop();
    try {
      // removed behind the function's back: its finalizer dropped by hand, then recreated without targets
      await admin[HUB]!.patch(DeploymentResource, "web", { metadata: { finalizers: null } }, { namespace: d.metadata.namespace });
      await admin[HUB]!.delete(DeploymentResource, "web", d.metadata.namespace);
      await eventually(async () => expect(await sourceNow(d)).toBeUndefined());
      await admin[HUB]!.create<Deployment>(DeploymentResource, { metadata: { name: "web", namespace: d.metadata.namespace, labels: { app: "web" } }, spec: { selector: { matchLabels: { app: "web" } }, template: { metadata: { labels: { app: "web" } }, spec: { containers: [{ name: "web", image: "registry.invalid/web:2" }] } } } });
      expect((await copyOn("t1", d))?.metadata.uid).toBe(copy.metadata.uid);
    } finally {
      await start();
    }
    await eventually(async () => expect(await copyOn("t1", d)).toBeUndefined());
    expect(await sourceNow(d)).toBeDefined(); // the new source is not touched
  });

  it("orphans the copies on request: they stay, without the owner marks", async () => {
    const d = await source("env=prod", { [DeletePolicyAnnotation]: "Orphan" });
    await eventually(async () => expect(await copyOn("t1", d)).toBeDefined());
    await admin[HUB]!.delete(DeploymentResource, "web", d.metadata.namespace);
    await eventually(async () => expect(await sourceNow(d)).toBeUndefined());
    const kept = (await copyOn("t1", d))!;
    expect(kept).toBeDefined();
    expect((kept.metadata.labels as Record<string, string> | undefined)?.[OwnedLabel]).toBeUndefined();
    expect((kept.metadata.annotations as Record<string, string> | undefined)?.[OwnerAnnotation.uid]).toBeUndefined();
    expect((kept.metadata.annotations as Record<string, string> | undefined)?.[SealAnnotation]).toBeUndefined();
  });

  it("keeps a Deployment on an unchosen target that someone who may patch but not delete Deployments marked as the source's copy", async () => {
    // mallory, on t2: Deployments read, patched and updated, never deleted
    const name = "deployment-patcher";
    await admin.t2!.create(ClusterRoleResource, { metadata: { name }, rules: [{ apiGroups: ["apps"], resources: ["deployments"], verbs: ["get", "list", "watch", "patch", "update"] }] });
    await admin.t2!.create(ClusterRoleBindingResource, { metadata: { name }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name }, subjects: [{ kind: "User", apiGroup: "rbac.authorization.k8s.io", name: "mallory" }] });
    const mallory = KubeClient.fromKubeconfig(await planes.get("t2").kubeconfigFor({ user: "mallory" }));
    try {
      const d = await source("env=prod"); // t1 is chosen, t2 is not
      await eventually(async () => expect(await copyOn("t1", d)).toBeDefined());
      await admin.t2!.create(NamespaceResource, { metadata: { name: d.metadata.namespace } });
      const theirs = await admin.t2!.create<Deployment>(DeploymentResource, { metadata: { name: "web", namespace: d.metadata.namespace }, spec: (await sourceNow(d))!.spec });
      await eventually(() => expect(mallory.delete(DeploymentResource, "web", d.metadata.namespace)).rejects.toSatisfy((e: unknown) => classifyError(e) === "forbidden"));
      const marks = ownedBy((await sourceNow(d))!, HUB);
      await mallory.patch(DeploymentResource, "web", { metadata: { labels: marks.labels, annotations: marks.annotations } }, { namespace: d.metadata.namespace });
      // the source changes, so the function reconciles it: t1's copy follows, t2's "copy" would be dropped
      await admin[HUB]!.patch(DeploymentResource, "web", { spec: { replicas: 3 } }, { namespace: d.metadata.namespace });
      await eventually(async () => expect((await copyOn("t1", d))?.spec?.replicas).toBe(3));
      await new Promise((r) => setTimeout(r, 3_000));
      expect((await copyOn("t2", d))?.metadata.uid).toBe(theirs.metadata.uid);
    } finally {
      mallory.close();
    }
  });
});

describe("the definition", () => {
  it("derives the subscriptions a Broker needs from the watches, and nothing else", () => {
    const kinds = new Set(deploymentCopy.subscriptions(config).map((s) => `${s.filters.type ?? ""} ${s.filters.kind ?? ""}`.trim()));
    expect(kinds).toEqual(
      new Set([
        "dev.knative.apiserver.resource.add Deployment",
        "dev.knative.apiserver.resource.update Deployment",
        "dev.knative.apiserver.resource.delete Deployment",
        "dev.knative.apiserver.resource.add ManagedCluster",
        "dev.knative.apiserver.resource.update ManagedCluster",
        "dev.knative.apiserver.resource.delete ManagedCluster",
        "dev.knative.sources.ping",
      ]),
    );
  });

  it("reads its settings from the environment, and refuses a bad one", () => {
    const key = randomBytes(32).toString("base64");
    expect(deploymentCopy.configFromEnv({ SOURCE: "hub", TARGETS: "a, b", COPY_SEAL_KEY: key })).toEqual({ source: "hub", targets: ["a", "b"], copySealKey: key });
    expect(() => deploymentCopy.configFromEnv({ COPY_SEAL_KEY: key })).toThrow(/targets/);
    expect(() => deploymentCopy.configFromEnv({ SOURCE: "hub", TARGETS: "a" })).toThrow(/copySealKey/);
  });
});
