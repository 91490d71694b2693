// Managed namespaces of a ManagedClusterSet (issue 24 item 5), end to end on one fleet: a hub and a
// spoke joined by the real registration functions. First live, with relays: a set's managedNamespaces
// reach the cluster's status through cluster-sets and the namespaces appear on the spoke through
// spoke-cluster-status. Then the spoke's relay and heartbeat stop and the tests call spoke-cluster-status
// themselves, under its own identity, against what OCM v1.2.0's agent does
// (pkg/registration/spoke/managedcluster/managed_namespace_reconcile.go): the hub's label on each
// namespace, "false" once it leaves the list (never a delete), NamespaceAvailable on each entry.
// Kept apart from spoke-cluster-status.test.ts, which another change is rewriting.
import { describe, it, expect, beforeAll, afterAll, beforeEach } from "vitest";
import { createHash } from "node:crypto";
import { parse } from "yaml";
import { startFleet, type Fleet } from "../../dev/local/fleet.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { LeaseResource, NamespaceResource, SecretResource } from "../../shared/api/kube.ts";
import {
  ClusterLabel,
  ManagedClusterConditionType,
  ManagedClusterLeaseName,
  ManagedClusterResource,
  ManagedClusterSetResource,
  type ClusterSetManagedNamespace,
  type ManagedCluster,
  type ManagedClusterSet,
} from "../../shared/api/cluster.ts";
import type { Lease } from "../../shared/cluster-lease.ts";
import { AgentNamespaceDefault, BootstrapSecretName, HubSecretKey } from "../../shared/api/registration.ts";
import { findCondition } from "../../shared/conditions.ts";
import { manualClock, microTime, type Clock } from "../../shared/clock.ts";
import { reconcileKey, type Io } from "../../shared/harness.ts";
import type { FunctionEvent } from "../../shared/events.ts";
import fn, { type Config, type Status } from "../../functions/spoke-cluster-status/reconcile.ts";
import { identityFor, testIo } from "../support/functions.ts";
import { eventually } from "../support/eventually.ts";

const FLEET_START_MS = 240_000;
const FLEET_TEST_MS = 90_000;
const CLUSTER = "c1";
const suffix = () => Math.random().toString(36).slice(2, 7);
const AVAILABLE = "NamespaceAvailable";
const APPLIED = { type: AVAILABLE, status: "True", reason: "NamespaceApplied", message: "Namespace successfully applied and managed" };

type Cluster = ManagedCluster & KubeObject;
type Namespace = KubeObject & { metadata: { labels?: Record<string, string>; deletionTimestamp?: string } };

let fleet: Fleet;
let spokeAdmin: KubeClient;
let fnKubeconfig: string;
let hubLabel: string; // worked out here from the agent's bootstrap kubeconfig, as OCM's agent does

beforeAll(async () => {
  fleet = await startFleet({ spokes: [{ name: CLUSTER, autoApprove: true }], resyncMs: 2_000, nodes: false });
  await eventually(async () => expect(findCondition((await hubCluster())?.status?.conditions, ManagedClusterConditionType.Joined)?.status).toBe("True"), { timeoutMs: 45_000 });
  spokeAdmin = KubeClient.fromKubeconfig(fleet.clusters.get(CLUSTER).adminKubeconfig);
  fnKubeconfig = await identityFor(fleet.clusters.get(CLUSTER), fn.spec.name);
  const bootstrap = (await spokeAdmin.get<KubeObject & { data: Record<string, string> }>(SecretResource, BootstrapSecretName, AgentNamespaceDefault))!;
  const server = (parse(Buffer.from(bootstrap.data[HubSecretKey.Kubeconfig]!, "base64").toString()) as { clusters: { cluster: { server: string } }[] }).clusters[0]!.cluster.server;
  hubLabel = `clusterset.open-cluster-management.io/${createHash("sha256").update(server).digest("hex").slice(0, 63)}`;
}, FLEET_START_MS);

afterAll(async () => {
  spokeAdmin?.close();
  await fleet?.stop();
});

const key = { cluster: CLUSTER, name: CLUSTER };
const ioWith = (o: { clock?: Clock } = {}): Io<Config> => testIo({ [CLUSTER]: fnKubeconfig }, fn.definition.config.parse({ managementCluster: CLUSTER, clusterName: CLUSTER }), o.clock ?? manualClock());
const run = (io: Io<Config>) => reconcileKey(fn.spec, io, key);
const hubCluster = () => fleet.hub.get<Cluster>(ManagedClusterResource, CLUSTER);
const managedOf = async (): Promise<ClusterSetManagedNamespace[]> => (await hubCluster())?.status?.managedNamespaces ?? [];
const spokeNamespace = (name: string) => spokeAdmin.get<Namespace>(NamespaceResource, name);
const labelOn = async (name: string) => (await spokeNamespace(name))?.metadata.labels?.[hubLabel];

// What a hub admin would do by hand: set the list to exactly this (PUT of the status).
async function setHubList(list: { name: string; clusterSet: string }[], keep = true): Promise<void> {
  const c = (await hubCluster())!;
  const status: Status = structuredClone(c.status ?? {});
  const old = status.managedNamespaces ?? [];
  status.managedNamespaces = list.map((e) => {
    const was = keep ? old.find((o) => o.name === e.name && o.clusterSet === e.clusterSet) : undefined;
    return was ? was : e;
  });
  await fleet.hub.update(ManagedClusterResource, { ...c, status }, "status");
}

describe("live: a set's managed namespaces reach the spoke", { timeout: FLEET_TEST_MS }, () => {
  it("lists the set's namespaces in the cluster's status, sorted, and the agent creates each labelled for this hub with NamespaceAvailable True", async () => {
    const set = `set-${suffix()}`;
    const id = suffix();
    const [second, first] = [`mns-b-${id}`, `mns-a-${id}`];
    await fleet.hub.create<ManagedClusterSet>(ManagedClusterSetResource, { metadata: { name: set }, spec: { managedNamespaces: [{ name: second }, { name: first }] } });
    await fleet.hub.patch(ManagedClusterResource, CLUSTER, { metadata: { labels: { [ClusterLabel.ClusterSet]: set } } });
    await eventually(
      async () => {
        const list = await managedOf();
        expect(list.map((m) => [m.clusterSet, m.name])).toEqual([
          [set, first],
          [set, second],
        ]);
        for (const m of list) expect(findCondition(m.conditions, AVAILABLE)).toMatchObject(APPLIED);
        expect(await labelOn(first)).toBe("true");
        expect(await labelOn(second)).toBe("true");
      },
      { timeoutMs: 45_000 },
    );
    expect(hubLabel).toMatch(/^clusterset\.open-cluster-management\.io\/[0-9a-f]{63}$/);
  });
});

describe("the agent's side, called directly", { timeout: FLEET_TEST_MS }, () => {
  beforeAll(async () => {
    // From here the tests' calls are the function's only invocations for this cluster.
    await fleet.stopRelay(CLUSTER);
    await fleet.stopRelay("hub");
    await fleet.stopHeartbeat(CLUSTER);
  });

  // The heartbeat is stopped: renew the cluster lease as it would, so the chain reaches this step.
  beforeEach(async () => {
    const lease = (await fleet.hub.get<Lease>(LeaseResource, ManagedClusterLeaseName, CLUSTER))!;
    await fleet.hub.update(LeaseResource, { ...lease, spec: { ...lease.spec, renewTime: microTime(new Date()) } });
  });

  it("takes an existing namespace under management keeping its own labels, and once it leaves the list labels it false and keeps it", async () => {
    const set = `set-${suffix()}`;
    const [kept, dropped] = [`mns-kept-${suffix()}`, `mns-dropped-${suffix()}`];
    await spokeAdmin.create(NamespaceResource, { metadata: { name: dropped, labels: { team: "blue" } } });
    const clock = manualClock();
    await setHubList([{ name: kept, clusterSet: set }, { name: dropped, clusterSet: set }]);
    await run(ioWith({ clock }));
    expect((await spokeNamespace(dropped))?.metadata.labels).toMatchObject({ team: "blue", [hubLabel]: "true" });
    expect(await labelOn(kept)).toBe("true");
    const first = findCondition((await managedOf()).find((m) => m.name === kept)?.conditions, AVAILABLE);
    expect(first).toMatchObject(APPLIED);

    clock.advance(60_000);
    await setHubList([{ name: kept, clusterSet: set }]);
    await run(ioWith({ clock }));
    const ns = await spokeNamespace(dropped);
    expect(ns?.metadata.deletionTimestamp).toBeUndefined();
    expect(ns?.metadata.labels).toMatchObject({ team: "blue", [hubLabel]: "false" });
    expect(await labelOn(kept)).toBe("true");
    // the condition of a namespace still managed holds: its transition time is the first one
    expect(findCondition((await managedOf()).find((m) => m.name === kept)?.conditions, AVAILABLE)).toEqual(first);

    // an empty list releases every namespace this hub manages
    await setHubList([]);
    await run(ioWith({ clock }));
    expect(await labelOn(kept)).toBe("false");
    expect(await spokeNamespace(kept)).toBeDefined();
  });

  it("wakes on an event of a namespace labelled as a hub's managed one, deleted or relabelled, and on no other namespace's", async () => {
    const io = ioWith();
    const event = (verb: "add" | "update" | "delete", labels?: Record<string, string>): FunctionEvent => ({
      type: "object",
      verb,
      cluster: CLUSTER,
      ref: { apiVersion: "v1", kind: "Namespace", name: "some-ns" },
      object: { apiVersion: "v1", kind: "Namespace", metadata: { name: "some-ns", labels } },
    });
    for (const verb of ["add", "update", "delete"] as const) {
      expect(await fn.spec.keys(event(verb, { [hubLabel]: "true" }), io)).toEqual([key]);
      expect(await fn.spec.keys(event(verb, { [hubLabel]: "false" }), io)).toEqual([key]);
    }
    for (const labels of [undefined, { team: "blue" }, { [ClusterLabel.ClusterSet]: "s" }] as (Record<string, string> | undefined)[]) expect(await fn.spec.keys(event("update", labels), io)).toEqual({ skip: "not this cluster's object: Namespace /some-ns" });
  });

  it("puts a deleted managed namespace back on the next call, and its label when someone removed it", async () => {
    const set = `set-${suffix()}`;
    const [gone, unlabelled] = [`mns-gone-${suffix()}`, `mns-unlabelled-${suffix()}`];
    await setHubList([{ name: gone, clusterSet: set }, { name: unlabelled, clusterSet: set }]);
    await run(ioWith());
    await spokeAdmin.patch(NamespaceResource, unlabelled, { metadata: { labels: { [hubLabel]: null } } });
    await spokeAdmin.delete(NamespaceResource, gone);
    await eventually(async () => expect(await spokeNamespace(gone)).toBeUndefined()); // no finalizers without a namespace controller's work
    await run(ioWith());
    expect(await labelOn(gone)).toBe("true");
    expect(await labelOn(unlabelled)).toBe("true");
  });

  it("marks a namespace the spoke refuses NamespaceApplyFailed with the API server's answer, still makes the others, writes both conditions and fails the call", async () => {
    const set = `set-${suffix()}`;
    const prefix = `mns-refused-${suffix()}`;
    const [refused, fine] = [`${prefix}-ns`, `mns-fine-${suffix()}`];
    // a ValidatingAdmissionPolicy on the spoke turns away the creation of namespaces named with the prefix
    const policy = `refuse-${prefix}`;
    const admission = { group: "admissionregistration.k8s.io", version: "v1", namespaced: false } as const;
    const policyResource = { ...admission, kind: "ValidatingAdmissionPolicy", plural: "validatingadmissionpolicies" } as const;
    const bindingResource = { ...admission, kind: "ValidatingAdmissionPolicyBinding", plural: "validatingadmissionpolicybindings" } as const;
    await spokeAdmin.create(policyResource, {
      metadata: { name: policy },
      spec: {
        failurePolicy: "Fail",
        matchConstraints: { resourceRules: [{ apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["namespaces"] }] },
        validations: [{ expression: `!object.metadata.name.startsWith('${prefix}')`, message: "refused by the test's policy" }],
      },
    });
    await spokeAdmin.create(bindingResource, { metadata: { name: policy }, spec: { policyName: policy, validationActions: ["Deny"] } });
    try {
      // the policy takes a moment to load: wait until it refuses an admin's own creation of another such
      // name (admission answers before the API server finds that one already made)
      const probe = { metadata: { name: `${prefix}-probe` } };
      await eventually(async () => expect(await spokeAdmin.create(NamespaceResource, probe).then(() => "created", (e: unknown) => String(e))).toContain("refused by the test's policy"));
      await setHubList([{ name: refused, clusterSet: set }, { name: fine, clusterSet: set }]);
      await expect(run(ioWith())).rejects.toThrow(`failed to apply namespace "${refused}"`);
      expect(await spokeNamespace(refused)).toBeUndefined();
      expect(await labelOn(fine)).toBe("true");
      const list = await managedOf();
      const failed = findCondition(list.find((m) => m.name === refused)?.conditions, AVAILABLE);
      expect(failed).toMatchObject({ status: "False", reason: "NamespaceApplyFailed" });
      expect(failed?.message).toMatch(new RegExp(`^Failed to apply namespace: failed to apply namespace "${refused}": .*refused by the test's policy`));
      expect(findCondition(list.find((m) => m.name === fine)?.conditions, AVAILABLE)).toMatchObject(APPLIED);
    } finally {
      await spokeAdmin.delete(bindingResource, policy);
      await spokeAdmin.delete(policyResource, policy);
    }
  });
});
