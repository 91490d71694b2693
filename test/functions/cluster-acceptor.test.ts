// The cluster-acceptor function against a real hub: it runs under its own RBAC (so the API server's
// escalation checks on the RBAC it writes are real), and what it grants is tested by acting as the
// cluster's agent.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { isDeepStrictEqual } from "node:util";
import type { LocalCluster } from "../../dev/control-plane/clusters.ts";
import { KubeClient, resourcePath, type KubeObject } from "../../shared/kube/client.ts";
import { classifyError } from "../../shared/kube/errors.ts";
import {
  CertificateSigningRequestResource,
  ClusterRoleBindingResource,
  ClusterRoleResource,
  KubeAPIServerClientSignerName,
  LeaseResource,
  NamespaceResource,
  RoleBindingResource,
  SubjectAccessReviewResource,
} from "../../shared/api/kube.ts";
import { ClusterAnnotation, ClusterFinalizer, ClusterLabel, ManagedClusterConditionType, ManagedClusterLeaseName, ManagedClusterResource, type ManagedCluster } from "../../shared/api/cluster.ts";
import { ManifestWorkResource, WorkFinalizer } from "../../shared/api/work.ts";
import { AgentConfigName, AgentConfigResource } from "../../shared/api/agent-config.ts";
import { HubRbacName, RegisterGroup, RegisterResource, RegisterSubresource, RegisterVerb } from "../../shared/api/register.ts";
import { CsrUsages, ManagedClustersGroup, agentUser, clusterGroup } from "../../shared/api/registration.ts";
import type { CertificateSigningRequest } from "../../shared/api/certificates.ts";
import { findCondition } from "../../shared/conditions.ts";
import { microTime } from "../../shared/clock.ts";
import { createCertificateRequest, generateKeyPair } from "../../shared/pki.ts";
import { handleEvent, serve, type Io, type Reply } from "../../shared/harness.ts";
import { fn, spec, type Config } from "../../functions/cluster-acceptor/reconcile.ts";
import { clusterRole } from "../../functions/cluster-acceptor/rbac.ts";
import { objectEvent, postEvent, startFunctionServer, tickEvent } from "../support/functions.ts";
import { eventually } from "../support/eventually.ts";
import { allowCsrRequests, bootstrapIdentities, functionIo, startHub, type Hub, type Requester } from "../support/fixtures.ts";

const HUB = "hub";
const BOOTSTRAP_GROUP = "system:bootstrappers:managedcluster";
const suffix = () => Math.random().toString(36).slice(2, 7);

let plane: Hub;
let hub: LocalCluster;
let admin: KubeClient;
let io: Io<Config>;
let autoApprover: Requester;
let otherBootstrapper: Requester;
let edgeBootstrapper: Requester; // an auto-approval user for edge-* clusters only

beforeAll(async () => {
  plane = await startHub(HUB, { controllers: true });
  ({ cluster: hub, admin } = plane);
  await allowCsrRequests(admin, [BOOTSTRAP_GROUP]);
  [autoApprover, otherBootstrapper, edgeBootstrapper] = (await bootstrapIdentities(hub, BOOTSTRAP_GROUP, 3)) as [Requester, Requester, Requester];
  const config = { hubCluster: HUB, autoApprovalUsers: [autoApprover.user, `${edgeBootstrapper.user}=edge-*`] };
  io = await functionIo(hub, spec.name, config, [ManagedClusterResource, ManifestWorkResource]);
});

afterAll(() => plane?.stop());

async function createCluster(name: string, hubAcceptsClient: boolean): Promise<ManagedCluster> {
  return admin.create<ManagedCluster>(ManagedClusterResource, { metadata: { name }, spec: { hubAcceptsClient } });
}

const readCluster = (c: string) => admin.get<ManagedCluster>(ManagedClusterResource, c);

async function setAccepts(c: string, hubAcceptsClient: boolean): Promise<ManagedCluster> {
  return admin.patch<ManagedCluster>(ManagedClusterResource, c, { spec: { hubAcceptsClient } });
}

// The bootstrap CSR an agent of cluster c makes with the given bootstrap identity.
async function bootstrapCsr(requester: KubeClient, c: string, commonName = agentUser(c, "agent1")): Promise<CertificateSigningRequest> {
  const request = await createCertificateRequest({ commonName, organizations: [clusterGroup(c), ManagedClustersGroup] }, await generateKeyPair());
  const body: CertificateSigningRequest = {
    metadata: { name: `${c}-${suffix()}`, labels: { [ClusterLabel.ClusterName]: c } },
    spec: { request: Buffer.from(request).toString("base64"), signerName: KubeAPIServerClientSignerName, usages: [...CsrUsages] },
  };
  return eventually(() => requester.create(CertificateSigningRequestResource, body));
}

async function deliver(event: Record<string, unknown>): Promise<Reply> {
  const reply = await handleEvent(spec, io, event);
  expect(reply.statusCode, reply.body).toBe(204);
  return reply;
}
const clusterEvent = (mc: KubeObject, verb: "add" | "update" | "delete" = "update") => objectEvent({ cluster: HUB, object: { apiVersion: "cluster.open-cluster-management.io/v1", kind: "ManagedCluster", ...mc }, verb });

type ClusterRoleObject = KubeObject & { rules?: unknown[] };

// Everything this function owns for cluster c, without names, so two clusters' states compare equal.
async function stateOf(c: string) {
  const [mc, ns, role, binding, registration, work, lease] = await Promise.all([
    readCluster(c),
    admin.get<KubeObject & { metadata: { labels?: Record<string, string> } }>(NamespaceResource, c),
    admin.get<ClusterRoleObject>(ClusterRoleResource, HubRbacName.cluster(c)),
    admin.get<KubeObject & { subjects?: { name: string }[] }>(ClusterRoleBindingResource, HubRbacName.cluster(c)),
    admin.get(RoleBindingResource, HubRbacName.registrationRoleBinding(c), c),
    admin.get<KubeObject & { metadata: { finalizers?: string[] } }>(RoleBindingResource, HubRbacName.workRoleBinding(c), c),
    admin.get<KubeObject & { spec: { holderIdentity?: string; renewTime?: string } }>(LeaseResource, ManagedClusterLeaseName, c),
  ]);
  const accepted = findCondition(mc?.status?.conditions, ManagedClusterConditionType.HubAccepted);
  return {
    cluster: mc ? "present" : "gone",
    hubAcceptsClient: mc?.spec?.hubAcceptsClient,
    finalizers: mc?.metadata.finalizers ?? [],
    autoAccepted: mc?.metadata.annotations?.[ClusterAnnotation.AutomaticallyAcceptedOn] !== undefined,
    condition: accepted ? `${accepted.status}/${accepted.reason}/${accepted.message}` : "none",
    namespace: ns ? ns.metadata.labels?.[ClusterLabel.ClusterName] === c : false,
    clusterRole: !role ? "none" : isDeepStrictEqual(role.rules, clusterRole(c, true).rules) ? "accepted" : isDeepStrictEqual(role.rules, clusterRole(c, false).rules) ? "denied" : JSON.stringify(role.rules),
    clusterRoleBinding: binding ? binding.subjects?.map((s) => s.name.replace(c, "<c>")) : "none",
    registrationRoleBinding: registration ? "present" : "none",
    workRoleBinding: work ? { finalizers: work.metadata.finalizers ?? [], deleting: !!work.metadata.deletionTimestamp } : "none",
    lease: lease ? { holder: lease.spec.holderIdentity, renewTimeIsMicro: /\.\d{6}Z$/.test(lease.spec.renewTime ?? "") } : "none",
  };
}
type State = Awaited<ReturnType<typeof stateOf>>;

const acceptedState: Partial<State> = {
  hubAcceptsClient: true,
  finalizers: [ClusterFinalizer.ApiResourceCleanup],
  condition: "True/HubClusterAdminAccepted/Accepted by hub cluster admin",
  namespace: true,
  clusterRole: "accepted",
  clusterRoleBinding: ["system:open-cluster-management:<c>", "open-cluster-management:<c>"],
  registrationRoleBinding: "present",
  workRoleBinding: { finalizers: [WorkFinalizer.ManifestWorkCleanup], deleting: false },
  lease: { holder: ManagedClusterLeaseName, renewTimeIsMicro: true },
};
const deniedState: Partial<State> = {
  hubAcceptsClient: false,
  condition: "False/HubClusterAdminDenied/Denied by hub cluster admin",
  clusterRole: "denied",
  clusterRoleBinding: ["system:open-cluster-management:<c>", "open-cluster-management:<c>"],
  registrationRoleBinding: "none",
  workRoleBinding: "none",
};
const untouchedState: Partial<State> = {
  hubAcceptsClient: false,
  finalizers: [],
  autoAccepted: false,
  condition: "none",
  namespace: false,
  clusterRole: "none",
  clusterRoleBinding: "none",
  registrationRoleBinding: "none",
  workRoleBinding: "none",
  lease: "none",
};

type Scenario = {
  name: string;
  given: {
    hubAcceptsClient: boolean;
    bootstrapCsrBy?: "auto-approval user" | "another user" | "auto-approval user, nonsense CN" | "edge-only auto-approval user";
    namePrefix?: string; // cluster names are <prefix><random>; "c" unless set
  };
  // admin changes, each followed by the event the change produces
  when: ("reconcile" | "admin sets hubAcceptsClient=false" | "admin sets hubAcceptsClient=true")[];
  then: Partial<State>;
};

const scenarios: Scenario[] = [
  { name: "accepts a cluster the admin accepted: namespace, RBAC, finalizer, lease and HubAcceptedManagedCluster=True", given: { hubAcceptsClient: true }, when: ["reconcile"], then: { ...acceptedState, autoAccepted: false } },
  { name: "writes nothing for a cluster that was never accepted", given: { hubAcceptsClient: false }, when: ["reconcile"], then: untouchedState },
  {
    name: "denies an accepted cluster the admin sets to false: narrower ClusterRole, no RoleBindings, HubClusterAdminDenied",
    given: { hubAcceptsClient: true },
    when: ["reconcile", "admin sets hubAcceptsClient=false"],
    then: { ...deniedState, finalizers: [ClusterFinalizer.ApiResourceCleanup], namespace: true },
  },
  { name: "accepts again after a deny", given: { hubAcceptsClient: true }, when: ["reconcile", "admin sets hubAcceptsClient=false", "admin sets hubAcceptsClient=true"], then: acceptedState },
  { name: "auto-accepts a cluster whose bootstrap CSR came from an auto-approval user", given: { hubAcceptsClient: false, bootstrapCsrBy: "auto-approval user" }, when: ["reconcile"], then: { ...acceptedState, autoAccepted: true } },
  { name: "does not auto-accept a cluster whose bootstrap CSR came from another user", given: { hubAcceptsClient: false, bootstrapCsrBy: "another user" }, when: ["reconcile"], then: untouchedState },
  // An auto-approval user's CSR counts only when the csr-approver would approve it for this cluster.
  {
    name: "does not auto-accept a cluster for an auto-approval user's CSR that the approver would refuse (nonsense CN)",
    given: { hubAcceptsClient: false, bootstrapCsrBy: "auto-approval user, nonsense CN" },
    when: ["reconcile"],
    then: untouchedState,
  },
  { name: "auto-accepts a cluster a narrowed auto-approval user may register (edge-*)", given: { hubAcceptsClient: false, bootstrapCsrBy: "edge-only auto-approval user", namePrefix: "edge-" }, when: ["reconcile"], then: { ...acceptedState, autoAccepted: true } },
  { name: "does not auto-accept a cluster outside a narrowed auto-approval user's names", given: { hubAcceptsClient: false, bootstrapCsrBy: "edge-only auto-approval user" }, when: ["reconcile"], then: untouchedState },
  {
    name: "keeps an auto-accepted cluster denied once the admin sets hubAcceptsClient=false",
    given: { hubAcceptsClient: false, bootstrapCsrBy: "auto-approval user" },
    when: ["reconcile", "admin sets hubAcceptsClient=false", "reconcile"],
    then: { ...deniedState, autoAccepted: true },
  },
];

describe("accepting and denying clusters", () => {
  it.each(scenarios)("$name", async ({ given, when, then }) => {
    const c = `${given.namePrefix ?? "c"}${suffix()}`;
    const created = await createCluster(c, given.hubAcceptsClient);
    const by = given.bootstrapCsrBy;
    if (by === "auto-approval user" || by === "another user") await bootstrapCsr(by === "auto-approval user" ? autoApprover.client : otherBootstrapper.client, c);
    if (by === "auto-approval user, nonsense CN") await bootstrapCsr(autoApprover.client, c, "nonsense");
    if (by === "edge-only auto-approval user") await bootstrapCsr(edgeBootstrapper.client, c);
    for (const step of when) {
      const changed = step === "reconcile" ? created : await setAccepts(c, step.endsWith("true"));
      await deliver(clusterEvent(changed));
    }
    expect(await stateOf(c)).toMatchObject(then);
    if (then === untouchedState) expect((await readCluster(c))!.metadata.resourceVersion).toBe(created.metadata.resourceVersion);
  });

  it("reports HubAcceptedManagedCluster=False/Error with every apply error when the cluster namespace is terminating", async () => {
    const c = `c${suffix()}`;
    await admin.create(NamespaceResource, { metadata: { name: c, finalizers: ["test.invalid/hold"] } });
    await admin.delete(NamespaceResource, c);
    try {
      const reply = await handleEvent(spec, io, clusterEvent(await createCluster(c, true)));
      expect(reply.statusCode).toBeGreaterThanOrEqual(500); // the source (or the resync) tries again
      const condition = findCondition((await readCluster(c))?.status?.conditions, ManagedClusterConditionType.HubAccepted);
      expect(condition).toMatchObject({ status: "False", reason: "Error" });
      // one line per failed step: both RoleBindings and the lease
      expect(condition!.message.split("\n")).toHaveLength(3);
      expect(condition!.message).toContain("being terminated");
    } finally {
      // leave nothing half-made behind for the resync test below
      await admin.patch(ManagedClusterResource, c, { metadata: { finalizers: null } });
      await admin.delete(ManagedClusterResource, c);
      await admin.patch(NamespaceResource, c, { metadata: { finalizers: null } });
    }
  });

  it("writes nothing when an accepted cluster is reconciled again", async () => {
    const c = `c${suffix()}`;
    await deliver(clusterEvent(await createCluster(c, true)));
    const versions = async () =>
      Promise.all([readCluster(c), admin.get(ClusterRoleResource, HubRbacName.cluster(c)), admin.get(RoleBindingResource, HubRbacName.workRoleBinding(c), c), admin.get(NamespaceResource, c)]).then((objs) =>
        objs.map((o) => o?.metadata.resourceVersion),
      );
    const before = await versions();
    await deliver(tickEvent(HUB));
    expect(await versions()).toEqual(before);
  });

  it("on a resync tick, reconciles only the clusters that differ from what acceptance leaves", async () => {
    const [steady, drifted, fresh] = [`c${suffix()}`, `c${suffix()}`, `c${suffix()}`];
    await deliver(clusterEvent(await createCluster(steady, true)));
    await deliver(clusterEvent(await createCluster(drifted, true)));
    await createCluster(fresh, true); // accepted by an admin, its event not yet come
    // the deletion of drifted's ClusterRoleBinding happened while its event was lost
    await admin.delete(ClusterRoleBindingResource, HubRbacName.cluster(drifted));
    const keys = await fn.definition.resync!(io, { type: "tick", cluster: HUB });
    if (!Array.isArray(keys)) throw new Error(`skipped: ${keys.skip}`);
    const names = keys.map((k) => k.name);
    expect(names).toEqual(expect.arrayContaining([drifted, fresh]));
    expect(names).not.toContain(steady);
    // the tick puts back what the lost events would have
    await deliver(tickEvent(HUB));
    expect(await stateOf(drifted)).toEqual(await stateOf(steady));
    expect(await stateOf(fresh)).toEqual(await stateOf(steady));
    expect(await fn.definition.resync!(io, { type: "tick", cluster: "spoke" })).toHaveProperty("skip");
  });

  it("on a resync tick, removes the RBAC of a cluster that went while its events were lost", async () => {
    const c = `c${suffix()}`;
    await deliver(clusterEvent(await createCluster(c, true)));
    await admin.patch(ManagedClusterResource, c, { metadata: { finalizers: null } });
    await admin.delete(ManagedClusterResource, c);
    await eventually(async () => expect(await readCluster(c)).toBeUndefined());
    const keys = await fn.definition.resync!(io, { type: "tick", cluster: HUB });
    expect(Array.isArray(keys) && keys.map((k) => k.name)).toContain(c);
    await deliver(tickEvent(HUB));
    expect(await stateOf(c)).toMatchObject({ cluster: "gone", clusterRole: "none", clusterRoleBinding: "none", registrationRoleBinding: "none" });
  });
});

// An agent of cluster c with its client certificate (what an approved CSR gives it).
async function agentOf(c: string): Promise<KubeClient> {
  return KubeClient.fromKubeconfig(await hub.kubeconfigFor({ user: agentUser(c, "agent1"), groups: [clusterGroup(c), ManagedClustersGroup] }));
}

const forbidden = async (call: Promise<unknown>) => expect(classifyError(await call.then(() => "allowed", (e: unknown) => e))).toBe("forbidden");

async function mayRenew(c: string): Promise<boolean> {
  const review = await admin.request<{ status: { allowed: boolean } }>("POST", resourcePath(SubjectAccessReviewResource), {
    spec: { user: agentUser(c, "agent1"), groups: [clusterGroup(c), ManagedClustersGroup], resourceAttributes: { group: RegisterGroup, resource: RegisterResource.ManagedClusters, subresource: RegisterSubresource.ClientCertificates, verb: RegisterVerb.Renew } },
  });
  return review.status.allowed;
}

describe("what the cluster's agent may do on the hub", () => {
  it("after acceptance: read its cluster, update its status, renew its lease, create CSRs and renew its certificate", async () => {
    const c = `c${suffix()}`;
    await deliver(clusterEvent(await createCluster(c, true)));
    const agent = await agentOf(c);
    await eventually(async () => {
      const mc = await agent.get<ManagedCluster>(ManagedClusterResource, c);
      expect(mc?.metadata.name).toBe(c);
      await agent.update(ManagedClusterResource, { ...mc!, status: { ...mc!.status, version: { kubernetes: "v1.35.4" } } }, "status");
      const lease = await agent.get<KubeObject & { spec: Record<string, unknown> }>(LeaseResource, ManagedClusterLeaseName, c);
      await agent.update(LeaseResource, { ...lease!, spec: { ...lease!.spec, renewTime: microTime(new Date()) } });
      const request = await createCertificateRequest({ commonName: agentUser(c, "agent1"), organizations: [clusterGroup(c)] }, await generateKeyPair());
      await agent.create(CertificateSigningRequestResource, {
        metadata: { generateName: `${c}-`, labels: { [ClusterLabel.ClusterName]: c } } as KubeObject["metadata"],
        spec: { request: Buffer.from(request).toString("base64"), signerName: KubeAPIServerClientSignerName, usages: [...CsrUsages] },
      });
      expect(await mayRenew(c)).toBe(true);
    });
    // ...and nothing of another cluster
    await createCluster(`${c}-other`, false);
    await forbidden(agent.get(ManagedClusterResource, `${c}-other`));
  });

  it("after a deny: still reads its cluster, but status updates, CSRs and renewals are refused", async () => {
    const c = `c${suffix()}`;
    await deliver(clusterEvent(await createCluster(c, true)));
    const agent = await agentOf(c);
    await eventually(async () => expect(await mayRenew(c)).toBe(true));
    await deliver(clusterEvent(await setAccepts(c, false)));
    await eventually(async () => {
      const mc = await agent.get<ManagedCluster>(ManagedClusterResource, c);
      expect(findCondition(mc?.status?.conditions, ManagedClusterConditionType.HubAccepted)?.reason).toBe("HubClusterAdminDenied");
      await forbidden(agent.patch(ManagedClusterResource, c, { status: { version: { kubernetes: "v0" } } }, { subresource: "status" }));
      await forbidden(agent.list(LeaseResource, { namespace: c }));
      await forbidden(agent.get(AgentConfigResource, AgentConfigName, c));
      expect(await mayRenew(c)).toBe(false);
    });
  });

  // The registration role grants AgentConfigs through a RoleBinding in the cluster's own namespace
  // (docs/agent-config.md); a ClusterRoleBinding of it would hand every cluster every other's config.
  it("after acceptance: reads its own AgentConfig and patches its status, but gets 403 reading, listing or patching another cluster's", async () => {
    const [a, b] = [`c${suffix()}`, `c${suffix()}`];
    for (const c of [a, b]) {
      await deliver(clusterEvent(await createCluster(c, true)));
      await admin.create(AgentConfigResource, { metadata: { name: AgentConfigName, namespace: c }, spec: { settings: { logLevel: "debug" } } });
    }
    const agentA = await agentOf(a);
    const report = { status: { lastError: "reported by the agent" } };
    // control: its own, once the grant has reached the authorizer
    await eventually(async () => {
      expect((await agentA.get(AgentConfigResource, AgentConfigName, a))?.metadata.name).toBe(AgentConfigName);
      expect((await agentA.list(AgentConfigResource, { namespace: a })).items).toHaveLength(1);
      await agentA.patch(AgentConfigResource, AgentConfigName, report, { namespace: a, subresource: "status" });
    });
    const bBefore = (await admin.get(AgentConfigResource, AgentConfigName, b))!.metadata.resourceVersion;
    await forbidden(agentA.get(AgentConfigResource, AgentConfigName, b));
    await forbidden(agentA.list(AgentConfigResource, { namespace: b }));
    await forbidden(agentA.list(AgentConfigResource));
    await forbidden(agentA.patch(AgentConfigResource, AgentConfigName, report, { namespace: b, subresource: "status" }));
    // the hub assigns, the agent only reports: not even its own spec
    await forbidden(agentA.patch(AgentConfigResource, AgentConfigName, { spec: { settings: { logLevel: "error" } } }, { namespace: a }));
    expect((await admin.get(AgentConfigResource, AgentConfigName, b))!.metadata.resourceVersion).toBe(bBefore);
  });
});

describe("cluster deletion", () => {
  it("removes the cluster's RBAC and releases its finalizer when it is deleted", async () => {
    const c = `c${suffix()}`;
    await deliver(clusterEvent(await createCluster(c, true)));
    await admin.delete(ManagedClusterResource, c);
    const deleting = (await readCluster(c))!;
    expect(deleting.metadata.deletionTimestamp).toBeTruthy();
    await deliver(clusterEvent(deleting));
    expect(await stateOf(c)).toMatchObject({ cluster: "gone", clusterRole: "none", clusterRoleBinding: "none", registrationRoleBinding: "none", workRoleBinding: "none", namespace: true });
  });

  it("keeps the work RoleBinding, and the cluster, until the cluster's ManifestWorks are gone", async () => {
    const c = `c${suffix()}`;
    await deliver(clusterEvent(await createCluster(c, true)));
    const work = await admin.create(ManifestWorkResource, { metadata: { name: "w1", namespace: c }, spec: { workload: { manifests: [{ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "w1", namespace: "default" } }] } } });
    await admin.delete(ManagedClusterResource, c);

    const reply = await deliver(clusterEvent((await readCluster(c))!));
    expect(reply.headers?.["x-recheck-after-ms"]).toBe("5000");
    expect(await stateOf(c)).toMatchObject({
      cluster: "present",
      finalizers: [ClusterFinalizer.ApiResourceCleanup],
      clusterRole: "none",
      registrationRoleBinding: "none",
      workRoleBinding: { finalizers: [WorkFinalizer.ManifestWorkCleanup], deleting: true },
    });

    await admin.delete(ManifestWorkResource, "w1", c);
    await deliver(objectEvent({ cluster: HUB, object: work, verb: "delete" }));
    expect(await stateOf(c)).toMatchObject({ cluster: "gone", workRoleBinding: "none" });
  });

  it("removes the RBAC of a cluster that is already gone, woken by an event of that RBAC", async () => {
    const c = `c${suffix()}`;
    await deliver(clusterEvent(await createCluster(c, true)));
    await admin.patch(ManagedClusterResource, c, { metadata: { finalizers: null } });
    await admin.delete(ManagedClusterResource, c);
    await eventually(async () => expect(await readCluster(c)).toBeUndefined());
    const binding = (await admin.get(RoleBindingResource, HubRbacName.registrationRoleBinding(c), c))!;
    await deliver(objectEvent({ cluster: HUB, object: { apiVersion: "rbac.authorization.k8s.io/v1", kind: "RoleBinding", ...binding } }));
    expect(await stateOf(c)).toMatchObject({ cluster: "gone", clusterRole: "none", clusterRoleBinding: "none", registrationRoleBinding: "none", workRoleBinding: "none" });
  });
});

describe("event delivery", () => {
  // An agent's join as the hub sees it: each change, then the event it produces (payloads are
  // snapshots of that moment). `onEvent` delivers at once (a clean run) or collects for later.
  async function join(c: string, onEvent: (e: Record<string, unknown>) => Promise<unknown>): Promise<void> {
    await onEvent(clusterEvent(await createCluster(c, false), "add"));
    const csr = await bootstrapCsr(autoApprover.client, c);
    await onEvent(objectEvent({ cluster: HUB, object: { apiVersion: "certificates.k8s.io/v1", kind: "CertificateSigningRequest", ...csr }, verb: "add" }));
    await onEvent(clusterEvent((await readCluster(c))!, "update"));
    await onEvent(objectEvent({ cluster: HUB, object: { apiVersion: "v1", kind: "Namespace", metadata: { name: c, labels: { [ClusterLabel.ClusterName]: c } } }, verb: "update" }));
    await onEvent(clusterEvent((await readCluster(c))!, "update"));
  }

  it("reaches the same state from duplicated and reversed events as from a clean run", async () => {
    const [clean, replayed] = [`c${suffix()}`, `c${suffix()}`];
    await join(clean, deliver);
    const stream: Record<string, unknown>[] = [];
    await join(replayed, async (e) => stream.push(e));
    for (const e of stream.reverse()) {
      await deliver(e);
      await deliver(e);
    }
    expect(await stateOf(clean)).toMatchObject({ ...acceptedState, autoAccepted: true });
    expect(await stateOf(replayed)).toEqual(await stateOf(clean));

    // A deny only counts after an accept (OCM's rule), so it is replayed once both are accepted.
    const [denyClean, denyReplayed] = await Promise.all([clean, replayed].map(async (c) => clusterEvent(await setAccepts(c, false))));
    await deliver(denyClean!);
    for (const e of [denyReplayed!, denyReplayed!]) await deliver(e);
    expect(await stateOf(clean)).toMatchObject({ ...deniedState, autoAccepted: true });
    expect(await stateOf(replayed)).toEqual(await stateOf(clean));
  });

  it("answers a malformed event with 400 and changes nothing", async () => {
    const c = `c${suffix()}`;
    const created = await createCluster(c, true);
    const { cluster: _dropped, ...noCluster } = clusterEvent(created);
    for (const event of [noCluster, { ...clusterEvent(created), data: { metadata: { name: "another" } } }, { ...clusterEvent(created), type: "dev.knative.apiserver.resource.poke" }]) {
      expect((await handleEvent(spec, io, event)).statusCode).toBe(400);
    }
    expect((await readCluster(c))!.metadata.resourceVersion).toBe(created.metadata.resourceVersion);
    expect(await stateOf(c)).toMatchObject({ ...untouchedState, hubAcceptsClient: true });
    // control: the same event, well formed, accepts the cluster
    expect((await handleEvent(spec, io, clusterEvent(created))).statusCode).toBe(204);
    expect(await stateOf(c)).toMatchObject(acceptedState);
  });

  it("accepts through the real faas-js-runtime HTTP server, answering 204", async () => {
    const server = await startFunctionServer(serve(spec, () => io));
    try {
      const c = `c${suffix()}`;
      const reply = await postEvent(server.url, clusterEvent(await createCluster(c, true), "add"));
      expect(reply.status).toBe(204);
      expect(await stateOf(c)).toMatchObject(acceptedState);
    } finally {
      await server.close();
    }
  });
});
