// The cluster-acceptor function against a real hub: it runs under its own RBAC (so the API server's
// escalation checks on the RBAC it writes are real), and what it grants is tested by acting as the
// cluster's agent.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { isDeepStrictEqual } from "node:util";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ocmAdmissionPolicies, type LocalCluster } from "../../dev/control-plane/clusters.ts";
import { KubeClient, resourcePath, type KubeObject } from "../../shared/kube/client.ts";
import { KubeError, classifyError } from "../../shared/kube/errors.ts";
import { applyManifests } from "../../shared/apply.ts";
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
import {
  ClusterAnnotation,
  ClusterFinalizer,
  ClusterLabel,
  ManagedClusterConditionType,
  ManagedClusterLeaseName,
  ManagedClusterResource,
  reservedClusterNameMessage,
  type ManagedCluster,
} from "../../shared/api/cluster.ts";
import { ManagedClusterAddOnV1alpha1Resource } from "../../shared/api/addon.ts";
import { ManifestWorkResource, WorkFinalizer } from "../../shared/api/work.ts";
import { AgentConfigName, AgentConfigResource } from "../../shared/api/agent-config.ts";
import { HubRbacName, RegisterGroup, RegisterResource, RegisterSubresource, RegisterVerb } from "../../shared/api/register.ts";
import { AddonNameLabel, CsrUsages, ManagedClustersGroup, agentUser, clusterGroup } from "../../shared/api/registration.ts";
import type { CertificateSigningRequest } from "../../shared/api/certificates.ts";
import { findCondition } from "../../shared/conditions.ts";
import { microTime } from "../../shared/clock.ts";
import { createCertificateRequest, generateKeyPair } from "../../shared/pki.ts";
import { done, handleEvent, jsonLog, serve, type Io, type Reply } from "../../shared/harness.ts";
import fn, { type Config } from "../../functions/cluster-acceptor/reconcile.ts";
import { clusterRole } from "../../functions/cluster-acceptor/rbac.ts";
import csrApprover, * as csrApproverModule from "../../functions/csr-approver/reconcile.ts";
import { deliverAsRelay, objectEvent, postEvent, startFunctionServer, tickEvent } from "../support/functions.ts";
import { eventually } from "../support/eventually.ts";
import { recordingRequests } from "../support/requests.ts";
import { allowCsrRequests, bootstrapIdentities, functionIo, startHub, type Hub, type Requester } from "../support/fixtures.ts";

const HUB = "hub";
const BOOTSTRAP_GROUP = "system:bootstrappers:managedcluster";
const suffix = () => Math.random().toString(36).slice(2, 7);

let plane: Hub;
let hub: LocalCluster;
let admin: KubeClient;
let io: Io<Config>;
let approverIo: Io<csrApproverModule.Config>;
let autoApprover: Requester;
let otherBootstrapper: Requester;
let edgeBootstrapper: Requester; // an auto-approval user for edge-* clusters only

beforeAll(async () => {
  plane = await startHub(HUB, { controllers: true });
  ({ cluster: hub, admin } = plane);
  await allowCsrRequests(admin, [BOOTSTRAP_GROUP]);
  [autoApprover, otherBootstrapper, edgeBootstrapper] = (await bootstrapIdentities(hub, BOOTSTRAP_GROUP, 3)) as [Requester, Requester, Requester];
  const config = { hubCluster: HUB, autoApprovalUsers: [autoApprover.user, `${edgeBootstrapper.user}=edge-*`] };
  io = await functionIo(hub, fn.spec.name, config, [ManagedClusterResource, ManifestWorkResource, ManagedClusterAddOnV1alpha1Resource]);
  approverIo = await functionIo(hub, csrApprover.spec.name, config, [CertificateSigningRequestResource]);
  // what OCM's cluster-manager grants a bootstrap identity: create its ManagedCluster, request a certificate
  await applyManifests(admin, readFileSync(join(import.meta.dirname, "..", "..", "manifests", "hub", "bootstrap-rbac.yaml"), "utf8"));
  await eventually(() => autoApprover.client.list(ManagedClusterResource)); // the grant has reached the authorizer
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
// `labels` go beside the cluster-name label; `signerName` replaces kube-apiserver-client's.
async function bootstrapCsr(requester: KubeClient, c: string, commonName = agentUser(c, "agent1"), o: { labels?: Record<string, string>; signerName?: string } = {}): Promise<CertificateSigningRequest> {
  const request = await createCertificateRequest({ commonName, organizations: [clusterGroup(c), ManagedClustersGroup] }, await generateKeyPair());
  const body: CertificateSigningRequest = {
    metadata: { name: `${c}-${suffix()}`, labels: { [ClusterLabel.ClusterName]: c, ...o.labels } },
    spec: { request: Buffer.from(request).toString("base64"), signerName: o.signerName ?? KubeAPIServerClientSignerName, usages: [...CsrUsages] },
  };
  return eventually(() => requester.create(CertificateSigningRequestResource, body));
}

async function deliver(event: Record<string, unknown>): Promise<Reply> {
  const reply = await deliverAsRelay(fn.spec, io, event);
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
  finalizers: [ClusterFinalizer.ApiResourceCleanup, ClusterFinalizer.ResourceCleanup],
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
    bootstrapCsrBy?: "auto-approval user" | "another user" | "auto-approval user, nonsense CN" | "edge-only auto-approval user" | "auto-approval user, as an add-on's" | "auto-approval user, for another signer";
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
    then: { ...deniedState, finalizers: [ClusterFinalizer.ApiResourceCleanup, ClusterFinalizer.ResourceCleanup], namespace: true },
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
  // Only the cluster's own bootstrap CSR counts: not an add-on's, nor one for another signer.
  { name: "does not auto-accept a cluster for an auto-approval user's CSR labelled as an add-on's", given: { hubAcceptsClient: false, bootstrapCsrBy: "auto-approval user, as an add-on's" }, when: ["reconcile"], then: untouchedState },
  { name: "does not auto-accept a cluster for an auto-approval user's CSR to another signer", given: { hubAcceptsClient: false, bootstrapCsrBy: "auto-approval user, for another signer" }, when: ["reconcile"], then: untouchedState },
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
    if (by === "auto-approval user, as an add-on's") await bootstrapCsr(autoApprover.client, c, undefined, { labels: { [AddonNameLabel]: "an-addon" } });
    if (by === "auto-approval user, for another signer") await bootstrapCsr(autoApprover.client, c, undefined, { signerName: "example.com/other" });
    for (const step of when) {
      const changed = step === "reconcile" ? created : await setAccepts(c, step.endsWith("true"));
      await deliver(clusterEvent(changed));
    }
    expect(await stateOf(c)).toMatchObject(then);
    if (then === untouchedState) expect((await readCluster(c))!.metadata.resourceVersion).toBe(created.metadata.resourceVersion);
  });

  it("reports HubAcceptedManagedCluster=False/Error with every apply error when the cluster namespace is terminating, and answers 422 (terminal)", async () => {
    const c = `c${suffix()}`;
    // made by the acceptor for this cluster earlier (labelled), and now going
    await admin.create(NamespaceResource, { metadata: { name: c, labels: { [ClusterLabel.ClusterName]: c }, finalizers: ["test.invalid/hold"] } });
    await admin.delete(NamespaceResource, c);
    try {
      const reply = await handleEvent(fn.spec, io, clusterEvent(await createCluster(c, true)));
      // a namespace being terminated is an admission denial: terminal, so no source retries it; the
      // resync looks at the cluster again (its namespace is not what acceptance leaves)
      expect(reply.statusCode).toBe(422);
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

  it("writes nothing when an accepted cluster is reconciled again: the reconcile of that cluster reads it and sends no write", async () => {
    const c = `c${suffix()}`;
    await deliver(clusterEvent(await createCluster(c, true)));
    const versions = async () =>
      Promise.all([
        readCluster(c),
        admin.get(NamespaceResource, c),
        admin.get(ClusterRoleResource, HubRbacName.cluster(c)),
        admin.get(ClusterRoleBindingResource, HubRbacName.cluster(c)),
        admin.get(RoleBindingResource, HubRbacName.registrationRoleBinding(c), c),
        admin.get(RoleBindingResource, HubRbacName.workRoleBinding(c), c),
        admin.get(LeaseResource, ManagedClusterLeaseName, c),
      ]).then((objs) => objs.map((o) => o?.metadata.resourceVersion));
    const before = await versions();
    expect(before).not.toContain(undefined);
    const again = recordingRequests(io);
    expect(await fn.definition.reconcile(again.io, { cluster: HUB, name: c })).toEqual(done);
    expect(again.requests).toContainEqual({ method: "GET", path: resourcePath(ManagedClusterResource, { name: c }), ok: true }); // it looked at c
    expect(again.writes()).toEqual([]);
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

// Issue 23 hole 5: a cluster's name is its namespace's. An auto-approval user allowed any name must not
// get a cluster into a namespace of Kubernetes or of the hub, nor into one made for something else.
describe("a cluster may not take over an existing namespace", () => {
  const bindingResource = { group: "admissionregistration.k8s.io", version: "v1", kind: "ValidatingAdmissionPolicyBinding", plural: "validatingadmissionpolicybindings", namespaced: false } as const;
  const clusterPolicy = "managedclustervalidators.admission.cluster.open-cluster-management.io";

  // A ManagedCluster the admission policy refuses today, as one made before the hub enforced the rule:
  // the admin lifts the policy's binding for this one create and puts it back.
  async function createPastThePolicy(name: string): Promise<ManagedCluster> {
    const binding = (ocmAdmissionPolicies() as KubeObject[]).find((d) => d.kind === bindingResource.kind && d.metadata.name === clusterPolicy)!;
    await admin.delete(bindingResource, clusterPolicy);
    try {
      return await eventually(() => createCluster(name, false));
    } finally {
      await admin.create(bindingResource, binding);
      await eventually(async () => {
        const probe = await admin.create(ManagedClusterResource, { metadata: { name: "admission.probe" }, spec: {} }).then(
          () => "admitted",
          (e: unknown) => (e instanceof KubeError ? e.message : String(e)),
        );
        if (probe === "admitted") await admin.delete(ManagedClusterResource, "admission.probe");
        expect(probe).toContain(clusterPolicy);
      });
    }
  }

  type Snapshot = { namespace: unknown; roleBindings: string[]; leases: string[] };
  async function namespaceSnapshot(ns: string): Promise<Snapshot> {
    const n = await admin.get<KubeObject & { metadata: { labels?: Record<string, string> } }>(NamespaceResource, ns);
    const [bindings, leases] = await Promise.all([admin.list(RoleBindingResource, { namespace: ns }), admin.list(LeaseResource, { namespace: ns })]);
    return {
      namespace: { labels: n?.metadata.labels, resourceVersion: n?.metadata.resourceVersion },
      roleBindings: bindings.items.map((b) => b.metadata.name ?? "").sort(),
      leases: leases.items.map((l) => l.metadata.name ?? "").filter((l) => l === ManagedClusterLeaseName),
    };
  }

  const acceptedOf = async (c: string) => {
    const got = findCondition((await readCluster(c))?.status?.conditions, ManagedClusterConditionType.HubAccepted);
    return got ? `${got.status}/${got.reason}/${got.message}` : "none";
  };

  it("gives an auto-approval user (any name) registering cluster kube-system no ManagedCluster, no certificate, no acceptance and no write in kube-system", async () => {
    const c = "kube-system";
    const before = await namespaceSnapshot(c);
    // the attacker's own ManagedCluster: refused by the admission policy
    const created = await autoApprover.client.create(ManagedClusterResource, { metadata: { name: c }, spec: { hubAcceptsClient: false } }).then(
      () => "created",
      (e: unknown) => (e instanceof KubeError ? `${e.code} ${e.message}` : String(e)),
    );
    expect(created).toContain(reservedClusterNameMessage(c));
    // its bootstrap CSR: the csr-approver, under its own identity, approves nothing
    const csr = await bootstrapCsr(autoApprover.client, c);
    expect((await handleEvent(csrApprover.spec, approverIo, objectEvent({ cluster: HUB, object: { apiVersion: "certificates.k8s.io/v1", kind: "CertificateSigningRequest", ...csr }, verb: "add" }))).statusCode).toBe(204);
    const after = (await admin.get<CertificateSigningRequest>(CertificateSigningRequestResource, csr.metadata.name))!;
    expect(after.status?.conditions ?? []).toEqual([]);
    expect(after.status?.certificate).toBeUndefined();

    // and a kube-system ManagedCluster that exists anyway (made before the rule): the acceptor accepts
    // nothing, not for the CSR, not for an admin's hubAcceptsClient=true, and writes only the verdict
    const mc = await createPastThePolicy(c);
    try {
      await deliver(clusterEvent(mc, "add"));
      await deliver(objectEvent({ cluster: HUB, object: { apiVersion: "certificates.k8s.io/v1", kind: "CertificateSigningRequest", ...csr }, verb: "add" }));
      await deliver(clusterEvent(await setAccepts(c, true)));
      await deliver(tickEvent(HUB));
      const verdict = `False/ClusterNameReserved/${reservedClusterNameMessage(c)}`;
      expect(await acceptedOf(c)).toBe(verdict);
      const state = await stateOf(c);
      expect(state).toMatchObject({ finalizers: [], autoAccepted: false, clusterRole: "none", clusterRoleBinding: "none", registrationRoleBinding: "none", workRoleBinding: "none", lease: "none" });
      expect(await namespaceSnapshot(c)).toEqual(before);
      expect(await mayRenew(c)).toBe(false);
    } finally {
      await admin.delete(ManagedClusterResource, c);
    }
  });

  it("does not accept a cluster into a pre-existing namespace made for something else: HubAcceptedManagedCluster=False/ClusterNamespaceNotOwned, the namespace untouched", async () => {
    const c = `app${suffix()}`;
    await admin.create(NamespaceResource, { metadata: { name: c, labels: { team: "payments" } } });
    const before = await namespaceSnapshot(c);
    // the auto-approval user registers a cluster of that name, as its agent would
    const mc = await autoApprover.client.create<ManagedCluster>(ManagedClusterResource, { metadata: { name: c }, spec: { hubAcceptsClient: false } });
    await bootstrapCsr(autoApprover.client, c);
    await deliver(clusterEvent(mc, "add"));
    await deliver(clusterEvent(await setAccepts(c, true))); // not even an admin's acceptance adopts it
    const verdict =
      `False/ClusterNamespaceNotOwned/namespace "${c}" exists and was not made for cluster "${c}" (it lacks the label ${ClusterLabel.ClusterName}=${c}), ` +
      `so the hub does not take it over: register the cluster under another name, or remove that namespace, or label it so if it was made for this cluster`;
    expect(await acceptedOf(c)).toBe(verdict);
    expect(await stateOf(c)).toMatchObject({ autoAccepted: false, finalizers: [], clusterRole: "none", registrationRoleBinding: "none", workRoleBinding: "none", lease: "none" });
    expect(await namespaceSnapshot(c)).toEqual(before);
    // control: the admin says the namespace is this cluster's, and acceptance goes ahead
    const labelled = await admin.patch(NamespaceResource, c, { metadata: { labels: { [ClusterLabel.ClusterName]: c } } });
    await deliver(objectEvent({ cluster: HUB, object: { apiVersion: "v1", kind: "Namespace", ...labelled } }));
    expect(await stateOf(c)).toMatchObject(acceptedState);
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

describe("acceptance in two waves, declared once the authorizer grants it", () => {
  it("a label another writer puts on the cluster between the acceptor's read and its finalizer patch costs one read of the cluster and the patch again, not a second judgement; the label stays", async () => {
    const c = `c${suffix()}`;
    const created = await createCluster(c, true);
    const rec = recordingRequests(io);
    const clusterPath = resourcePath(ManagedClusterResource, { name: c });
    // the other writer (cluster-sets, say) gets in just before the acceptor's first patch of the cluster
    let raced = false;
    const racing: Io<Config> = {
      ...rec.io,
      cluster: (name) => {
        const client = rec.io.cluster(name);
        const wrapped = Object.create(client) as KubeClient;
        wrapped.patch = async (r, n, body, o) => {
          if (!raced && r === ManagedClusterResource && n === c && !o?.subresource) {
            raced = true;
            await admin.patch(ManagedClusterResource, c, { metadata: { labels: { "cluster.open-cluster-management.io/clusterset": "default" } } });
          }
          return client.patch(r, n, body, o);
        };
        return wrapped;
      },
    };
    expect((await handleEvent(fn.spec, racing, clusterEvent(created))).statusCode).toBe(204);
    expect(raced).toBe(true);
    expect(rec.requests.filter((r) => r.method === "PATCH" && r.path === clusterPath).map((r) => r.ok)).toEqual([false, true]);
    // judged once: the namespace was read once
    expect(rec.requests.filter((r) => r.method === "GET" && r.path === resourcePath(NamespaceResource, { name: c }))).toHaveLength(1);
    const now = (await readCluster(c))!;
    expect((now.metadata.labels as Record<string, string> | undefined)?.["cluster.open-cluster-management.io/clusterset"]).toBe("default");
    expect(now.metadata.finalizers).toEqual(expect.arrayContaining([ClusterFinalizer.ApiResourceCleanup, ClusterFinalizer.ResourceCleanup]));
  });

  it("sends the namespace and every role at once, then every binding, the lease and both finalizers at once, then asks the authorizer, and only then writes HubAccepted", async () => {
    const c = `c${suffix()}`;
    const rec = recordingRequests(io);
    const event = clusterEvent(await createCluster(c, true));
    expect((await handleEvent(fn.spec, rec.io, event)).statusCode).toBe(204);
    // the first delivery's requests; a recheck (the authorizer not there yet) redoes the reads and asks again
    const firstDelivery = rec.timeline.slice();
    expect((await deliverAsRelay(fn.spec, rec.io, event)).statusCode).toBe(204);
    const cluster = resourcePath(ManagedClusterResource, { name: c });
    const of = (test: (r: { method: string; path: string }) => boolean) => firstDelivery.filter(test);
    const first = of((r) => (r.method === "POST" && r.path === resourcePath(NamespaceResource)) || r.path.startsWith(resourcePath(ClusterRoleResource)));
    const second = of(
      (r) =>
        r.path.startsWith(resourcePath(ClusterRoleBindingResource)) ||
        r.path.startsWith(resourcePath(RoleBindingResource, { namespace: c })) ||
        r.path.startsWith(resourcePath(LeaseResource, { namespace: c })) ||
        (r.method === "PATCH" && r.path === cluster),
    );
    const reviews = of((r) => r.method === "POST" && r.path === resourcePath(SubjectAccessReviewResource));
    // Each wave starts every one of its objects before any answer comes back: in the first the namespace
    // and the three ClusterRoles; in the second the ClusterRoleBinding, both RoleBindings, the lease and
    // the finalizer patch (each object's first request, a read where the object may exist).
    const startedAtOnce = (rs: typeof first) => rs.filter((r) => r.sent < Math.min(...rs.map((x) => x.answered))).length;
    expect(startedAtOnce(first)).toBe(4);
    expect(startedAtOnce(second)).toBe(5);
    // ...the second after the first was answered, the reviews after the second, the condition last
    expect(Math.max(...first.map((r) => r.answered))).toBeLessThan(Math.min(...second.map((r) => r.sent)));
    expect(reviews.length).toBeGreaterThanOrEqual(3);
    expect(Math.max(...second.map((r) => r.answered))).toBeLessThan(Math.min(...reviews.map((r) => r.sent)));
    const written = rec.timeline.filter((r) => r.method === "PATCH" && r.path === `${cluster}/status`);
    expect(written).toHaveLength(1);
    const asked = rec.timeline.filter((r) => r.method === "POST" && r.path === resourcePath(SubjectAccessReviewResource) && r.sent < written[0]!.sent);
    expect(Math.max(...asked.map((r) => r.answered))).toBeLessThan(written[0]!.sent);
    expect(findCondition((await readCluster(c))?.status?.conditions, ManagedClusterConditionType.HubAccepted)?.status).toBe("True");
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

  // The finalizers stand for the agents: the work agent removes its finalizer once it has removed
  // what the work applied, the add-on's owner once the add-on is cleaned up.
  const WORK_AGENT = "test.invalid/work-agent";
  const ADDON_AGENT = "test.invalid/addon-agent";
  const workIn = (c: string, name: string, annotations: Record<string, string> = {}) =>
    admin.create(ManifestWorkResource, { metadata: { name, namespace: c, finalizers: [WORK_AGENT], annotations }, spec: { workload: { manifests: [{ apiVersion: "v1", kind: "ConfigMap", metadata: { name, namespace: "default" } }] } } });
  const release = (r: typeof ManifestWorkResource | typeof ManagedClusterAddOnV1alpha1Resource, c: string, name: string) => admin.patch(r, name, { metadata: { finalizers: null } }, { namespace: c });
  const deleting = async (r: typeof ManifestWorkResource | typeof ManagedClusterAddOnV1alpha1Resource, c: string, name: string) => !!(await admin.get(r, name, c))?.metadata.deletionTimestamp;

  it("keeps the work RoleBinding, and the cluster, until the cluster's ManifestWorks are gone", async () => {
    const c = `c${suffix()}`;
    await deliver(clusterEvent(await createCluster(c, true)));
    const work = await workIn(c, "w1");
    await admin.delete(ManagedClusterResource, c);

    const reply = await deliver(clusterEvent((await readCluster(c))!));
    expect(reply.headers?.["x-recheck-after-ms"]).toBe("5000");
    expect(await stateOf(c)).toMatchObject({
      cluster: "present",
      finalizers: [ClusterFinalizer.ApiResourceCleanup, ClusterFinalizer.ResourceCleanup],
      clusterRole: "none",
      registrationRoleBinding: "none",
      workRoleBinding: { finalizers: [WorkFinalizer.ManifestWorkCleanup], deleting: true },
    });

    await release(ManifestWorkResource, c, "w1");
    await eventually(async () => expect(await admin.get(ManifestWorkResource, "w1", c)).toBeUndefined());
    await deliver(objectEvent({ cluster: HUB, object: work, verb: "delete" }));
    expect(await stateOf(c)).toMatchObject({ cluster: "gone", workRoleBinding: "none" });
  });

  // Issue 24: OCM's resource-cleanup (gate ResourceCleanup, on by default): add-ons first, then works,
  // each kind by its cleanup-priority annotation, lowest first.
  it("deletes the cluster namespace's ManagedClusterAddOns, then its ManifestWorks by cleanup priority, then lets the cluster go", async () => {
    const c = `c${suffix()}`;
    await deliver(clusterEvent(await createCluster(c, true)));
    expect((await readCluster(c))!.metadata.finalizers).toContain(ClusterFinalizer.ResourceCleanup);
    const addon = await eventually(() => admin.create(ManagedClusterAddOnV1alpha1Resource, { metadata: { name: "a1", namespace: c, finalizers: [ADDON_AGENT] }, spec: {} }));
    const first = await workIn(c, "w-first");
    const last = await workIn(c, "w-last", { [ClusterAnnotation.CleanupPriority]: "10" });
    await admin.delete(ManagedClusterResource, c);
    const deletingCondition = async () => {
      const got = findCondition((await readCluster(c))?.status?.conditions, ManagedClusterConditionType.Deleting);
      return got && `${got.status}/${got.reason}`;
    };

    await deliver(clusterEvent((await readCluster(c))!));
    expect([await deleting(ManagedClusterAddOnV1alpha1Resource, c, "a1"), await deleting(ManifestWorkResource, c, "w-first")]).toEqual([true, false]);
    expect(await deletingCondition()).toBe("False/ResourceRemaining");

    await release(ManagedClusterAddOnV1alpha1Resource, c, "a1");
    await deliver(objectEvent({ cluster: HUB, object: { apiVersion: "addon.open-cluster-management.io/v1alpha1", kind: "ManagedClusterAddOn", ...addon }, verb: "delete" }));
    expect([await deleting(ManifestWorkResource, c, "w-first"), await deleting(ManifestWorkResource, c, "w-last")]).toEqual([true, false]);

    await release(ManifestWorkResource, c, "w-first");
    await deliver(objectEvent({ cluster: HUB, object: first, verb: "delete" }));
    expect(await deleting(ManifestWorkResource, c, "w-last")).toBe(true);
    expect(await readCluster(c)).toBeDefined();

    await release(ManifestWorkResource, c, "w-last");
    await deliver(objectEvent({ cluster: HUB, object: last, verb: "delete" }));
    expect(await stateOf(c)).toMatchObject({ cluster: "gone", namespace: true, workRoleBinding: "none", registrationRoleBinding: "none", clusterRole: "none" });
    expect((await admin.list(ManifestWorkResource, { namespace: c })).items).toEqual([]);
    expect((await admin.list(ManagedClusterAddOnV1alpha1Resource, { namespace: c })).items).toEqual([]);
  });

  it("logs a cleanup wait once while it stays the same and rechecks it ever later (5 s, 10 s, 20 s), not at every event", async () => {
    const c = `c${suffix()}`;
    await deliver(clusterEvent(await createCluster(c, true)));
    await workIn(c, "w1");
    await admin.delete(ManagedClusterResource, c);
    const lines: string[] = [];
    const logged = { ...io, log: jsonLog("test", (line) => lines.push(line)) };
    const rechecks: (string | undefined)[] = [];
    for (let i = 0; i < 3; i++) {
      const reply = await handleEvent(fn.spec, logged, clusterEvent((await readCluster(c))!));
      expect(reply.statusCode, reply.body).toBe(204);
      rechecks.push(reply.headers?.["x-recheck-after-ms"]);
    }
    expect(rechecks).toEqual(["5000", "10000", "20000"]);
    expect(lines.filter((l) => l.includes(`"cluster":"${c}"`))).toHaveLength(1);
    await release(ManifestWorkResource, c, "w1");
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
      expect((await handleEvent(fn.spec, io, event)).statusCode).toBe(400);
    }
    expect((await readCluster(c))!.metadata.resourceVersion).toBe(created.metadata.resourceVersion);
    expect(await stateOf(c)).toMatchObject({ ...untouchedState, hubAcceptsClient: true });
    // control: the same event, well formed, accepts the cluster (delivered as a relay does: a recheck
    // while the authorizer catches up with the grants is called again)
    expect((await deliverAsRelay(fn.spec, io, clusterEvent(created))).statusCode).toBe(204);
    expect(await stateOf(c)).toMatchObject(acceptedState);
  });

  it("accepts through our CloudEvents HTTP server (shared/cloudevents-server.ts), answering 204", async () => {
    const server = await startFunctionServer(serve(fn.spec, () => io));
    try {
      const c = `c${suffix()}`;
      const event = clusterEvent(await createCluster(c, true), "add");
      // posted again as the relay would after a recheck, while the authorizer catches up with the grants
      await eventually(async () => {
        const reply = await postEvent(server.url, event);
        expect(reply.status).toBe(204);
        expect(await stateOf(c)).toMatchObject(acceptedState);
      });
    } finally {
      await server.close();
    }
  });
});

// needsLook is a second statement of what the reconcile leaves; this holds the two together. Many
// clusters, each given a seeded random history (accepted, denied, accepted again, or never) and drift
// afterwards, are judged by the resync as a tick judges them, with auto-approval on and off; each one
// passed over is then reconciled on its own, and must send no write.
describe("resync ticks pass over only what the reconcile would leave alone", () => {
  const drifts = [
    "cluster role binding deleted",
    "cluster role narrowed",
    "registration role binding deleted",
    "work role binding's finalizer removed",
    "HubAccepted condition removed",
    "other conditions added",
    "a finalizer removed",
    "marked auto-accepted",
    "hubAcceptsClient flipped",
    "lease deleted",
    "namespace relabelled for another cluster",
    "namespace label removed",
    "deleted",
  ] as const;
  type Drift = (typeof drifts)[number];
  type Shape = { accepts: boolean; history: "never reconciled" | "reconciled" | "denied" | "accepted again"; foreignNamespace: boolean; drift: Drift[] };

  // mulberry32: the same seed, the same clusters
  const random = (seed: number) => () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const SEED = 25_6;
  const COUNT = 40;

  function shapes(): Shape[] {
    const r = random(SEED);
    const pick = <T,>(xs: readonly T[]) => xs[Math.floor(r() * xs.length)]!;
    return Array.from({ length: COUNT }, () => {
      const drift = new Set<Drift>();
      const n = pick([0, 0, 1, 1, 2, 3]);
      while (drift.size < n) drift.add(pick(drifts));
      return { accepts: r() < 0.7, history: pick(["never reconciled", "reconciled", "reconciled", "denied", "accepted again"] as const), foreignNamespace: r() < 0.1, drift: [...drift] };
    });
  }

  async function make(c: string, shape: Shape): Promise<void> {
    if (shape.foreignNamespace) await admin.create(NamespaceResource, { metadata: { name: c } });
    await createCluster(c, shape.accepts);
    const reconcile = () => fn.definition.reconcile(io, { cluster: HUB, name: c }).catch(() => undefined); // an error is a state too
    if (shape.history !== "never reconciled") await reconcile();
    if (shape.history === "denied" || shape.history === "accepted again") {
      await setAccepts(c, false);
      await reconcile();
    }
    if (shape.history === "accepted again") {
      await setAccepts(c, true);
      await reconcile();
    }
    for (const d of shape.drift) await drift(c, d);
  }

  async function drift(c: string, d: Drift): Promise<void> {
    const mc = await readCluster(c);
    if (!mc) return;
    const conditions = mc.status?.conditions ?? [];
    switch (d) {
      case "cluster role binding deleted":
        return void (await admin.delete(ClusterRoleBindingResource, HubRbacName.cluster(c)));
      case "cluster role narrowed":
        if (await admin.get(ClusterRoleResource, HubRbacName.cluster(c))) await admin.patch(ClusterRoleResource, HubRbacName.cluster(c), { rules: clusterRole(c, false).rules });
        return;
      case "registration role binding deleted":
        return void (await admin.delete(RoleBindingResource, HubRbacName.registrationRoleBinding(c), c));
      case "work role binding's finalizer removed":
        if (await admin.get(RoleBindingResource, HubRbacName.workRoleBinding(c), c)) await admin.patch(RoleBindingResource, HubRbacName.workRoleBinding(c), { metadata: { finalizers: null } }, { namespace: c });
        return;
      case "HubAccepted condition removed":
        return void (await admin.patch(ManagedClusterResource, c, { status: { conditions: conditions.filter((x) => x.type !== ManagedClusterConditionType.HubAccepted) } }, { subresource: "status" }));
      case "other conditions added": {
        const at = new Date().toISOString().replace(/\.\d+Z$/, "Z");
        const extra = [
          { type: ManagedClusterConditionType.Available, status: "Unknown", reason: "ManagedClusterLeaseUpdateStopped", message: "stopped", lastTransitionTime: at },
          { type: "ManagedClusterJoined", status: "True", reason: "ManagedClusterJoined", message: "joined", lastTransitionTime: at },
        ];
        return void (await admin.patch(ManagedClusterResource, c, { status: { conditions: [...conditions.filter((x) => !extra.some((e) => e.type === x.type)), ...extra] } }, { subresource: "status" }));
      }
      case "a finalizer removed":
        return void (await admin.patch(ManagedClusterResource, c, { metadata: { resourceVersion: mc.metadata.resourceVersion, finalizers: (mc.metadata.finalizers ?? []).slice(1) } }));
      case "marked auto-accepted":
        return void (await admin.patch(ManagedClusterResource, c, { metadata: { annotations: { [ClusterAnnotation.AutomaticallyAcceptedOn]: "2026-01-01T00:00:00Z" } } }));
      case "hubAcceptsClient flipped":
        return void (await setAccepts(c, !mc.spec?.hubAcceptsClient));
      case "lease deleted":
        return void (await admin.delete(LeaseResource, ManagedClusterLeaseName, c));
      case "namespace relabelled for another cluster":
        if (await admin.get(NamespaceResource, c)) await admin.patch(NamespaceResource, c, { metadata: { labels: { [ClusterLabel.ClusterName]: `not-${c}` } } });
        return;
      case "namespace label removed":
        if (await admin.get(NamespaceResource, c)) await admin.patch(NamespaceResource, c, { metadata: { labels: { [ClusterLabel.ClusterName]: null } } });
        return;
      case "deleted":
        return void (await admin.delete(ManagedClusterResource, c));
    }
  }

  it(`for every one of ${COUNT} varied clusters a resync passes over (needsLook false), the reconcile of that cluster sends no write, with auto-approval on and off`, async () => {
    const made = shapes().map((shape) => ({ c: `p${suffix()}`, shape }));
    for (const { c, shape } of made) await make(c, shape);
    const configs = { "auto-approval on": io, "auto-approval off": { ...io, config: { ...io.config, autoApprovalUsers: [] } } };
    const wrong: unknown[] = [];
    let passedOver = 0;
    let looked = 0;
    for (const [label, cfgIo] of Object.entries(configs)) {
      const keys = await fn.definition.resync!(cfgIo, { type: "tick", cluster: HUB });
      if (!Array.isArray(keys)) throw new Error(`skipped: ${keys.skip}`);
      const listed = new Set(keys.map((k) => k.name));
      for (const { c, shape } of made) {
        if (listed.has(c)) {
          looked++;
          continue;
        }
        passedOver++;
        const rec = recordingRequests(cfgIo);
        const outcome = await fn.definition.reconcile(rec.io, { cluster: HUB, name: c }).catch((err: unknown) => ({ error: String(err) }));
        if (rec.writes().length > 0 || "error" in outcome) wrong.push({ c, label, shape, writes: rec.writes(), outcome });
      }
    }
    expect(wrong).toEqual([]);
    // not vacuous: the clusters are varied enough that the tick both looks at some and passes over some
    expect(passedOver).toBeGreaterThanOrEqual(COUNT / 4);
    expect(looked).toBeGreaterThanOrEqual(COUNT / 4);
  });
});
