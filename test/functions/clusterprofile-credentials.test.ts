// clusterprofile-credentials against a real hub, under its own RBAC (OCM managed-serviceaccount's
// ClusterProfile credential syncer): a syncing ManagedServiceAccount's token copied beside every profile
// of its cluster as <cluster>-<name>, owned by the profile, kept in step, deleted when the
// ManagedServiceAccount stops syncing or goes; nothing else copied, and a Secret that is not a copy of
// ours left alone; and a consumer minting one for a cluster outside its sets gets no token.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { KubeClient } from "../../shared/kube/client.ts";
import { NamespaceResource, RoleBindingResource, RoleResource, SecretResource } from "../../shared/api/kube.ts";
import { ClusterProfileResource, type ClusterProfile } from "../../shared/api/inventory.ts";
import { ManagedServiceAccountResource, type ManagedServiceAccount } from "../../shared/api/authentication.ts";
import type { Secret } from "../../shared/hub-credentials.ts";
import { handleEvent, type Io } from "../../shared/harness.ts";
import fn, { copyName, type Config } from "../../functions/clusterprofile-credentials/reconcile.ts";
import { objectEvent, testIo, tickEvent } from "../support/functions.ts";
import { readyIdentity, startHub, type Hub } from "../support/fixtures.ts";
import { recordingRequests } from "../support/requests.ts";
import { eventually } from "../support/eventually.ts";

const HUB = "hub";
const suffix = () => Math.random().toString(36).slice(2, 7);
const SYNC = "authentication.open-cluster-management.io/sync-to-clusterprofile";

let hub: Hub;
let admin: KubeClient;
let io: Io<Config>;

beforeAll(async () => {
  hub = await startHub(HUB);
  admin = hub.admin;
  io = testIo({ [HUB]: await readyIdentity(hub.cluster, fn.spec.name, [ClusterProfileResource, ManagedServiceAccountResource]) }, { hubCluster: HUB });
});
afterAll(() => hub?.stop());

const b64 = (s: string) => Buffer.from(s).toString("base64");
const deliver = async (event: Record<string, unknown>) => {
  const reply = await handleEvent(fn.spec, io, event);
  expect(reply.statusCode, reply.body).toBe(204);
};
const profileEvent = (p: ClusterProfile, verb: "add" | "update" | "delete" = "update") => objectEvent({ cluster: HUB, verb, object: { apiVersion: "multicluster.x-k8s.io/v1alpha1", kind: "ClusterProfile", ...p } });
const msaEvent = (m: ManagedServiceAccount, verb: "add" | "update" | "delete" = "update") => objectEvent({ cluster: HUB, verb, object: { apiVersion: "authentication.open-cluster-management.io/v1beta1", kind: "ManagedServiceAccount", ...m } });

// A cluster namespace with a reported token, and the cluster's profile in a consumer namespace.
async function scene(o: { sync?: boolean } = {}) {
  const cluster = `cluster-${suffix()}`;
  const consumer = `consumer-${suffix()}`;
  for (const name of [cluster, consumer]) await admin.create(NamespaceResource, { metadata: { name } });
  const msa = `msa-${suffix()}`;
  let m = await admin.create<ManagedServiceAccount>(ManagedServiceAccountResource, { metadata: { name: msa, namespace: cluster, labels: o.sync === false ? {} : { [SYNC]: "true" } }, spec: { rotation: {} } });
  await admin.create<Secret>(SecretResource, { metadata: { name: msa, namespace: cluster }, data: { token: b64("token-1"), "ca.crt": b64("ca") } });
  m = await admin.patch<ManagedServiceAccount>(ManagedServiceAccountResource, msa, { status: { tokenSecretRef: { name: msa, lastRefreshTimestamp: "2026-12-02T00:00:00Z" }, expirationTimestamp: "2026-12-02T01:00:00Z" } }, { namespace: cluster, subresource: "status" });
  const profile = await admin.create<ClusterProfile>(ClusterProfileResource, {
    metadata: { name: cluster, namespace: consumer, labels: { "x-k8s.io/cluster-manager": "open-cluster-management", "open-cluster-management.io/cluster-name": cluster } },
    spec: { clusterManager: { name: "open-cluster-management" } },
  });
  return { cluster, consumer, msa, m, profile };
}
const readCopy = (s: { cluster: string; consumer: string; msa: string }) => admin.get<Secret>(SecretResource, copyName(s.cluster, s.msa), s.consumer);

describe("token copies beside the profiles", () => {
  it("copies a syncing ManagedServiceAccount's token beside its cluster's profile as <cluster>-<name>, labelled and owned by the profile", async () => {
    const s = await scene();
    await deliver(profileEvent(s.profile, "add"));
    const copy = (await readCopy(s))!;
    expect(copy.data).toEqual({ token: b64("token-1"), "ca.crt": b64("ca") });
    expect(copy.metadata.labels).toEqual({ "authentication.open-cluster-management.io/synced-from": `${s.cluster}-${s.msa}` });
    expect(copy.metadata.ownerReferences).toEqual([{ apiVersion: "multicluster.x-k8s.io/v1alpha1", kind: "ClusterProfile", name: s.cluster, uid: s.profile.metadata.uid, controller: true }]);
  });

  it("copies nothing for a ManagedServiceAccount that does not ask to sync", async () => {
    const s = await scene({ sync: false });
    await deliver(profileEvent(s.profile, "add"));
    expect(await readCopy(s)).toBeUndefined();
  });

  it("follows a renewed token, writes nothing when the copy is current, and deletes the copy once the ManagedServiceAccount stops syncing", async () => {
    const s = await scene();
    await deliver(msaEvent(s.m, "add"));
    const first = (await readCopy(s))!;
    const rec = recordingRequests(io);
    await handleEvent(fn.spec, rec.io, msaEvent(s.m));
    await handleEvent(fn.spec, rec.io, tickEvent());
    expect(rec.writes()).toEqual([]);
    const src = (await admin.get<Secret>(SecretResource, s.msa, s.cluster))!;
    await admin.update(SecretResource, { ...src, data: { ...src.data, token: b64("token-2") } });
    await deliver(msaEvent(s.m));
    expect((await readCopy(s))?.data?.token).toBe(b64("token-2"));
    expect((await readCopy(s))?.metadata.uid).toBe(first.metadata.uid);
    const stopped = await admin.patch<ManagedServiceAccount>(ManagedServiceAccountResource, s.msa, { metadata: { labels: { [SYNC]: null } } }, { namespace: s.cluster });
    await deliver(msaEvent(stopped));
    expect(await readCopy(s)).toBeUndefined();
  });

  it("deletes the copy once the ManagedServiceAccount is deleted", async () => {
    const s = await scene();
    await deliver(profileEvent(s.profile, "add"));
    await admin.delete(ManagedServiceAccountResource, s.msa, s.cluster);
    await deliver(msaEvent(s.m, "delete"));
    expect(await readCopy(s)).toBeUndefined();
  });

  it("leaves alone a Secret of the copy's name that is not this profile's copy, and a profile of another cluster manager", async () => {
    const s = await scene();
    await admin.create(SecretResource, { metadata: { name: copyName(s.cluster, s.msa), namespace: s.consumer }, data: { token: b64("theirs") } });
    await deliver(profileEvent(s.profile, "add"));
    expect((await readCopy(s))?.data).toEqual({ token: b64("theirs") });
    const other = await scene();
    const foreign = await admin.patch<ClusterProfile>(ClusterProfileResource, other.cluster, { metadata: { labels: { "x-k8s.io/cluster-manager": "someone-else" } } }, { namespace: other.consumer });
    await deliver(profileEvent(foreign));
    expect(await readCopy(other)).toBeUndefined();
  });
});

describe("attacks under a consumer's own identity", () => {
  it("a consumer that may mint ManagedServiceAccounts for a cluster outside its sets gets no token: the copy goes only beside that cluster's profiles, and it may read neither the token nor their copies", async () => {
    const s = await scene(); // cluster s.cluster, published only in s.consumer
    const attackerNs = `attacker-${suffix()}`;
    await admin.create(NamespaceResource, { metadata: { name: attackerNs } });
    const user = `attacker-${suffix()}`;
    const subjects = [{ kind: "User", apiGroup: "rbac.authorization.k8s.io", name: user }];
    // generous: it may make ManagedServiceAccounts in that cluster's namespace, and read secrets in its own
    await admin.create(RoleResource, { metadata: { name: user, namespace: s.cluster }, rules: [{ apiGroups: ["authentication.open-cluster-management.io"], resources: ["managedserviceaccounts"], verbs: ["create", "get"] }] });
    await admin.create(RoleBindingResource, { metadata: { name: user, namespace: s.cluster }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: user }, subjects });
    await admin.create(RoleResource, { metadata: { name: user, namespace: attackerNs }, rules: [{ apiGroups: [""], resources: ["secrets"], verbs: ["get", "list"] }] });
    await admin.create(RoleBindingResource, { metadata: { name: user, namespace: attackerNs }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: user }, subjects });
    const attacker = KubeClient.fromKubeconfig(await hub.cluster.kubeconfigFor({ user }));
    try {
      const minted = await eventually(() => attacker.create<ManagedServiceAccount>(ManagedServiceAccountResource, { metadata: { name: `stolen-${suffix()}`, namespace: s.cluster, labels: { [SYNC]: "true" } }, spec: { rotation: {} } }));
      // as the agent would report it
      await admin.create<Secret>(SecretResource, { metadata: { name: minted.metadata.name, namespace: s.cluster }, data: { token: b64("stolen-token") } });
      const reported = await admin.patch<ManagedServiceAccount>(ManagedServiceAccountResource, minted.metadata.name, { status: { tokenSecretRef: { name: minted.metadata.name, lastRefreshTimestamp: "2026-12-02T00:00:00Z" } } }, { namespace: s.cluster, subresource: "status" });
      await deliver(msaEvent(reported));
      expect((await admin.list<Secret>(SecretResource, { namespace: attackerNs })).items).toEqual([]);
      expect(await admin.get(SecretResource, copyName(s.cluster, minted.metadata.name), s.consumer)).toBeDefined();
      await expect(attacker.get(SecretResource, minted.metadata.name, s.cluster)).rejects.toThrow(/forbidden/);
      await expect(attacker.get(SecretResource, copyName(s.cluster, minted.metadata.name), s.consumer)).rejects.toThrow(/forbidden/);
      // and one with no right there is refused the mint itself
      const stranger = KubeClient.fromKubeconfig(await hub.cluster.kubeconfigFor({ user: `stranger-${suffix()}` }));
      await expect(stranger.create(ManagedServiceAccountResource, { metadata: { name: "x", namespace: s.cluster }, spec: { rotation: {} } })).rejects.toThrow(/forbidden/);
      stranger.close();
    } finally {
      attacker.close();
    }
  });
});
