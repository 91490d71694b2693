// OCM's hub admission rules on a real hub, enforced by manifests/hub/admission-policies.yaml: each rule
// refuses an identity that lacks the permission OCM demands and lets one that holds it through.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { LocalCluster } from "../dev/control-plane/clusters.ts";
import { KubeClient, resourcePath, type KubeObject } from "../shared/kube/client.ts";
import { KubeError } from "../shared/kube/errors.ts";
import { applyManifests } from "../shared/apply.ts";
import { ClusterRoleBindingResource, ClusterRoleResource, NamespaceResource, SubjectAccessReviewResource } from "../shared/api/kube.ts";
import { ClusterLabel, ManagedClusterResource, ManagedClusterSetBindingResource, isReservedClusterName, reservedClusterNameMessage, type ManagedCluster } from "../shared/api/cluster.ts";
import { ManifestWorkResource, WorkGroup } from "../shared/api/work.ts";
import { RegisterGroup, RegisterResource, RegisterSubresource } from "../shared/api/register.ts";
import { ManagedClustersGroup, agentUser, clusterGroup } from "../shared/api/registration.ts";
import { clusterRole, clusterRoleBinding } from "../functions/cluster-acceptor/rbac.ts";
import { eventually } from "./support/eventually.ts";
import { startHub, type Hub } from "./support/fixtures.ts";

const HUB = "hub";
const BOOTSTRAP_GROUP = "system:bootstrappers:managedcluster";
const WORKS = "cluster-works"; // the namespace of the ManifestWork and binding rows
const EXECUTOR = { namespace: "apps", name: "deployer" }; // the service account alice may execute as
const SETS = { a: "set-a", b: "set-b", x: "set-x" }; // alice may join and bind set-a and set-b only
const suffix = () => Math.random().toString(36).slice(2, 7);

let plane: Hub;
let hub: LocalCluster;
let admin: KubeClient;
let bootstrap: { user: string; client: KubeClient };
// mallory may write clusters, bindings and works, nothing more; alice also holds what OCM's rules ask
let mallory: KubeClient;
let alice: KubeClient;
const clients: KubeClient[] = [];

const rbacGroup = "rbac.authorization.k8s.io";
const user = (name: string) => [{ kind: "User", apiGroup: rbacGroup, name }];

async function grant(name: string, rules: object[]): Promise<void> {
  await admin.create(ClusterRoleResource, { metadata: { name }, rules });
  await admin.create(ClusterRoleBindingResource, { metadata: { name }, roleRef: { apiGroup: rbacGroup, kind: "ClusterRole", name }, subjects: user(name) });
}

// Until the authorizer sees a new binding, a refusal could be RBAC's and not the rule's.
async function untilAllowed(u: { user: string; groups?: string[] }, attributes: Record<string, string>): Promise<void> {
  await eventually(async () => {
    const review = await admin.create<KubeObject & { status?: { allowed?: boolean } }>(SubjectAccessReviewResource, {
      metadata: {},
      spec: { user: u.user, groups: u.groups ?? [], resourceAttributes: attributes },
    });
    if (!review.status?.allowed) throw new Error(`${u.user} not yet allowed ${JSON.stringify(attributes)}`);
  });
}

async function clientFor(u: { user: string; groups?: string[] }): Promise<KubeClient> {
  const client = KubeClient.fromKubeconfig(await hub.kubeconfigFor(u));
  clients.push(client);
  return client;
}

beforeAll(async () => {
  plane = await startHub(HUB);
  ({ cluster: hub, admin } = plane);
  await applyManifests(admin, readFileSync(join(import.meta.dirname, "..", "manifests", "hub", "bootstrap-rbac.yaml"), "utf8"));
  await admin.create(NamespaceResource, { metadata: { name: WORKS } });

  const plain = [
    { apiGroups: [ManagedClusterResource.group], resources: ["managedclusters", "managedclustersetbindings"], verbs: ["get", "create", "update", "patch"] },
    { apiGroups: [WorkGroup], resources: ["manifestworks"], verbs: ["get", "create", "update", "patch"] },
  ];
  await grant("mallory", plain);
  await grant("alice", [
    ...plain,
    { apiGroups: [RegisterGroup], resources: [`${RegisterResource.ManagedClusters}/${RegisterSubresource.Accept}`], verbs: ["update"] },
    { apiGroups: [ManagedClusterResource.group], resources: ["managedclustersets/join", "managedclustersets/bind"], resourceNames: [SETS.a, SETS.b], verbs: ["create"] },
    { apiGroups: [WorkGroup], resources: ["manifestworks"], resourceNames: [`system:serviceaccount:${EXECUTOR.namespace}:${EXECUTOR.name}`], verbs: ["execute-as"] },
  ]);
  const token = await hub.createBootstrapToken([BOOTSTRAP_GROUP]);
  bootstrap = { user: token.user, client: KubeClient.fromKubeconfig(token.kubeconfig) };
  clients.push(bootstrap.client);
  [mallory, alice] = await Promise.all([clientFor({ user: "mallory" }), clientFor({ user: "alice" })]);
  await Promise.all([
    untilAllowed({ user: "mallory" }, { group: WorkGroup, resource: "manifestworks", verb: "create", namespace: WORKS }),
    untilAllowed({ user: "alice" }, { group: WorkGroup, resource: "manifestworks", verb: "execute-as", namespace: WORKS, name: `system:serviceaccount:${EXECUTOR.namespace}:${EXECUTOR.name}` }),
    untilAllowed({ user: bootstrap.user, groups: [BOOTSTRAP_GROUP] }, { group: ManagedClusterResource.group, resource: "managedclusters", verb: "create" }),
  ]);
});

afterAll(async () => {
  for (const c of clients) c.close();
  await plane?.stop();
});

// A joined cluster's agent: its certificate's user and groups, and the per-cluster RBAC that
// functions/cluster-acceptor writes on acceptance (update on its own ManagedCluster among it).
async function agentOf(cluster: string): Promise<{ user: string; client: KubeClient }> {
  await admin.create(ClusterRoleResource, clusterRole(cluster, true));
  await admin.create(ClusterRoleBindingResource, clusterRoleBinding(cluster));
  const identity = { user: agentUser(cluster, "agent1"), groups: [clusterGroup(cluster), ManagedClustersGroup] };
  await untilAllowed(identity, { group: ManagedClusterResource.group, resource: "managedclusters", verb: "update", name: cluster });
  return { user: identity.user, client: await clientFor(identity) };
}

type ClusterShape = { accepts?: boolean; set?: string; urls?: string[]; labels?: Record<string, string> };
const managedCluster = (name: string, s: ClusterShape = {}): ManagedCluster => ({
  metadata: { name, labels: { ...s.labels, ...(s.set ? { [ClusterLabel.ClusterSet]: s.set } : {}) } },
  spec: { hubAcceptsClient: s.accepts ?? false, ...(s.urls ? { managedClusterClientConfigs: s.urls.map((url) => ({ url })) } : {}) },
});

// A full update (PUT) of the cluster as read, with the change applied.
async function updateCluster(as: KubeClient, name: string, change: (mc: ManagedCluster) => void): Promise<ManagedCluster> {
  const mc = await as.get<ManagedCluster>(ManagedClusterResource, name);
  if (!mc) throw new Error(`ManagedCluster ${name} not found`);
  change(mc);
  return as.update(ManagedClusterResource, mc);
}
const setLabel = (set: string | undefined) => (mc: ManagedCluster) => {
  const labels = { ...mc.metadata.labels };
  if (set === undefined) delete labels[ClusterLabel.ClusterSet];
  else labels[ClusterLabel.ClusterSet] = set;
  mc.metadata.labels = labels;
};

type Verdict = { allowed: true } | { allowed: false; code: number; reason: string; message: string };
async function verdict(write: Promise<unknown>): Promise<Verdict> {
  try {
    await write;
    return { allowed: true };
  } catch (err) {
    if (err instanceof KubeError) return { allowed: false, code: err.code, reason: err.reason, message: err.message };
    throw err;
  }
}

// then: "allowed", or the status and OCM's message (a function of the acting user's name).
type Expectation = "allowed" | { code: 403 | 422; message: (user: string) => string };
const forbidden = (message: (user: string) => string): Expectation => ({ code: 403, message });
const invalid = (message: string | ((user: string) => string)): Expectation => ({ code: 422, message: typeof message === "string" ? () => message : message });

function expectVerdict(got: Verdict, then: Expectation, actor: string): void {
  if (then === "allowed") {
    expect(got).toEqual({ allowed: true });
    return;
  }
  expect(got.allowed, "the write was admitted").toBe(false);
  if (got.allowed) return;
  expect({ code: got.code, reason: got.reason }).toEqual({ code: then.code, reason: then.code === 403 ? "Forbidden" : "Invalid" });
  expect(got.message).toContain("ValidatingAdmissionPolicy");
  expect(got.message).toContain(then.message(actor));
}

type Actor = "admin" | "bootstrap" | "mallory" | "alice" | "agent";
async function actor(who: Actor, cluster: string): Promise<{ user: string; client: KubeClient }> {
  switch (who) {
    case "admin":
      return { user: "admin", client: admin };
    case "bootstrap":
      return bootstrap;
    case "mallory":
      return { user: "mallory", client: mallory };
    case "alice":
      return { user: "alice", client: alice };
    case "agent":
      return agentOf(cluster);
  }
}

// given: what the admin creates first for the row's fresh name n; when: the write under test.
type Row = { name: string; as: Actor; given?: (n: string) => Promise<unknown>; when: (as: KubeClient, n: string) => Promise<unknown>; then: Expectation };
async function runRow(row: Row, prefix: string): Promise<void> {
  const n = `${prefix}-${suffix()}`;
  await row.given?.(n);
  const { user: actorName, client } = await actor(row.as, n);
  expectVerdict(await verdict(row.when(client, n)), row.then, actorName);
}

const givenCluster = (s: ClusterShape) => (n: string) => admin.create(ManagedClusterResource, managedCluster(n, s));
const cannotAccept = (u: string) => `user "${u}" cannot update the HubAcceptsClient field`;
const cannotJoin = (set: string) => (u: string) => `user "${u}" cannot add/remove a ManagedCluster to/from ManagedClusterSet "${set}"`;

describe("the two attacks", () => {
  it("refuses a bootstrap identity creating its ManagedCluster with hubAcceptsClient true", async () => {
    const n = `attack-${suffix()}`;
    const got = await verdict(bootstrap.client.create(ManagedClusterResource, managedCluster(n, { accepts: true })));
    expectVerdict(got, forbidden(cannotAccept), bootstrap.user);
    expect(await admin.get(ManagedClusterResource, n)).toBeUndefined();
  });

  it("refuses a joined cluster's agent adding its own ManagedCluster to a cluster set with a full update", async () => {
    const n = `attack-${suffix()}`;
    await givenCluster({ accepts: true })(n);
    const agent = await agentOf(n);
    const got = await verdict(updateCluster(agent.client, n, setLabel(SETS.a)));
    expectVerdict(got, forbidden(cannotJoin(SETS.a)), agent.user);
    expect((await admin.get<ManagedCluster>(ManagedClusterResource, n))?.metadata.labels?.[ClusterLabel.ClusterSet]).toBeUndefined();
  });
});

const acceptRows: Row[] = [
  { name: "refuses a user without managedclusters/accept creating a cluster already accepted", as: "mallory", when: (c, n) => c.create(ManagedClusterResource, managedCluster(n, { accepts: true })), then: forbidden(cannotAccept) },
  { name: "lets a user with managedclusters/accept create a cluster already accepted", as: "alice", when: (c, n) => c.create(ManagedClusterResource, managedCluster(n, { accepts: true })), then: "allowed" },
  { name: "lets a bootstrap identity create its cluster not accepted", as: "bootstrap", when: (c, n) => c.create(ManagedClusterResource, managedCluster(n)), then: "allowed" },
  { name: "refuses a user without managedclusters/accept turning hubAcceptsClient true", as: "mallory", given: givenCluster({}), when: (c, n) => c.patch(ManagedClusterResource, n, { spec: { hubAcceptsClient: true } }), then: forbidden(cannotAccept) },
  { name: "refuses a cluster's agent accepting its own cluster after the admin denied it", as: "agent", given: givenCluster({ accepts: false }), when: (c, n) => updateCluster(c, n, (mc) => (mc.spec!.hubAcceptsClient = true)), then: forbidden(cannotAccept) },
  { name: "lets a user with managedclusters/accept turn hubAcceptsClient true", as: "alice", given: givenCluster({}), when: (c, n) => c.patch(ManagedClusterResource, n, { spec: { hubAcceptsClient: true } }), then: "allowed" },
  { name: "lets any writer update an accepted cluster without touching hubAcceptsClient", as: "mallory", given: givenCluster({ accepts: true }), when: (c, n) => c.patch(ManagedClusterResource, n, { metadata: { labels: { env: "dev" } } }), then: "allowed" },
  { name: "lets any writer deny a cluster (true to false needs no accept permission)", as: "mallory", given: givenCluster({ accepts: true }), when: (c, n) => c.patch(ManagedClusterResource, n, { spec: { hubAcceptsClient: false } }), then: "allowed" },
];

const joinRows: Row[] = [
  { name: "refuses a user without managedclustersets/join creating a cluster in a set", as: "mallory", when: (c, n) => c.create(ManagedClusterResource, managedCluster(n, { set: SETS.a })), then: forbidden(cannotJoin(SETS.a)) },
  { name: "lets a user with managedclustersets/join on the set create a cluster in it", as: "alice", when: (c, n) => c.create(ManagedClusterResource, managedCluster(n, { set: SETS.a })), then: "allowed" },
  { name: "lets a bootstrap identity create its cluster in a set (OCM's bootstrap role may join any set)", as: "bootstrap", when: (c, n) => c.create(ManagedClusterResource, managedCluster(n, { set: SETS.x })), then: "allowed" },
  { name: "refuses a user moving a cluster out of a set it may not join", as: "alice", given: givenCluster({ set: SETS.x }), when: (c, n) => updateCluster(c, n, setLabel(SETS.a)), then: forbidden(cannotJoin(SETS.x)) },
  { name: "refuses a user moving a cluster into a set it may not join", as: "alice", given: givenCluster({ set: SETS.a }), when: (c, n) => updateCluster(c, n, setLabel(SETS.x)), then: forbidden(cannotJoin(SETS.x)) },
  { name: "lets a user with join on both sets move a cluster between them", as: "alice", given: givenCluster({ set: SETS.a }), when: (c, n) => updateCluster(c, n, setLabel(SETS.b)), then: "allowed" },
  { name: "refuses a user without join removing a cluster from its set", as: "mallory", given: givenCluster({ set: SETS.a }), when: (c, n) => updateCluster(c, n, setLabel(undefined)), then: forbidden(cannotJoin(SETS.a)) },
  { name: "lets any writer update a cluster in a set without touching the label", as: "mallory", given: givenCluster({ set: SETS.a }), when: (c, n) => updateCluster(c, n, (mc) => (mc.metadata.labels = { ...mc.metadata.labels, env: "dev" })), then: "allowed" },
];

const shapeRows: Row[] = [
  { name: "refuses a cluster name that is not a valid namespace name, even to an admin", as: "admin", when: (c, n) => c.create(ManagedClusterResource, managedCluster(`${n}.example`)), then: invalid("metadata.name format is not correct: must not contain dots") },
  { name: "refuses a client-config URL that is not https", as: "admin", when: (c, n) => c.create(ManagedClusterResource, managedCluster(n, { urls: ["https://10.0.0.1:6443", "http://10.0.0.2:6443"] })), then: invalid('url "http://10.0.0.2:6443" is invalid in client configs') },
  { name: "refuses a client-config URL that is not a URL", as: "admin", when: (c, n) => c.create(ManagedClusterResource, managedCluster(n, { urls: ["10.0.0.1:6443"] })), then: invalid('url "10.0.0.1:6443" is invalid in client configs') },
  { name: "refuses an update that adds a URL that is not https", as: "admin", given: givenCluster({}), when: (c, n) => c.patch(ManagedClusterResource, n, { spec: { managedClusterClientConfigs: [{ url: "http://10.0.0.1:6443" }] } }), then: invalid('url "http://10.0.0.1:6443" is invalid in client configs') },
  { name: "lets a writer create a cluster with https client-config URLs", as: "mallory", when: (c, n) => c.create(ManagedClusterResource, managedCluster(n, { urls: ["https://10.0.0.1:6443", "HTTPS://spoke.example:443/"] })), then: "allowed" },
];

// Ours, stricter than OCM: a cluster's name is its namespace on the hub, so the namespaces of Kubernetes
// and of the hub itself are refused as names (shared/api/cluster.ts ReservedClusterNames).
const reserved = (name: string): Expectation => invalid(reservedClusterNameMessage(name));
const reservedRows: Row[] = [
  { name: "refuses a bootstrap identity creating a cluster named kube-system", as: "bootstrap", when: (c) => c.create(ManagedClusterResource, managedCluster("kube-system")), then: reserved("kube-system") },
  { name: "refuses a cluster named default, even to an admin", as: "admin", when: (c) => c.create(ManagedClusterResource, managedCluster("default")), then: reserved("default") },
  { name: "refuses a kube-* cluster name (kube-node-lease), even to an admin", as: "admin", when: (c) => c.create(ManagedClusterResource, managedCluster("kube-node-lease")), then: reserved("kube-node-lease") },
  { name: "refuses the hub's own namespace open-cluster-management-hub as a cluster name", as: "bootstrap", when: (c) => c.create(ManagedClusterResource, managedCluster("open-cluster-management-hub")), then: reserved("open-cluster-management-hub") },
  { name: "refuses an open-cluster-management* cluster name (open-cluster-management-agent-addon)", as: "mallory", when: (c) => c.create(ManagedClusterResource, managedCluster("open-cluster-management-agent-addon")), then: reserved("open-cluster-management-agent-addon") },
  { name: "refuses Knative's namespace knative-eventing as a cluster name", as: "admin", when: (c) => c.create(ManagedClusterResource, managedCluster("knative-eventing")), then: reserved("knative-eventing") },
  { name: "lets a bootstrap identity create a cluster whose name merely contains kube or default (kubeflow-*, my-default-*)", as: "bootstrap", when: async (c, n) => { await c.create(ManagedClusterResource, managedCluster(`kubeflow-${n}`)); return c.create(ManagedClusterResource, managedCluster(`my-default-${n}`)); }, then: "allowed" },
];

const binding = (name: string, clusterSet: string) => ({ metadata: { name, namespace: WORKS }, spec: { clusterSet } });
const givenBinding = (n: string) => admin.create(ManagedClusterSetBindingResource, binding(n, n));
const cannotBind = (set: string) => (u: string) => `user "${u}" is not allowed to bind cluster set "${set}"`;
const bindingRows: Row[] = [
  { name: "refuses a user without managedclustersets/bind binding a set", as: "mallory", when: (c) => c.create(ManagedClusterSetBindingResource, binding(SETS.a, SETS.a)), then: forbidden(cannotBind(SETS.a)) },
  { name: "refuses a user binding a set it may not bind", as: "alice", when: (c) => c.create(ManagedClusterSetBindingResource, binding(SETS.x, SETS.x)), then: forbidden(cannotBind(SETS.x)) },
  { name: "lets a user with managedclustersets/bind on the set bind it", as: "alice", when: (c) => c.create(ManagedClusterSetBindingResource, binding(SETS.b, SETS.b)), then: "allowed" },
  { name: "refuses a binding not named after its set, even to an admin", as: "admin", when: (c, n) => c.create(ManagedClusterSetBindingResource, binding(n, SETS.a)), then: invalid("The ManagedClusterSetBinding must have the same name as the target ManagedClusterSet") },
  { name: "refuses an update that points a binding at another set", as: "alice", given: givenBinding, when: (c, n) => c.patch(ManagedClusterSetBindingResource, n, { spec: { clusterSet: SETS.a } }, { namespace: WORKS }), then: invalid("The ManagedClusterSetBinding must have the same name as the target ManagedClusterSet") },
  { name: "lets a writer without bind update an existing binding (bind is checked on create)", as: "mallory", given: givenBinding, when: (c, n) => c.patch(ManagedClusterSetBindingResource, n, { metadata: { labels: { env: "dev" } } }, { namespace: WORKS }), then: "allowed" },
];

const configMap = (name: string, extra: Record<string, unknown> = {}) => ({ apiVersion: "v1", kind: "ConfigMap", metadata: { name, namespace: "default", ...extra } });
const configMaps = (count: number) => Array.from({ length: count }, (_, i) => configMap(`cm-${i}`));
type Executor = { subject: { type: "ServiceAccount"; serviceAccount?: { namespace: string; name: string } } };
const executorOf = (sa?: { namespace: string; name: string }): Executor => ({ subject: { type: "ServiceAccount", ...(sa ? { serviceAccount: sa } : {}) } });
const work = (name: string, manifests: object[], executor?: Executor) => ({ metadata: { name, namespace: WORKS }, spec: { workload: { manifests }, ...(executor ? { executor } : {}) } });
const givenWork = (executor?: Executor) => (n: string) => admin.create(ManifestWorkResource, work(n, [configMap("a")], executor));
const cannotExecute = (sa: { namespace: string; name: string }) => (u: string) => `user ${u} cannot manipulate the Manifestwork with executor ${sa.namespace}/${sa.name} in namespace ${WORKS}`;
const OTHER_SA = { namespace: "apps", name: "cluster-admin-sa" };
const workRows: Row[] = [
  { name: "refuses a work without manifests", as: "admin", when: (c, n) => c.create(ManifestWorkResource, work(n, [])), then: invalid("manifests should not be empty") },
  { name: "refuses a manifest without a name", as: "admin", when: (c, n) => c.create(ManifestWorkResource, work(n, [{ apiVersion: "v1", kind: "ConfigMap", metadata: { namespace: "default" } }])), then: invalid("name must be set in manifest") },
  { name: "refuses a manifest with generateName", as: "admin", when: (c, n) => c.create(ManifestWorkResource, work(n, [configMap("a", { generateName: "a-" })])), then: invalid("generateName must not be set in manifest") },
  { name: "refuses two manifests for the same object", as: "admin", when: (c, n) => c.create(ManifestWorkResource, work(n, [configMap("a"), configMap("b"), configMap("b", { labels: { x: "y" } })])), then: invalid("duplicate manifest for resource default/b with resource type v1.ConfigMap") },
  { name: "refuses a repeated manifest in a work of more than 500 manifests", as: "admin", when: (c, n) => c.create(ManifestWorkResource, work(n, [...configMaps(600), configMap("cm-7")])), then: invalid("insert failed: key v1/ConfigMap/default/cm-7 already exists") },
  { name: "lets a writer create a work of 6000 manifests (CEL's cost limits are not a size limit)", as: "mallory", when: (c, n) => c.create(ManifestWorkResource, work(n, configMaps(6000))), then: "allowed" },
  { name: "refuses an executor without a service account", as: "admin", when: (c, n) => c.create(ManifestWorkResource, work(n, [configMap("a")], executorOf())), then: invalid("executor service account can not be nil") },
  { name: "refuses a user who may not execute-as the executor creating a work", as: "mallory", when: (c, n) => c.create(ManifestWorkResource, work(n, [configMap("a")], executorOf(EXECUTOR))), then: invalid(cannotExecute(EXECUTOR)) },
  { name: "refuses a user executing as a service account it was not granted", as: "alice", when: (c, n) => c.create(ManifestWorkResource, work(n, [configMap("a")], executorOf(OTHER_SA))), then: invalid(cannotExecute(OTHER_SA)) },
  { name: "lets a user who may execute-as the executor create a work", as: "alice", when: (c, n) => c.create(ManifestWorkResource, work(n, [configMap("a"), configMap("b")], executorOf(EXECUTOR))), then: "allowed" },
  { name: "lets a writer create a work without an executor", as: "mallory", when: (c, n) => c.create(ManifestWorkResource, work(n, [configMap("a")])), then: "allowed" },
  { name: "lets a writer update a work when the executor stays the same", as: "mallory", given: givenWork(executorOf(EXECUTOR)), when: (c, n) => c.patch(ManifestWorkResource, n, { spec: { workload: { manifests: [configMap("a"), configMap("c")] } } }, { namespace: WORKS }), then: "allowed" },
  { name: "refuses a writer who may not execute-as the new executor changing it", as: "mallory", given: givenWork(), when: (c, n) => c.patch(ManifestWorkResource, n, { spec: { executor: executorOf(EXECUTOR) } }, { namespace: WORKS }), then: invalid(cannotExecute(EXECUTOR)) },
];

const tables: [string, string, Row[]][] = [
  ["hubAcceptsClient needs managedclusters/accept", "accept", acceptRows],
  ["the clusterset label needs managedclustersets/join on the sets left and joined", "join", joinRows],
  ["a ManagedCluster's name and client-config URLs", "shape", shapeRows],
  ["a ManagedCluster may not be named after a namespace of Kubernetes or of the hub", "reserved", reservedRows],
  ["ManagedClusterSetBinding: named after its set, bind needed to create", "bind", bindingRows],
  ["ManifestWork: manifests and executor", "work", workRows],
];

describe("reserved cluster names: the policy and the functions' rule agree", () => {
  it("refuses exactly the names isReservedClusterName (csr-approver, cluster-acceptor) calls reserved", async () => {
    const names = ["default", "kube-system", "kube-public", "kube-x", "knative-serving", "open-cluster-management", "open-cluster-management-hub", "open-cluster-managementx", "kube", "kubeflow", "defaults", "my-default", "knative", "local-cluster", "cluster1"];
    const refused: Record<string, boolean> = {};
    for (const name of names) {
      const got = await verdict(admin.request("POST", `${resourcePath(ManagedClusterResource)}?dryRun=All`, { apiVersion: "cluster.open-cluster-management.io/v1", kind: "ManagedCluster", ...managedCluster(name) }));
      refused[name] = !got.allowed && got.message.includes(reservedClusterNameMessage(name));
    }
    expect(refused).toEqual(Object.fromEntries(names.map((n) => [n, isReservedClusterName(n)])));
    expect(Object.values(refused).filter(Boolean)).toHaveLength(8); // control: both kinds of name are in the list
  });
});

for (const [title, prefix, rows] of tables) {
  describe(title, () => {
    it.each(rows)("$name", (row) => runRow(row, prefix));
  });
}

// issue 23: a cluster's agent may not select itself into LabelSelector sets (or placements) by labelling
// its own ManagedCluster. OCM's agent (v1.2.0) writes no labels there: it creates its cluster with
// annotations and client configs, and later updates only the client configs. So the cluster's own agent
// identity (group system:open-cluster-management:<cluster>) changes the labels only with update on the
// virtual subresource managedclusters/labels for its cluster; the clusterset label keeps OCM's join rule.
// The agent's RBAC (functions/cluster-acceptor/rbac.ts) has update, not patch, on its cluster: full updates.
const cannotLabel = (cluster: string) => (u: string) => `user "${u}" cannot change the labels of its own ManagedCluster "${cluster}"`;
const labelRows: (n: string) => Row[] = (n) => [
  { name: "refuses a cluster's agent adding a label to its own ManagedCluster", as: "agent", given: givenCluster({ accepts: true }), when: (c) => updateCluster(c, n, (mc) => (mc.metadata.labels = { ...mc.metadata.labels, env: "prod" })), then: forbidden(cannotLabel(n)) },
  { name: "refuses a cluster's agent changing a label's value on its own ManagedCluster", as: "agent", given: givenCluster({ accepts: true, labels: { env: "dev" } }), when: (c) => updateCluster(c, n, (mc) => (mc.metadata.labels = { ...mc.metadata.labels, env: "prod" })), then: forbidden(cannotLabel(n)) },
  { name: "refuses a cluster's agent removing a label from its own ManagedCluster", as: "agent", given: givenCluster({ accepts: true, labels: { env: "dev" } }), when: (c) => updateCluster(c, n, (mc) => delete mc.metadata.labels!.env), then: forbidden(cannotLabel(n)) },
  { name: "lets a cluster's agent update its ManagedCluster's client configs with the labels as read (what OCM's agent does)", as: "agent", given: givenCluster({ accepts: true, labels: { env: "dev" }, set: SETS.x }), when: (c) => updateCluster(c, n, (mc) => (mc.spec!.managedClusterClientConfigs = [{ url: "https://10.0.0.9:6443" }])), then: "allowed" },
  { name: "lets another writer change the labels of a cluster (the rule binds the cluster's own agent only)", as: "mallory", given: givenCluster({ accepts: true, labels: { env: "dev" } }), when: (c) => c.patch(ManagedClusterResource, n, { metadata: { labels: { env: "prod" } } }), then: "allowed" },
  {
    name: "lets a cluster's agent holding update on managedclusters/labels for its cluster change its labels",
    as: "agent",
    given: async () => {
      await givenCluster({ accepts: true })(n);
      const role = `label-own-cluster-${n}`;
      await admin.create(ClusterRoleResource, { metadata: { name: role }, rules: [{ apiGroups: [ManagedClusterResource.group], resources: ["managedclusters/labels"], resourceNames: [n], verbs: ["update"] }] });
      await admin.create(ClusterRoleBindingResource, { metadata: { name: role }, roleRef: { apiGroup: rbacGroup, kind: "ClusterRole", name: role }, subjects: [{ kind: "Group", apiGroup: rbacGroup, name: clusterGroup(n) }] });
      await untilAllowed({ user: agentUser(n, "agent1"), groups: [clusterGroup(n)] }, { group: ManagedClusterResource.group, resource: "managedclusters", subresource: "labels", verb: "update", name: n });
    },
    when: (c) => updateCluster(c, n, (mc) => (mc.metadata.labels = { ...mc.metadata.labels, env: "prod" })),
    then: "allowed",
  },
];

describe("a cluster's own agent may not change its ManagedCluster's labels without managedclusters/labels", () => {
  it.each(labelRows("<n>").map((r) => r.name))("%s", async (title) => {
    const n = `label-${suffix()}`;
    const row = labelRows(n).find((r) => r.name === title)!;
    await row.given?.(n);
    const { user: actorName, client } = await actor(row.as, n);
    const before = (await admin.get<ManagedCluster>(ManagedClusterResource, n))?.metadata.labels ?? {};
    const got = await verdict(row.when(client, n));
    expectVerdict(got, row.then, actorName);
    if (row.then !== "allowed") expect((await admin.get<ManagedCluster>(ManagedClusterResource, n))?.metadata.labels ?? {}).toEqual(before);
  });
});
