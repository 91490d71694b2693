// A spoke function's reconcile as its cluster's agent on the hub: the hub client from the agent's
// secrets (shared/hub-credentials.ts), the spoke under the function's own identity, and the time of the
// reconcile. Until the agent is bootstrapped, and while the hub refuses that identity what the reconcile
// needs, it has nothing to do as that identity: the reconcile is done at once, with a log line that
// says why, and the relay's watch under the identity wakes it when that changes.
import { done, type Io, type Outcome } from "./harness.ts";
import { withAgentHub, type AgentSecrets } from "./hub-credentials.ts";
import type { KubeClient } from "./kube/client.ts";
import { managedClusterOf } from "./settings.ts";

// spoke: the management cluster, where the agent's secrets and records live; managed: the cluster it
// reports on and applies work to (the same one but in Hosted mode).
export type AgentView = { hub: KubeClient; spoke: KubeClient; managed: KubeClient; now: Date };

export async function asAgent<C extends AgentSecrets & { managementCluster: string; managedCluster?: string }>(io: Io<C>, use: (a: AgentView) => Promise<Outcome>, logged: object = {}): Promise<Outcome> {
  const now = io.clock.now();
  const spoke = io.cluster(io.config.managementCluster);
  const managed = io.cluster(managedClusterOf(io.config));
  return withAgentHub(
    spoke,
    io.config,
    now,
    (hub) => use({ hub, spoke, managed, now }),
    (reason) => {
      io.log.info({ ...logged, reason }, "skipped: the cluster's identity has no hub access (not bootstrapped, or not granted)");
      return done;
    },
  );
}
