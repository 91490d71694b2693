// What a joined spoke must keep doing, whichever form the hub runs in (test/eventing-node.test.ts with
// Deployments, test/serving-node.test.ts with Knative Services): its lease renews, its cluster turns
// Unknown while its relay (which keeps the heartbeat) is halted and Available when it returns, and a ManifestWork is applied.
import { expect } from "vitest";
import { RelayName } from "../../cli/render/spoke.ts";
import type { Deployed } from "../../dev/local/deployed.ts";
import { ManagedClusterConditionType, ManagedClusterLeaseName, ManagedClusterResource, type ManagedCluster } from "../../shared/api/cluster.ts";
import { ConfigMapResource, LeaseResource } from "../../shared/api/kube.ts";
import { ManifestWorkResource } from "../../shared/api/work.ts";
import { findCondition } from "../../shared/conditions.ts";
import type { KubeClient, KubeObject } from "../../shared/kube/client.ts";
import { eventually } from "./eventually.ts";

type Lease = KubeObject & { spec?: { renewTime?: string } };
type Conditioned = KubeObject & { status?: { conditions?: { type: string; status: string }[] } };

export async function leaseRenewsAndHeartbeatCounts(hubAdmin: KubeClient, spokeRun: Deployed, cluster: string): Promise<void> {
  const renewTime = async () => (await hubAdmin.get<Lease>(LeaseResource, ManagedClusterLeaseName, cluster))?.spec?.renewTime;
  const first = await eventually(async () => {
    const t = await renewTime();
    expect(t).toBeDefined();
    return t!;
  });
  await eventually(async () => expect(await renewTime()).not.toBe(first), { timeoutMs: 30_000, intervalMs: 500 });

  const available = async () => findCondition((await hubAdmin.get<ManagedCluster>(ManagedClusterResource, cluster))?.status?.conditions, ManagedClusterConditionType.Available)?.status;
  await spokeRun.halt(RelayName);
  await eventually(async () => expect(await available()).toBe("Unknown"), { timeoutMs: 120_000, intervalMs: 500 });
  spokeRun.resume(RelayName);
  await eventually(async () => expect(await available()).toBe("True"), { timeoutMs: 120_000, intervalMs: 500 });
}

export async function manifestWorkApplied(hubAdmin: KubeClient, spokeAdmin: KubeClient, cluster: string): Promise<void> {
  const manifest = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "hello-from-hub", namespace: "default" }, data: { from: "hub" } };
  await hubAdmin.create(ManifestWorkResource, { metadata: { name: "hello", namespace: cluster }, spec: { workload: { manifests: [manifest] } } });
  await eventually(async () => expect((await spokeAdmin.get<KubeObject & { data?: Record<string, string> }>(ConfigMapResource, "hello-from-hub", "default"))?.data).toEqual({ from: "hub" }), {
    timeoutMs: 60_000,
  });
  await eventually(async () => expect((await hubAdmin.get<Conditioned>(ManifestWorkResource, "hello", cluster))?.status?.conditions?.find((c) => c.type === "Applied")?.status).toBe("True"), {
    timeoutMs: 60_000,
  });
}
