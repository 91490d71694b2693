// A placement's decisions in SIG-Multicluster's terms (KEP-5313, multicluster.x-k8s.io PlacementDecision),
// for a Placement that asks for them with SigDecisionsAnnotation: one object beside each of OCM's
// decisions, named as it is, each chosen cluster named as the ClusterProfile cluster-profiles publishes
// for it in the placement's namespace (a set bound there is how the cluster became eligible).
import type { Io } from "../../shared/harness.ts";
import type { KubeClient } from "../../shared/kube/client.ts";
import { isNotFound } from "../../shared/kube/errors.ts";
import { isDeepStrictEqual } from "node:util";
import { PlacementResource, type Placement, type PlacementDecision } from "../../shared/api/cluster.ts";
import { ClusterManagerName, InventoryLabel, SigDecisionLabel, SigPlacementDecisionResource, type SigPlacementDecision } from "../../shared/api/inventory.ts";

// "true" on a Placement: publish its decisions as SIG PlacementDecisions too. Any other value, or none:
// none are kept.
export const SigDecisionsAnnotation = "placement.ocm-functions.io/sig-placement-decisions";

export const sigDecisionsWanted = (p: Placement) => p.metadata.annotations?.[SigDecisionsAnnotation] === "true";

// The SIG decisions that mirror OCM's `decisions` (in their order: the index is the slice's place).
export function sigDecisions(p: Placement, decisions: readonly PlacementDecision[]): SigPlacementDecision[] {
  const namespace = p.metadata.namespace!;
  return decisions.map((d, index) => ({
    apiVersion: `${SigPlacementDecisionResource.group}/${SigPlacementDecisionResource.version}`,
    kind: SigPlacementDecisionResource.kind,
    metadata: {
      name: d.metadata.name,
      namespace,
      labels: {
        [InventoryLabel.ClusterManager]: ClusterManagerName,
        [SigDecisionLabel.PlacementKey]: p.metadata.name,
        [SigDecisionLabel.DecisionKey]: p.metadata.name,
        [SigDecisionLabel.DecisionIndex]: String(index),
      },
      ownerReferences: [{ apiVersion: `${PlacementResource.group}/${PlacementResource.version}`, kind: PlacementResource.kind, name: p.metadata.name, uid: p.metadata.uid ?? "", controller: true, blockOwnerDeletion: true }],
    },
    decisions: (d.status?.decisions ?? []).map((x) => ({ clusterProfileRef: { name: x.clusterName, namespace }, ...(x.reason ? { reason: x.reason } : {}) })),
    schedulerName: ClusterManagerName,
  }));
}

export const sigDecisionsSelector = (p: Placement) => `${SigDecisionLabel.PlacementKey}=${p.metadata.name}`;

// Creates, patches and deletes this placement's SIG decisions until they are `wanted` (none when the
// placement does not ask); each write carries the resourceVersion read. Only ours (our manager's label)
// are judged: another scheduler's under the same placement key is left alone.
export async function writeSigDecisions(io: Io<unknown>, hub: KubeClient, p: Placement, wanted: readonly SigPlacementDecision[]): Promise<void> {
  let items: SigPlacementDecision[];
  try {
    ({ items } = await hub.list<SigPlacementDecision>(SigPlacementDecisionResource, { namespace: p.metadata.namespace, labelSelector: sigDecisionsSelector(p) }));
  } catch (err) {
    // a hub that does not serve the kind (its CRD not installed) has none to remove; a placement that
    // asks for them fails on it, and says so
    if (isNotFound(err) && wanted.length === 0) return;
    throw err;
  }
  const present = items.filter((d) => d.metadata.labels?.[InventoryLabel.ClusterManager] === ClusterManagerName);
  const byName = new Map(present.map((d) => [d.metadata.name, d]));
  for (const want of wanted) {
    const have = byName.get(want.metadata.name);
    if (!have) {
      // a create that loses a race answers AlreadyExists: the source's retry reads it again
      await hub.create<SigPlacementDecision>(SigPlacementDecisionResource, want);
      io.log.info({ decision: want.metadata.name, clusters: want.decisions.length }, "SIG placement decision created");
      continue;
    }
    const labels = want.metadata.labels!;
    const labelsDiffer = Object.entries(labels).some(([k, v]) => have.metadata.labels?.[k] !== v);
    if (!labelsDiffer && isDeepStrictEqual(have.decisions ?? [], want.decisions) && have.schedulerName === want.schedulerName) continue;
    await hub.patch(SigPlacementDecisionResource, want.metadata.name, { metadata: { resourceVersion: have.metadata.resourceVersion, labels }, decisions: want.decisions, schedulerName: want.schedulerName }, { namespace: want.metadata.namespace });
    io.log.info({ decision: want.metadata.name, clusters: want.decisions.length }, "SIG placement decision updated");
  }
  const keep = new Set(wanted.map((d) => d.metadata.name));
  for (const d of present) {
    if (keep.has(d.metadata.name)) continue;
    if (await hub.delete(SigPlacementDecisionResource, d.metadata.name, d.metadata.namespace, { uid: d.metadata.uid, resourceVersion: d.metadata.resourceVersion }))
      io.log.info({ decision: d.metadata.name }, "SIG placement decision deleted");
  }
}
