// The tables of `ocmf get` and of the live view of `npm start`: kubectl's columns for OCM's kinds.
import { DeployModeAnnotation, ManagedClusterResource, ManagedClusterConditionType, type ManagedCluster } from "../shared/api/cluster.ts";
import { findCondition } from "../shared/conditions.ts";
import { ManagedClusterAddOnV1alpha1Resource } from "../shared/api/addon.ts";
import type { KubeClient, KubeObject } from "../shared/kube/client.ts";
import { ClusterProfileResource, ClusterProfileConditionType, ClusterManagerName, type ClusterProfile } from "../shared/api/inventory.ts";
import { again } from "./transient.ts";

export async function clusterTable(hub: KubeClient, now = new Date()): Promise<string> {
  const { items } = await again(() => hub.list<ManagedCluster & KubeObject>(ManagedClusterResource));
  const rows = items.map((mc) => {
    const status = (t: string) => findCondition(mc.status?.conditions, t)?.status ?? "";
    const created = Date.parse(String(mc.metadata.creationTimestamp ?? now.toISOString()));
    return [
      mc.metadata.name ?? "",
      String(mc.spec?.hubAcceptsClient ?? false),
      (mc.spec?.managedClusterClientConfigs ?? []).map((c) => c.url).join(","),
      status(ManagedClusterConditionType.Joined),
      status(ManagedClusterConditionType.Available),
      age(now.getTime() - created),
    ];
  });
  return table(["NAME", "HUB ACCEPTED", "MANAGED CLUSTER URLS", "JOINED", "AVAILABLE", "AGE"], rows);
}

function age(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  return `${Math.floor(s / 3600)}h`;
}

// What `kubectl get managedclusters -o wide` does not show: the agent's mode, version, capacity and taints.
export async function clusterDetails(hub: KubeClient): Promise<string> {
  const { items } = await again(() => hub.list<ManagedCluster & KubeObject>(ManagedClusterResource));
  const rows = items.map((mc) => [
    mc.metadata.name ?? "",
    (mc.metadata.annotations as Record<string, string> | undefined)?.[DeployModeAnnotation] === "Hosted" ? "Hosted" : "Default",
    mc.status?.version?.kubernetes ?? "",
    `${mc.status?.capacity?.cpu ?? ""}/${mc.status?.allocatable?.cpu ?? ""}`,
    `${mc.status?.capacity?.memory ?? ""}/${mc.status?.allocatable?.memory ?? ""}`,
    (mc.spec?.taints ?? []).map((t) => t.key.split("/").pop()).join(",") || "-",
  ]);
  return table(["CLUSTER", "MODE", "VERSION", "CPU (CAPACITY/ALLOCATABLE)", "MEMORY (CAPACITY/ALLOCATABLE)", "TAINTS"], rows);
}

// `kubectl get managedclusteraddons -A`: the printer columns of OCM's CRD.
export async function addonTable(hub: KubeClient): Promise<string> {
  const { items } = await again(() => hub.list<KubeObject & { status?: { conditions?: { type: string; status: string }[] } }>(ManagedClusterAddOnV1alpha1Resource));
  if (!items.length) return "";
  const status = (a: (typeof items)[number], t: string) => a.status?.conditions?.find((c) => c.type === t)?.status ?? "";
  const rows = items.map((a) => [a.metadata.namespace ?? "", a.metadata.name ?? "", status(a, "Available"), status(a, "Degraded"), status(a, "Progressing")]);
  return table(["NAMESPACE", "NAME", "AVAILABLE", "DEGRADED", "PROGRESSING"], rows);
}

// The ClusterProfiles the hub publishes (cluster-profiles), in every namespace or one: where each cluster is
// published, how healthy it is, and the API server its access provider points at.
export async function profileTable(hub: KubeClient, o: { namespace?: string } = {}, now = new Date()): Promise<string> {
  const { items } = await again(() => hub.list<ClusterProfile>(ClusterProfileResource, o.namespace ? { namespace: o.namespace } : {}));
  if (!items.length) return "";
  const rows = items.map((p) => [
    p.metadata.namespace ?? "",
    p.metadata.name,
    p.spec?.clusterManager?.name ?? "",
    findCondition(p.status?.conditions, ClusterProfileConditionType.ControlPlaneHealthy)?.status ?? "",
    findCondition(p.status?.conditions, ClusterProfileConditionType.Joined)?.status ?? "",
    p.status?.version?.kubernetes ?? "",
    p.status?.accessProviders?.find((a) => a.name === ClusterManagerName)?.cluster?.server ?? "",
    age(now.getTime() - Date.parse(String(p.metadata.creationTimestamp ?? now.toISOString()))),
  ]);
  return table(["NAMESPACE", "NAME", "MANAGER", "HEALTHY", "JOINED", "VERSION", "SERVER", "AGE"], rows);
}

function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  return [header, ...rows].map((r) => r.map((cell, i) => cell.padEnd(widths[i]!)).join("   ").trimEnd()).join("\n");
}
