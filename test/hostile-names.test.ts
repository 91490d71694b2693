// Events naming objects with names no API server would accept ("." and ".." resolve to the collection in
// a URL path, "/" and "%" to another path) are refused when parsed: every hub function, under its own
// identity, answers 400 with the reason and writes nothing. The client refuses such path segments too.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { startHub, type Hub } from "./support/fixtures.ts";
import { KubeClient, resourcePath, type KubeObject } from "../shared/kube/client.ts";
import type { ApiResource } from "../shared/api/meta.ts";
import { handleEvent, type FunctionSpec, type Io } from "../shared/harness.ts";
import { parseEvent } from "../shared/events.ts";
import { fieldSelectorOf, labelsQuery } from "../shared/selector-query.ts";
import { KubeError } from "../shared/kube/errors.ts";
import {
  CertificateSigningRequestResource,
  ClusterRoleBindingResource,
  ClusterRoleResource,
  ConfigMapResource,
  EventResource,
  LeaseResource,
  NamespaceResource,
  RoleBindingResource,
  RoleResource,
  SecretResource,
} from "../shared/api/kube.ts";
import {
  ClusterLabel,
  ManagedClusterResource,
  ManagedClusterSetBindingResource,
  ManagedClusterSetResource,
  PlacementDecisionResource,
  PlacementResource,
} from "../shared/api/cluster.ts";
import { AddOnLabel, ClusterManagementAddOnV1alpha1Resource, ManagedClusterAddOnV1alpha1Resource } from "../shared/api/addon.ts";
import { ManifestWorkResource } from "../shared/api/work.ts";
import clusterAcceptor from "../functions/cluster-acceptor/reconcile.ts";
import csrApprover from "../functions/csr-approver/reconcile.ts";
import clusterLeaseMonitor from "../functions/cluster-lease-monitor/reconcile.ts";
import clusterTaints from "../functions/cluster-taints/reconcile.ts";
import addonInstaller from "../functions/addon-installer/reconcile.ts";
import addonManager from "../functions/addon-manager/reconcile.ts";
import addonCsrApprover from "../functions/addon-csr-approver/reconcile.ts";
import addonClusterLabel from "../functions/addon-cluster-label/reconcile.ts";
import clusterSets from "../functions/cluster-sets/reconcile.ts";
import placementScheduler from "../functions/placement-scheduler/reconcile.ts";
import agentConfigRollout from "../functions/agent-config-rollout/reconcile.ts";
import { AgentConfigResource } from "../shared/api/agent-config.ts";
import { identityFor, objectEvent, testIo } from "./support/functions.ts";
import { eventually } from "./support/eventually.ts";

const HUB = "hub";
const VICTIM = `victim-${Math.random().toString(36).slice(2, 7)}`;
const hostileNames = [".", "..", "../x", "a/../../b", "x".repeat(300), "%2e%2e"];

// A kind each function watches, with a legitimate name; the hostile name replaces one part of it.
type Watched = { resource: ApiResource; name: string };
const cluster: Watched = { resource: ManagedClusterResource, name: VICTIM };
const addon: Watched = { resource: ManagedClusterAddOnV1alpha1Resource, name: "helloworld" };
const cma: Watched = { resource: ClusterManagementAddOnV1alpha1Resource, name: "helloworld" };
const csr: Watched = { resource: CertificateSigningRequestResource, name: `${VICTIM}-abcde` };
const work: Watched = { resource: ManifestWorkResource, name: "addon-helloworld-deploy-0" };
const set: Watched = { resource: ManagedClusterSetResource, name: "default" };
const binding: Watched = { resource: ManagedClusterSetBindingResource, name: "default" };
const placement: Watched = { resource: PlacementResource, name: "all" };
const decision: Watched = { resource: PlacementDecisionResource, name: "all-decision-1" };
type Subject = { spec: FunctionSpec<never>; config: unknown; watched: Watched[] };
const hubConfig = { hubCluster: HUB, autoApprovalUsers: [] };
const subjects: Subject[] = [
  { spec: clusterAcceptor.spec, config: hubConfig, watched: [cluster, work, { resource: RoleBindingResource, name: `open-cluster-management:managedcluster:${VICTIM}:registration` }, { resource: ClusterRoleResource, name: `open-cluster-management:managedcluster:${VICTIM}` }] },
  { spec: csrApprover.spec, config: hubConfig, watched: [csr] },
  { spec: clusterLeaseMonitor.spec, config: clusterLeaseMonitor.definition.config.parse({ hubCluster: HUB }), watched: [cluster, { resource: LeaseResource, name: "managed-cluster-lease" }] },
  { spec: clusterTaints.spec, config: { hubCluster: HUB }, watched: [cluster] },
  { spec: addonInstaller.spec, config: { hubCluster: HUB }, watched: [cma, addon, placement, decision] },
  { spec: addonManager.spec, config: { hubCluster: HUB }, watched: [addon, cma, cluster, work] },
  { spec: addonCsrApprover.spec, config: { hubCluster: HUB }, watched: [csr] },
  { spec: addonClusterLabel.spec, config: { hubCluster: HUB }, watched: [addon, cluster] },
  { spec: clusterSets.spec, config: { hubCluster: HUB }, watched: [set, binding, cluster] },
  { spec: placementScheduler.spec, config: { hubCluster: HUB }, watched: [placement, decision, set, binding, cluster] },
  { spec: agentConfigRollout.spec, config: { hubCluster: HUB }, watched: [{ resource: AgentConfigResource, name: "tuning" }, { resource: AgentConfigResource, name: "agent" }, decision] },
] as Subject[];

const apiVersionOf = (r: ApiResource) => (r.group ? `${r.group}/${r.version}` : r.version);
// Every label the functions read a key from.
const labelled = (v: string) => ({ [ClusterLabel.ClusterName]: v, [ClusterLabel.Placement]: v, [AddOnLabel.AddonName]: v, [AddOnLabel.AddonNamespace]: v });

const legitimate = (w: Watched, o: { name?: string; namespace?: string; labels?: Record<string, string> } = {}): KubeObject => ({
  apiVersion: apiVersionOf(w.resource),
  kind: w.resource.kind,
  metadata: { name: o.name ?? w.name, namespace: o.namespace ?? (w.resource.namespaced ? VICTIM : undefined), labels: o.labels ?? labelled(VICTIM) },
});

type Row = { row: string; event: Record<string, unknown> };
// Each hostile name in each position: the object's name, its namespace, the cluster extension, only the
// payload's namespace, and (Resource mode carries them) the labels.
function hostileEvents(w: Watched): Row[] {
  const rows: Row[] = [];
  for (const h of hostileNames) {
    const shown = h.length > 20 ? `${h.slice(0, 3)}…(${h.length})` : h;
    for (const mode of ["resource", "ref"] as const) {
      const object = (o: { name?: string; namespace?: string; labels?: Record<string, string> }) => legitimate(w, o);
      const at = (where: string) => `${w.resource.kind} ${mode} ${where} ${JSON.stringify(shown)}`;
      rows.push({ row: at("name"), event: objectEvent({ cluster: HUB, mode, object: object({ name: h }) }) });
      rows.push({ row: at("namespace"), event: objectEvent({ cluster: HUB, mode, object: object({ namespace: h }) }) });
      rows.push({ row: at("cluster"), event: objectEvent({ cluster: h, mode, object: object({}) }) });
      const payloadOnly = objectEvent({ cluster: HUB, mode, object: object({}) });
      const data = payloadOnly.data as { metadata?: { namespace?: string }; namespace?: string };
      if (mode === "resource") data.metadata!.namespace = h;
      else data.namespace = h;
      rows.push({ row: at("payload namespace"), event: payloadOnly });
      if (mode === "resource") rows.push({ row: at("labels"), event: objectEvent({ cluster: HUB, mode, object: object({ labels: labelled(h) }) }) });
    }
  }
  return rows;
}

// Every object of the kinds these functions write, with its resourceVersion; kube-system's leases are
// renewed by the API server itself and are left out.
const written: ApiResource[] = [
  ManagedClusterResource,
  NamespaceResource,
  ClusterRoleResource,
  ClusterRoleBindingResource,
  RoleResource,
  RoleBindingResource,
  ManifestWorkResource,
  ManagedClusterAddOnV1alpha1Resource,
  ClusterManagementAddOnV1alpha1Resource,
  CertificateSigningRequestResource,
  LeaseResource,
  EventResource,
  SecretResource,
  ConfigMapResource,
  ManagedClusterSetResource,
  ManagedClusterSetBindingResource,
  PlacementResource,
  PlacementDecisionResource,
  AgentConfigResource,
];
async function snapshot(): Promise<string[]> {
  const lists = await Promise.all(written.map(async (r) => (await admin.list(r)).items.map((o) => `${r.plural} ${o.metadata.namespace ?? ""}/${o.metadata.name} ${o.metadata.resourceVersion}`)));
  return lists.flat().filter((line) => !line.includes(" kube-")).sort();
}

let plane: Hub;
let admin: KubeClient;
const ios = new Map<string, Io<never>>();

beforeAll(async () => {
  plane = await startHub(HUB);
  admin = plane.admin;
  for (const s of subjects) ios.set(s.spec.name, testIo({ [HUB]: await identityFor(plane.cluster, s.spec.name) }, s.config as never));
  // Something to lose: an accepted cluster, its namespace and an add-on, as a list written back or a
  // collection deleted would show.
  await admin.create(ManagedClusterResource, { metadata: { name: VICTIM }, spec: { hubAcceptsClient: true } });
  await admin.create(NamespaceResource, { metadata: { name: VICTIM } });
  await admin.create(ClusterManagementAddOnV1alpha1Resource, { metadata: { name: "helloworld" }, spec: {} });
  await eventually(() => admin.create(ManagedClusterAddOnV1alpha1Resource, { metadata: { name: "helloworld", namespace: VICTIM }, spec: {} }));
  // Every function has done its legitimate work on them, so whatever a hostile event writes stands out.
  for (const s of subjects) for (const w of s.watched) for (let i = 0; i < 2; i++) await handleEvent(s.spec, ios.get(s.spec.name)!, objectEvent({ cluster: HUB, object: legitimate(w) }));
});
afterAll(() => plane?.stop());

describe.each(subjects)("$spec.name", ({ spec, watched }) => {
  it("answers 400 with the reason to an event naming a hostile name anywhere, and writes nothing", async () => {
    const io = ios.get(spec.name)!;
    const before = await snapshot();
    const wrong: string[] = [];
    const tally: Record<number, number> = {}; // the wrong answers by status
    for (const w of watched) {
      for (const { row, event } of hostileEvents(w)) {
        const reply = await handleEvent(spec, io, event);
        if (reply.statusCode === 400 && reply.body) continue;
        wrong.push(`${row}: ${reply.statusCode} ${(reply.body ?? "").slice(0, 160)}`);
        tally[reply.statusCode] = (tally[reply.statusCode] ?? 0) + 1;
      }
    }
    expect.soft(tally, wrong.slice(0, 12).join("\n")).toEqual({});
    expect.soft(await snapshot()).toEqual(before);
  });
});

describe("legitimate names that are not DNS subdomains", () => {
  const role = `open-cluster-management:managedcluster:ctl-${Math.random().toString(36).slice(2, 7)}`;
  const object = { apiVersion: apiVersionOf(ClusterRoleResource), kind: ClusterRoleResource.kind, metadata: { name: role, labels: { [ClusterLabel.ClusterName]: "ctl-gone" } } };

  it.each(["resource", "ref"] as const)("an RBAC name with colons is parsed and reconciled (%s mode)", async (mode) => {
    const event = objectEvent({ cluster: HUB, mode, object });
    const parsed = parseEvent(event);
    expect(parsed.ok && parsed.event.type === "object" && parsed.event.ref.name).toBe(role);
    expect((await handleEvent(clusterAcceptor.spec, ios.get(clusterAcceptor.spec.name)!, event)).statusCode).toBe(204);
  });
});

describe("resourcePath", () => {
  const cases = [
    { name: "a name of '.'", o: { name: "." } },
    { name: "a name of '..'", o: { name: ".." } },
    { name: "an empty name", o: { name: "" } },
    { name: "a name with '/'", o: { name: "a/../../b" } },
    { name: "a name with '%'", o: { name: "%2e%2e" } },
    { name: "a namespace of '.'", o: { namespace: ".", name: "x" } },
    { name: "a namespace of '..'", o: { namespace: "..", name: "x" } },
  ];
  it.each(cases)("refuses $name", ({ o }) => {
    expect(() => resourcePath(ManagedClusterAddOnV1alpha1Resource, o)).toThrow(/refusing a request for managedclusteraddons: (name|namespace) ".*" may not/);
  });

  it("addresses names with colons, and the collection when no name is given", () => {
    expect(resourcePath(ClusterRoleResource, { name: "open-cluster-management:managedcluster:c1" })).toBe("/apis/rbac.authorization.k8s.io/v1/clusterroles/open-cluster-management%3Amanagedcluster%3Ac1");
    expect(resourcePath(ManagedClusterAddOnV1alpha1Resource, { namespace: "c1" })).toBe("/apis/addon.open-cluster-management.io/v1alpha1/namespaces/c1/managedclusteraddons");
  });
});

// issue 23 hole 8: a name with a character that means something in a selector or a URL. No custom
// resource can have one (the API server holds their names to DNS-1123 subdomains), so an event naming one
// is refused when parsed; names that are legal (RBAC names are any path segment) are escaped as
// apimachinery's fields.EscapeValue escapes them and URL-encoded.
describe("names with selector characters", () => {
  const selectorNames = ["hello?world", "hello=world", "hello#world", "hello,world", "hello\\world", "a=b,metadata.namespace!=x"];
  const withCmaWatch = subjects.filter((s) => s.watched.includes(cma));

  it("the API server refuses each as a ClusterManagementAddOn name (so an event naming one is forged)", async () => {
    for (const name of selectorNames) {
      const refused = await admin.create(ClusterManagementAddOnV1alpha1Resource, { metadata: { name }, spec: {} }).then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(refused instanceof KubeError && refused.code, name).toBe(422);
    }
  });

  it.each(withCmaWatch.map((s) => [s.spec.name, s] as const))("%s answers 400 with the reason to a ClusterManagementAddOn event naming one, never 500, and writes nothing", async (_, s) => {
    const io = ios.get(s.spec.name)!;
    const before = await snapshot();
    const wrong: string[] = [];
    for (const name of selectorNames)
      for (const mode of ["resource", "ref"] as const) {
        const reply = await handleEvent(s.spec, io, objectEvent({ cluster: HUB, mode, object: legitimate(cma, { name }) }));
        if (reply.statusCode !== 400 || !/DNS-1123 subdomain/.test(reply.body ?? "")) wrong.push(`${mode} ${JSON.stringify(name)}: ${reply.statusCode} ${(reply.body ?? "").slice(0, 160)}`);
      }
    expect(wrong).toEqual([]);
    expect(await snapshot()).toEqual(before);
  });

  it("a field selector built by fieldSelectorOf finds exactly the ClusterRole whose name holds each, URL-encoded and escaped", async () => {
    const tag = Math.random().toString(36).slice(2, 7);
    const names = selectorNames.map((n) => `${tag}:${n}`);
    for (const name of names) await admin.create(ClusterRoleResource, { metadata: { name }, rules: [] });
    for (const name of names) {
      const { items } = await admin.list(ClusterRoleResource, { fieldSelector: fieldSelectorOf({ "metadata.name": name }) });
      expect(items.map((o) => o.metadata.name), name).toEqual([name]);
    }
  });

  it("a label selector for a value no label can hold selects nothing instead of failing, and one for a label value selects the labelled", async () => {
    const long = `${"a".repeat(60)}.example.com`; // a legal custom resource name, too long for a label value
    const found = async (value: string) => (await admin.list(ConfigMapResource, { namespace: VICTIM, labelSelector: labelsQuery({ [AddOnLabel.AddonName]: value }, { absent: [AddOnLabel.AddonNamespace] }) })).items.map((o) => o.metadata.name);
    await admin.create(ConfigMapResource, { metadata: { name: "labelled", namespace: VICTIM, labels: { [AddOnLabel.AddonName]: "short.example.com" } } });
    expect(await found(long)).toEqual([]);
    expect(await found("hello,world")).toEqual([]);
    expect(await found("short.example.com")).toEqual(["labelled"]);
  });

  it("addon-manager reconciles an add-on whose name is a legal custom resource name longer than any label value, finding no works by that label instead of a 500", async () => {
    const name = `${"a".repeat(60)}.example.com`;
    const fn = subjects.find((s) => s.spec === addonManager.spec)!;
    const io = ios.get(fn.spec.name)!;
    const made = await admin.create<KubeObject>(ClusterManagementAddOnV1alpha1Resource, { metadata: { name }, spec: {} });
    await eventually(() => admin.create(ManagedClusterAddOnV1alpha1Resource, { metadata: { name, namespace: VICTIM }, spec: {} }));
    // ManifestApplied already there: Progressing then looks for the add-on's works by its label
    const applied = { type: "ManifestApplied", status: "True", reason: "AddonManifestApplied", message: "applied", lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, "Z") };
    await admin.patch(ManagedClusterAddOnV1alpha1Resource, name, { status: { conditions: [applied] } }, { namespace: VICTIM, subresource: "status" });
    // the CMA's event finds its add-on by name; the add-on's own event reconciles it
    for (const mode of ["resource", "ref"] as const) {
      expect((await handleEvent(fn.spec, io, objectEvent({ cluster: HUB, mode, object: legitimate(cma, { name }) }))).statusCode).toBe(204);
      expect((await handleEvent(fn.spec, io, objectEvent({ cluster: HUB, mode, object: legitimate(addon, { name }) }))).statusCode).toBe(204);
    }
    const mca = await admin.get<KubeObject & { metadata: { ownerReferences?: { uid: string }[] }; status?: { conditions?: { type: string; status: string; message: string }[] } }>(ManagedClusterAddOnV1alpha1Resource, name, VICTIM);
    expect(mca?.metadata.ownerReferences?.map((r) => r.uid)).toEqual([made.metadata.uid]);
    // no work can carry a label value that long, so none is found: still progressing, with no works
    expect(mca?.status?.conditions?.find((c) => c.type === "Progressing")).toMatchObject({ status: "True", message: expect.stringContaining("no addon works") });
  });
});
