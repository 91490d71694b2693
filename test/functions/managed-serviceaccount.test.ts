// managed-serviceaccount against a real hub and spoke (a fleet with one auto-approved cluster), under its
// own spoke identity, the cluster's hub identity for reading and the add-on's for writing (OCM's
// managed-serviceaccount agent): a ServiceAccount per ManagedServiceAccount, a token the spoke
// authenticates as it, reported with the cluster's CA and OCM's status, renewed past four fifths of its
// life, and the ServiceAccount gone with the ManagedServiceAccount; and what each identity may not do.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { request as httpsRequest } from "node:https";
import { startFleet, type Fleet } from "../../dev/local/fleet.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { CustomResourceDefinitionResource, NamespaceResource, RoleBindingResource, SecretResource, ServiceAccountResource } from "../../shared/api/kube.ts";
import { applyManifests, createOrUpdate } from "../../shared/apply.ts";
import { findCondition } from "../../shared/conditions.ts";
import { manualClock } from "../../shared/clock.ts";
import { handleEvent, reconcileKey, type Outcome } from "../../shared/harness.ts";
import { secretText, type Secret } from "../../shared/hub-credentials.ts";
import { ManagedServiceAccountResource, MsaSecretKey, type ManagedServiceAccount } from "../../shared/api/authentication.ts";
import fn, { ConfigSchema, addOnHubClient, addOnHubSecretName, tokenSubject, type Config } from "../../functions/managed-serviceaccount/reconcile.ts";
import { identityFor, testIo, tickEvent } from "../support/functions.ts";
import { eventually } from "../support/eventually.ts";
import { joinedThenQuiet } from "../support/fixtures.ts";
import { recordingRequests } from "../support/requests.ts";

const FLEET_START_MS = 240_000;
const C = "cluster1";
const HUB = "hub";
const ADDON_NS = "open-cluster-management-agent-addon";
const suffix = () => Math.random().toString(36).slice(2, 7);
const addOnUser = `system:open-cluster-management:cluster:${C}:addon:managed-serviceaccount:agent:addon-agent`;
const addOnGroups = [`system:open-cluster-management:cluster:${C}:addon:managed-serviceaccount`, "system:open-cluster-management:addon:managed-serviceaccount"];

let fleet: Fleet;
let hub: KubeClient;
let spoke: KubeClient;
let fnKubeconfig: string;

beforeAll(async () => {
  fleet = await startFleet({ spokes: [{ name: C, autoApprove: true }], resyncMs: 60_000, ...(process.env.FLEET_LOG ? { log: (line: string) => process.stderr.write(`${line}\n`) } : {}) });
  hub = fleet.hub;
  spoke = KubeClient.fromKubeconfig(fleet.clusters.get(C).adminKubeconfig);
  fnKubeconfig = await identityFor(fleet.clusters.get(C), fn.spec.name);
  await joinedThenQuiet(fleet, C, agent().io, (asCluster) => asCluster.list(ManagedServiceAccountResource, { namespace: C }));
  // what enabling the add-on leaves behind (the add-on manager's binding, the registration's secret),
  // made here by hand: the add-on's ClusterRole bound in the cluster's namespace, its kubeconfig on the spoke
  await applyManifests(hub, readFileSync(join(import.meta.dirname, "..", "..", "manifests", "addons", "managed-serviceaccount.yaml"), "utf8"));
  await hub.create(RoleBindingResource, {
    metadata: { name: "managed-serviceaccount-addon-agent", namespace: C },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "open-cluster-management:managed-serviceaccount:addon-agent" },
    subjects: [{ kind: "Group", apiGroup: "rbac.authorization.k8s.io", name: addOnGroups[0] }],
  });
  await createOrUpdate(spoke, NamespaceResource, { metadata: { name: ADDON_NS } }, []);
  const kubeconfig = await fleet.clusters.get(HUB).kubeconfigFor({ user: addOnUser, groups: addOnGroups });
  await spoke.create(SecretResource, { metadata: { name: addOnHubSecretName, namespace: ADDON_NS }, data: { kubeconfig: Buffer.from(kubeconfig).toString("base64") } });
  const asAddOn = KubeClient.fromKubeconfig(kubeconfig);
  await eventually(() => asAddOn.list(SecretResource, { namespace: C }));
  asAddOn.close();
}, FLEET_START_MS);
afterAll(async () => {
  spoke?.close();
  await fleet?.stop();
});

function agent(o: Partial<Config> = {}) {
  const clock = manualClock();
  const io = testIo({ [C]: fnKubeconfig }, ConfigSchema.parse({ managementCluster: C, clusterName: C, ...o }), clock);
  return { io, clock, reconcile: (name: string): Promise<Outcome> => reconcileKey(fn.spec, io, { cluster: HUB, namespace: C, name }) };
}

const newMsa = async (validity = "1h") => (await hub.create<ManagedServiceAccount>(ManagedServiceAccountResource, { metadata: { name: `msa-${suffix()}`, namespace: C }, spec: { rotation: { validity } } })).metadata.name;
const readMsa = (name: string) => hub.get<ManagedServiceAccount>(ManagedServiceAccountResource, name, C);
const readSecret = (name: string) => hub.get<Secret>(SecretResource, name, C);
const tokenOf = async (name: string) => secretText(await readSecret(name), MsaSecretKey.Token)!;

// Whom the spoke's API server says the token is, over TLS verified by the reported CA alone.
function whoAmI(token: string, caPem: string): Promise<string> {
  const url = new URL("/apis/authentication.k8s.io/v1/selfsubjectreviews", fleet.clusters.get(C).url);
  const body = JSON.stringify({ apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" });
  return new Promise((resolve, reject) => {
    const req = httpsRequest(url, { method: "POST", ca: caPem, headers: { authorization: `Bearer ${token}`, "content-type": "application/json" } }, (res) => {
      let text = "";
      res.on("data", (d) => (text += d));
      res.on("end", () => (res.statusCode === 201 ? resolve((JSON.parse(text) as { status: { userInfo: { username: string } } }).status.userInfo.username) : reject(new Error(`${res.statusCode}: ${text}`))));
    });
    req.on("error", reject);
    req.end(body);
  });
}

describe("a token for each ManagedServiceAccount", () => {
  it("makes the ServiceAccount and reports a token the spoke authenticates as it, with the cluster's CA, the owner and OCM's status", async () => {
    const a = agent();
    const name = await newMsa();
    const outcome = await a.reconcile(name);
    const sa = await spoke.get<KubeObject & { metadata: { labels?: Record<string, string> } }>(ServiceAccountResource, name, ADDON_NS);
    expect(sa?.metadata.labels).toEqual({ "authentication.open-cluster-management.io/is-managed-serviceaccount": "true" });
    const secret = (await readSecret(name))!;
    expect(secret.type).toBe("Opaque");
    expect(secret.metadata.labels).toEqual({ "authentication.open-cluster-management.io/is-managed-serviceaccount": "true" });
    const msa = (await readMsa(name))!;
    expect(secret.metadata.ownerReferences).toEqual([{ apiVersion: "authentication.open-cluster-management.io/v1beta1", kind: "ManagedServiceAccount", name, uid: msa.metadata.uid }]);
    expect(await whoAmI(secretText(secret, "token")!, secretText(secret, "ca.crt")!)).toBe(`system:serviceaccount:${ADDON_NS}:${name}`);
    expect(msa.status?.conditions?.map(({ type, status, reason }) => [type, status, reason])).toEqual([["SecretCreated", "True", "SecretCreated"], ["TokenReported", "True", "TokenReported"]]);
    expect(msa.status?.tokenSecretRef).toEqual({ name, lastRefreshTimestamp: a.clock.now().toISOString().replace(/\.\d+Z$/, "Z") });
    // valid for the hour asked, and looked at again just after four fifths of it
    const life = Date.parse(msa.status!.expirationTimestamp!) - a.clock.now().getTime();
    expect(Math.abs(life - 3_600_000)).toBeLessThan(60_000);
    expect("recheckInMs" in outcome && Math.abs(outcome.recheckInMs - (life * 4) / 5 - 5_000)).toBeLessThan(2_000);
  });

  it("writes nothing while the token is fresh, and a new one once four fifths of its life have passed", async () => {
    const a = agent();
    const name = await newMsa();
    await a.reconcile(name);
    const first = await tokenOf(name);
    const rec = recordingRequests(a.io);
    a.clock.advance(40 * 60_000);
    await reconcileKey(fn.spec, rec.io, { cluster: HUB, namespace: C, name });
    expect(rec.writes()).toEqual([]);
    a.clock.advance(9 * 60_000); // 49 minutes of 60: past 48
    await a.reconcile(name);
    const second = await tokenOf(name);
    expect(second).not.toBe(first);
    expect(tokenSubject(second)?.user).toBe(`system:serviceaccount:${ADDON_NS}:${name}`);
    expect((await readMsa(name))?.status?.tokenSecretRef?.lastRefreshTimestamp).toBe(a.clock.now().toISOString().replace(/\.\d+Z$/, "Z"));
  });

  it("reports a new token at once for a ServiceAccount deleted and made again, or a token Secret edited by hand", async () => {
    const a = agent();
    const name = await newMsa();
    await a.reconcile(name);
    const first = await tokenOf(name);
    await spoke.delete(ServiceAccountResource, name, ADDON_NS);
    await a.reconcile(name);
    const second = await tokenOf(name);
    expect(second).not.toBe(first);
    // the old token names the deleted account's uid: the new one authenticates, the old one no longer
    const ca = secretText(await readSecret(name), "ca.crt")!;
    expect(await whoAmI(second, ca)).toBe(`system:serviceaccount:${ADDON_NS}:${name}`);
    await expect(whoAmI(first, ca)).rejects.toThrow(/401/);
    const secret = (await readSecret(name))!;
    await hub.update(SecretResource, { ...secret, data: { ...secret.data, token: Buffer.from("forged").toString("base64") } });
    await a.reconcile(name);
    expect(tokenSubject(await tokenOf(name))?.user).toBe(`system:serviceaccount:${ADDON_NS}:${name}`);
  });

  it("deletes the ServiceAccount it made once the ManagedServiceAccount is gone", async () => {
    const a = agent();
    const name = await newMsa();
    await a.reconcile(name);
    await hub.delete(ManagedServiceAccountResource, name, C);
    await a.reconcile(name);
    expect(await spoke.get(ServiceAccountResource, name, ADDON_NS)).toBeUndefined();
  });
});

describe("what it refuses", () => {
  it("issues no token for a ServiceAccount it did not make, says so in TokenReported, and never deletes that account", async () => {
    const a = agent();
    const name = await newMsa();
    await spoke.create(ServiceAccountResource, { metadata: { name, namespace: ADDON_NS } });
    await a.reconcile(name);
    expect(await readSecret(name)).toBeUndefined();
    expect(findCondition((await readMsa(name))?.status?.conditions, "TokenReported")).toMatchObject({ status: "False", reason: "TokenReportFailed", message: `ServiceAccount ${ADDON_NS}/${name} exists and is not one this add-on made: no token is issued for it` });
    await hub.delete(ManagedServiceAccountResource, name, C);
    await a.reconcile(name);
    expect(await spoke.get(ServiceAccountResource, name, ADDON_NS)).toBeDefined();
  });

  it("refuses a validity shorter than the TokenRequest API issues, and writes no token", async () => {
    const a = agent();
    const name = await newMsa("5m");
    await a.reconcile(name);
    expect(await readSecret(name)).toBeUndefined();
    expect(findCondition((await readMsa(name))?.status?.conditions, "TokenReported")).toMatchObject({ status: "False", reason: "TokenReportFailed" });
  });

  it("keeps one client for the add-on's hub identity per version of its secret, and builds a new one once the secret changes", async () => {
    const a = agent();
    const client = a.io.cluster(C);
    const first = await addOnHubClient(client, a.io.config);
    expect(first).toBeDefined();
    expect(await addOnHubClient(client, a.io.config)).toBe(first);
    const secret = (await spoke.get<Secret>(SecretResource, addOnHubSecretName, ADDON_NS))!;
    await spoke.update(SecretResource, { ...secret, metadata: { ...secret.metadata, annotations: { touched: "yes" } } });
    const after = await addOnHubClient(client, a.io.config);
    expect(after).toBeDefined();
    expect(after).not.toBe(first);
    expect((await after!.request<{ gitVersion: string }>("GET", "/version")).gitVersion).toMatch(/^v1\./); // it works
  });

  it("writes nothing without the add-on's hub kubeconfig (the add-on not enabled on this cluster)", async () => {
    const kept = (await spoke.get<Secret>(SecretResource, addOnHubSecretName, ADDON_NS))!;
    await spoke.delete(SecretResource, addOnHubSecretName, ADDON_NS);
    try {
      const a = agent();
      const name = await newMsa();
      const rec = recordingRequests(a.io);
      expect(await reconcileKey(fn.spec, rec.io, { cluster: HUB, namespace: C, name })).toEqual({ done: true });
      expect(rec.writes()).toEqual([]);
      expect(await readSecret(name)).toBeUndefined();
      expect(await spoke.get(ServiceAccountResource, name, ADDON_NS)).toBeUndefined();
    } finally {
      await spoke.create(SecretResource, { metadata: { name: addOnHubSecretName, namespace: ADDON_NS }, data: kept.data });
    }
  });

  it("the cluster's own identity reads its ManagedServiceAccounts but may write no Secret there nor their status; the add-on's identity may write in its cluster's namespace only", async () => {
    const name = await newMsa();
    const asCluster = KubeClient.fromKubeconfig(await fleet.clusters.get(HUB).kubeconfigFor({ user: `system:open-cluster-management:${C}:agent`, groups: [`system:open-cluster-management:${C}`, "system:open-cluster-management:managed-clusters"] }));
    const asAddOn = KubeClient.fromKubeconfig(await fleet.clusters.get(HUB).kubeconfigFor({ user: addOnUser, groups: addOnGroups }));
    try {
      expect((await asCluster.list(ManagedServiceAccountResource, { namespace: C })).items.map((m) => m.metadata.name)).toContain(name);
      await expect(asCluster.create(SecretResource, { metadata: { name: "planted", namespace: C }, data: {} })).rejects.toThrow(/forbidden/);
      await expect(asCluster.patch(ManagedServiceAccountResource, name, { status: { expirationTimestamp: "2030-01-01T00:00:00Z" } }, { namespace: C, subresource: "status" })).rejects.toThrow(/forbidden/);
      const other = `other-${suffix()}`;
      await hub.create(NamespaceResource, { metadata: { name: other } });
      await expect(asAddOn.create(SecretResource, { metadata: { name: "planted", namespace: other }, data: {} })).rejects.toThrow(/forbidden/);
      await expect(asAddOn.list(SecretResource, { namespace: other })).rejects.toThrow(/forbidden/);
    } finally {
      asCluster.close();
      asAddOn.close();
    }
  });
});

describe("on a hub that does not serve ManagedServiceAccounts (OCM's own, without the add-on)", () => {
  // last in this file: it removes the kind from the fleet's hub
  it("answers its resync ticks 204, with nothing to report, and writes nothing", async () => {
    await hub.delete(CustomResourceDefinitionResource, "managedserviceaccounts.authentication.open-cluster-management.io");
    const a = agent();
    await eventually(async () => expect(await hub.list(ManagedServiceAccountResource, { namespace: C }).then(() => "served", (err: Error) => err.message)).toMatch(/404/));
    const rec = recordingRequests(a.io);
    const reply = await handleEvent(fn.spec, rec.io, tickEvent());
    expect(reply.statusCode, reply.body).toBe(204);
    expect(rec.writes()).toEqual([]);
  });
});
