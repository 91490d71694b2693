// The spoke agent's add-on lease controller (OCM §5.4): an add-on whose health is checked by lease is
// Available while its agent renews the Lease named after it in its install namespace on this cluster,
// not available once the lease has gone five lease durations without renewal, and Unknown without a
// lease. The root kind is ManagedClusterAddOn on the hub, in the cluster's namespace.
import { z } from "zod";
import { SpokeAgentSettingsSchema, managedClusterOf } from "../../shared/settings.ts";
import { asNumber, fromEnv } from "../../shared/env-settings.ts";
import { AddOnConditionType, AddOnReason, HealthCheckMode, ManagedClusterAddOnV1alpha1Resource, type ManagedClusterAddOnV1alpha1 } from "../../shared/api/addon.ts";
import { LeaseResource } from "../../shared/api/kube.ts";
import { patchStatusIfChanged } from "../../shared/apply.ts";
import { setCondition, type NewCondition } from "../../shared/conditions.ts";
import type { ObjectEvent, TickEvent } from "../../shared/events.ts";
import { asAgent } from "../../shared/agent-hub.ts";
import { withAgentHub } from "../../shared/hub-credentials.ts";
import { done, type Io, type Key, type Outcome } from "../../shared/harness.ts";
import { defineFunction } from "../../shared/sdk.ts";
import type { KubeObject } from "../../shared/kube/client.ts";
import { installNamespaceOf, outsideInstallRefusal, runsOutsideManagedCluster } from "../../shared/addon-install-namespace.ts";

export const ConfigSchema = SpokeAgentSettingsSchema.extend({
  // OCM's AddOnLeaseControllerLeaseDurationSeconds (60; its integration tests lower it)
  leaseDurationSeconds: fromEnv("ADDON_LEASE_DURATION_SECONDS", z.number().int().positive().default(60), asNumber),
});
export type Config = z.infer<typeof ConfigSchema>;

// OCM: grace = 5 × the lease duration.
const LEASE_DURATION_TIMES = 5;

type Addon = ManagedClusterAddOnV1alpha1;
export type Lease = KubeObject & { spec?: { renewTime?: string; [k: string]: unknown } };

// The root kind is ManagedClusterAddOn on the hub, in the cluster's namespace, keyed by itself. OCM has
// no lease informer (it resyncs every 30 s); a lease event on the spoke only makes that sooner, and
// wakes the add-on named like it, which reads its lease in its own install namespace, whichever this
// one was. The relay leaves out the control-plane namespaces, as leaseKeys does. The hub is reached
// with the agent's own credentials, so a resync tick's keys come from resyncKeys, not a list through io.
export default defineFunction({
  name: "addon-health",
  config: ConfigSchema,
  watches: (c) => [
    { cluster: c.hubCluster, resource: ManagedClusterAddOnV1alpha1Resource, namespace: c.clusterName, mode: "Resource", root: true },
    // on the managed cluster, where add-on agents run (an add-on with a hosting cluster renews on the
    // management cluster: no event then, its 60 s resync and lease rechecks find it)
    { cluster: managedClusterOf(c), resource: LeaseResource, fieldSelector: ControlPlaneLeaseNamespacesExcluded, mode: "Resource", keys: leaseKeys },
  ],
  resyncSeconds: 60,
  resync: resyncKeys,
  // addon-health on the spoke: read add-on leases, and the agent's secrets for its hub identity. Its hub
  // access is only the cluster's own identity (managedclusteraddons and their status, granted at acceptance).
  //
  // Leases in every namespace: an add-on renews its lease in its install namespace, which the hub chooses.
  writes: (c) => [
    { cluster: c.managementCluster, namespace: c.agentNamespace, why: "the bootstrap and hub kubeconfigs the cluster's identity comes from", apiGroups: [""], resources: ["secrets"], verbs: ["get"] },
    // the lease of an add-on whose agent runs outside the managed cluster (a hosting cluster is named), as
    // OCM reads it; in Hosted mode only in the agent's own namespace of the shared management cluster
    { cluster: c.managementCluster, ...(c.managedCluster !== undefined ? { namespace: c.agentNamespace } : {}), why: "the lease of an add-on run outside the managed cluster", apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["get"] },
  ],
  reconcile,
});

export async function reconcile(io: Io<Config>, key: Key): Promise<Outcome> {
  const c = io.config;
  return asAgent(
    io,
    async ({ hub, spoke, managed, now }) => {
      const mca = await hub.get<Addon>(ManagedClusterAddOnV1alpha1Resource, key.name, c.clusterName);
      if (!mca) return done;
      // Customized: the add-on's manager reports its health itself.
      if (mca.status?.healthCheck?.mode === HealthCheckMode.Customized) {
        io.log.info({ addon: key.name }, "skipped: health check mode is Customized");
        return done;
      }
      const namespace = installNamespaceOf(mca);
      // OCM's AddOnLeaseController: on the management cluster for an add-on run outside the managed one
      const outside = runsOutsideManagedCluster(mca);
      const refusal = outside ? outsideInstallRefusal(c, namespace) : undefined;
      if (refusal) {
        io.log.warn({ addon: key.name }, `skipped: ${refusal}`);
        return done;
      }
      const lease = await (outside ? spoke : managed).get<Lease>(LeaseResource, mca.metadata.name, namespace);
      const judged = judgeLease(lease, { addon: mca.metadata.name, now, graceMs: LEASE_DURATION_TIMES * c.leaseDurationSeconds * 1000 });
      // OCM writes this whatever the cluster's state; the hub replaces it while the cluster is Unknown.
      const conditions = setCondition(mca.status?.conditions, judged.condition, now);
      if (await patchStatusIfChanged(hub, ManagedClusterAddOnV1alpha1Resource, mca, { ...mca.status, conditions })) {
        io.log.info({ addon: key.name, lease: `${namespace}/${mca.metadata.name}`, status: judged.condition.status, reason: judged.condition.reason }, "add-on availability updated from its lease");
      }
      return judged.expiresInMs === undefined ? done : { recheckInMs: judged.expiresInMs };
    },
    { addon: key.name },
  );
}

export type LeaseJudgement = { condition: NewCondition; expiresInMs?: number };

// OCM: Available while now < renewTime + grace; the recheck lands on that moment. A lease never renewed
// (no renewTime) counts as stopped.
export function judgeLease(lease: Lease | undefined, o: { addon: string; now: Date; graceMs: number }): LeaseJudgement {
  const type = AddOnConditionType.Available;
  if (!lease) return { condition: { type, status: "Unknown", reason: AddOnReason.ManagedClusterAddOnLeaseNotFound, message: `The status of ${o.addon} add-on is unknown.` } };
  const renewed = lease.spec?.renewTime ? Date.parse(lease.spec.renewTime) : NaN;
  const expiresInMs = renewed + o.graceMs - o.now.getTime();
  if (expiresInMs > 0) return { condition: { type, status: "True", reason: AddOnReason.ManagedClusterAddOnLeaseUpdated, message: `${o.addon} add-on is available.` }, expiresInMs };
  return { condition: { type, status: "False", reason: AddOnReason.ManagedClusterAddOnLeaseUpdateStopped, message: `${o.addon} add-on is not available.` } };
}

// Leader-election and node leases live here; an add-on's lease never does.
const ControlPlaneLeaseNamespaces: readonly string[] = ["kube-system", "kube-node-lease"];
const ControlPlaneLeaseNamespacesExcluded = ControlPlaneLeaseNamespaces.map((ns) => `metadata.namespace!=${ns}`).join(",");

type Keys = Key[] | { skip: string };
const keyOf = (c: Config, addon: string): Key => ({ cluster: c.hubCluster, namespace: c.clusterName, name: addon });

async function resyncKeys(io: Io<Config>, tick: TickEvent): Promise<Keys> {
  const c = io.config;
  if (tick.cluster && tick.cluster !== c.hubCluster && tick.cluster !== c.managementCluster) return { skip: `tick for cluster ${tick.cluster}` };
  return withAgentHub<Keys>(
    io.cluster(c.managementCluster),
    c,
    io.clock.now(),
    async (hub) => (await hub.list<Addon>(ManagedClusterAddOnV1alpha1Resource, { namespace: c.clusterName })).items.map((a) => keyOf(c, a.metadata.name)),
    (reason) => ({ skip: `not bootstrapped: ${reason}` }),
  );
}

function leaseKeys(event: ObjectEvent, io: Io<Config>): Keys {
  const { name, namespace } = event.ref;
  if (namespace && ControlPlaneLeaseNamespaces.includes(namespace)) return { skip: `a control-plane lease in ${namespace}, not an add-on's` };
  return [keyOf(io.config, name)];
}
