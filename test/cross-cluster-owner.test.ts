// Cross-cluster ownership against three real clusters (a source and two targets): orphaned copies are
// collected, an owner's deletion waits for its copies on every target, orphaning releases them, a
// partition deletes nothing and the next reconcile finishes, malformed marks are reported, not guessed,
// and marks without the function's seal (written by someone who may patch but not delete, or copied
// from a real copy) make nothing the function's to delete or release (issue 23).
// No controller manager: Kubernetes' garbage collector would take the `orphan` finalizer off within
// milliseconds (docs/cross-cluster-ownership.md), and nothing here needs another controller.
import { randomBytes, randomUUID } from "node:crypto";
import { isDeepStrictEqual } from "node:util";
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { startClusters, type LocalClusters } from "../dev/control-plane/clusters.ts";
import { startApiserver, stopApiserver } from "../dev/control-plane/restart.ts";
import { startFunction } from "../dev/local/functions.ts";
import { ClusterRoleBindingResource, ClusterRoleResource, ConfigMapResource } from "../shared/api/kube.ts";
import { createOrUpdate, withDesired, wouldWrite } from "../shared/apply.ts";
import { done, reconcileKey, type FunctionSpec, type Io, type Outcome } from "../shared/harness.ts";
import { KubeClient, resourcePath, type KubeObject } from "../shared/kube/client.ts";
import { parseKubeconfig } from "../shared/kube/kubeconfig.ts";
import { classifyError } from "../shared/kube/errors.ts";
import {
  collectOrphanedCopy,
  copiesSelector,
  CopiesFinalizer,
  CopySeal,
  createSealedCopy,
  deleteOwner,
  DeletePolicyAnnotation,
  ensureCopiesFinalizer,
  finalizeOwner,
  MalformedOwnerMarks,
  OwnedLabel,
  OwnerAnnotation,
  OwnerHashLabel,
  ownedBy,
  ownerOf,
  SealAnnotation,
  sealedMarks,
  sealedOwnerOf,
  UNREACHABLE_RECHECK_MS,
  WAITING_RECHECK_MS,
  type OwnerMarks,
} from "../shared/cross-cluster-owner.ts";
import { eventually } from "./support/eventually.ts";
import { objectEvent, testIo } from "./support/functions.ts";

const SOURCE = "source";
const A = "target-a";
const B = "target-b";
const TARGETS = [A, B] as const;
const NS = "default";
const USER = "ocm-functions:configmap-replicator";
const PATCHER = "mallory"; // may read, patch and update ConfigMaps on target-a, never delete them
const CM = ConfigMapResource;
const SEAL = CopySeal.fromBase64(randomBytes(32).toString("base64")); // the function's key, a setting of its own

type ConfigMap = KubeObject & { data?: Record<string, string> };

// A test-local multi-cluster function built on the library: it copies ConfigMaps from the source to
// every target, and collects copies whose owner is gone. With `finalizer`, owners wait for their copies.
type Config = { source: string; targets: readonly string[]; finalizer: boolean };

const replicator: FunctionSpec<Config> = {
  name: "configmap-replicator",
  keys: (event) => (event.type === "object" ? [{ cluster: event.cluster, namespace: event.ref.namespace, name: event.ref.name }] : { skip: "no resync here" }),
  async reconcile(io, key) {
    const at = { ...key, resource: CM };
    if (key.cluster !== io.config.source) return collectOrphanedCopy(io, at, SEAL);
    const owner = io.config.finalizer ? await ensureCopiesFinalizer(io, at) : await io.cluster(key.cluster).get<ConfigMap>(CM, key.name, key.namespace);
    if (!owner) return done;
    if (owner.metadata.deletionTimestamp) return io.config.finalizer ? finalizeOwner(io, at, { resource: CM, clusters: io.config.targets }, SEAL) : done;
    let waiting = false;
    for (const target of io.config.targets) {
      const client = io.cluster(target);
      const place = { cluster: target, resource: CM, namespace: key.namespace, name: key.name };
      const existing = await client.get<ConfigMap>(CM, key.name, key.namespace);
      if (!existing) {
        await createSealedCopy<ConfigMap>(io, SEAL, place, { metadata: { name: key.name, namespace: key.namespace, ...ownedBy(owner, key.cluster) }, data: (owner as ConfigMap).data });
        continue;
      }
      // Another owner's copy, or an object this function did not seal, is not ours to take over.
      if (sealedOwnerOf(SEAL, existing, place)?.uid !== owner.metadata.uid) {
        waiting = true;
        continue;
      }
      // the object read and sealed, or a conflict: its resourceVersion rides along
      const desired: ConfigMap = { metadata: { name: key.name, namespace: key.namespace, ...sealedMarks(SEAL, owner, key.cluster, place, existing.metadata.uid!) }, data: (owner as ConfigMap).data };
      if (wouldWrite(existing, desired, ["data"])) await client.update(CM, withDesired(existing, desired, ["data"]));
    }
    return waiting ? { recheckInMs: WAITING_RECHECK_MS } : done;
  },
};

let local: LocalClusters;
const admins = new Map<string, KubeClient>();
const kubeconfigs: Record<string, string> = {};
let gcOnly: Io<Config>; // copies collected after the fact, like Kubernetes' background deletion
let withFinalizer: Io<Config>;
let patcher: KubeClient; // PATCHER on target-a

const admin = (cluster: string) => admins.get(cluster)!;
const read = (cluster: string, name: string) => admin(cluster).get<ConfigMap>(CM, name, NS);
const suffix = () => randomBytes(3).toString("hex");

// The function's own identity on a cluster: ConfigMaps only, cluster-wide (copies are listed across namespaces).
async function replicatorIdentity(cluster: string): Promise<string> {
  const name = "configmap-replicator";
  await createOrUpdate(admin(cluster), ClusterRoleResource, { metadata: { name }, rules: [{ apiGroups: [""], resources: ["configmaps"], verbs: ["get", "list", "watch", "create", "update", "patch", "delete"] }] }, ["rules"]);
  await createOrUpdate(
    admin(cluster),
    ClusterRoleBindingResource,
    { metadata: { name }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name }, subjects: [{ kind: "User", apiGroup: "rbac.authorization.k8s.io", name: USER }] },
    ["subjects"],
  );
  const kubeconfig = await local.get(cluster).kubeconfigFor({ user: USER });
  const probe = KubeClient.fromKubeconfig(kubeconfig);
  try {
    await eventually(() => probe.list(CM));
  } finally {
    probe.close();
  }
  return kubeconfig;
}

// Someone who may read and change ConfigMaps on a cluster, but not delete them: the right to patch an
// object must not become the right to have it deleted.
async function patcherIdentity(cluster: string): Promise<KubeClient> {
  const name = "configmap-patcher";
  await admin(cluster).create(ClusterRoleResource, { metadata: { name }, rules: [{ apiGroups: [""], resources: ["configmaps"], verbs: ["get", "list", "watch", "patch", "update"] }] });
  await admin(cluster).create(ClusterRoleBindingResource, { metadata: { name }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name }, subjects: [{ kind: "User", apiGroup: "rbac.authorization.k8s.io", name: PATCHER }] });
  const client = KubeClient.fromKubeconfig(await local.get(cluster).kubeconfigFor({ user: PATCHER }));
  await eventually(() => client.list(CM));
  return client;
}

beforeAll(async () => {
  local = await startClusters({ names: [SOURCE, A, B], controllers: false, crds: false, log: () => {} });
  for (const c of local.clusters) admins.set(c.name, KubeClient.fromKubeconfig(c.adminKubeconfig));
  for (const c of local.clusters) kubeconfigs[c.name] = await replicatorIdentity(c.name);
  patcher = await patcherIdentity(A);
  gcOnly = testIo(kubeconfigs, { source: SOURCE, targets: TARGETS, finalizer: false });
  withFinalizer = testIo(kubeconfigs, { source: SOURCE, targets: TARGETS, finalizer: true });
});
afterAll(async () => {
  patcher?.close();
  for (const c of admins.values()) c.close();
  // restarted apiservers are processes local.stop() does not know
  for (const c of local?.clusters ?? []) await stopApiserver(c);
  await local?.stop();
});

type Scene = { name: string; owner: ConfigMap };

const replicate = (io: Io<Config>, name: string) => reconcileKey(replicator, io, { cluster: SOURCE, namespace: NS, name });
const collect = (io: Io<Config>, cluster: string, name: string) => reconcileKey(replicator, io, { cluster, namespace: NS, name });
const collectBoth = (s: Scene) => Promise.all(TARGETS.map((t) => collect(gcOnly, t, s.name)));
const ownerKey = (name: string) => ({ cluster: SOURCE, resource: CM, namespace: NS, name });

// An owner on the source and its copy on each target, written by the function.
async function ownerWithCopies(io: Io<Config>): Promise<Scene> {
  const name = `cm-${suffix()}`;
  await admin(SOURCE).create(CM, { metadata: { name, namespace: NS }, data: { colour: "blue", n: suffix() } });
  expect(await replicate(io, name)).toEqual(done);
  const owner = (await read(SOURCE, name))!;
  expect(owner.metadata.finalizers ?? []).toEqual(io.config.finalizer ? [CopiesFinalizer] : []);
  const s = { name, owner };
  expect(await copyStates(s)).toEqual({ [A]: "copy", [B]: "copy" });
  return s;
}

// Each target's object: gone, a copy of the scene's owner, or released (no marks, the owner's data).
async function copyStates(s: Scene, targets: readonly string[] = TARGETS): Promise<Record<string, string>> {
  const states: Record<string, string> = {};
  for (const t of targets) {
    const o = await read(t, s.name);
    const owner = o && ownerOf(o, t);
    if (!o) states[t] = "absent";
    else if (!owner) states[t] = isDeepStrictEqual(o.data, s.owner.data) ? "released" : "unmarked, other data";
    else states[t] = owner.uid === s.owner.metadata.uid ? "copy" : `copy of ${owner.uid}`;
  }
  return states;
}

async function ownerState(name: string): Promise<string> {
  const o = await read(SOURCE, name);
  if (!o) return "absent";
  if (!o.metadata.deletionTimestamp) return "live";
  return `deleting, held by [${((o.metadata.finalizers ?? []) as string[]).join(", ")}]`;
}

// DELETE as a user would send it, with a propagation policy.
const deleteAsUser = (name: string, propagationPolicy?: "Orphan" | "Background") =>
  admin(SOURCE).request("DELETE", resourcePath(CM, { namespace: NS, name }), { kind: "DeleteOptions", apiVersion: "v1", propagationPolicy });

// A copy of `owner` made and sealed as the function makes them (here with the admin's rights).
function sealedCopyOf(owner: KubeObject, ownerCluster: string, cluster: string, name: string): Promise<ConfigMap> {
  const io = { cluster: admin, log: gcOnly.log };
  return createSealedCopy<ConfigMap>(io, SEAL, { cluster, resource: CM, namespace: NS, name }, { metadata: { name, namespace: NS, ...ownedBy(owner, ownerCluster) } });
}

async function recreateOwner(s: Scene): Promise<void> {
  await admin(SOURCE).delete(CM, s.name, NS);
  await admin(SOURCE).create(CM, { metadata: { name: s.name, namespace: NS }, data: s.owner.data });
  s.owner = (await read(SOURCE, s.name))!;
}

describe("the marks", () => {
  const owner: ConfigMap = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "settings", namespace: "apps", uid: randomUUID() } };

  it("name the owner so that ownerOf reads back what ownedBy wrote, and the selector finds them", () => {
    const marks = ownedBy(owner, "hub");
    const copy = { metadata: { name: "x", ...marks } };
    expect(ownerOf(copy)).toEqual({ cluster: "hub", apiVersion: "v1", kind: "ConfigMap", namespace: "apps", name: "settings", uid: owner.metadata.uid });
    expect(copiesSelector(owner, "hub")).toBe(`${OwnedLabel}=true,${OwnerHashLabel}=${marks.labels[OwnerHashLabel]}`);
    // another incarnation, or the same name on another cluster, is another owner
    expect(copiesSelector({ ...owner, metadata: { ...owner.metadata, uid: randomUUID() } }, "hub")).not.toBe(copiesSelector(owner, "hub"));
    expect(copiesSelector(owner, "other-hub")).not.toBe(copiesSelector(owner, "hub"));
  });

  it("are absent from an object that carries none of them", () => {
    expect(ownerOf({ metadata: { name: "x", labels: { app: "y" }, annotations: { note: "z" } } })).toBeUndefined();
  });
});

// The real client, with a pause before its next request, for interleaving another writer at that point.
class PausingClient extends KubeClient {
  beforeNextRequest?: () => Promise<void>;
  override async request<T = unknown>(method: string, path: string, body?: unknown, contentType?: string): Promise<T> {
    const pause = this.beforeNextRequest;
    this.beforeNextRequest = undefined;
    await pause?.();
    return super.request<T>(method, path, body, contentType);
  }
}

const merged = (o: KubeObject, marks: OwnerMarks) => ({
  labels: { ...(o.metadata.labels as Record<string, string>), ...marks.labels },
  annotations: { ...(o.metadata.annotations as Record<string, string>), ...marks.annotations },
});

describe("collecting orphaned copies", () => {
  const rows: { name: string; when(s: Scene): Promise<Outcome[]>; then: Record<string, string> }[] = [
    {
      name: "deletes the copies on both targets once their owner is gone",
      when: async (s) => {
        await admin(SOURCE).delete(CM, s.name, NS);
        return collectBoth(s);
      },
      then: { [A]: "absent", [B]: "absent" },
    },
    {
      name: "deletes the old copies of an owner deleted and recreated under the same name, so the new one gets its own",
      when: async (s) => {
        const old = s.owner;
        await recreateOwner(s);
        expect(s.owner.metadata.uid).not.toBe(old.metadata.uid);
        const collected = await collectBoth(s);
        expect(await copyStates(s)).toEqual({ [A]: "absent", [B]: "absent" });
        return [...collected, await replicate(gcOnly, s.name)];
      },
      then: { [A]: "copy", [B]: "copy" },
    },
    {
      name: "keeps the copies while their owner exists",
      when: collectBoth,
      then: { [A]: "copy", [B]: "copy" },
    },
    {
      name: "finds nothing to do for a copy deleted by hand",
      when: async (s) => {
        await admin(A).delete(CM, s.name, NS);
        return collectBoth(s);
      },
      then: { [A]: "absent", [B]: "copy" },
    },
    {
      name: "leaves alone an object without marks, even where a gone owner's copy was",
      when: async (s) => {
        await admin(A).delete(CM, s.name, NS);
        await admin(A).create(CM, { metadata: { name: s.name, namespace: NS }, data: s.owner.data });
        await admin(SOURCE).delete(CM, s.name, NS);
        return collectBoth(s);
      },
      then: { [A]: "released", [B]: "absent" },
    },
  ];

  it.each(rows)("$name", async ({ when, then }) => {
    const s = await ownerWithCopies(gcOnly);
    const outcomes = await when(s);
    expect(outcomes).toEqual(outcomes.map(() => done));
    expect(await copyStates(s)).toEqual(then);
  });

  // The copy is read, then the owner; in between another writer replaces the copy. The DELETE names
  // the copy that was read (uid and resourceVersion), so the newer one survives.
  const races: { name: string; meanwhile(s: Scene): Promise<void> }[] = [
    {
      name: "never deletes a copy recreated for the new owner while the old owner was being read",
      meanwhile: async (s) => {
        await admin(A).delete(CM, s.name, NS);
        await sealedCopyOf(s.owner, SOURCE, A, s.name); // as the function makes it again: sealed
      },
    },
    {
      name: "never deletes a copy re-marked for the new owner while the old owner was being read",
      meanwhile: async (s) => {
        const copy = (await read(A, s.name))!;
        const marks = sealedMarks(SEAL, s.owner, SOURCE, { cluster: A, resource: CM, namespace: NS, name: s.name }, copy.metadata.uid!);
        await admin(A).update(CM, { ...copy, metadata: { ...copy.metadata, ...merged(copy, marks) } });
      },
    },
  ];

  it.each(races)("$name", async ({ meanwhile }) => {
    const s = await ownerWithCopies(gcOnly);
    await recreateOwner(s); // the copies now name a replaced owner
    const paused = new PausingClient(parseKubeconfig(kubeconfigs[SOURCE]!));
    paused.beforeNextRequest = () => meanwhile(s);
    const io = { ...gcOnly, cluster: (name: string) => (name === SOURCE ? paused : gcOnly.cluster(name)) };
    const err = await collectOrphanedCopy(io, { cluster: A, resource: CM, namespace: NS, name: s.name }, SEAL).catch((e: unknown) => e);
    paused.close();
    expect(classifyError(err)).toBe("conflict");
    expect(await copyStates(s, [A])).toEqual({ [A]: "copy" });
    // and the retry, reading again, finds a live owner
    expect(await collect(gcOnly, A, s.name)).toEqual(done);
    expect(await copyStates(s, [A])).toEqual({ [A]: "copy" });
  });
});

describe("deleting an owner that holds the copies finalizer", () => {
  const rows: { name: string; when(s: Scene): Promise<unknown>; owner: string; then: Record<string, string> }[] = [
    {
      name: "deletes the copies on both targets, then lets the owner go",
      when: () => Promise.resolve(),
      owner: "absent",
      then: { [A]: "absent", [B]: "absent" },
    },
    {
      name: "releases the copies when the owner carries delete-policy Orphan",
      when: (s) => admin(SOURCE).patch(CM, s.name, { metadata: { annotations: { [DeletePolicyAnnotation]: "Orphan" } } }, { namespace: NS }),
      owner: "absent",
      then: { [A]: "released", [B]: "released" },
    },
  ];

  it.each(rows)("$name", async ({ when, owner, then }) => {
    const s = await ownerWithCopies(withFinalizer);
    await when(s);
    await deleteAsUser(s.name);
    expect(await ownerState(s.name)).toBe(`deleting, held by [${CopiesFinalizer}]`);
    expect(await replicate(withFinalizer, s.name)).toEqual(done);
    expect(await ownerState(s.name)).toBe(owner);
    expect(await copyStates(s)).toEqual(then);
    // a duplicated or late event changes nothing
    expect(await replicate(withFinalizer, s.name)).toEqual(done);
    expect(await copyStates(s)).toEqual(then);
  });

  it("releases the copies on propagationPolicy=Orphan and leaves Kubernetes' orphan finalizer to its garbage collector", async () => {
    const s = await ownerWithCopies(withFinalizer);
    await deleteAsUser(s.name, "Orphan");
    expect(await ownerState(s.name)).toBe(`deleting, held by [${CopiesFinalizer}, orphan]`);
    expect(await replicate(withFinalizer, s.name)).toEqual(done);
    expect(await copyStates(s)).toEqual({ [A]: "released", [B]: "released" });
    expect(await ownerState(s.name)).toBe("deleting, held by [orphan]");
    // the request is written down on the owner, where it outlives the `orphan` finalizer
    expect((await read(SOURCE, s.name))!.metadata.annotations).toMatchObject({ [DeletePolicyAnnotation]: "Orphan" });
  });

  it("releases the copies of an owner deleted with deleteOwner(Orphan)", async () => {
    const s = await ownerWithCopies(withFinalizer);
    expect(await deleteOwner(withFinalizer, ownerKey(s.name), "Orphan")).toBe(true);
    expect(await replicate(withFinalizer, s.name)).toEqual(done);
    expect(await copyStates(s)).toEqual({ [A]: "released", [B]: "released" });
    expect(await ownerState(s.name)).toBe("deleting, held by [orphan]");
    expect(await deleteOwner(withFinalizer, ownerKey(s.name), "Orphan")).toBe(true); // still there: the DELETE is repeated, harmlessly
  });

  it("keeps the owner while a copy is held by a finalizer of its own, and lets it go once the copy is gone", async () => {
    const s = await ownerWithCopies(withFinalizer);
    const hold = "test.ocm-functions.io/hold";
    await admin(A).patch(CM, s.name, { metadata: { finalizers: [hold] } }, { namespace: NS });
    await deleteAsUser(s.name);
    expect(await replicate(withFinalizer, s.name)).toEqual({ recheckInMs: WAITING_RECHECK_MS });
    expect(await ownerState(s.name)).toBe(`deleting, held by [${CopiesFinalizer}]`);
    expect((await read(A, s.name))?.metadata.deletionTimestamp).toBeDefined();
    expect(await copyStates(s, [B])).toEqual({ [B]: "absent" });

    await admin(A).patch(CM, s.name, { metadata: { finalizers: null } }, { namespace: NS });
    expect(await replicate(withFinalizer, s.name)).toEqual(done);
    expect(await ownerState(s.name)).toBe("absent");
    expect(await copyStates(s)).toEqual({ [A]: "absent", [B]: "absent" });
  });

  it("does not add the finalizer to an owner already being deleted (Kubernetes refuses it)", async () => {
    const name = `cm-${suffix()}`;
    await admin(SOURCE).create(CM, { metadata: { name, namespace: NS, finalizers: ["test.ocm-functions.io/hold"] } });
    await deleteAsUser(name);
    const owner = await ensureCopiesFinalizer(withFinalizer, ownerKey(name));
    expect(owner?.metadata.finalizers).toEqual(["test.ocm-functions.io/hold"]);
    await admin(SOURCE).patch(CM, name, { metadata: { finalizers: null } }, { namespace: NS });
  });
});

// One cluster's API server stopped and started again, whatever the test's outcome.
async function whileStopped<T>(cluster: string, during: () => Promise<T>): Promise<T> {
  await stopApiserver(local.get(cluster));
  try {
    return await during();
  } finally {
    await startApiserver(local.get(cluster));
  }
}

describe("partitions", () => {
  it("keeps a copy while its owner's cluster is unreachable, and collects it once the cluster is back", async () => {
    const s = await ownerWithCopies(gcOnly);
    await admin(SOURCE).delete(CM, s.name, NS);
    await whileStopped(SOURCE, async () => {
      expect(await collect(gcOnly, A, s.name)).toEqual({ recheckInMs: UNREACHABLE_RECHECK_MS });
      expect(await copyStates(s)).toEqual({ [A]: "copy", [B]: "copy" });
    });
    expect(await collect(gcOnly, A, s.name)).toEqual(done);
    expect(await copyStates(s)).toEqual({ [A]: "absent", [B]: "copy" });
  });

  it("keeps a copy whose owner's kind is not served on the owner's cluster", async () => {
    const name = `cm-${suffix()}`;
    const widget = { apiVersion: "example.com/v1", kind: "Widget", metadata: { name, namespace: NS, uid: randomUUID() } };
    await sealedCopyOf(widget, SOURCE, A, name);
    expect(await collect(gcOnly, A, name)).toEqual({ recheckInMs: UNREACHABLE_RECHECK_MS });
    expect(await read(A, name)).toBeDefined();
  });

  it("holds an owner's deletion while a target is unreachable, settles the other target, and finishes when it is back (over HTTP)", async () => {
    const s = await ownerWithCopies(withFinalizer);
    const fn = await startFunction(replicator, withFinalizer);
    try {
      const deliver = async () => post(fn.url, objectEvent({ cluster: SOURCE, object: (await read(SOURCE, s.name))!, verb: "update" }));
      await whileStopped(B, async () => {
        await deleteAsUser(s.name);
        expect(await deliver()).toEqual({ status: 204, recheckAfterMs: String(UNREACHABLE_RECHECK_MS) });
        expect(await ownerState(s.name)).toBe(`deleting, held by [${CopiesFinalizer}]`);
        expect(await read(A, s.name)).toBeUndefined(); // deleted outright, not half-way
        expect(await deliver()).toEqual({ status: 204, recheckAfterMs: String(UNREACHABLE_RECHECK_MS) });
      });
      expect(await copyStates(s, [B])).toEqual({ [B]: "copy" }); // nothing touched it during the partition
      expect(await deliver()).toEqual({ status: 204, recheckAfterMs: null });
      expect(await ownerState(s.name)).toBe("absent");
      expect(await copyStates(s)).toEqual({ [A]: "absent", [B]: "absent" });
    } finally {
      await fn.close();
    }
  });

  it("keeps orphaning across a partition although Kubernetes' orphan finalizer is gone by then", async () => {
    const s = await ownerWithCopies(withFinalizer);
    await whileStopped(B, async () => {
      await deleteAsUser(s.name, "Orphan");
      expect(await replicate(withFinalizer, s.name)).toEqual({ recheckInMs: UNREACHABLE_RECHECK_MS });
      expect(await copyStates(s, [A])).toEqual({ [A]: "released" });
      expect(await ownerState(s.name)).toBe(`deleting, held by [${CopiesFinalizer}, orphan]`);
      // what the source's garbage collector does within milliseconds once its own dependents are orphaned
      await admin(SOURCE).patch(CM, s.name, { metadata: { finalizers: [CopiesFinalizer] } }, { namespace: NS });
    });
    expect(await replicate(withFinalizer, s.name)).toEqual(done);
    expect(await copyStates(s)).toEqual({ [A]: "released", [B]: "released" });
    expect(await ownerState(s.name)).toBe("absent");
  });
});

// Binary-mode POST as the ApiServerSource adapter sends it; the answer's status and recheck header.
async function post(url: string, ce: Record<string, unknown>): Promise<{ status: number; recheckAfterMs: string | null }> {
  const headers: Record<string, string> = { "content-type": "application/json" };
  for (const [k, v] of Object.entries(ce)) if (k !== "data" && k !== "datacontenttype") headers[`ce-${k}`] = String(v);
  const res = await fetch(url, { method: "POST", headers, body: JSON.stringify(ce.data) });
  await res.text();
  return { status: res.status, recheckAfterMs: res.headers.get("x-recheck-after-ms") };
}

// A merge patch that replaces all of a copy's marks with `marks`.
function marksPatch(marks: OwnerMarks) {
  const cleared = (keys: readonly string[]) => Object.fromEntries(keys.map((k) => [k, null]));
  return {
    metadata: {
      labels: { ...cleared([OwnedLabel, OwnerHashLabel]), ...marks.labels },
      annotations: { ...cleared(Object.values(OwnerAnnotation)), ...marks.annotations },
    },
  };
}

// A log that keeps what was logged, to see what the library said about an object it left alone.
function recordingIo(io: Io<Config>): { io: Io<Config>; warnings: { fields: Record<string, unknown>; msg: string }[] } {
  const warnings: { fields: Record<string, unknown>; msg: string }[] = [];
  const log = { ...io.log, warn: (fields: object, msg: string) => void warnings.push({ fields: fields as Record<string, unknown>, msg }) };
  return { io: { ...io, log }, warnings };
}
const FOREIGN = "left alone: forged or foreign cross-cluster owner marks";

describe("malformed marks", () => {
  // Tampered owner annotations no longer match the seal: the object is not the function's copy any
  // more, so it is kept (a leak the tamperer chose, never a deletion). A bad label on a sealed copy is
  // a defect the library reports.
  const rows: { name: string; corrupt(marks: OwnerMarks): OwnerMarks; reports?: RegExp }[] = [
    {
      name: "an owner uid that is not a uid",
      corrupt: (m) => ({ ...m, annotations: { ...m.annotations, [OwnerAnnotation.uid]: "not-a-uid" } }),
    },
    {
      name: "the labels without the annotations",
      corrupt: (m) => ({ ...m, annotations: {} }),
    },
    {
      name: "an owner name edited so it no longer matches the hash label",
      corrupt: (m) => ({ ...m, annotations: { ...m.annotations, [OwnerAnnotation.name]: "someone-else" } }),
    },
    {
      name: "an owned label that is not \"true\" on a sealed copy",
      corrupt: (m) => ({ ...m, labels: { ...m.labels, [OwnedLabel]: "yes" } }),
      reports: /label multicluster\.ocm-functions\.io\/owned is "yes", not "true"/,
    },
  ];

  it.each(rows)("deletes nothing for $name, and says why", async ({ corrupt, reports }) => {
    const s = await ownerWithCopies(gcOnly);
    const copy = (await read(A, s.name))!;
    const sealed = sealedMarks(SEAL, s.owner, SOURCE, { cluster: A, resource: CM, namespace: NS, name: s.name }, copy.metadata.uid!);
    await admin(A).patch(CM, s.name, marksPatch(corrupt(sealed)), { namespace: NS });
    await admin(SOURCE).delete(CM, s.name, NS); // with valid marks, the copy would now be collected
    const { io, warnings } = recordingIo(gcOnly);
    const result = await collectOrphanedCopy(io, { cluster: A, resource: CM, namespace: NS, name: s.name }, SEAL).catch((e: unknown) => e);
    if (reports) {
      expect(result).toBeInstanceOf(MalformedOwnerMarks);
      expect((result as Error).message).toMatch(new RegExp(`ConfigMap default/${s.name} on target-a carries malformed cross-cluster owner marks`));
      expect((result as Error).message).toMatch(reports);
    } else {
      expect(result).toEqual(done);
      expect(warnings.map((w) => w.msg)).toEqual([FOREIGN]);
    }
    expect((await read(A, s.name))?.metadata.uid).toBe(copy.metadata.uid);
  });

  it("reports a copy whose owner is on a cluster it has no credentials for, and deletes nothing", async () => {
    const name = `cm-${suffix()}`;
    const elsewhere = { apiVersion: "v1", kind: "ConfigMap", metadata: { name, namespace: NS, uid: randomUUID() } };
    await sealedCopyOf(elsewhere, "elsewhere", A, name);
    await expect(collect(gcOnly, A, name)).rejects.toThrow(/no credentials for cluster elsewhere/);
    expect(await read(A, name)).toBeDefined();
  });

  it("finalizes an owner past a copy whose seal was tampered with, which it leaves alone", async () => {
    const s = await ownerWithCopies(withFinalizer);
    const tampered = (await admin(B).patch<ConfigMap>(CM, s.name, { metadata: { annotations: { [SealAnnotation]: "v1.tampered" } } }, { namespace: NS })).metadata.uid;
    await deleteAsUser(s.name);
    const { io, warnings } = recordingIo(withFinalizer);
    expect(await reconcileKey(replicator, io, { cluster: SOURCE, namespace: NS, name: s.name })).toEqual(done);
    expect(await ownerState(s.name)).toBe("absent");
    expect(await copyStates(s, [A])).toEqual({ [A]: "absent" });
    expect((await read(B, s.name))?.metadata.uid).toBe(tampered); // not this function's copy any more: kept
    expect(warnings.map((w) => [w.msg, (w.fields.object as { cluster: string }).cluster])).toEqual([[FOREIGN, B]]);
  });

  it("reports a delete-policy that is neither Orphan nor Delete, and deletes nothing", async () => {
    const s = await ownerWithCopies(withFinalizer);
    await admin(SOURCE).patch(CM, s.name, { metadata: { annotations: { [DeletePolicyAnnotation]: "orphan" } } }, { namespace: NS });
    await deleteAsUser(s.name);
    await expect(replicate(withFinalizer, s.name)).rejects.toThrow(/annotation multicluster\.ocm-functions\.io\/delete-policy is "orphan", not "Orphan" or "Delete"/);
    expect(await copyStates(s)).toEqual({ [A]: "copy", [B]: "copy" });
    expect(await ownerState(s.name)).toBe(`deleting, held by [${CopiesFinalizer}]`);
    await admin(SOURCE).patch(CM, s.name, { metadata: { finalizers: null } }, { namespace: NS });
  });
});

// The holes of issue 23: marks are labels and annotations, which whoever may patch an object can
// write. Only the function's seal, over the object's own uid, makes an object its copy.
describe("marks without the function's seal", () => {
  // An object on target-a its owner (a ConfigMap on the admin's side) never had copied.
  async function victim(): Promise<ConfigMap> {
    return admin(A).create<ConfigMap>(CM, { metadata: { name: `victim-${suffix()}`, namespace: NS }, data: { mine: "yes" } });
  }

  it("never deletes a ConfigMap that a user who may patch but not delete ConfigMaps marked as the copy of an absent owner", async () => {
    const v = await victim();
    const absent = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: v.metadata.name, namespace: NS, uid: randomUUID() } };
    // the patcher cannot delete it...
    await expect(patcher.delete(CM, v.metadata.name!, NS)).rejects.toSatisfy((e: unknown) => classifyError(e) === "forbidden");
    // ...so marks it, a made-up seal too, and waits for the function
    const marks = ownedBy(absent, SOURCE);
    await patcher.patch(CM, v.metadata.name!, marksPatch({ ...marks, annotations: { ...marks.annotations, [SealAnnotation]: `v1.${randomBytes(32).toString("base64url")}` } }), { namespace: NS });
    const { io, warnings } = recordingIo(gcOnly);
    expect(await reconcileKey(replicator, io, { cluster: A, namespace: NS, name: v.metadata.name! })).toEqual(done);
    expect((await read(A, v.metadata.name!))?.metadata.uid).toBe(v.metadata.uid);
    expect(warnings.map((w) => w.msg)).toEqual([FOREIGN]);
  });

  it("collects the genuine copies of a gone owner but keeps the unrelated object its real marks were copied onto", async () => {
    const s = await ownerWithCopies(gcOnly);
    const v = await victim();
    const genuine = (await patcher.get<ConfigMap>(CM, s.name, NS))!;
    // every mark of the real copy, its seal included, written onto the victim by the patcher
    await patcher.patch(CM, v.metadata.name!, { metadata: { labels: genuine.metadata.labels, annotations: genuine.metadata.annotations } }, { namespace: NS });
    await admin(SOURCE).delete(CM, s.name, NS);
    expect(await collectBoth(s)).toEqual([done, done]);
    expect(await collect(gcOnly, A, v.metadata.name!)).toEqual(done);
    expect(await copyStates(s)).toEqual({ [A]: "absent", [B]: "absent" });
    expect((await read(A, v.metadata.name!))?.metadata.uid).toBe(v.metadata.uid);
  });

  it("deletes an owner's genuine copies when it is deleted but neither deletes nor releases the unrelated object its real marks were copied onto", async () => {
    const s = await ownerWithCopies(withFinalizer);
    const v = await victim();
    const genuine = (await patcher.get<ConfigMap>(CM, s.name, NS))!;
    await patcher.patch(CM, v.metadata.name!, { metadata: { labels: genuine.metadata.labels, annotations: genuine.metadata.annotations } }, { namespace: NS });
    await deleteAsUser(s.name);
    expect(await replicate(withFinalizer, s.name)).toEqual(done); // the victim does not hold the owner either
    expect(await ownerState(s.name)).toBe("absent");
    expect(await copyStates(s)).toEqual({ [A]: "absent", [B]: "absent" });
    const kept = (await read(A, v.metadata.name!))!;
    expect(kept.metadata.uid).toBe(v.metadata.uid);
    expect(kept.metadata.annotations).toMatchObject(genuine.metadata.annotations as Record<string, string>); // not released either
  });

  it("releases an owner's genuine copies on Orphan but leaves the marks copied onto an unrelated object alone", async () => {
    const s = await ownerWithCopies(withFinalizer);
    const v = await victim();
    const genuine = (await patcher.get<ConfigMap>(CM, s.name, NS))!;
    await patcher.patch(CM, v.metadata.name!, { metadata: { labels: genuine.metadata.labels, annotations: genuine.metadata.annotations } }, { namespace: NS });
    expect(await deleteOwner(withFinalizer, ownerKey(s.name), "Orphan")).toBe(true);
    expect(await replicate(withFinalizer, s.name)).toEqual(done);
    expect(await copyStates(s)).toEqual({ [A]: "released", [B]: "released" });
    expect(((await read(A, s.name))?.metadata.annotations as Record<string, string> | undefined)?.[SealAnnotation]).toBeUndefined();
    expect((await read(A, v.metadata.name!))?.metadata.annotations).toMatchObject(genuine.metadata.annotations as Record<string, string>);
  });

  it("refuses a seal key that is not base64 or shorter than 32 bytes", () => {
    expect(() => CopySeal.fromBase64("not base64!")).toThrow(/the copy seal key is not base64/);
    expect(() => CopySeal.fromBase64(randomBytes(16).toString("base64"))).toThrow(/the copy seal key has 16 bytes, not at least 32/);
  });

  it("seals one object only: another uid, name or cluster under the same marks does not match", () => {
    const owner = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "o", namespace: NS, uid: randomUUID() } };
    const place = { cluster: A, resource: CM, namespace: NS, name: "c" };
    const uid = randomUUID();
    const copy = (at: typeof place, u: string, marks: OwnerMarks) => ({ kind: "ConfigMap", metadata: { name: at.name, namespace: NS, uid: u, ...marks } });
    const marks = sealedMarks(SEAL, owner, SOURCE, place, uid);
    expect(sealedOwnerOf(SEAL, copy(place, uid, marks), place)).toMatchObject({ uid: owner.metadata.uid });
    expect(sealedOwnerOf(SEAL, copy(place, randomUUID(), marks), place)).toBeUndefined();
    expect(sealedOwnerOf(SEAL, copy({ ...place, name: "d" }, uid, marks), { ...place, name: "d" })).toBeUndefined();
    expect(sealedOwnerOf(SEAL, copy(place, uid, marks), { ...place, cluster: B })).toBeUndefined();
    expect(sealedOwnerOf(CopySeal.fromBase64(randomBytes(32).toString("base64")), copy(place, uid, marks), place)).toBeUndefined();
  });
});
