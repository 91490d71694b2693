// `ocmf uninstall hub|spoke`: removes what install and join made, found by the label every rendered
// object carries (app.kubernetes.io/part-of=ocm-functions) among the kinds the render makes, in the
// reverse of the apply order, CRDs last; waits until it is all gone. Running it again finds nothing.
//
// ManagedClusters are the hub admin's, as with `clusteradm clean`: uninstall hub refuses while any
// exists, unless --purge-clusters, which deletes them first, while the hub's functions still run and
// release each cluster (its RBAC goes; its namespace stays, as OCM leaves it). A cluster's ManifestWorks
// would hold that release until its agent removed what they applied, and the agent may be gone: purging
// deletes them without waiting (their finalizers released), so work already applied stays on spokes that
// are not uninstalled. Finalizers of OCM's kinds that only the removed functions would have released
// (an add-on's, an AppliedManifestWork's) are removed just before their CRDs go; on a spoke, the work
// an AppliedManifestWork owns then goes with it (the garbage collector follows the owner references the
// work applier set, as on OCM), unless its ManifestWork orphaned it. SIG-Multicluster's CRDs are left
// (every cluster manager's); the ClusterProfiles and SIG PlacementDecisions we published in them go.
import { NamespaceResource, SecretResource } from "../shared/api/kube.ts";
import { HostedClusterLabel } from "./render/spoke.ts";
import { ManagedClusterResource } from "../shared/api/cluster.ts";
import { ClusterManagerName, ClusterProfileResource, InventoryLabel, SigPlacementDecisionResource } from "../shared/api/inventory.ts";
import { AppliedManifestWorkResource, ManifestWorkResource, type AppliedManifestWork } from "../shared/api/work.ts";
import type { ApiResource } from "../shared/api/meta.ts";
import type { KubeClient, KubeObject } from "../shared/kube/client.ts";
import { isCrd, plural, rankOf } from "./apply.ts";
import { Discovery, typeName, type TypeRef } from "./discovery.ts";
import { again } from "./transient.ts";
import { KubeError } from "../shared/kube/errors.ts";
import { partOfSelector, renderHub, renderSpoke } from "./render/index.ts";
import { sleep } from "../shared/timers.ts";

// selector: more label terms, for a Hosted agent's objects on a management cluster shared with others
// (cli/render/spoke.ts hostedSelector); its CRDs carry none, so they stay.
export type UninstallOptions = { purgeClusters: boolean; timeoutMs: number; timeoutText: string; selector?: string };

type Found = KubeObject & { metadata: { name: string; namespace?: string; finalizers?: string[]; deletionTimestamp?: string; ownerReferences?: { uid: string }[] } };
type Listed = { type: TypeRef; resource: ApiResource; items: Found[] };

const isOcmFinalizer = (f: string) => f.includes("open-cluster-management.io/");
const nameOf = (o: Found) => (o.metadata.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : o.metadata.name);

// Every kind the render makes in either workload form (the hub's bootstrap tokens are Secrets too), in
// removal order.
function kindsOf(side: "hub" | "spoke"): TypeRef[] {
  const rendered = (["knative", "deployments"] as const).flatMap((workloads) => (side === "hub" ? renderHub({ workloads }) : renderSpoke({ workloads })));
  const objects: TypeRef[] = side === "hub" ? [...rendered, { apiVersion: "v1", kind: SecretResource.kind }] : rendered;
  return [...new Map(objects.map((o) => [typeName(o), { apiVersion: o.apiVersion, kind: o.kind }])).values()].sort((a, b) => rankOf(b) - rankOf(a));
}

async function until(what: () => string, deadline: number, done: () => Promise<boolean>): Promise<void> {
  for (let delay = 250; ; delay = Math.min(delay * 1.5, 2_000)) {
    if (await done()) return;
    if (Date.now() > deadline) throw new Error(what());
    await sleep(delay);
  }
}

async function purgeClusters(client: KubeClient, discovery: Discovery, o: UninstallOptions & { deadline: number }, print: (line: string) => void): Promise<void> {
  if (!(await discovery.isServed({ apiVersion: "cluster.open-cluster-management.io/v1", kind: ManagedClusterResource.kind }))) return;
  const { items } = await again(() => client.list<Found>(ManagedClusterResource));
  if (!items.length) return;
  const names = items.map((c) => c.metadata.name);
  if (!o.purgeClusters)
    throw new Error(
      `${plural(items.length, "ManagedCluster")} still registered (${names.join(", ")}): detach them first (ocmf uninstall spoke on each, then delete the ManagedCluster) or pass --purge-clusters to delete them now`,
    );
  let works = 0;
  if (await discovery.isServed({ apiVersion: "work.open-cluster-management.io/v1", kind: ManifestWorkResource.kind })) {
    for (const name of names) {
      for (const work of (await again(() => client.list<Found>(ManifestWorkResource, { namespace: name }))).items) {
        await again(() => client.delete(ManifestWorkResource, work.metadata.name, name));
        await releaseFinalizers(client, ManifestWorkResource, work);
        works++;
      }
    }
  }
  if (works) print(`deleted ${plural(works, "ManifestWork")} of those clusters without waiting for their agents`);
  for (const name of names) await again(() => client.delete(ManagedClusterResource, name));
  print(`deleted ${plural(names.length, "ManagedCluster")} (${names.join(", ")}); waiting for the hub's functions to release them`);
  let left: Found[] = items;
  await until(
    () => `ManagedClusters not gone after ${o.timeoutText}: ${left.map((c) => `${c.metadata.name} (finalizers: ${(c.metadata.finalizers ?? []).join(", ") || "none"})`).join("; ")}; is the hub's cluster-acceptor running?`,
    o.deadline,
    async () => (left = (await again(() => client.list<Found>(ManagedClusterResource))).items).length === 0,
  );
}

async function releaseFinalizers(client: KubeClient, r: ApiResource, item: Found): Promise<boolean> {
  const finalizers = item.metadata.finalizers ?? [];
  if (!finalizers.some(isOcmFinalizer)) return false;
  try {
    await again(() => client.patch(r, item.metadata.name, { metadata: { finalizers: finalizers.filter((f) => !isOcmFinalizer(f)) } }, { namespace: item.metadata.namespace }));
  } catch (err) {
    if (err instanceof KubeError && err.code === 404) return false; // gone meanwhile
    throw err;
  }
  return true;
}

// The instances of CRDs about to be deleted keep them Terminating while they carry finalizers nobody
// will release any more.
async function releaseOrphanedFinalizers(client: KubeClient, discovery: Discovery, crds: readonly Found[], o: { deadline: number; timeoutText: string }, print: (line: string) => void): Promise<void> {
  let released = 0;
  const applied: Found[] = [];
  for (const crd of crds) {
    const spec = crd.spec as { group: string; names: { kind: string }; versions: { name: string; storage?: boolean }[] };
    const version = spec.versions.find((v) => v.storage) ?? spec.versions[0]!;
    const type = { apiVersion: `${spec.group}/${version.name}`, kind: spec.names.kind };
    if (!(await discovery.isServed(type))) continue;
    const r = await discovery.resourceOf(type);
    const { items } = await again(() => client.list<Found>(r));
    for (const item of items) if (await releaseFinalizers(client, r, item)) released++;
    if (type.kind === AppliedManifestWorkResource.kind) applied.push(...items);
  }
  if (released) print(`released the OCM finalizers of ${plural(released, "object")} whose functions are gone`);
  if (applied.length) await removeAppliedWorks(client, applied, o, print);
}

// What an AppliedManifestWork applied carries it as owner, and the garbage collector removes it once it
// sees the owner go; it can only look the owner up while the owner's kind is still served. So these
// owners are deleted, and what they own waited for, before their CRD goes: deleting the CRD first would
// leave the work applied for good whenever the collector is slower than the CRD's removal.
async function removeAppliedWorks(client: KubeClient, works: readonly Found[], o: { deadline: number; timeoutText: string }, print: (line: string) => void): Promise<void> {
  const owned = works.flatMap((w) => ((w as AppliedManifestWork).status?.appliedResources ?? []).map((a) => ({ owner: w.metadata.uid, ...a })));
  for (const w of works) await again(() => client.delete(AppliedManifestWorkResource, w.metadata.name, undefined, { propagationPolicy: "Background" }));
  let left = owned;
  await until(
    () => `what ${plural(works.length, "AppliedManifestWork")} applied is not gone after ${o.timeoutText}: ${left.slice(0, 3).map((a) => `${a.resource} ${a.namespace ? `${a.namespace}/` : ""}${a.name}`).join("; ")}; is the spoke's garbage collector (kube-controller-manager) running?`,
    o.deadline,
    async () => {
      const still = await Promise.all(left.map(async (a) => {
        const r = { group: a.group ?? "", version: a.version, plural: a.resource, kind: a.resource, namespaced: a.namespace !== undefined && a.namespace !== "" };
        const found = await again(() => client.get<Found>(r, a.name, a.namespace || undefined));
        return found !== undefined && (!a.uid || found.metadata.uid === a.uid) && (found.metadata.ownerReferences ?? []).some((ref) => ref.uid === a.owner);
      }));
      left = left.filter((_, i) => still[i]);
      return left.length === 0;
    },
  );
  print(`deleted ${plural(works.length, "AppliedManifestWork")} and, by their owner references, what they applied`);
}

export async function uninstall(client: KubeClient, side: "hub" | "spoke", o: UninstallOptions, print: (line: string) => void): Promise<void> {
  const discovery = new Discovery(client);
  // A Default spoke's uninstall leaves the hosted agents a management cluster may also run, and, while
  // any is left, the CRDs they share.
  const selector = o.selector ? `${partOfSelector},${o.selector}` : side === "spoke" ? `${partOfSelector},!${HostedClusterLabel}` : partOfSelector;
  const hostedLeft = side === "spoke" && !o.selector ? (await again(() => client.list<Found>(NamespaceResource, { labelSelector: `${partOfSelector},${HostedClusterLabel}` }))).items.map((n) => n.metadata.name) : [];
  const deadline = Date.now() + o.timeoutMs;
  if (side === "hub") await purgeClusters(client, discovery, { ...o, deadline }, print);

  const listed: Listed[] = [];
  for (const type of kindsOf(side)) {
    if (!(await discovery.isServed(type))) continue; // its CRD is gone already, or Knative was never there
    const resource = await discovery.resourceOf(type);
    const { items } = await again(() => client.list<Found>(resource, { labelSelector: selector }));
    if (items.length) listed.push({ type, resource, items });
  }
  if (!listed.length) {
    print(`nothing of ocm-functions${o.selector ? ` (${o.selector})` : ""} on the ${side} at ${client.server}`);
    return;
  }
  if (hostedLeft.length) {
    for (const { type, items } of listed.filter((l) => isCrd(l.type))) print(`left ${plural(items.length, type.kind)}: the hosted agents in ${hostedLeft.join(", ")} use them (ocmf uninstall spoke --mode hosted for each first)`);
    listed.splice(0, listed.length, ...listed.filter((l) => !isCrd(l.type)));
  }
  for (const { type, resource, items } of listed) {
    if (isCrd(type)) await releaseOrphanedFinalizers(client, discovery, items, { deadline, timeoutText: o.timeoutText }, print);
    for (const item of items) await again(() => client.delete(resource, item.metadata.name, item.metadata.namespace, { propagationPolicy: "Background" }));
    print(`deleted ${plural(items.length, type.kind)}`);
  }

  let left: { type: TypeRef; item: Found }[] = [];
  let last = "";
  await until(
    () => `not all gone after ${o.timeoutText}: ${left.slice(0, 3).map(({ type, item }) => `${type.kind} ${nameOf(item)}${item.metadata.finalizers?.length ? ` (finalizers: ${item.metadata.finalizers.join(", ")})` : ""}`).join("; ")}${left.length > 3 ? ` and ${left.length - 3} more` : ""}`,
    deadline,
    async () => {
      left = [];
      for (const { type, resource } of listed) {
        discovery.forget(type.apiVersion);
        if (!(await discovery.isServed(type))) continue;
        const { items } = await again(() => client.list<Found>(resource, { labelSelector: selector }));
        left.push(...items.map((item) => ({ type, item })));
      }
      const line = left.length ? `waiting for ${plural(left.length, "object")} to go: ${[...new Set(left.map((l) => l.type.kind))].join(", ")}` : "";
      if (line && line !== last) print(line);
      last = line;
      return left.length === 0;
    },
  );
  if (side === "hub") await removePublished(client, discovery, print);
  if (hostedLeft.length) print(`The spoke's own agent is uninstalled; its CRDs stay for the hosted agents in ${hostedLeft.join(", ")}.`);
  else print(`The ${side} is uninstalled: nothing labelled ${o.selector ? selector : partOfSelector} is left.`);
}

// The ClusterProfiles and SIG PlacementDecisions our functions published (the manager's label says
// whose), once the functions are gone; their CRDs stay (cli/render/hub.ts isSharedCrd).
async function removePublished(client: KubeClient, discovery: Discovery, print: (line: string) => void): Promise<void> {
  const selector = `${InventoryLabel.ClusterManager}=${ClusterManagerName}`;
  for (const r of [ClusterProfileResource, SigPlacementDecisionResource]) {
    const type = { apiVersion: `${r.group}/${r.version}`, kind: r.kind };
    discovery.forget(type.apiVersion);
    if (!(await discovery.isServed(type))) continue;
    const { items } = await again(() => client.list<Found>(r, { labelSelector: selector }));
    for (const item of items) await again(() => client.delete(r, item.metadata.name, item.metadata.namespace));
    if (items.length) print(`deleted the ${plural(items.length, `${r.group} ${r.kind}`)} ocm-functions published (their CRD stays: other cluster managers may publish there)`);
  }
}

// A Hosted agent: its objects on the management cluster (labelled with its cluster), then on the managed
// cluster what join put there (its records, with what their ManifestWorks applied, and their CRDs).
export async function uninstallHosted(management: KubeClient, o: UninstallOptions & { clusterName?: string; managedKubeconfig?: string }, print: (line: string) => void): Promise<void> {
  if (!o.clusterName) throw new Error("--mode hosted needs --cluster-name, the managed cluster whose agent goes");
  if (!o.managedKubeconfig) throw new Error("--mode hosted needs --managed-kubeconfig, to remove what the agent recorded on the managed cluster");
  const [{ KubeClient: Client }, { readBootstrapKubeconfig }, { hostedSelector }] = await Promise.all([import("../shared/kube/client.ts"), import("./kubeconfig-file.ts"), import("./render/spoke.ts")]);
  const managed = Client.fromKubeconfig(readBootstrapKubeconfig(o.managedKubeconfig, "the managed cluster's kubeconfig"));
  try {
    await uninstall(management, "spoke", { ...o, selector: hostedSelector(o.clusterName) }, print);
    await uninstall(managed, "spoke", o, print);
  } finally {
    managed.close();
  }
}
