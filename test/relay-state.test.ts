// What a relay hands with an event (components/relay/state.ts), judged on caches it builds from
// objects given here: a related list is handed whole while it fits the budget a function's server can
// take, and left out past it, so the function reads that list from the API as on any miss.
import { describe, it, expect } from "vitest";
import { CloudEvent } from "cloudevents";
import { HANDED_LISTS_MAX_BYTES, observedFor, type Cache } from "../components/relay/state.ts";
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
