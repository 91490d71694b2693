// What a relay hands with an event (components/relay/state.ts), judged on caches it builds from
// objects given here: a related list is handed whole while it fits the budget a function's server can
// take, and left out past it, so the function reads that list from the API as on any miss; and an
// update that changed none of the parts its watch looks at is not sent, nor an event about an object
// outside every scope the function watches, nor an add or update of a root object its function's
// declarative settled test holds for.
import { describe, it, expect } from "vitest";
import { CloudEvent } from "cloudevents";
import { HANDED_LISTS_MAX_BYTES, changedNothingWatched, narrows, observedFor, outsideEveryScope, settledRoot, type Cache } from "../components/relay/state.ts";
import leaseMonitor from "../functions/cluster-lease-monitor/reconcile.ts";
import addonClusterLabel from "../functions/addon-cluster-label/reconcile.ts";
import placementScheduler from "../functions/placement-scheduler/reconcile.ts";
import clusterAcceptor from "../functions/cluster-acceptor/reconcile.ts";
import { ManagedClusterResource, ManagedClusterSetResource } from "../shared/api/cluster.ts";
import type { KubeObject } from "../shared/kube/client.ts";
import type { StateConfig } from "../components/relay/config.ts";
import type { Observed } from "../shared/observed.ts";

const HUB = "hub";
const group = ManagedClusterResource.group;

function cacheOf(resource: Cache["resource"], objects: KubeObject[]): Cache {
  const byKey = new Map(objects.map((o) => [`${o.metadata.namespace ?? ""}/${o.metadata.name}`, o]));
  return { resource, get: (key) => byKey.get(key), objects: () => [...byKey.values()] };
}

// cluster-sets' shape: a set's event hands the whole fleet
const state: StateConfig = {
  watches: [{ cluster: HUB, group, kind: ManagedClusterSetResource.kind, related: [{ group, kind: ManagedClusterResource.kind }], onTick: true }],
};

const setEvent = new CloudEvent({ id: "e1", source: "test", type: "dev.knative.apiserver.resource.update", cluster: HUB, apiversion: `${group}/v1`, kind: ManagedClusterSetResource.kind, name: "team", namespace: "", data: { metadata: { name: "team" } } });

// `n` clusters of about `bytes` of JSON each
const fleet = (n: number, bytes: number): KubeObject[] =>
  Array.from({ length: n }, (_, i) => ({ metadata: { name: `c${i}`, resourceVersion: String(i + 1), annotations: { pad: "x".repeat(bytes) } } }));

function handedFor(clusters: KubeObject[]): Observed {
  const caches = (_cluster: string, _group: string, kind: string) =>
    kind === ManagedClusterSetResource.kind ? cacheOf(ManagedClusterSetResource, [{ metadata: { name: "team", resourceVersion: "1" } }]) : cacheOf(ManagedClusterResource, clusters);
  const observed = observedFor(state, caches, setEvent as CloudEvent<unknown>);
  if (!observed || observed === "unrelated") throw new Error(`nothing handed: ${String(observed)}`);
  return observed;
}

describe("the lists a relay hands with one event", () => {
  it("hands a fleet whose JSON fits the budget whole, every cluster in it", () => {
    const observed = handedFor(fleet(200, 2_000));
    expect(observed.lists.map((l) => [l.kind, l.items.length])).toEqual([[ManagedClusterResource.kind, 200]]);
  });

  it(`leaves out a fleet whose JSON would pass ${HANDED_LISTS_MAX_BYTES} bytes, and still hands the event's own object`, () => {
    const clusters = fleet(300, Math.ceil(HANDED_LISTS_MAX_BYTES / 300) + 100);
    const observed = handedFor(clusters);
    expect(observed.lists).toEqual([]);
    expect(observed.objects.map((o) => o.name)).toEqual(["team"]);
  });
});

describe("a related list narrower than the cache's selector", () => {
  const manager = "x-k8s.io/cluster-manager=open-cluster-management";
  const profiles = { group: "multicluster.x-k8s.io", version: "v1alpha1", kind: "ClusterProfile", plural: "clusterprofiles", namespaced: true } as const;
  // cluster-profiles' shape: a cluster's event hands that cluster's profiles, from a cache of every profile we publish
  const narrowState: StateConfig = {
    watches: [{ cluster: HUB, group, kind: ManagedClusterResource.kind, related: [{ group: profiles.group, kind: profiles.kind, labelSelector: `${manager},open-cluster-management.io/cluster-name={name}` }], onTick: false }],
  };
  const clusterEvent = new CloudEvent({ id: "e2", source: "test", type: "dev.knative.apiserver.resource.update", cluster: HUB, apiversion: `${group}/v1`, kind: ManagedClusterResource.kind, name: "c1", namespace: "", data: { metadata: { name: "c1" } } });
  const profile = (ns: string, name: string): KubeObject => ({ metadata: { name, namespace: ns, resourceVersion: "1", labels: { "x-k8s.io/cluster-manager": "open-cluster-management", "open-cluster-management.io/cluster-name": name } } });
  const handed = (cacheSelector: string | undefined) => {
    const caches = (_c: string, _g: string, kind: string) =>
      kind === profiles.kind ? { ...cacheOf(profiles, [profile("a", "c1"), profile("b", "c1"), profile("a", "c2")]), ...(cacheSelector ? { labelSelector: cacheSelector } : {}) } : cacheOf(ManagedClusterResource, [{ metadata: { name: "c1", resourceVersion: "1" } }]);
    const observed = observedFor(narrowState, caches, clusterEvent as CloudEvent<unknown>);
    if (!observed || observed === "unrelated") throw new Error(`nothing handed: ${String(observed)}`);
    return observed.lists.map((l) => [l.labelSelector, l.items.map((i) => `${i.metadata.namespace}/${i.metadata.name}`)]);
  };

  it("is handed from a cache whose selector is the list's with fewer terms, holding only what the list selects", () => {
    expect(handed(manager)).toEqual([[`${manager},open-cluster-management.io/cluster-name=c1`, ["a/c1", "b/c1"]]]);
  });

  it("is not handed from a cache selected by a term the list does not have, nor by a set-based selector", () => {
    expect(handed("example.com/other=x")).toEqual([]);
    expect(narrows("a=1,b in (x,y)", "b in (x,y)")).toBe(false);
    expect(narrows("a=1,b=2", "b=2")).toBe(true);
    expect(narrows(undefined, "b=2")).toBe(false);
  });

  it("is handed from a cache selected by a label's existence for a list that names the label's value, never for one that excludes a value", () => {
    expect(handed(`${manager},open-cluster-management.io/cluster-name`)).toEqual([[`${manager},open-cluster-management.io/cluster-name=c1`, ["a/c1", "b/c1"]]]);
    expect(narrows("a==1", "a")).toBe(true);
    expect(narrows("a!=1", "a")).toBe(false);
    expect(narrows("b=2", "a")).toBe(false);
  });
});

describe("an update its watch looks at nothing of", () => {
  const watching: StateConfig = {
    watches: [{ cluster: HUB, group, kind: ManagedClusterResource.kind, related: [], onTick: false, changes: ["metadata.labels", "metadata.deletionTimestamp"] }],
  };
  const before = { metadata: { name: "c1", resourceVersion: "1", labels: { a: "1" } }, status: { version: { kubernetes: "v1.34.0" } } };
  const event = (verb: string, object: KubeObject) =>
    new CloudEvent({ id: "e2", source: "test", type: `dev.knative.apiserver.resource.${verb}`, cluster: HUB, apiversion: `${group}/v1`, kind: ManagedClusterResource.kind, name: "c1", namespace: "", data: object }) as CloudEvent<unknown>;

  it("is not sent when only the status changed, and is when a label or the deletion did", () => {
    const statusOnly = { ...before, metadata: { ...before.metadata, resourceVersion: "2" }, status: { version: { kubernetes: "v1.35.4" } } };
    expect(changedNothingWatched(watching, event("update", statusOnly), { previous: before, current: statusOnly })).toBe(true);
    const relabelled = { ...statusOnly, metadata: { ...statusOnly.metadata, labels: { a: "2" } } };
    expect(changedNothingWatched(watching, event("update", relabelled), { previous: before, current: relabelled })).toBe(false);
    const deleting = { ...statusOnly, metadata: { ...statusOnly.metadata, deletionTimestamp: "2026-12-01T00:00:00Z" } };
    expect(changedNothingWatched(watching, event("update", deleting), { previous: before, current: deleting })).toBe(false);
  });

  it("is always sent for an add or a delete, and for a watch that names no parts", () => {
    expect(changedNothingWatched(watching, event("add", before), { previous: before, current: before })).toBe(false);
    expect(changedNothingWatched(watching, event("delete", before), { previous: before, current: before })).toBe(false);
    const all: StateConfig = { watches: [{ ...watching.watches[0]!, changes: undefined }] };
    expect(changedNothingWatched(all, event("update", { ...before, status: {} }), { previous: before, current: { ...before, status: {} } })).toBe(false);
  });
});

describe("what a new cluster's other writers change, for the functions that judge none of it", () => {
  // from the definitions, as the render gives them to the relay
  const stateOf = (fn: typeof placementScheduler | typeof clusterAcceptor): StateConfig => fn.state({ hubCluster: HUB, autoApprovalUsers: [] } as never) as StateConfig;
  const update = (kind: string, previous: KubeObject, current: KubeObject) => [
    new CloudEvent({ id: "e5", source: "test", type: "dev.knative.apiserver.resource.update", cluster: HUB, apiversion: `${group}/v1`, kind, name: "n1", namespace: "", data: current }) as CloudEvent<unknown>,
    { previous, current },
  ] as const;
  const bump = <T extends KubeObject>(o: T, change: Partial<T>): T => ({ ...o, ...change, metadata: { ...o.metadata, resourceVersion: "2", ...(change.metadata ?? {}) } });

  it("cluster-sets' member count in a set's status is not sent to placement-scheduler; a change of the set's selector is", () => {
    const set: KubeObject = { metadata: { name: "n1", resourceVersion: "1", generation: 1 }, spec: { clusterSelector: { selectorType: "ExclusiveClusterSetLabel" } }, status: { conditions: [{ type: "ClusterSetEmpty", status: "True" }] } };
    const state = stateOf(placementScheduler);
    expect(changedNothingWatched(state, ...update(ManagedClusterSetResource.kind, set, bump(set, { status: { conditions: [{ type: "ClusterSetEmpty", status: "False" }] } })))).toBe(true);
    expect(changedNothingWatched(state, ...update(ManagedClusterSetResource.kind, set, bump(set, { spec: { clusterSelector: { selectorType: "LabelSelector" } } })))).toBe(false);
  });

  it("a cluster set's label, a taint and a finalizer (the acceptor's own patch) on a cluster are not sent to the acceptor; hubAcceptsClient and a condition are", () => {
    const cluster: KubeObject = { metadata: { name: "n1", resourceVersion: "1" }, spec: { hubAcceptsClient: true } };
    const state = stateOf(clusterAcceptor);
    const sent = (change: Partial<KubeObject>) => !changedNothingWatched(state, ...update(ManagedClusterResource.kind, cluster, bump(cluster, change)));
    expect(sent({ metadata: { labels: { "cluster.open-cluster-management.io/clusterset": "default" } } })).toBe(false);
    expect(sent({ spec: { hubAcceptsClient: true, taints: [{ key: "cluster.open-cluster-management.io/unreachable", effect: "NoSelect" }] } })).toBe(false);
    expect(sent({ spec: { hubAcceptsClient: false } })).toBe(true);
    expect(sent({ metadata: { finalizers: ["cluster.open-cluster-management.io/api-resource-cleanup"] } })).toBe(false);
    expect(sent({ status: { conditions: [{ type: "HubAcceptedManagedCluster", status: "True" }] } })).toBe(true);
  });
});

describe("an object outside every scope its function watches", () => {
  // addon-csr-approver's shape: only CSRs labelled with an add-on's name, on a relay that watches every
  // CSR for the csr-approver
  const labelled: StateConfig = {
    watches: [{ cluster: HUB, group: "certificates.k8s.io", kind: "CertificateSigningRequest", labelSelector: "open-cluster-management.io/addon-name", related: [], onTick: false }],
  };
  const csr = (labels: Record<string, string>) => ({ metadata: { name: "r1", resourceVersion: "1", labels } });
  const event = (verb: string) =>
    new CloudEvent({ id: "e3", source: "test", type: `dev.knative.apiserver.resource.${verb}`, cluster: HUB, apiversion: "certificates.k8s.io/v1", kind: "CertificateSigningRequest", name: "r1", namespace: "", data: {} }) as CloudEvent<unknown>;
  const addon = csr({ "open-cluster-management.io/addon-name": "a" });
  const agent = csr({ "open-cluster-management.io/cluster-name": "c1" });

  it("is not sent for an add, update or delete that never touches the scope", () => {
    expect(outsideEveryScope(labelled, event("add"), { current: agent })).toBe(true);
    expect(outsideEveryScope(labelled, event("update"), { previous: agent, current: agent })).toBe(true);
    expect(outsideEveryScope(labelled, event("delete"), { current: agent })).toBe(true);
  });

  it("is sent when it is in the scope, enters it or leaves it", () => {
    expect(outsideEveryScope(labelled, event("add"), { current: addon })).toBe(false);
    expect(outsideEveryScope(labelled, event("update"), { previous: agent, current: addon })).toBe(false);
    expect(outsideEveryScope(labelled, event("update"), { previous: addon, current: agent })).toBe(false);
  });

  it("leaves alone an event of a kind the function does not watch at all (a tick, a due recheck)", () => {
    const other: StateConfig = { watches: [{ ...labelled.watches[0]!, kind: "ManagedCluster", group }] };
    expect(outsideEveryScope(other, event("add"), { current: agent })).toBe(false);
  });

  it("is not sent when it is of a kind the function watches only in another group (SIG's PlacementDecision beside OCM's)", () => {
    const ocmDecisions: StateConfig = { watches: [{ cluster: HUB, group, kind: "PlacementDecision", related: [], onTick: false }] };
    const sig = new CloudEvent({ id: "e3", source: "test", type: "dev.knative.apiserver.resource.add", cluster: HUB, apiversion: "multicluster.x-k8s.io/v1alpha1", kind: "PlacementDecision", name: "p-decision-1", namespace: "ns", data: {} });
    const ocm = new CloudEvent({ ...sig, id: "e4", apiversion: `${group}/v1beta1` });
    const decision = { metadata: { name: "p-decision-1", namespace: "ns" } };
    expect(outsideEveryScope(ocmDecisions, sig as CloudEvent<unknown>, { current: decision })).toBe(true);
    expect(outsideEveryScope(ocmDecisions, ocm as CloudEvent<unknown>, { current: decision })).toBe(false);
  });
});

describe("a root object its function's settled test holds for", () => {
  // the state the render gives the lease monitor and the add-on label function, from their definitions
  const stateFor = (fn: typeof leaseMonitor | typeof addonClusterLabel): StateConfig => fn.state({ hubCluster: HUB } as never) as StateConfig;
  const event = (verb: string, object: KubeObject) =>
    new CloudEvent({ id: "e4", source: "test", type: `dev.knative.apiserver.resource.${verb}`, cluster: HUB, apiversion: `${group}/v1`, kind: ManagedClusterResource.kind, name: "c1", namespace: "", data: object }) as CloudEvent<unknown>;
  const created: KubeObject = { metadata: { name: "c1", resourceVersion: "1" }, spec: { hubAcceptsClient: true } };
  const accepted: KubeObject = { ...created, status: { conditions: [{ type: "HubAcceptedManagedCluster", status: "True" }] } };
  const available: KubeObject = { ...created, status: { conditions: [{ type: "HubAcceptedManagedCluster", status: "True" }, { type: "ManagedClusterConditionAvailable", status: "Unknown" }] } };
  const deleting: KubeObject = { ...available, metadata: { ...available.metadata, deletionTimestamp: "2026-12-01T00:00:00Z" } };

  it("is not sent to the lease monitor before the cluster was ever accepted, and is once it was", () => {
    const state = stateFor(leaseMonitor);
    expect(settledRoot(state, event("add", created), created)).toBe(true);
    expect(settledRoot(state, event("update", created), created)).toBe(true);
    expect(settledRoot(state, event("update", accepted), accepted)).toBe(false);
  });

  it("is not sent to the add-on label function before Available or while deleting, and is when Available is there", () => {
    const state = stateFor(addonClusterLabel);
    expect(settledRoot(state, event("add", accepted), accepted)).toBe(true);
    expect(settledRoot(state, event("update", deleting), deleting)).toBe(true);
    expect(settledRoot(state, event("update", available), available)).toBe(false);
  });

  it("is not sent to the acceptor once the cluster is accepted, finalized and not leaving, and is for its creation, a finalizer taken off, acceptance withdrawn, another HubAccepted or its deletion", () => {
    const state = clusterAcceptor.state(clusterAcceptor.definition.config.parse({ hubCluster: HUB })) as StateConfig;
    const finalizers = ["cluster.open-cluster-management.io/api-resource-cleanup", "cluster.open-cluster-management.io/resource-cleanup"];
    const hubAccepted = { type: "HubAcceptedManagedCluster", status: "True", reason: "HubClusterAdminAccepted", message: "Accepted by hub cluster admin" };
    const done: KubeObject = { metadata: { name: "c1", resourceVersion: "3", finalizers }, spec: { hubAcceptsClient: true }, status: { conditions: [hubAccepted] } };
    const agentWrote: KubeObject = { ...done, status: { conditions: [hubAccepted, { type: "ManagedClusterJoined", status: "True" }] } };
    expect(settledRoot(state, event("update", done), done)).toBe(true);
    expect(settledRoot(state, event("update", agentWrote), agentWrote)).toBe(true);
    expect(settledRoot(state, event("add", created), created)).toBe(false);
    const oneFinalizer: KubeObject = { ...done, metadata: { ...done.metadata, finalizers: finalizers.slice(1) } };
    expect(settledRoot(state, event("update", oneFinalizer), oneFinalizer)).toBe(false);
    const withdrawn: KubeObject = { ...done, spec: { hubAcceptsClient: false } };
    expect(settledRoot(state, event("update", withdrawn), withdrawn)).toBe(false);
    const otherReason: KubeObject = { ...done, status: { conditions: [{ ...hubAccepted, reason: "SomeoneElse" }] } };
    expect(settledRoot(state, event("update", otherReason), otherReason)).toBe(false);
    const leaving: KubeObject = { ...done, metadata: { ...done.metadata, deletionTimestamp: "2026-12-01T00:00:00Z" } };
    expect(settledRoot(state, event("update", leaving), leaving)).toBe(false);
    expect(settledRoot(state, event("delete", done), done)).toBe(false);
  });

  it("is always sent for a deletion, and never judged for a function without a declarative test", () => {
    expect(settledRoot(stateFor(leaseMonitor), event("delete", created), created)).toBe(false);
    const none: StateConfig = { watches: [{ cluster: HUB, group, kind: ManagedClusterResource.kind, related: [], onTick: true }] };
    expect(settledRoot(none, event("add", created), created)).toBe(false);
  });
});
