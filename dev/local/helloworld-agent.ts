// The helloworld add-on's own agent, for local mode only: no kubelet runs the Deployment its
// AddOnTemplate deploys, so this loop does that workload's job. It reads the credentials the add-on
// registration wrote (as the kubelet would mount them), then acts as the Deployment's ServiceAccount:
// copies the ConfigMaps of its cluster's namespace on the hub into its install namespace, and renews
// its lease `helloworld` there, as addon-framework agents do, which is what the add-on's health reads.
import { ConfigMapResource, LeaseResource, SecretResource } from "../../shared/api/kube.ts";
import { createOrUpdate } from "../../shared/apply.ts";
import { microTime, type Clock } from "../../shared/clock.ts";
import { clientWithSecretFiles, secretText, type Secret } from "../../shared/hub-credentials.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import type { LocalCluster } from "../control-plane/clusters.ts";
import type { Log } from "../../shared/harness.ts";

const ADDON = "helloworld";
const INSTALL_NAMESPACE = "open-cluster-management-agent-addon";
const SERVICE_ACCOUNT = "helloworld-agent-sa";
export const COPIED_LABEL = "helloworld.open-cluster-management.io/copied-from-hub";

export type AgentOptions = { spoke: LocalCluster; clusterName: string; clock: Clock; log: Log; intervalMs?: number };

export async function startHelloworldAgent(o: AgentOptions): Promise<{ stop(): Promise<void> }> {
  // The kubelet's part: reading the secret to mount. The workload's part: its ServiceAccount's rights,
  // as the template's Role grants them (a client certificate can carry a ServiceAccount's user name).
  const kubelet = KubeClient.fromKubeconfig(o.spoke.adminKubeconfig);
  const asServiceAccount = KubeClient.fromKubeconfig(
    await o.spoke.kubeconfigFor({ user: `system:serviceaccount:${INSTALL_NAMESPACE}:${SERVICE_ACCOUNT}`, groups: ["system:serviceaccounts", `system:serviceaccounts:${INSTALL_NAMESPACE}`] }),
  );
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> = Promise.resolve();

  async function once(): Promise<void> {
    const secret = await kubelet.get<Secret>(SecretResource, `${ADDON}-hub-kubeconfig`, INSTALL_NAMESPACE);
    const kubeconfig = secretText(secret, "kubeconfig");
    if (!kubeconfig) return; // not registered yet: the pod would not have started
    const hub = clientWithSecretFiles(kubeconfig, secret!);
    try {
      const { items } = await hub.list<KubeObject & { data?: Record<string, string> }>(ConfigMapResource, { namespace: o.clusterName });
      for (const cm of items) {
        await createOrUpdate(asServiceAccount, ConfigMapResource, { metadata: { name: cm.metadata.name, namespace: INSTALL_NAMESPACE, labels: { [COPIED_LABEL]: "true" } }, data: cm.data ?? {} }, ["data"]);
      }
    } finally {
      hub.close();
    }
    const now = microTime(o.clock.now());
    const lease = await asServiceAccount.get<KubeObject & { spec?: object }>(LeaseResource, ADDON, INSTALL_NAMESPACE);
    if (lease) await asServiceAccount.update(LeaseResource, { ...lease, spec: { ...lease.spec, renewTime: now } });
    else await asServiceAccount.create(LeaseResource, { metadata: { name: ADDON, namespace: INSTALL_NAMESPACE }, spec: { holderIdentity: ADDON, leaseDurationSeconds: 60, renewTime: now } });
  }

  const tick = () => {
    running = once()
      .catch((err: Error) => o.log.warn({ addon: ADDON, cluster: o.clusterName, error: err.message }, "helloworld agent: this round failed"))
      .finally(() => {
        if (!stopped) timer = setTimeout(tick, o.intervalMs ?? 10_000);
      });
  };
  tick();
  return {
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await running;
      kubelet.close();
      asServiceAccount.close();
    },
  };
}
