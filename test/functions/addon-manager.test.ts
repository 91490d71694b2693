// The addon-manager function against a real hub, under its own RBAC: the helloworld AddOnTemplate
// add-on (manifests/addons/helloworld.yaml) enabled with the CLI, rendered into its deploy work with its
// registration and hub permission; configs and their spec hashes; ManifestApplied and Progressing as the
// work agent reports; oversized add-ons split over several works; add-on health while the cluster is Unknown.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { createHash } from "node:crypto";
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import type { LocalCluster } from "../../dev/control-plane/clusters.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { applyManifests } from "../../shared/apply.ts";
import { setCondition, findCondition, type NewCondition } from "../../shared/conditions.ts";
import { ConfigMapResource, NamespaceResource, RoleBindingResource } from "../../shared/api/kube.ts";
import { ManagedClusterConditionType, ManagedClusterReason, ManagedClusterResource, PlacementDecisionResource, PlacementResource, ClusterLabel, type ManagedCluster } from "../../shared/api/cluster.ts";
import { ManifestWorkResource, WorkAnnotation, WorkConditionType, WorkReason, type ManifestWork } from "../../shared/api/work.ts";
import {
  AddOnConditionType,
  AddOnDeploymentConfigV1alpha1Resource,
  AddOnGroup,
  AddOnLabel,
  AddOnReason,
  AddOnTemplateResource,
  ClusterManagementAddOnV1alpha1Resource,
  ManagedClusterAddOnV1alpha1Resource,
  type AddOnDeploymentConfig,
  type AddOnTemplate,
  type ClusterManagementAddOnV1alpha1,
  type ManagedClusterAddOnV1alpha1,
} from "../../shared/api/addon.ts";
import { AddOnMessage, addonAgentUser, addonGroups, deployWorkName, hubPermissionBindingName, templateAgentName } from "../../shared/api/addon-strings.ts";
import { handleEvent, serve, type Io } from "../../shared/harness.ts";
import fn, { type Config } from "../../functions/addon-manager/reconcile.ts";
import { goJson, specHash } from "../../functions/addon-manager/spec-hash.ts";
import { overrideImage, substitute } from "../../functions/addon-manager/render.ts";
import { enableAddon } from "../../cli/addon.ts";
import { objectEvent, postEvent, startFunctionServer, tickEvent } from "../support/functions.ts";
import { eventually } from "../support/eventually.ts";
import { functionIo, startHub, type Hub } from "../support/fixtures.ts";
import { PROBED_DAEMONSET, PROBED_DEPLOYMENT, PROBED_NAMESPACE, createProbedAddon, reportWork as reportProbedWork, type WorkReport } from "../support/probed-addon.ts";

const HUB = "hub";
const HELLO = "helloworld";
const suffix = () => Math.random().toString(36).slice(2, 7);
const helloworldYaml = readFileSync(join(import.meta.dirname, "..", "..", "manifests", "addons", "helloworld.yaml"), "utf8");

let plane: Hub;
let hub: LocalCluster;
let admin: KubeClient;
let io: Io<Config>;

beforeAll(async () => {
  plane = await startHub(HUB);
  ({ cluster: hub, admin } = plane);
  await applyManifests(admin, helloworldYaml);
  io = await functionIo(hub, fn.spec.name, { hubCluster: HUB }, [ManagedClusterAddOnV1alpha1Resource, ManifestWorkResource, AddOnDeploymentConfigV1alpha1Resource, PlacementDecisionResource]);
});

afterAll(() => plane?.stop());

// A registered cluster: the ManagedCluster and its namespace on the hub, as acceptance leaves them.
async function newCluster(): Promise<string> {
  const c = `cluster-${suffix()}`;
  await admin.create(ManagedClusterResource, { metadata: { name: c }, spec: { hubAcceptsClient: true } });
  await admin.create(NamespaceResource, { metadata: { name: c } });
  return c;
}

const reconcile = (c: string, addon: string) => fn.spec.reconcile(io, { cluster: HUB, namespace: c, name: addon });
const readAddon = async (c: string, addon: string) => (await admin.get<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, addon, c))!;
const readWork = (c: string, name: string) => admin.get<ManifestWork>(ManifestWorkResource, name, c);
const condition = (a: ManagedClusterAddOnV1alpha1, type: string) => findCondition(a.status?.conditions, type);
const manifestOf = (w: ManifestWork, kind: string) => (w.spec?.workload?.manifests ?? []).find((m) => m.kind === kind) as KubeObject & Record<string, any>;
const templateHash = async (name: string) => specHash((await admin.get<AddOnTemplate>(AddOnTemplateResource, name))!);

// What the work agent writes once it has applied (or failed to apply) a work.
async function reportWork(c: string, name: string, applied: "True" | "False", available: "True" | "False" = applied): Promise<void> {
  const w = (await readWork(c, name))!;
  const now = new Date();
  const gen = w.metadata.generation;
  let conditions = setCondition(w.status?.conditions, { type: WorkConditionType.Applied, status: applied, reason: applied === "True" ? WorkReason.AppliedManifestWorkComplete : WorkReason.AppliedManifestWorkFailed, message: applied === "True" ? "Apply manifest work complete" : "Failed to apply manifest work", observedGeneration: gen }, now);
  conditions = setCondition(conditions, { type: WorkConditionType.Available, status: available, reason: available === "True" ? WorkReason.ResourcesAvailable : WorkReason.ResourcesNotAvailable, message: "x", observedGeneration: gen }, now);
  await admin.patch(ManifestWorkResource, name, { status: { conditions } }, { namespace: c, subresource: "status" });
}

describe("deploying the helloworld AddOnTemplate add-on", () => {
  it("renders the template into addon-helloworld-deploy-0 with its registration, namespace and hub permission", async () => {
    const c = await newCluster();
    expect(await enableAddon(admin, { addon: HELLO, clusters: [c] })).toEqual([{ cluster: c, result: "created" }]);
    await reconcile(c, HELLO);

    const addon = await readAddon(c, HELLO);
    const cma = (await admin.get<ClusterManagementAddOnV1alpha1>(ClusterManagementAddOnV1alpha1Resource, HELLO))!;
    expect(addon.metadata.ownerReferences).toEqual([expect.objectContaining({ kind: "ClusterManagementAddOn", name: HELLO, uid: cma.metadata.uid, controller: true })]);
    const user = addonAgentUser(c, HELLO, templateAgentName(HELLO));
    expect(user).toBe(`system:open-cluster-management:cluster:${c}:addon:helloworld:agent:helloworld-agent`);
    expect(addon.status?.registrations).toEqual([{ signerName: "kubernetes.io/kube-apiserver-client", subject: { user, groups: addonGroups(c, HELLO) } }]);
    expect(addon.status?.namespace).toBe("open-cluster-management-agent-addon");
    expect(addon.status?.supportedConfigs).toEqual([
      { group: AddOnGroup, resource: "addondeploymentconfigs" },
      { group: AddOnGroup, resource: "addontemplates" },
    ]);
    const hash = await templateHash(HELLO);
    expect(addon.status?.configReferences).toEqual([{ group: AddOnGroup, resource: "addontemplates", name: HELLO, lastObservedGeneration: 1, desiredConfig: { name: HELLO, specHash: hash } }]);
    expect(condition(addon, AddOnConditionType.Configured)).toMatchObject({ status: "True", reason: AddOnReason.ConfigurationsConfigured, message: AddOnMessage.Configured });
    expect(condition(addon, AddOnConditionType.RegistrationApplied)).toMatchObject({ status: "True", reason: AddOnReason.SetPermissionApplied, message: AddOnMessage.RegistrationApplied });
    // the work agent has not reported yet
    expect(condition(addon, AddOnConditionType.ManifestApplied)).toBeUndefined();
    expect(condition(addon, AddOnConditionType.Progressing)).toMatchObject({ status: "False", reason: "WaitingForManifestApplied" });

    const work = (await readWork(c, deployWorkName(HELLO, 0)))!;
    expect(work.metadata.labels).toEqual({ [AddOnLabel.AddonName]: HELLO });
    expect(work.metadata.ownerReferences).toEqual([expect.objectContaining({ kind: "ManagedClusterAddOn", name: HELLO, uid: addon.metadata.uid, controller: true })]);
    expect(JSON.parse(work.metadata.annotations![WorkAnnotation.ConfigSpecHash]!)).toEqual({ [`addontemplates.${AddOnGroup}//${HELLO}`]: hash });
    const deployment = manifestOf(work, "Deployment");
    expect(deployment.metadata.namespace).toBe("open-cluster-management-agent-addon");
    const container = deployment.spec.template.spec.containers[0];
    expect(container.args).toEqual(["/helloworld", "agent", `--cluster-name=${c}`, "--addon-namespace=open-cluster-management-agent-addon", "--addon-name=helloworld", "--hub-kubeconfig=/managed/hub-kubeconfig/kubeconfig"]);
    expect(container.env).toEqual([
      { name: "LOG_LEVEL", value: "" },
      { name: "HUB_KUBECONFIG", value: "/managed/hub-kubeconfig/kubeconfig" },
      { name: "CLUSTER_NAME", value: c },
      { name: "INSTALL_NAMESPACE", value: "open-cluster-management-agent-addon" },
    ]);
    expect(container.volumeMounts).toEqual([{ name: "hub-kubeconfig", mountPath: "/managed/hub-kubeconfig" }]);
    expect(deployment.spec.template.spec.volumes).toEqual([{ name: "hub-kubeconfig", secret: { secretName: "helloworld-hub-kubeconfig" } }]);
    expect(manifestOf(work, "Namespace").metadata.name).toBe("open-cluster-management-agent-addon");
    expect(work.spec?.deleteOption).toEqual({ propagationPolicy: "SelectivelyOrphan", selectivelyOrphans: { orphaningRules: [{ group: "", resource: "namespaces", namespace: "", name: "open-cluster-management-agent-addon" }] } });
    expect(work.spec?.manifestConfigs).toEqual([expect.objectContaining({ resourceIdentifier: { group: "apps", resource: "deployments", name: "helloworld-agent", namespace: "open-cluster-management-agent-addon" }, feedbackRules: [{ type: "WellKnownStatus" }] })]);

    const binding = await admin.get<KubeObject & { roleRef: unknown; subjects: unknown }>(RoleBindingResource, hubPermissionBindingName(HELLO, "ClusterRole"), c);
    expect(binding?.metadata.name).toBe("open-cluster-management:helloworld:clusterrole:agent");
    expect(binding?.roleRef).toEqual({ apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "open-cluster-management:helloworld:agent" });
    expect(binding?.subjects).toEqual([
      { kind: "User", apiGroup: "rbac.authorization.k8s.io", name: user },
      // every default group but system:authenticated, which would grant the permission to everyone
      ...addonGroups(c, HELLO).slice(0, 2).map((name) => ({ kind: "Group", apiGroup: "rbac.authorization.k8s.io", name })),
    ]);
    // the add-on agent's identity may now read its cluster's ConfigMaps on the hub, and only those
    const agent = KubeClient.fromKubeconfig(await hub.kubeconfigFor({ user, groups: addonGroups(c, HELLO) }));
    try {
      await eventually(() => agent.list(ConfigMapResource, { namespace: c }));
      await expect(agent.list(ConfigMapResource, { namespace: "default" })).rejects.toMatchObject({ code: 403 });
    } finally {
      agent.close();
    }

    // a second run finds nothing to change
    const before = [(await readAddon(c, HELLO)).metadata.resourceVersion, (await readWork(c, deployWorkName(HELLO, 0)))!.metadata.resourceVersion];
    await reconcile(c, HELLO);
    expect([(await readAddon(c, HELLO)).metadata.resourceVersion, (await readWork(c, deployWorkName(HELLO, 0)))!.metadata.resourceVersion]).toEqual(before);
  });

  type Report = { name: string; applied: "True" | "False"; available: "True" | "False"; manifestApplied: Partial<NewCondition>; progressing: Partial<NewCondition> };
  const reports: Report[] = [
    {
      name: "marks ManifestApplied True and Progressing Completed once the work is Applied and Available",
      applied: "True",
      available: "True",
      manifestApplied: { status: "True", reason: AddOnReason.AddonManifestApplied, message: AddOnMessage.ManifestsApplied },
      progressing: { status: "False", reason: AddOnReason.Completed, message: AddOnMessage.Completed },
    },
    {
      name: "keeps Progressing while the applied work is not yet Available",
      applied: "True",
      available: "False",
      manifestApplied: { status: "True", reason: AddOnReason.AddonManifestApplied },
      progressing: { status: "True", reason: AddOnReason.Progressing, message: "progressing... work is not ready" },
    },
    {
      name: "marks ManifestApplied False when the work agent failed to apply the work",
      applied: "False",
      available: "False",
      manifestApplied: { status: "False", reason: AddOnReason.AddonManifestAppliedFailed, message: AddOnMessage.ManifestsApplyFailed },
      progressing: { status: "True", reason: AddOnReason.Progressing, message: "progressing... work is not ready" },
    },
  ];
  it.each(reports)("$name", async (row) => {
    const c = await newCluster();
    await enableAddon(admin, { addon: HELLO, clusters: [c] });
    await reconcile(c, HELLO);
    await reportWork(c, deployWorkName(HELLO, 0), row.applied, row.available);
    // the work's status event wakes the add-on it is labelled with
    const work = (await readWork(c, deployWorkName(HELLO, 0)))!;
    expect((await handleEvent(fn.spec, io, objectEvent({ cluster: HUB, object: work }))).statusCode).toBe(204);
    const addon = await readAddon(c, HELLO);
    expect(condition(addon, AddOnConditionType.ManifestApplied)).toMatchObject(row.manifestApplied);
    expect(condition(addon, AddOnConditionType.Progressing)).toMatchObject(row.progressing);
    const ref = addon.status!.configReferences![0]!;
    if (row.progressing.reason === AddOnReason.Completed) expect(ref.lastAppliedConfig).toEqual(ref.desiredConfig);
    else expect(ref.lastAppliedConfig).toBeUndefined();
  });

  it("renders customized variables, node placement, image mirrors and the install namespace of an AddOnDeploymentConfig", async () => {
    const c = await newCluster();
    await admin.create<AddOnDeploymentConfig>(AddOnDeploymentConfigV1alpha1Resource, {
      metadata: { name: "hello-config", namespace: c },
      spec: {
        customizedVariables: [{ name: "LOG_LEVEL", value: "4" }, { name: "CLUSTER_NAME", value: "not-overridable" }],
        nodePlacement: { nodeSelector: { "node-role.kubernetes.io/infra": "" }, tolerations: [{ key: "infra", operator: "Exists", effect: "NoSchedule" }] },
        registries: [{ source: "quay.io/open-cluster-management", mirror: "mirror.example.com/ocm" }],
        agentInstallNamespace: "hello-agents",
      },
    });
    await admin.create<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, {
      metadata: { name: HELLO, namespace: c },
      spec: { configs: [{ group: AddOnGroup, resource: "addondeploymentconfigs", namespace: c, name: "hello-config" }] },
    });
    await reconcile(c, HELLO);
    const addon = await readAddon(c, HELLO);
    expect(addon.status?.namespace).toBe("hello-agents");
    const work = (await readWork(c, deployWorkName(HELLO, 0)))!;
    const deployment = manifestOf(work, "Deployment");
    const pod = deployment.spec.template.spec;
    expect(deployment.metadata.namespace).toBe("hello-agents");
    expect(pod.containers[0].image).toBe("mirror.example.com/ocm/addon-examples:latest");
    expect(pod.containers[0].args).toContain(`--cluster-name=${c}`);
    expect(pod.containers[0].args).toContain("--addon-namespace=hello-agents");
    expect(pod.containers[0].env).toEqual([
      { name: "LOG_LEVEL", value: "4" },
      { name: "HUB_KUBECONFIG", value: "/managed/hub-kubeconfig/kubeconfig" },
      { name: "CLUSTER_NAME", value: c },
      { name: "INSTALL_NAMESPACE", value: "hello-agents" },
    ]);
    expect(pod.nodeSelector).toEqual({ "node-role.kubernetes.io/infra": "" });
    expect(pod.tolerations).toEqual([{ key: "infra", operator: "Exists", effect: "NoSchedule" }]);
    expect(manifestOf(work, "Namespace").metadata.name).toBe("hello-agents");
    expect(manifestOf(work, "RoleBinding").subjects).toEqual([{ kind: "ServiceAccount", name: "helloworld-agent-sa", namespace: "hello-agents" }]);
    const adc = (await admin.get<AddOnDeploymentConfig>(AddOnDeploymentConfigV1alpha1Resource, "hello-config", c))!;
    expect(JSON.parse(work.metadata.annotations![WorkAnnotation.ConfigSpecHash]!)).toEqual({
      [`addondeploymentconfigs.${AddOnGroup}/${c}/hello-config`]: specHash(adc),
      [`addontemplates.${AddOnGroup}//${HELLO}`]: await templateHash(HELLO),
    });
  });

  // Issue 24: v1beta1 of ClusterManagementAddOn is not served, so the garbage collector cannot resolve an
  // owner reference through it; earlier builds wrote such references.
  it("replaces an owner reference to the ClusterManagementAddOn through unserved v1beta1 with the v1alpha1 one OCM v1.2.0 writes", async () => {
    const c = await newCluster();
    const cma = (await admin.get<ClusterManagementAddOnV1alpha1>(ClusterManagementAddOnV1alpha1Resource, HELLO))!;
    const stale = { apiVersion: `${AddOnGroup}/v1beta1`, kind: "ClusterManagementAddOn", name: HELLO, uid: cma.metadata.uid!, controller: true, blockOwnerDeletion: true };
    await admin.create<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, { metadata: { name: HELLO, namespace: c, ownerReferences: [stale] }, spec: {} });
    await reconcile(c, HELLO);
    expect((await readAddon(c, HELLO)).metadata.ownerReferences).toEqual([{ ...stale, apiVersion: `${AddOnGroup}/v1alpha1` }]);
  });
});

describe("configs and their spec hashes", () => {
  // A plain (non-template) add-on: only configs, Configured and Progressing are this function's.
  async function configAddon(o: { defaultAdc?: string; placements?: { namespace: string; name: string; configs: { name: string; namespace: string }[] }[] }) {
    const addon = `cfg-${suffix()}`;
    const c = await newCluster();
    await admin.create<ClusterManagementAddOnV1alpha1>(ClusterManagementAddOnV1alpha1Resource, {
      metadata: { name: addon },
      spec: {
        supportedConfigs: [{ group: AddOnGroup, resource: "addondeploymentconfigs", ...(o.defaultAdc ? { defaultConfig: { namespace: "default", name: o.defaultAdc } } : {}) }],
        ...(o.placements
          ? { installStrategy: { type: "Placements", placements: o.placements.map((p) => ({ namespace: p.namespace, name: p.name, configs: p.configs.map((x) => ({ group: AddOnGroup, resource: "addondeploymentconfigs", ...x })) })) } }
          : {}),
      },
    });
    return { addon, c };
  }
  async function adc(namespace: string, name: string, value: string): Promise<AddOnDeploymentConfig> {
    return admin.create<AddOnDeploymentConfig>(AddOnDeploymentConfigV1alpha1Resource, { metadata: { name, namespace }, spec: { customizedVariables: [{ name: "V", value }] } });
  }
  const hashOf = (a: ManagedClusterAddOnV1alpha1) => (a.status?.configReferences ?? []).map((r) => [r.desiredConfig?.namespace, r.desiredConfig?.name, r.desiredConfig?.specHash]);

  type Row = { name: string; given: (n: string) => { defaultAdc?: string; own?: string; placement?: string }; then: (n: string, c: string) => [string | undefined, string][] };
  const rows: Row[] = [
    { name: "uses the ClusterManagementAddOn's default config", given: (n) => ({ defaultAdc: `${n}-default` }), then: (n) => [["default", `${n}-default`]] },
    { name: "lets the add-on's own config override the default", given: (n) => ({ defaultAdc: `${n}-default`, own: `${n}-own` }), then: (n, c) => [[c, `${n}-own`]] },
    { name: "lets an install-strategy placement's config override the default", given: (n) => ({ defaultAdc: `${n}-default`, placement: `${n}-placed` }), then: (n) => [["default", `${n}-placed`]] },
    { name: "lets the add-on's own config override the placement's", given: (n) => ({ defaultAdc: `${n}-default`, placement: `${n}-placed`, own: `${n}-own` }), then: (n, c) => [[c, `${n}-own`]] },
  ];
  it.each(rows)("$name", async (row) => {
    const n = `adc-${suffix()}`;
    const g = row.given(n);
    const placement = g.placement ? { namespace: "default", name: `pl-${n}`, configs: [{ namespace: "default", name: g.placement }] } : undefined;
    const { addon, c } = await configAddon({ defaultAdc: g.defaultAdc, placements: placement ? [placement] : undefined });
    if (g.defaultAdc) await adc("default", g.defaultAdc, "default");
    if (g.placement) {
      await adc("default", g.placement, "placed");
      await admin.create(PlacementResource, { metadata: { name: placement!.name, namespace: "default" }, spec: {} });
      const d = await admin.create<KubeObject>(PlacementDecisionResource, { metadata: { name: `${placement!.name}-decision-1`, namespace: "default", labels: { [ClusterLabel.Placement]: placement!.name } } });
      await admin.patch(PlacementDecisionResource, d.metadata.name!, { status: { decisions: [{ clusterName: c, reason: "" }] } }, { namespace: "default", subresource: "status" });
    }
    if (g.own) await adc(c, g.own, "own");
    await admin.create<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, {
      metadata: { name: addon, namespace: c },
      spec: g.own ? { configs: [{ group: AddOnGroup, resource: "addondeploymentconfigs", namespace: c, name: g.own }] } : {},
    });
    await reconcile(c, addon);
    const a = await readAddon(c, addon);
    // a second run finds nothing to change
    await reconcile(c, addon);
    expect((await readAddon(c, addon)).metadata.resourceVersion).toBe(a.metadata.resourceVersion);
    const expected = await Promise.all(row.then(n, c).map(async ([ns, name]) => [ns, name, specHash((await admin.get<AddOnDeploymentConfig>(AddOnDeploymentConfigV1alpha1Resource, name, ns))!)]));
    expect(hashOf(a)).toEqual(expected);
    expect(condition(a, AddOnConditionType.Configured)).toMatchObject({ status: "True", reason: AddOnReason.ConfigurationsConfigured });
  });

  it("records a new spec hash when the config's spec changes, and the known one from OCM's own test", async () => {
    const { addon, c } = await configAddon({ defaultAdc: undefined });
    await adc(c, "cfg", "1");
    await admin.create<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, { metadata: { name: addon, namespace: c }, spec: { configs: [{ group: AddOnGroup, resource: "addondeploymentconfigs", namespace: c, name: "cfg" }] } });
    await reconcile(c, addon);
    const first = hashOf(await readAddon(c, addon))[0]![2];
    const config = (await admin.get<AddOnDeploymentConfig>(AddOnDeploymentConfigV1alpha1Resource, "cfg", c))!;
    await admin.update(AddOnDeploymentConfigV1alpha1Resource, { ...config, spec: { ...config.spec, customizedVariables: [{ name: "V", value: "2" }] } });
    // the config's event wakes the add-on that uses it
    const changed = (await admin.get<AddOnDeploymentConfig>(AddOnDeploymentConfigV1alpha1Resource, "cfg", c))!;
    expect((await handleEvent(fn.spec, io, objectEvent({ cluster: HUB, object: changed }))).statusCode).toBe(204);
    const after = await readAddon(c, addon);
    expect(hashOf(after)[0]![2]).not.toBe(first);
    expect(hashOf(after)[0]![2]).toBe(createHash("sha256").update(JSON.stringify({ spec: changed.spec })).digest("hex"));
    expect(after.status?.configReferences?.[0]?.lastObservedGeneration).toBe(2);
    // addon-framework's unit test: spec {test: "test"} hashes to 5f0f8e6c…
    expect(specHash({ apiVersion: "config.test/v1", kind: "Config", metadata: { name: "test" }, spec: { test: "test" } })).toBe("5f0f8e6cc1574ce8832b6bcefac131d90ae93653fc7204c085bd6e91b6df0892");
    // a plain add-on supports no config kinds of its own, so naming one is unsupported (OCM)
    expect(condition(after, AddOnConditionType.Progressing)).toMatchObject({ status: "False", reason: "ConfigurationUnsupported", message: `Configuration with gvr ${AddOnGroup}/addondeploymentconfigs is not supported for this addon` });
  });
});

describe("oversized add-ons", () => {
  it("splits manifests over 400 KiB into several works, and deletes a work the manifests no longer fill", async () => {
    const addon = `big-${suffix()}`;
    const configMap = (i: number) => ({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: `blob-${i}`, namespace: "open-cluster-management-agent-addon" }, data: { blob: "x".repeat(150 * 1024) } });
    const template = await admin.create<AddOnTemplate>(AddOnTemplateResource, { metadata: { name: addon }, spec: { addonName: addon, agentSpec: { workload: { manifests: [0, 1, 2, 3].map(configMap) } } } });
    await admin.create<ClusterManagementAddOnV1alpha1>(ClusterManagementAddOnV1alpha1Resource, { metadata: { name: addon }, spec: { supportedConfigs: [{ group: AddOnGroup, resource: "addontemplates", defaultConfig: { name: addon } }] } });
    const c = await newCluster();
    await enableAddon(admin, { addon, clusters: [c] });
    await reconcile(c, addon);
    const works = (await admin.list<ManifestWork>(ManifestWorkResource, { namespace: c, labelSelector: `${AddOnLabel.AddonName}=${addon}` })).items;
    expect(works.map((w) => w.metadata.name).sort()).toEqual([deployWorkName(addon, 0), deployWorkName(addon, 1)]);
    for (const w of works) {
      expect(w.spec?.workload?.manifests).toHaveLength(2);
      expect(Buffer.byteLength(JSON.stringify(w.spec?.workload?.manifests))).toBeLessThan(500 * 1024);
    }
    const names = works.flatMap((w) => (w.spec?.workload?.manifests ?? []).map((m) => (m as KubeObject).metadata.name)).sort();
    expect(names).toEqual(["blob-0", "blob-1", "blob-2", "blob-3"]);
    // a registration-free template needs no hub permission and still registers (NilRegistration is OCM's
    // reason for add-ons without a registration option; a template always has one)
    expect(condition(await readAddon(c, addon), AddOnConditionType.RegistrationApplied)).toMatchObject({ status: "True" });

    // the template shrinks to one ConfigMap: the work that held it stays, the other goes
    const keep = works.find((w) => (w.spec?.workload?.manifests ?? []).some((m) => (m as KubeObject).metadata.name === "blob-0"))!;
    await admin.update(AddOnTemplateResource, { ...template, metadata: { ...template.metadata, resourceVersion: (await admin.get<AddOnTemplate>(AddOnTemplateResource, addon))!.metadata.resourceVersion }, spec: { ...template.spec, agentSpec: { workload: { manifests: [configMap(0)] } } } });
    await reconcile(c, addon);
    const left = (await admin.list<ManifestWork>(ManifestWorkResource, { namespace: c, labelSelector: `${AddOnLabel.AddonName}=${addon}` })).items;
    expect(left.map((w) => w.metadata.name)).toEqual([keep.metadata.name]);
    expect(left[0]!.spec?.workload?.manifests).toHaveLength(1);
  });
});

// Issue 24 item 4: OCM gives every template add-on the WorkloadAvailability prober, so Available follows
// the works, not a lease its agent may never renew.
describe("template add-on health from the deploy work's workload feedback", () => {
  it("sets healthCheck mode Customized and Available from the WellKnownStatus feedback of the Deployment and DaemonSet: WorkNotApplied, NoProbeResult, ProbeAvailable, ProbeUnavailable", async () => {
    const c = await newCluster();
    const addon = `probed-${suffix()}`;
    await createProbedAddon(admin, addon, c);
    await reconcile(c, addon);
    const work = deployWorkName(addon, 0);
    const deployed = await readAddon(c, addon);
    expect(deployed.status?.healthCheck).toEqual({ mode: "Customized" });
    // nothing applied yet: Available is not probed
    expect(condition(deployed, AddOnConditionType.Available)).toBeUndefined();
    // the work asks for the feedback the probe reads, for both Deployments
    expect((await readWork(c, work))!.spec?.manifestConfigs?.map((m) => [m.resourceIdentifier.name, m.feedbackRules])).toEqual([
      [PROBED_DEPLOYMENT, [{ type: "WellKnownStatus" }]],
      ["standby", [{ type: "WellKnownStatus" }]],
      [PROBED_DAEMONSET, [{ type: "WellKnownStatus" }]],
    ]);

    const steps: { report: WorkReport; then: Partial<NewCondition> }[] = [
      { report: { available: false }, then: { status: "False", reason: AddOnReason.WorkNotApplied, message: "1 of 4 resources are not available" } },
      { report: {}, then: { status: "Unknown", reason: AddOnReason.NoProbeResult, message: "Probe results are not returned" } },
      { report: { status: { replicas: 1, readyReplicas: 1, availableReplicas: 1 } }, then: { status: "True", reason: AddOnReason.ProbeAvailable, message: `${addon} add-on is available.` } },
      {
        report: { status: { replicas: 1, readyReplicas: 0, availableReplicas: 0 } },
        then: { status: "False", reason: AddOnReason.ProbeUnavailable, message: `Probe addon unavailable with err desiredNumberReplicas is 1 but readyReplica is 0 for deployments ${PROBED_NAMESPACE}/${PROBED_DEPLOYMENT}` },
      },
      // a DaemonSet needs every scheduled pod ready
      {
        report: { status: { replicas: 1, readyReplicas: 1, availableReplicas: 1 }, daemonSet: { desiredNumberScheduled: 2, numberReady: 1, numberAvailable: 1 } },
        then: { status: "False", reason: AddOnReason.ProbeUnavailable, message: `Probe addon unavailable with err desiredNumberReplicas is 2 but readyReplica is 1 for daemonsets ${PROBED_NAMESPACE}/${PROBED_DAEMONSET}` },
      },
      { report: { status: { replicas: 1, readyReplicas: 1, availableReplicas: 1 }, daemonSet: { desiredNumberScheduled: 2, numberReady: 2, numberAvailable: 2 } }, then: { status: "True", reason: AddOnReason.ProbeAvailable } },
    ];
    for (const step of steps) {
      await reportProbedWork(admin, c, work, step.report);
      await reconcile(c, addon);
      const a = await readAddon(c, addon);
      expect(condition(a, AddOnConditionType.Available)).toMatchObject(step.then);
      expect(a.status?.healthCheck).toEqual({ mode: "Customized" });
    }
  });
});

describe("add-on health while the cluster is Unknown", () => {
  const unknown: NewCondition = { type: ManagedClusterConditionType.Available, status: "Unknown", reason: ManagedClusterReason.ManagedClusterLeaseUpdateStopped, message: "Registration agent stopped updating its lease." };
  const available: NewCondition = { type: ManagedClusterConditionType.Available, status: "True", reason: ManagedClusterReason.ManagedClusterAvailable, message: "Managed cluster is available" };
  const leaseUpdated: NewCondition = { type: AddOnConditionType.Available, status: "True", reason: AddOnReason.ManagedClusterAddOnLeaseUpdated, message: "x add-on is available." };
  const rows = [
    { name: "copies the cluster's Unknown onto every add-on of the cluster, with or without a ClusterManagementAddOn", cluster: unknown, then: { status: "Unknown", reason: unknown.reason, message: unknown.message } },
    { name: "leaves Available to the spoke while the cluster is available", cluster: available, then: { status: "True", reason: leaseUpdated.reason, message: leaseUpdated.message } },
  ];
  it.each(rows)("$name", async (row) => {
    const c = await newCluster();
    const orphan = `no-cma-${suffix()}`;
    await enableAddon(admin, { addon: HELLO, clusters: [c] });
    await enableAddon(admin, { addon: orphan, clusters: [c] });
    // what the spoke's add-on lease controller wrote
    for (const a of [HELLO, orphan]) await admin.patch(ManagedClusterAddOnV1alpha1Resource, a, { status: { conditions: setCondition([], leaseUpdated, new Date()) } }, { namespace: c, subresource: "status" });
    const mc = (await admin.get<ManagedCluster>(ManagedClusterResource, c))!;
    await admin.patch(ManagedClusterResource, c, { status: { conditions: setCondition(mc.status?.conditions, row.cluster, new Date()) } }, { subresource: "status" });
    // the cluster's event wakes each of its add-ons
    const updated = (await admin.get<ManagedCluster>(ManagedClusterResource, c))!;
    expect((await handleEvent(fn.spec, io, objectEvent({ cluster: HUB, object: { apiVersion: "cluster.open-cluster-management.io/v1", kind: "ManagedCluster", ...updated } }))).statusCode).toBe(204);
    for (const a of [HELLO, orphan]) expect(condition(await readAddon(c, a), AddOnConditionType.Available)).toMatchObject(row.then);
  });
});

describe("events", () => {
  it("deploys through our CloudEvents HTTP server (shared/cloudevents-server.ts), answers 400 to a malformed event, and finds add-ons on a tick", async () => {
    const c = await newCluster();
    await enableAddon(admin, { addon: HELLO, clusters: [c] });
    const mca = { apiVersion: `${AddOnGroup}/v1alpha1`, kind: "ManagedClusterAddOn", ...(await readAddon(c, HELLO)) };
    const server = await startFunctionServer(serve(fn.spec, () => io));
    try {
      const { cluster: _dropped, ...noCluster } = objectEvent({ cluster: HUB, object: mca });
      expect((await postEvent(server.url, noCluster)).status).toBe(400);
      expect(await readWork(c, deployWorkName(HELLO, 0))).toBeUndefined();
      expect((await postEvent(server.url, objectEvent({ cluster: HUB, object: mca, verb: "add" }))).status).toBe(204);
      expect(await readWork(c, deployWorkName(HELLO, 0))).toBeDefined();
    } finally {
      await server.close();
    }
    const other = await newCluster();
    await enableAddon(admin, { addon: HELLO, clusters: [other] });
    expect((await handleEvent(fn.spec, io, tickEvent(HUB))).statusCode).toBe(204);
    expect(await readWork(other, deployWorkName(HELLO, 0))).toBeDefined();
  });
});

// Values in, values out: the rendering rules that need no API server.
describe("rendering rules", () => {
  const mirrors = [
    { name: "replaces the source prefix with the mirror", registries: [{ source: "quay.io/ocm", mirror: "mirror.io/ocm" }], image: "quay.io/ocm/agent:v1", then: "mirror.io/ocm/agent:v1" },
    { name: "leaves images of other sources alone", registries: [{ source: "quay.io/ocm", mirror: "mirror.io/ocm" }], image: "docker.io/library/busybox", then: "docker.io/library/busybox" },
    { name: "moves the image name to a mirror without source", registries: [{ mirror: "mirror.io/all/" }], image: "quay.io/ocm/agent:v1", then: "mirror.io/all/agent:v1" },
    { name: "lets the last matching mirror win", registries: [{ source: "quay.io", mirror: "a.io" }, { source: "quay.io/ocm", mirror: "b.io" }], image: "quay.io/ocm/agent", then: "b.io/agent" },
  ];
  it.each(mirrors)("image mirrors: $name", ({ registries, image, then }) => expect(overrideImage(registries, image)).toBe(then));

  const templates = [
    { name: "substitutes known variables", manifest: { a: "--x={{CLUSTER_NAME}}" }, then: { a: "--x=c1" } },
    { name: "renders an unknown variable as nothing, as fasttemplate does", manifest: { a: "{{NOPE}}-{{ CLUSTER_NAME }}" }, then: { a: "-" } },
    { name: "keeps a value with quotes inside its string", manifest: { a: "{{QUOTED}}" }, then: { a: 'say "hi"' } },
  ];
  it.each(templates)("variables: $name", ({ manifest, then }) => expect(substitute(manifest, new Map([["CLUSTER_NAME", "c1"], ["QUOTED", 'say "hi"']]))).toEqual(then));

  it("writes JSON as Go does: sorted keys, HTML characters escaped", () => {
    expect(goJson({ b: 1, a: ["<&>", null], c: { z: true, y: "\u2028" } })).toBe('{"a":["\\u003c\\u0026\\u003e",null],"b":1,"c":{"y":"\\u2028","z":true}}');
  });
});
