// The `kubectl get managedclusters` table, for `ocmf get clusters` and the live view of `npm start`.
import { ManagedClusterResource, ManagedClusterConditionType, type ManagedCluster } from "../shared/api/cluster.ts";
import { findCondition } from "../shared/conditions.ts";
import type { KubeClient, KubeObject } from "../shared/kube/client.ts";

export async function clusterTable(hub: KubeClient, now = new Date()): Promise<string> {
  const { items } = await hub.list<ManagedCluster & KubeObject>(ManagedClusterResource);
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
  const header = ["NAME", "HUB ACCEPTED", "MANAGED CLUSTER URLS", "JOINED", "AVAILABLE", "AGE"];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  return [header, ...rows].map((r) => r.map((cell, i) => cell.padEnd(widths[i]!)).join("   ").trimEnd()).join("\n");
}

function age(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  return `${Math.floor(s / 3600)}h`;
}
