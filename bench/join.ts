// Join latency: from a spoke's functions and relay starting (bootstrap kubeconfig in place, cluster
// auto-approved) to a valid hub kubeconfig secret and ManagedClusterJoined=True, over 20 joins.
import { appendFileSync } from "node:fs";
import { startClusters } from "../dev/control-plane/clusters.ts";
import { startFleet } from "../dev/local/fleet.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { SecretResource } from "../shared/api/kube.ts";
import { ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { AgentNamespaceDefault, BootstrapSecretName, HubKubeconfigSecretName } from "../shared/api/registration.ts";
import { judgeHubSecret, hubEndpoint, secretText, type Secret } from "../shared/hub-credentials.ts";
import { isTrue } from "../shared/conditions.ts";
import { pendingSecretName, ConfigSchema } from "../functions/spoke-registration/reconcile.ts";
import { percentile, ms } from "./stats.ts";

const JOINS = Number(process.env.BENCH_JOINS ?? 20);

export const join = {
  name: "join",
  async run() {
    const clusters = await startClusters({ names: ["hub", "spoke"], log: () => {} });
    const spokeAdmin = KubeClient.fromKubeconfig(clusters.get("spoke").adminKubeconfig);
    const samples: number[] = [];
    try {
      for (let i = 0; i < JOINS; i++) {
        const name = `bench-${i}`;
        for (const secret of [BootstrapSecretName, HubKubeconfigSecretName, pendingSecretName(ConfigSchema.parse({ managementCluster: "spoke", clusterName: name }))]) {
          await spokeAdmin.delete(SecretResource, secret, AgentNamespaceDefault);
        }
        const log = process.env.BENCH_LOG ? (line: string) => appendFileSync(process.env.BENCH_LOG!, line) : undefined;
        const fleet = await startFleet({ clusters, spokes: [{ name, controlPlane: "spoke", autoApprove: true }], resyncMs: 60_000, log });
        const t0 = performance.now();
        for (;;) {
          const [mc, secret, bootstrap] = await Promise.all([
            fleet.hub.get<ManagedCluster & KubeObject>(ManagedClusterResource, name),
            spokeAdmin.get<Secret>(SecretResource, HubKubeconfigSecretName, AgentNamespaceDefault),
            spokeAdmin.get<Secret>(SecretResource, BootstrapSecretName, AgentNamespaceDefault),
          ]);
          const valid = bootstrap && judgeHubSecret({ hubSecret: secret, bootstrap: hubEndpoint(secretText(bootstrap, "kubeconfig")!), clusterName: name, now: new Date() }).valid;
          if (valid && isTrue(mc?.status?.conditions, "ManagedClusterJoined")) break;
          if (performance.now() - t0 > 60_000) throw new Error(`${name} did not join within 60 s`);
          await new Promise((r) => setTimeout(r, 5));
        }
        samples.push(performance.now() - t0);
        await fleet.stop();
      }
    } finally {
      spokeAdmin.close();
      await clusters.stop();
    }
    return {
      joins: samples.length,
      "join latency p50": ms(percentile(samples, 50)),
      "join latency p95": ms(percentile(samples, 95)),
      "join latency min": ms(Math.min(...samples)),
      "join latency max": ms(Math.max(...samples)),
    };
  },
};
