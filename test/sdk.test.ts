// The SDK's derivations (shared/sdk.ts, cli/render/sources.ts), on values: how a definition's watches
// become keys, func.yaml subscriptions, event sources and the RBAC skeleton. The end-to-end proof is
// test/examples/ and our own functions, which are all written with it.
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ConfigMapResource, LeaseResource, SecretResource } from "../shared/api/kube.ts";
import { ManagedClusterResource } from "../shared/api/cluster.ts";
import { done, skipClass, type Io, type Skip } from "../shared/harness.ts";
import type { ObjectEvent } from "../shared/events.ts";
import { defineFunction, subscriptionsOf, watchRules, type Watch } from "../shared/sdk.ts";
import { labelSelectorObject, mergeWatches } from "../cli/render/sources.ts";

const Config = z.object({ hub: z.string().default("hub"), spoke: z.string().default("spoke1") });
type Config = z.infer<typeof Config>;

const fn = defineFunction({
  name: "sample",
  config: Config,
  watches: (c) => [
    { cluster: c.hub, resource: ManagedClusterResource, root: true, verbs: ["add", "update"] },
    { cluster: c.spoke, resource: ConfigMapResource, namespace: "agent", mode: "Either", keys: (e) => [{ cluster: c.hub, name: e.ref.name.replace(/-cm$/, "") }] },
    { cluster: c.spoke, resource: LeaseResource, mode: "Reference", verbs: ["update"] },
  ],
  resyncSeconds: 60,
  map: (e) => ({ skip: `map saw ${e.ref.kind}` }),
  reconcile: async () => done,
});

const io = { config: Config.parse({}), clock: { now: () => new Date(0) }, log: { info() {}, warn() {}, error() {} }, cluster: () => { throw new Error("no cluster in a values test"); } } as unknown as Io<Config>;
const event = (cluster: string, kind: string, apiVersion: string, name: string, verb: ObjectEvent["verb"] = "update", namespace?: string): ObjectEvent => ({ type: "object", verb, cluster, ref: { apiVersion, kind, name, ...(namespace ? { namespace } : {}) } });

describe("defineFunction's keys", () => {
  it("keys a root event by the object itself", async () => {
    expect(await fn.spec.keys(event("hub", "ManagedCluster", "cluster.open-cluster-management.io/v1", "c1"), io)).toEqual([{ cluster: "hub", name: "c1" }]);
  });

  it("skips a verb the watch does not take, and a kind, cluster or namespace no watch names", async () => {
    // each with its reason class, which /metrics counts by (docs/metrics.md)
    for (const [e, reason] of [
      [event("hub", "ManagedCluster", "cluster.open-cluster-management.io/v1", "c1", "delete"), "verb"],
      [event("spoke2", "ConfigMap", "v1", "x-cm", "add", "agent"), "not-watched"],
      [event("spoke1", "ConfigMap", "v1", "x-cm", "add", "other"), "not-watched"],
      [event("hub", "Secret", "v1", "s"), "not-watched"],
      // the same kind name in another group is another kind
      [event("hub", "ManagedCluster", "example.com/v1", "c1"), "not-watched"],
    ] as const) {
      const keys = await fn.spec.keys(e, io);
      expect(keys).toEqual({ skip: expect.any(String) });
      expect(skipClass(keys as Skip)).toBe(reason);
    }
  });

  it("maps a watch's events with its own keys, across clusters, and others through map", async () => {
    expect(await fn.spec.keys(event("spoke1", "ConfigMap", "v1", "c7-cm", "delete", "agent"), io)).toEqual([{ cluster: "hub", name: "c7" }]);
    expect(await fn.spec.keys(event("spoke1", "Lease", "coordination.k8s.io/v1", "l", "update", "x"), io)).toEqual({ skip: "map saw Lease" });
  });

  it("skips a root event whose object, as the event carries it, is settled; keys one without the object", async () => {
    const calm = defineFunction({ ...fn.definition, settled: (o) => o.metadata.labels !== undefined });
    const withObject = (labels?: Record<string, string>): ObjectEvent => ({ ...event("hub", "ManagedCluster", "cluster.open-cluster-management.io/v1", "c1"), object: { metadata: { name: "c1", labels } } });
    const settled = await calm.spec.keys(withObject({ a: "b" }), io);
    expect(settled).toEqual({ skip: expect.stringContaining("settled") });
    expect(skipClass(settled as Skip)).toBe("settled");
    expect(await calm.spec.keys(withObject(), io)).toEqual([{ cluster: "hub", name: "c1" }]);
    expect(await calm.spec.keys(event("hub", "ManagedCluster", "cluster.open-cluster-management.io/v1", "c1"), io)).toEqual([{ cluster: "hub", name: "c1" }]);
    // a deletion is never settled
    const deleting = defineFunction({ ...calm.definition, watches: () => [{ cluster: "hub", resource: ManagedClusterResource, root: true }] });
    expect(await deleting.spec.keys({ ...withObject({ a: "b" }), verb: "delete" }, io)).toEqual([{ cluster: "hub", name: "c1" }]);
  });

  it("skips a tick for a cluster it reconciles nothing on", async () => {
    const keys = await fn.spec.keys({ type: "tick", cluster: "spoke1" }, io);
    expect(keys).toEqual({ skip: expect.stringContaining("spoke1") });
    expect(skipClass(keys as Skip)).toBe("no-roots");
  });

  it("refuses a name that is not a DNS label", () => {
    expect(() => defineFunction({ name: "Not_a_label", config: Config, watches: () => [], reconcile: async () => done })).toThrow(/DNS label/);
  });

  it("reads its settings from SCREAMING_SNAKE variables, defaults for the rest", () => {
    expect(fn.configFromEnv({ SPOKE: "edge" })).toEqual({ hub: "hub", spoke: "edge" });
  });
});

describe("func.yaml subscriptions", () => {
  it("names each kind's types, one kind-only filter for every type, and the ticks", () => {
    expect(fn.subscriptions(io.config)).toEqual([
      { source: "default", filters: { type: "dev.knative.apiserver.resource.add", kind: "ManagedCluster" } },
      { source: "default", filters: { type: "dev.knative.apiserver.resource.update", kind: "ManagedCluster" } },
      { source: "default", filters: { kind: "ConfigMap" } },
      { source: "default", filters: { type: "dev.knative.apiserver.ref.update", kind: "Lease" } },
      { source: "default", filters: { type: "dev.knative.sources.ping" } },
    ]);
  });

  it("has no tick subscription without a resync", () => {
    expect(subscriptionsOf([{ cluster: "hub", resource: SecretResource, mode: "Reference" }], false)).toEqual(
      ["add", "update", "delete"].map((v) => ({ source: "default", filters: { type: `dev.knative.apiserver.ref.${v}`, kind: "Secret" } })),
    );
  });
});

describe("event sources and RBAC from watches", () => {
  const watches: Watch[] = [
    { cluster: "spoke", resource: SecretResource, namespace: "agent", mode: "Either" },
    { cluster: "spoke", resource: SecretResource, namespace: "agent", mode: "Reference" },
    { cluster: "spoke", resource: LeaseResource, namespace: "a", fieldSelector: "metadata.name=x" },
    { cluster: "spoke", resource: LeaseResource, namespace: "b", fieldSelector: "metadata.name=x", mode: "Either" },
    { cluster: "hub", resource: LeaseResource, labelSelector: "l" },
  ];

  it("merges one source per kind and cluster, keeping the scope they agree on and Resource when any needs it", () => {
    expect(mergeWatches(watches)).toEqual([
      { cluster: "spoke", resource: SecretResource, mode: "Reference", namespace: "agent" },
      { cluster: "spoke", resource: LeaseResource, mode: "Resource", fieldSelector: "metadata.name=x" },
      { cluster: "hub", resource: LeaseResource, mode: "Resource", labelSelector: "l" },
    ]);
  });

  it("gives get, list and watch per watched resource, per cluster", () => {
    expect(Object.fromEntries(watchRules(watches))).toEqual({
      spoke: [
        { apiGroups: [""], resources: ["secrets"], verbs: ["get", "list", "watch"] },
        { apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["get", "list", "watch"] },
      ],
      hub: [{ apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["get", "list", "watch"] }],
    });
  });

  it("turns a label selector into an ApiServerSource's LabelSelector, and refuses what it cannot say", () => {
    expect(labelSelectorObject("a, !b, c=1, d!=2")).toEqual({
      matchLabels: { c: "1" },
      matchExpressions: [
        { key: "a", operator: "Exists" },
        { key: "b", operator: "DoesNotExist" },
        { key: "d", operator: "NotIn", values: ["2"] },
      ],
    });
    expect(() => labelSelectorObject("env in (a,b)")).toThrow(/not key/);
  });
});
