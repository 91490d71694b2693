// Issue 24 item 3: the add-on kinds on a real API server lose nothing through any version it serves.
// Our CRDs have no conversion webhook, so the API server serves every version of a kind from the one
// stored object, pruned to the schema of the version asked for. Whatever version a client picks
// (kubectl picks the group's preferred one), an object written through one served version, read and
// written back through another, must read back unchanged: v1beta1 of ClusterManagementAddOn and
// ManagedClusterAddOn cannot hold v1alpha1's fields, so it is not served (OCM v1.2.0's programs and
// clusteradm v1.3.1 read and write v1alpha1 only); AddOnDeploymentConfig is the same in both versions.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import type { KubeClient, KubeObject } from "../../shared/kube/client.ts";
import { KubeError } from "../../shared/kube/errors.ts";
import { ConfigMapResource, NamespaceResource } from "../../shared/api/kube.ts";
import type { ApiResource } from "../../shared/api/meta.ts";
import {
  AddOnDeploymentConfigV1alpha1Resource,
  AddOnGroup,
  ClusterManagementAddOnV1alpha1Resource,
  ManagedClusterAddOnV1alpha1Resource,
  KubeApiServerClientSigner,
} from "../../shared/api/addon.ts";
import { cmaControllerReference, mcaControllerReference } from "../../shared/addon-owners.ts";
import { eventually } from "../support/eventually.ts";
import { startHub, type Hub } from "../support/fixtures.ts";

const NS = "cluster1";
const ADC = { group: AddOnGroup, resource: "addondeploymentconfigs" };
const condition = { type: "Available", status: "True", reason: "ProbeAvailable", message: "the agent is up", lastTransitionTime: "2026-01-01T00:00:00Z", observedGeneration: 1 };
const hashed = (specHash: string) => ({ namespace: "configs", name: "deploy", specHash });
const rollout = { type: "Progressive", progressive: { minSuccessTime: "1m", progressDeadline: "10m", maxFailures: 1, maxConcurrency: "25%", mandatoryDecisionGroups: [{ groupName: "canary" }, { groupIndex: 1 }] } };

type Content = { spec: object; status?: object };

// Every field each version's schema has, set to a value no default would give.
const richest: Record<string, Record<string, Content>> = {
  ManagedClusterAddOn: {
    v1alpha1: {
      spec: { installNamespace: "demo-agent", configs: [{ ...ADC, namespace: "configs", name: "deploy" }] },
      status: {
        conditions: [condition],
        relatedObjects: [{ group: "apps", resource: "deployments", namespace: "demo-agent", name: "agent" }],
        addOnMeta: { displayName: "Demo", description: "a demo add-on" },
        supportedConfigs: [ADC],
        namespace: "demo-agent",
        healthCheck: { mode: "Customized" },
        addOnConfiguration: { crdName: "demos.example.io", crName: "demo", lastObservedGeneration: 2 },
        configReferences: [{ ...ADC, namespace: "configs", name: "deploy", lastObservedGeneration: 3, desiredConfig: hashed("a1"), lastAppliedConfig: hashed("a0") }],
        registrations: [
          { signerName: KubeApiServerClientSigner, subject: { user: "system:open-cluster-management:cluster:cluster1:addon:demo:agent:demo", groups: ["system:open-cluster-management:addon:demo"] } },
          { signerName: "example.io/signer", subject: { user: "signed", groups: ["signed-group"], organizationUnit: ["unit"] } },
        ],
        kubeClientDriver: "csr",
      },
    },
    v1beta1: {
      spec: { configs: [{ ...ADC, namespace: "configs", name: "deploy" }] },
      status: {
        conditions: [condition],
        relatedObjects: [{ group: "apps", resource: "deployments", namespace: "demo-agent", name: "agent" }],
        addOnMeta: { displayName: "Demo", description: "a demo add-on" },
        supportedConfigs: [ADC],
        namespace: "demo-agent",
        healthCheck: { mode: "Customized" },
        configReferences: [{ ...ADC, lastObservedGeneration: 3, desiredConfig: hashed("a1"), lastAppliedConfig: hashed("a0") }],
        registrations: [
          { type: "kubeClient", kubeClient: { subject: { user: "system:open-cluster-management:cluster:cluster1:addon:demo:agent:demo", groups: ["system:open-cluster-management:addon:demo"] }, driver: "token" } },
          { type: "customSigner", customSigner: { signerName: "example.io/signer", subject: { user: "signed", groups: ["signed-group"], organizationUnits: ["unit"] } } },
        ],
      },
    },
  },
  ClusterManagementAddOn: {
    v1alpha1: {
      spec: {
        addOnMeta: { displayName: "Demo", description: "a demo add-on" },
        addOnConfiguration: { crdName: "demos.example.io", crName: "demo", lastObservedGeneration: 2 },
        supportedConfigs: [{ ...ADC, defaultConfig: { namespace: "configs", name: "deploy" } }, { group: AddOnGroup, resource: "addontemplates" }],
        installStrategy: { type: "Placements", placements: [{ namespace: "configs", name: "all", configs: [{ ...ADC, namespace: "configs", name: "other" }], rolloutStrategy: rollout }] },
      },
      status: {
        defaultconfigReferences: [{ ...ADC, desiredConfig: hashed("d1") }],
        installProgressions: [{ namespace: "configs", name: "all", configReferences: [{ ...ADC, desiredConfig: hashed("d2"), lastAppliedConfig: hashed("d1"), lastKnownGoodConfig: hashed("d0") }], conditions: [condition] }],
      },
    },
    v1beta1: {
      spec: {
        addOnMeta: { displayName: "Demo", description: "a demo add-on" },
        defaultConfigs: [{ ...ADC, namespace: "configs", name: "deploy" }],
        installStrategy: { type: "Placements", placements: [{ namespace: "configs", name: "all", configs: [{ ...ADC, namespace: "configs", name: "other" }], rolloutStrategy: rollout }] },
      },
      status: {
        defaultConfigReferences: [{ ...ADC, desiredConfig: hashed("d1") }],
        installProgressions: [{ namespace: "configs", name: "all", configReferences: [{ ...ADC, desiredConfig: hashed("d2"), lastAppliedConfig: hashed("d1"), lastKnownGoodConfig: hashed("d0") }], conditions: [condition] }],
      },
    },
  },
  AddOnDeploymentConfig: Object.fromEntries(
    ["v1alpha1", "v1beta1"].map((v) => [
      v,
      {
        spec: {
          customizedVariables: [{ name: "LOG_LEVEL", value: "4" }],
          nodePlacement: { nodeSelector: { "node-role.kubernetes.io/infra": "" }, tolerations: [{ key: "infra", operator: "Equal", value: "yes", effect: "NoExecute", tolerationSeconds: 30 }] },
          registries: [{ mirror: "mirror.example.io/ocm", source: "quay.io/open-cluster-management" }],
          proxyConfig: { httpProxy: "http://proxy:3128", httpsProxy: "https://proxy:3129", caBundle: Buffer.from("a CA").toString("base64"), noProxy: "10.0.0.0/8" },
          agentInstallNamespace: "demo-agent",
          resourceRequirements: [{ containerID: "deployments:*:*", resources: { limits: { memory: "128Mi" }, requests: { cpu: "100m" } } }],
        },
      },
    ]),
  ),
};

const resources: Record<string, Omit<ApiResource, "version">> = {
  ManagedClusterAddOn: ManagedClusterAddOnV1alpha1Resource,
  ClusterManagementAddOn: ClusterManagementAddOnV1alpha1Resource,
  AddOnDeploymentConfig: AddOnDeploymentConfigV1alpha1Resource,
};
const at = (kind: string, version: string): ApiResource => ({ ...resources[kind]!, version });

let hub: Hub;
let admin: KubeClient;

// The versions of the add-on group that serve a kind, as the API server's discovery says.
async function servedVersions(plural: string): Promise<string[]> {
  const group = await admin.request<{ versions: { version: string }[] }>("GET", `/apis/${AddOnGroup}`);
  const served: string[] = [];
  for (const { version } of group.versions) {
    const list = await admin.request<{ resources: { name: string }[] }>("GET", `/apis/${AddOnGroup}/${version}`);
    if (list.resources.some((r) => r.name === plural)) served.push(version);
  }
  return served.sort();
}

const contentOf = (o: KubeObject & Content): Content => ({
  spec: o.spec,
  ...(o.status ? { status: o.status } : {}),
});

async function write(kind: string, version: string, name: string, content: Content): Promise<void> {
  const r = at(kind, version);
  const namespace = r.namespaced ? NS : undefined;
  const created = await admin.create<KubeObject & Content>(r, { apiVersion: `${AddOnGroup}/${version}`, kind, metadata: { name, namespace }, spec: content.spec });
  if (content.status) await admin.update(r, { ...created, status: content.status }, "status");
}

async function read(kind: string, version: string, name: string): Promise<KubeObject & Content> {
  const r = at(kind, version);
  const got = await admin.get<KubeObject & Content>(r, name, r.namespaced ? NS : undefined);
  if (!got) throw new Error(`${kind} ${name} not found through ${version}`);
  return got;
}

// What a client of version `through` does to an object it reads and saves unchanged (kubectl edit, an
// apply of what get printed): the object and its status written back as read.
async function writeBack(kind: string, through: string, name: string): Promise<void> {
  const r = at(kind, through);
  const seen = await read(kind, through, name);
  const saved = await admin.update<KubeObject & Content>(r, seen);
  if (seen.status) await admin.update(r, { ...saved, status: seen.status }, "status");
}

const errorText = (err: unknown) => (err instanceof KubeError || err instanceof Error ? err.message : String(err));

beforeAll(async () => {
  hub = await startHub("hub", { controllers: ["garbagecollector"] });
  admin = hub.admin;
  await admin.create(NamespaceResource, { metadata: { name: NS } });
}, 180_000);

afterAll(async () => {
  await hub?.stop();
});

describe("add-on kinds through every served version (issue 24 item 3)", () => {
  it.each(Object.keys(richest))(
    "%s: written through any served version, read and written back unchanged through any served version, reads back with every field",
    async (kind) => {
      const served = await servedVersions(resources[kind]!.plural);
      expect(served).toContain("v1alpha1");
      const seen: { route: string; content?: Content; error?: string }[] = [];
      const wanted: typeof seen = [];
      for (const from of served)
        for (const through of served) {
          const route = `${from} -> ${through} -> ${from}`;
          const name = `${kind.toLowerCase()}-${from}-${through}`;
          const content = richest[kind]![from]!;
          wanted.push({ route, content });
          try {
            await write(kind, from, name, content);
            // through its own version first: the richest object must be valid and kept as written
            expect(contentOf(await read(kind, from, name))).toEqual(content);
            await writeBack(kind, through, name);
            seen.push({ route, content: contentOf(await read(kind, from, name)) });
          } catch (err) {
            seen.push({ route, error: errorText(err) });
          }
        }
      expect(seen).toEqual(wanted);
    },
    60_000,
  );

  it("serves ClusterManagementAddOn and ManagedClusterAddOn as v1alpha1 only (v1beta1 answers 404), AddOnDeploymentConfig as both, like OCM", async () => {
    expect(await servedVersions("clustermanagementaddons")).toEqual(["v1alpha1"]);
    expect(await servedVersions("managedclusteraddons")).toEqual(["v1alpha1"]);
    expect(await servedVersions("addondeploymentconfigs")).toEqual(["v1alpha1", "v1beta1"]);
    for (const path of [`/apis/${AddOnGroup}/v1beta1/clustermanagementaddons`, `/apis/${AddOnGroup}/v1beta1/namespaces/${NS}/managedclusteraddons`]) {
      const status = await admin.request("GET", path).then(
        () => 200,
        (err: unknown) => (err instanceof KubeError ? err.code : -1),
      );
      expect({ path, status }).toEqual({ path, status: 404 });
    }
  });

  it("the owner references our add-on functions write resolve: deleting a ClusterManagementAddOn collects its ManagedClusterAddOn, and that its ConfigMap", async () => {
    const cma = await admin.create<KubeObject>(at("ClusterManagementAddOn", "v1alpha1"), { metadata: { name: "owned" }, spec: {} });
    const mca = await admin.create<KubeObject>(at("ManagedClusterAddOn", "v1alpha1"), { metadata: { name: "owned", namespace: NS, ownerReferences: [cmaControllerReference(cma)] }, spec: {} });
    await admin.create(ConfigMapResource, { metadata: { name: "owned-by-addon", namespace: NS, ownerReferences: [mcaControllerReference(mca)] }, data: {} });
    await admin.delete(at("ClusterManagementAddOn", "v1alpha1"), "owned");
    // the garbage collector learns the add-on kinds from discovery within its 30 s resync
    await eventually(async () => {
      expect(await admin.get(at("ManagedClusterAddOn", "v1alpha1"), "owned", NS)).toBeUndefined();
      expect(await admin.get(ConfigMapResource, "owned-by-addon", NS)).toBeUndefined();
    }, { timeoutMs: 120_000 });
  }, 150_000);
});
