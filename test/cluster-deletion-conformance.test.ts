// Deleting a ManagedCluster with a ManifestWork and a ManagedClusterAddOn left in its namespace (issue 24),
// our cluster-acceptor beside OCM's own registration controller (open-cluster-management.io/ocm v1.2.0,
// built by `scripts/build-tools.sh ocm`, gate ResourceCleanup on as by default). Two hubs get the same
// input: on `ocm` the controller runs as a process and acts on its watch events; on `ours` the function's
// reconcile runs under its own identity for each event the change produces. Each step must end the same
// on both: the finalizers of the accepted cluster, the add-on deleted before the work, then the cluster
// gone, nothing left in its namespace, the namespace itself kept (as OCM keeps it).
// The finalizers on the add-on and the work stand for their agents, which remove them once cleaned up.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { join } from "node:path";
import { findOcm } from "../dev/control-plane/binaries.ts";
import { startClusters, type LocalClusters } from "../dev/control-plane/clusters.ts";
import { logTail, stopProcess, type Managed } from "../dev/control-plane/processes.ts";
import { startOcmHubProgram } from "./support/ocm-programs.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { NamespaceResource } from "../shared/api/kube.ts";
import { ClusterFinalizer, ManagedClusterConditionType, ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { ManagedClusterAddOnV1alpha1Resource } from "../shared/api/addon.ts";
import { ManifestWorkResource } from "../shared/api/work.ts";
import { findCondition, isTrue } from "../shared/conditions.ts";
import type { Io } from "../shared/harness.ts";
import fn, { type Config } from "../functions/cluster-acceptor/reconcile.ts";
import { deliverAsRelay, objectEvent } from "./support/functions.ts";
import { functionIo } from "./support/fixtures.ts";
import { eventually } from "./support/eventually.ts";

const OCM = "ocm";
const OURS = "ours";
const WORK_AGENT = "test.invalid/work-agent";
const ADDON_AGENT = "test.invalid/addon-agent";
const STEP_MS = 30_000;

let planes: LocalClusters | undefined;
let admins: Record<typeof OCM | typeof OURS, KubeClient>;
let controller: Managed | undefined;
let io: Io<Config>;

beforeAll(async () => {
  const programs = findOcm();
  planes = await startClusters({ names: [OCM, OURS] });
  const ocmPlane = planes.get(OCM);
  admins = { [OCM]: KubeClient.fromKubeconfig(ocmPlane.adminKubeconfig), [OURS]: KubeClient.fromKubeconfig(planes.get(OURS).adminKubeconfig) };
  await admins[OCM].create(NamespaceResource, { metadata: { name: "open-cluster-management-hub" } });
  controller = await startOcmHubProgram({ planeDir: ocmPlane.dir, name: "ocm-registration-controller", binary: programs.registration, command: "controller", kubeconfig: join(ocmPlane.dir, "admin.kubeconfig"), namespace: "open-cluster-management-hub" });
  io = await functionIo(planes.get(OURS), fn.spec.name, { hubCluster: OURS, autoApprovalUsers: [] }, [ManagedClusterResource, ManifestWorkResource, ManagedClusterAddOnV1alpha1Resource]);
}, 180_000);

afterAll(async () => {
  if (controller) await stopProcess(controller);
  for (const a of Object.values(admins ?? {})) a.close();
  await planes?.stop();
});

// On ours, the event a change produces, delivered to the function.
async function deliver(object: KubeObject, verb: "add" | "update" | "delete" = "update"): Promise<void> {
  const reply = await deliverAsRelay(fn.spec, io, objectEvent({ cluster: OURS, object, verb }));
  expect(reply.statusCode, reply.body).toBe(204);
}
const typed = (r: { group: string; version: string; kind: string }, o: KubeObject): KubeObject => ({ apiVersion: `${r.group}/${r.version}`, kind: r.kind, ...o });

// What a step is judged by, on one hub.
async function stateOn(admin: KubeClient, c: string) {
  const [mc, ns, works, addons] = await Promise.all([
    admin.get<ManagedCluster>(ManagedClusterResource, c),
    admin.get(NamespaceResource, c),
    admin.list(ManifestWorkResource, { namespace: c }),
    admin.list(ManagedClusterAddOnV1alpha1Resource, { namespace: c }),
  ]);
  const items = (l: { items: KubeObject[] }) => Object.fromEntries(l.items.map((o) => [o.metadata.name, o.metadata.deletionTimestamp ? "deleting" : "present"]));
  const deletingCondition = findCondition(mc?.status?.conditions, ManagedClusterConditionType.Deleting);
  return {
    cluster: mc ? (mc.metadata.deletionTimestamp ? "deleting" : "present") : "gone",
    accepted: isTrue(mc?.status?.conditions, ManagedClusterConditionType.HubAccepted),
    finalizers: [...(mc?.metadata.finalizers ?? [])].sort(),
    deleting: deletingCondition ? `${deletingCondition.status}/${deletingCondition.reason}` : "none",
    namespace: ns ? "present" : "gone",
    works: items(works),
    addons: items(addons),
  };
}
type State = Awaited<ReturnType<typeof stateOn>>;

// OCM's hub reaches `expected` in its own time; ours must already be there after its events.
async function bothReach(c: string, expected: Partial<State>): Promise<void> {
  await eventually(
    async () => {
      if (controller!.child.exitCode !== null) throw new Error(`OCM's registration controller exited:\n${logTail(controller!)}`);
      expect(await stateOn(admins[OCM], c)).toMatchObject(expected);
    },
    { timeoutMs: STEP_MS },
  );
  expect(await stateOn(admins[OURS], c)).toEqual(await stateOn(admins[OCM], c));
}

describe("deleting a ManagedCluster with a ManifestWork and a ManagedClusterAddOn in its namespace, beside OCM v1.2.0", () => {
  it("ends the same as OCM's registration controller: same finalizers, the add-on deleted before the work, then the cluster gone and its namespace emptied", async () => {
    const c = `c${Math.random().toString(36).slice(2, 7)}`;
    const both = async (act: (admin: KubeClient, hub: typeof OCM | typeof OURS) => Promise<void>) => {
      for (const hub of [OCM, OURS] as const) await act(admins[hub], hub);
    };

    await both(async (admin, hub) => {
      const mc = await admin.create<ManagedCluster>(ManagedClusterResource, { metadata: { name: c }, spec: { hubAcceptsClient: true } });
      if (hub === OURS) await deliver(typed(ManagedClusterResource, mc), "add");
    });
    const finalizers = [ClusterFinalizer.ApiResourceCleanup, ClusterFinalizer.ResourceCleanup].sort();
    await bothReach(c, { cluster: "present", accepted: true, finalizers, namespace: "present" });

    const made: Record<string, { addon: KubeObject; work: KubeObject }> = {};
    await both(async (admin, hub) => {
      const addon = await eventually(() => admin.create(ManagedClusterAddOnV1alpha1Resource, { metadata: { name: "a1", namespace: c, finalizers: [ADDON_AGENT] }, spec: {} }));
      const work = await admin.create(ManifestWorkResource, {
        metadata: { name: "w1", namespace: c, finalizers: [WORK_AGENT] },
        spec: { workload: { manifests: [{ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "w1", namespace: "default" } }] } },
      });
      made[hub] = { addon, work };
    });

    // the deletion: add-ons go first, the work waits
    await both(async (admin, hub) => {
      await admin.delete(ManagedClusterResource, c);
      if (hub === OURS) await deliver(typed(ManagedClusterResource, (await admin.get<ManagedCluster>(ManagedClusterResource, c))!));
    });
    await bothReach(c, { cluster: "deleting", finalizers, deleting: "False/ResourceRemaining", addons: { a1: "deleting" }, works: { w1: "present" } });

    // the add-on's agent is done: then the work is deleted
    await both(async (admin, hub) => {
      await admin.patch(ManagedClusterAddOnV1alpha1Resource, "a1", { metadata: { finalizers: null } }, { namespace: c });
      if (hub === OURS) await deliver(typed(ManagedClusterAddOnV1alpha1Resource, made[hub]!.addon), "delete");
    });
    await bothReach(c, { cluster: "deleting", addons: {}, works: { w1: "deleting" } });

    // the work agent is done: the cluster goes, its namespace stays, emptied
    await both(async (admin, hub) => {
      await admin.patch(ManifestWorkResource, "w1", { metadata: { finalizers: null } }, { namespace: c });
      if (hub === OURS) await deliver(typed(ManifestWorkResource, made[hub]!.work), "delete");
    });
    await bothReach(c, { cluster: "gone", finalizers: [], namespace: "present", works: {}, addons: {} });
  }, 150_000);
});
