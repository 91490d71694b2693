// The namespaces of status.managedNamespaces (filled on the hub from the cluster's sets, see
// functions/cluster-sets/managed-namespaces.ts), made on the spoke as OCM's agent makes them: each
// created if missing and labelled clusterset.open-cluster-management.io/<hub hash>=true, and each entry
// given its NamespaceAvailable condition (True/NamespaceApplied, or False/NamespaceApplyFailed with the
// error). A namespace that left the list, or every one while the cluster is being deleted, is kept with
// its label turned to "false": OCM never deletes a managed namespace, and neither does this step.
//
// A namespace that could not be made fails its own entry only: the others still go on, the conditions
// are written, and the step then fails with every error, so the reconcile is retried.
import { createHash } from "node:crypto";
import {
  HubClusterSetLabelPrefix,
  ManagedNamespaceAppliedMessage,
  ManagedNamespaceConditionType,
  ManagedNamespaceReason,
  managedNamespaceFailedMessage,
} from "../../../shared/api/cluster.ts";
import { NamespaceResource } from "../../../shared/api/kube.ts";
import { setCondition, type NewCondition } from "../../../shared/conditions.ts";
import type { KubeClient, KubeObject } from "../../../shared/kube/client.ts";
import type { Io } from "../../../shared/harness.ts";
import type { Step, StepResult } from "../step.ts";

type Namespace = KubeObject & { metadata: { labels?: Record<string, string> } };

// OCM keys the label by its hub: sha256 of the hub's server URL as the agent's kubeconfig writes it, in
// lower-case hex, cut to the 63 characters a label name may have.
export function hubClusterSetLabel(hubServer: string): string {
  return HubClusterSetLabelPrefix + createHash("sha256").update(hubServer).digest("hex").slice(0, 63);
}

// Whether a namespace carries a hub's managed-namespace label (any hub's: the event alone does not say
// which hub this agent's is). Its event wakes the status reconcile, as OCM's agent watches the namespaces
// labelled for its hub.
export function isManagedNamespace(object: KubeObject | undefined): boolean {
  const labels = (object as Namespace | undefined)?.metadata.labels ?? {};
  return Object.keys(labels).some((k) => k.startsWith(HubClusterSetLabelPrefix));
}

const applied: NewCondition = { type: ManagedNamespaceConditionType.NamespaceAvailable, status: "True", reason: ManagedNamespaceReason.NamespaceApplied, message: ManagedNamespaceAppliedMessage };
const failed = (error: string): NewCondition => ({ type: ManagedNamespaceConditionType.NamespaceAvailable, status: "False", reason: ManagedNamespaceReason.NamespaceApplyFailed, message: managedNamespaceFailedMessage(error) });

export const managedNamespaces: Step = async (draft, { managed, hub, io, cluster, now }): Promise<StepResult> => {
  const label = hubClusterSetLabel(hub.cluster.server);
  // A cluster being deleted manages nothing any more; its entries are left as they are.
  const entries = cluster.metadata.deletionTimestamp ? [] : (draft.managedNamespaces ?? []);
  const errors: string[] = [];
  for (const entry of entries) {
    const where = { namespace: entry.name, clusterSet: entry.clusterSet };
    try {
      if (await applyNamespace(managed, entry.name, label)) io.log.info(where, "managed namespace applied");
      entry.conditions = setCondition(entry.conditions, applied, now);
    } catch (err) {
      const error = `failed to apply namespace ${JSON.stringify(entry.name)}: ${messageOf(err)}`;
      io.log.warn({ ...where, error }, "managed namespace not applied");
      entry.conditions = setCondition(entry.conditions, failed(error), now);
      errors.push(error);
    }
  }
  errors.push(...(await releaseNamespaces(managed, label, new Set(entries.map((e) => e.name)), io)));
  if (errors.length > 0) throw new Error(`managed namespaces: ${errors.join("; ")}`);
  return "continue";
};

// Creates the namespace with the label, or adds the label to the one there (its other labels kept).
// Whether it wrote anything.
async function applyNamespace(spoke: KubeClient, name: string, label: string): Promise<boolean> {
  const existing = await spoke.get<Namespace>(NamespaceResource, name);
  if (!existing) {
    await spoke.create<KubeObject>(NamespaceResource, { metadata: { name, labels: { [label]: "true" } } });
    return true;
  }
  if (existing.metadata.labels?.[label] === "true") return false;
  await spoke.patch<KubeObject>(NamespaceResource, name, { metadata: { resourceVersion: existing.metadata.resourceVersion, labels: { [label]: "true" } } });
  return true;
}

// Namespaces this hub labelled "true" that are no longer in the list get "false": the record that this
// hub managed them once. One that fails is reported; the rest still go.
async function releaseNamespaces(spoke: KubeClient, label: string, keep: ReadonlySet<string>, io: Pick<Io<unknown>, "log">): Promise<string[]> {
  const errors: string[] = [];
  const { items } = await spoke.list<KubeObject>(NamespaceResource, { labelSelector: `${label}=true` });
  for (const ns of items) {
    const name = ns.metadata.name!;
    if (keep.has(name)) continue;
    try {
      await spoke.patch<KubeObject>(NamespaceResource, name, { metadata: { resourceVersion: ns.metadata.resourceVersion, labels: { [label]: "false" } } });
      io.log.info({ namespace: name }, "namespace no longer managed: label set to false");
    } catch (err) {
      const error = `failed to update namespace ${JSON.stringify(name)}: ${messageOf(err)}`;
      io.log.warn({ namespace: name, error }, "previously managed namespace not released");
      errors.push(error);
    }
  }
  return errors;
}

const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));
