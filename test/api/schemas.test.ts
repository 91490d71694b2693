// Value-level checks that real objects, as the API server returns them, parse with the shared/api schemas.
import { describe, expect, it } from "vitest";
import {
  ManagedClusterAddOnV1alpha1Schema,
  ManagedClusterAddOnV1beta1Schema,
} from "../../shared/api/addon.ts";
import {
  ManagedClusterConditionType,
  ManagedClusterLeaseName,
  ManagedClusterResource,
  ManagedClusterSchema,
  TaintKey,
} from "../../shared/api/cluster.ts";
import * as addon from "../../shared/api/addon.ts";
import * as cluster from "../../shared/api/cluster.ts";
import { crds } from "../../shared/api/crds.ts";
import type { ApiResource } from "../../shared/api/meta.ts";
import * as work from "../../shared/api/work.ts";
import * as agentConfig from "../../shared/api/agent-config.ts";
import * as inventory from "../../shared/api/inventory.ts";
import * as authentication from "../../shared/api/authentication.ts";
import { ManifestWorkSchema } from "../../shared/api/work.ts";

const managedCluster = {
  apiVersion: "cluster.open-cluster-management.io/v1",
  kind: "ManagedCluster",
  metadata: {
    name: "cluster1",
    uid: "9a1f0c6e-0f5e-4a43-9a8e-5a4b7e9f3c21",
    resourceVersion: "4711",
    generation: 2,
    creationTimestamp: "2026-08-01T10:00:00Z",
    labels: { "cluster.open-cluster-management.io/clusterset": "default", "feature.open-cluster-management.io/addon-x": "available" },
    annotations: { "open-cluster-management.io/automatically-accepted-on": "2026-08-01T10:00:01Z" },
    finalizers: ["cluster.open-cluster-management.io/api-resource-cleanup"],
    managedFields: [{ manager: "registration", operation: "Update", fieldsType: "FieldsV1" }],
  },
  spec: {
    hubAcceptsClient: true,
    leaseDurationSeconds: 60,
    managedClusterClientConfigs: [{ url: "https://10.0.0.1:6443", caBundle: "LS0tLS1CRUdJTi0tLS0t" }],
    taints: [
      { key: "cluster.open-cluster-management.io/unreachable", effect: "NoSelect", timeAdded: "2026-08-01T10:00:00Z" },
      { key: "example.com/other", effect: "PreferNoSelect", timeAdded: null },
    ],
  },
  status: {
    conditions: [
      {
        type: "HubAcceptedManagedCluster",
        status: "True",
        reason: "HubClusterAdminAccepted",
        message: "Accepted by hub cluster admin",
        lastTransitionTime: "2026-08-01T10:00:01Z",
      },
      {
        type: "ManagedClusterConditionAvailable",
        status: "Unknown",
        reason: "ManagedClusterLeaseUpdateStopped",
        message: "Registration agent stopped updating its lease.",
        lastTransitionTime: "2026-08-01T10:05:00Z",
        observedGeneration: 2,
      },
    ],
    capacity: { cpu: "8", memory: "32Gi", pods: 110 },
    allocatable: { cpu: "7500m", memory: "30Gi" },
    version: { kubernetes: "v1.30.1" },
    clusterClaims: [{ name: "id.k8s.io", value: "cluster1" }],
    futureField: { from: "a newer OCM" },
  },
};

describe("ManagedClusterSchema", () => {
  it("parses a real cluster and keeps fields it does not know", () => {
    const parsed = ManagedClusterSchema.parse(managedCluster);
    expect(parsed).toEqual(managedCluster);
    expect(parsed.status?.conditions?.[1]?.type).toBe(ManagedClusterConditionType.Available);
    expect(parsed.spec?.taints?.[0]?.key).toBe(TaintKey.Unreachable);
  });

  it("parses a freshly created cluster with no spec or status", () => {
    expect(ManagedClusterSchema.safeParse({ metadata: { name: "new" } }).success).toBe(true);
  });

  it.each([
    { name: "a taint effect OCM does not define", patch: { spec: { taints: [{ key: "k", effect: "NoSchedule" }] } } },
    { name: "a lease duration that is not an int32", patch: { spec: { leaseDurationSeconds: 2 ** 31 } } },
    { name: "a condition status outside True/False/Unknown", patch: { status: { conditions: [{ ...managedCluster.status.conditions[0], status: "Yes" }] } } },
    { name: "no metadata.name", patch: { metadata: {} } },
  ])("rejects $name", ({ patch }) => {
    expect(ManagedClusterSchema.safeParse({ ...managedCluster, ...patch }).success).toBe(false);
  });
});

describe("ManifestWorkSchema", () => {
  it("keeps embedded manifests whole", () => {
    const configMap = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "cm", namespace: "default" }, data: { a: "b" } };
    const work = ManifestWorkSchema.parse({
      metadata: { name: "w", namespace: "cluster1" },
      spec: { workload: { manifests: [configMap] }, deleteOption: { propagationPolicy: "Orphan" } },
      status: {
        resourceStatus: {
          manifests: [
            {
              resourceMeta: { ordinal: 0, group: "", version: "v1", kind: "ConfigMap", resource: "configmaps", name: "cm", namespace: "default" },
              conditions: [],
              statusFeedback: { values: [{ name: "replicas", fieldValue: { type: "Integer", integer: 3 } }] },
            },
          ],
        },
      },
    });
    expect(work.spec?.workload?.manifests?.[0]).toEqual(configMap);
  });
});

describe("ManagedClusterAddOn", () => {
  it("parses the v1alpha1 and v1beta1 shapes of the same add-on", () => {
    const metadata = { name: "helloworld", namespace: "cluster1" };
    const alpha = ManagedClusterAddOnV1alpha1Schema.parse({
      metadata,
      spec: { installNamespace: "open-cluster-management-agent-addon" },
      status: {
        registrations: [{ signerName: "kubernetes.io/kube-apiserver-client", subject: { user: "u", organizationUnit: ["ou"] } }],
        kubeClientDriver: "csr",
      },
    });
    const beta = ManagedClusterAddOnV1beta1Schema.parse({
      metadata,
      spec: {},
      status: { registrations: [{ type: "kubeClient", kubeClient: { driver: "csr", subject: { user: "u" } } }] },
    });
    expect(alpha.status?.registrations?.[0]?.subject?.organizationUnit).toEqual(["ou"]);
    expect(beta.status?.registrations?.[0]?.type).toBe("kubeClient");
  });
});

describe("constants", () => {
  it("spell OCM's names exactly", () => {
    expect(ManagedClusterLeaseName).toBe("managed-cluster-lease");
    expect(ManagedClusterConditionType.HubAccepted).toBe("HubAcceptedManagedCluster");
    expect(ManagedClusterResource).toEqual({
      group: "cluster.open-cluster-management.io",
      version: "v1",
      kind: "ManagedCluster",
      plural: "managedclusters",
      namespaced: false,
    });
  });
});

describe("API coordinates", () => {
  const resources = Object.entries({ ...cluster, ...addon, ...work, ...agentConfig, ...inventory, ...authentication })
    .filter(([name]) => name.endsWith("Resource"))
    .map(([name, value]) => ({ name, resource: value as ApiResource }));

  it("exist for every served version of every CRD", () => {
    // v1beta1 of ClusterManagementAddOn and ManagedClusterAddOn is declared but not served (no conversion)
    const served = crds.flatMap((c) => c.spec.versions.filter((v) => v["served"] === true).map((v) => `${c.spec.names.kind}/${v["name"] as string}`));
    expect(resources.map(({ resource: r }) => `${r.kind}/${r.version}`).sort()).toEqual(served.sort());
  });

  it.each(resources)("$name addresses a served CRD version with the right plural and scope", ({ resource }) => {
    const crd = crds.find((c) => c.spec.group === resource.group && c.spec.names.kind === resource.kind);
    expect(crd?.spec.names.plural).toBe(resource.plural);
    expect(crd?.spec.scope).toBe(resource.namespaced ? "Namespaced" : "Cluster");
    expect(crd?.spec.versions.find((v) => v["name"] === resource.version)?.["served"]).toBe(true);
  });
});
