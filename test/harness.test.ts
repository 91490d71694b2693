// The harness's error path against a real API server: every key is settled, each failure is decided once
// (retry, permission missing, terminal) and logged on its own line carrying the CloudEvent id, the
// function and the key; one answer comes by the rule retry > permission > error > terminal > success.
// A call the authorizer refused is tried again briefly (permissions granted by another reconciler
// arrive a moment late), then answered 500 as a permission missing, named with verb and resource; a
// call admission denied (a ValidatingAdmissionPolicy, a namespace being terminated) is terminal at once.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { LocalCluster } from "../dev/control-plane/clusters.ts";
import { startHub, type Hub } from "./support/fixtures.ts";
import { ClusterRoleBindingResource, ClusterRoleResource, ConfigMapResource, NamespaceResource } from "../shared/api/kube.ts";
import { done, handleEvent, type FunctionSpec, type Io, type Key } from "../shared/harness.ts";
import { KubeClient, resourcePath } from "../shared/kube/client.ts";
import { KubeError } from "../shared/kube/errors.ts";
import { clientsFromKubeconfigs } from "../shared/kube/clients.ts";
import { systemClock } from "../shared/clock.ts";
import { objectEvent, tickEvent } from "./support/functions.ts";
import { eventually } from "./support/eventually.ts";

const HUB = "hub";
const suffix = () => Math.random().toString(36).slice(2, 7);

let plane: Hub;
let hub: LocalCluster;
let admin: KubeClient;

// A ValidatingAdmissionPolicy of this test's own: no ConfigMap named denied-* may be created. It
// answers 403 Forbidden as RBAC does; only the Status tells the two apart.
const POLICY = "test-no-denied-configmaps";
const POLICY_MESSAGE = "ConfigMaps named denied-* are refused by this test's policy";
const TERMINATING = `leaving-${suffix()}`; // a namespace held in Terminating by a finalizer

beforeAll(async () => {
  plane = await startHub(HUB, { crds: false });
  ({ cluster: hub, admin } = plane);
  const vap = { group: "admissionregistration.k8s.io", version: "v1", namespaced: false } as const;
  await admin.create({ ...vap, kind: "ValidatingAdmissionPolicy", plural: "validatingadmissionpolicies" }, {
    metadata: { name: POLICY },
    spec: {
      failurePolicy: "Fail",
      matchConstraints: { resourceRules: [{ apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"] }] },
      // Forbidden, as most of manifests/hub/admission-policies.yaml's rules answer (the default is Invalid, a 422)
      validations: [{ expression: "!object.metadata.name.startsWith('denied-')", message: POLICY_MESSAGE, reason: "Forbidden" }],
    },
  });
  await admin.create({ ...vap, kind: "ValidatingAdmissionPolicyBinding", plural: "validatingadmissionpolicybindings" }, {
    metadata: { name: POLICY },
    spec: { policyName: POLICY, validationActions: ["Deny"] },
  });
  // policies load asynchronously: in force once a dry run is refused with the policy's message
  await eventually(async () => {
    const refused = await admin
      .request("POST", `${resourcePath(ConfigMapResource, { namespace: "default" })}?dryRun=All`, { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "denied-probe" } })
      .then(() => false, (err: unknown) => err instanceof KubeError && err.message.includes(POLICY_MESSAGE));
    if (!refused) throw new Error(`${POLICY} not in force yet`);
  });
  await admin.create(NamespaceResource, { metadata: { name: TERMINATING } });
  await admin.create(ConfigMapResource, { metadata: { name: "held", namespace: TERMINATING, finalizers: ["test.ocm-functions.io/hold"] } });
  await admin.delete(NamespaceResource, TERMINATING);
});

afterAll(async () => {
  await admin?.patch(ConfigMapResource, "held", { metadata: { finalizers: null } }, { namespace: TERMINATING }).catch(() => {});
  await plane?.stop();
});

type Logged = { level: string; msg: string; [k: string]: unknown };

// An identity with no rights at all, and a log that keeps what the harness says.
async function ioFor(user: string): Promise<{ io: Io<null>; lines: Logged[] }> {
  const lines: Logged[] = [];
  const write = (level: string) => (fields: object, msg: string) => lines.push({ level, msg, ...fields });
  const io: Io<null> = { clock: systemClock, config: null, log: { info: write("info"), warn: write("warn"), error: write("error") }, cluster: clientsFromKubeconfigs({ [HUB]: await hub.kubeconfigFor({ user }) }) };
  return { io, lines };
}

// A function that lists ConfigMaps in the key's namespace, on a tick, for the given keys.
function lister(keys: Key[], extra: (key: Key) => Promise<void> = async () => {}): FunctionSpec<null> {
  return {
    name: "lister",
    keys: () => keys,
    async reconcile(io, key) {
      await extra(key);
      await io.cluster(HUB).list(ConfigMapResource, { namespace: key.namespace });
      return done;
    },
  };
}

// A function that creates a ConfigMap named after the key, in the key's namespace.
function creator(keys: Key[]): FunctionSpec<null> {
  return {
    name: "creator",
    keys: () => keys,
    async reconcile(io, key) {
      await io.cluster(HUB).create(ConfigMapResource, { metadata: { name: key.name, namespace: key.namespace } });
      return done;
    },
  };
}

async function grantList(user: string, verbs: string[] = ["list"]): Promise<void> {
  const name = `test:${verbs.join("-")}-configmaps:${user}`;
  await admin.create(ClusterRoleResource, { metadata: { name }, rules: [{ apiGroups: [""], resources: ["configmaps"], verbs }] });
  await admin.create(ClusterRoleBindingResource, {
    metadata: { name },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name },
    subjects: [{ kind: "User", apiGroup: "rbac.authorization.k8s.io", name: user }],
  });
}

const PERMISSION_MISSING = "permission missing: the identity may not make a call it needs";
const TERMINAL = "failed for good: the request is refused as it stands; no retry";

// Until the authorizer sees a new binding, a refusal could be RBAC's and not admission's.
async function untilMayCreate(user: string): Promise<void> {
  const client = KubeClient.fromKubeconfig(await hub.kubeconfigFor({ user }));
  try {
    await eventually(() => client.request("POST", `${resourcePath(ConfigMapResource, { namespace: "default" })}?dryRun=All`, { apiVersion: "v1", kind: "ConfigMap", metadata: { name: `probe-${suffix()}` } }));
  } finally {
    client.close();
  }
}

describe("a permission that never comes", () => {
  it("is answered 500 at once, after one run with no wait, and logged once as a permission missing naming the user, verb and resource, with the CloudEvent id, function and key", async () => {
    const user = `nobody-${suffix()}`;
    const { io, lines } = await ioFor(user);
    const tick = tickEvent(HUB);
    const key = { cluster: HUB, namespace: "default", name: "x" };
    let runs = 0;
    const reply = await handleEvent(lister([key], async () => void runs++), io, tick);
    expect(reply.statusCode).toBe(500);
    expect(reply.body).toBe(`permission missing: ${user} may not list configmaps in default`);
    const missing = lines.filter((l) => l.msg === PERMISSION_MISSING);
    expect(missing).toEqual([expect.objectContaining({ level: "error", decision: "permission", ce: tick.id, fn: "lister", key, missing: { user, verb: "list", resource: "configmaps", group: "", namespace: "default" } })]);
    expect(runs).toBe(1);
  });
});

describe("an admission denial", () => {
  it("by a real ValidatingAdmissionPolicy is terminal: answered 422 at once, with no wait and no re-run, and logged once with the policy's message, the CloudEvent id, function and key", async () => {
    const user = `denied-${suffix()}`;
    await grantList(user, ["create"]);
    await untilMayCreate(user);
    const { io, lines } = await ioFor(user);
    const key = { cluster: HUB, namespace: "default", name: `denied-${suffix()}` };
    const tick = tickEvent(HUB);
    let runs = 0;
    const spec = creator([key]);
    const counted: FunctionSpec<null> = { ...spec, reconcile: (io, k) => (runs++, spec.reconcile(io, k)) };
    const reply = await handleEvent(counted, io, tick);
    expect(reply.statusCode, reply.body).toBe(422);
    expect(reply.body).toContain(`ValidatingAdmissionPolicy '${POLICY}'`);
    expect(reply.body).toContain(POLICY_MESSAGE);
    expect(runs).toBe(1);
    const failed = lines.filter((l) => l.level !== "info");
    expect(failed).toEqual([expect.objectContaining({ msg: TERMINAL, level: "warn", decision: "terminal", class: "denied", ce: tick.id, fn: "creator", key, error: expect.stringContaining(POLICY_MESSAGE) })]);
    // every line of the delivery carries its id and the function
    expect(lines.length).toBeGreaterThan(0);
    for (const l of lines) expect([l.ce, l.fn]).toEqual([tick.id, "creator"]);
  });

  it("of a write into a namespace being terminated is terminal: answered 422 at once and logged once with the API server's message", async () => {
    const user = `late-ns-${suffix()}`;
    await grantList(user, ["create"]);
    await untilMayCreate(user);
    const { io, lines } = await ioFor(user);
    const key = { cluster: HUB, namespace: TERMINATING, name: `cm-${suffix()}` };
    const tick = tickEvent(HUB);
    const reply = await handleEvent(creator([key]), io, tick);
    expect(reply.statusCode, reply.body).toBe(422);
    expect(reply.body).toContain("because it is being terminated");
    expect(lines.filter((l) => l.level !== "info")).toEqual([expect.objectContaining({ msg: TERMINAL, decision: "terminal", class: "denied", ce: tick.id, key, error: expect.stringContaining("being terminated") })]);
  });

  it("is not mistaken for one when the authorizer refused the same write (control: permission missing, 500)", async () => {
    const user = `no-create-${suffix()}`;
    const { io, lines } = await ioFor(user);
    const key = { cluster: HUB, namespace: "default", name: `denied-${suffix()}` };
    const reply = await handleEvent(creator([key]), io, tickEvent(HUB));
    expect(reply.statusCode).toBe(500);
    expect(lines.filter((l) => l.level !== "info")).toEqual([expect.objectContaining({ decision: "permission", missing: { user, verb: "create", resource: "configmaps", group: "", namespace: "default" } })]);
  });
});

describe("a permission that arrives a moment late", () => {
  it("is not waited for in the request: the delivery before the grant is answered 500 naming it, the source's next delivery after it 204", async () => {
    const user = `late-${suffix()}`;
    const { io } = await ioFor(user);
    const spec = lister([{ cluster: HUB, namespace: "default", name: "x" }]);
    const before = await handleEvent(spec, io, tickEvent(HUB));
    expect(before.statusCode).toBe(500);
    expect(before.body).toBe(`permission missing: ${user} may not list configmaps in default`);
    await grantList(user);
    // the source's retry, once the authorizer has the grant
    await eventually(async () => expect((await handleEvent(spec, io, tickEvent(HUB))).statusCode).toBe(204));
  });
});

describe("several keys", () => {
  it("settles every key, logs each failure, then answers 503 when any key needs a retry, though another lacks a permission", async () => {
    const user = `mixed-${suffix()}`;
    const { io, lines } = await ioFor(user);
    const reached: string[] = [];
    const spec: FunctionSpec<null> = {
      name: "mixed",
      keys: () => ["defect", "busy", "fine"].map((name) => ({ cluster: HUB, namespace: "default", name })),
      async reconcile(io, key) {
        reached.push(key.name);
        if (key.name === "busy") throw new KubeError(429, "TooManyRequests", "the server is busy");
        if (key.name === "defect") await io.cluster(HUB).list(ConfigMapResource, { namespace: "default" });
        return done;
      },
    };
    const tick = tickEvent(HUB);
    const reply = await handleEvent(spec, io, tick);
    expect(reply.statusCode).toBe(503);
    expect(new Set(reached)).toEqual(new Set(["defect", "busy", "fine"]));
    expect(lines.filter((l) => l.msg === PERMISSION_MISSING).map((l) => (l.key as Key).name)).toEqual(["defect"]);
    expect(lines.filter((l) => l.level !== "info" && l.msg !== PERMISSION_MISSING).map((l) => [(l.key as Key).name, l.decision, l.ce])).toEqual([["busy", "retry", tick.id]]);
  });

  it("answers the permission's 500 when no key needs a retry (control)", async () => {
    const user = `only-${suffix()}`;
    const { io } = await ioFor(user);
    const reply = await handleEvent(lister(["a", "b"].map((name) => ({ cluster: HUB, namespace: "default", name }))), io, tickEvent(HUB));
    expect(reply.statusCode).toBe(500);
  });

  it("logs both of two keys that fail differently (an admission denial, a permission missing) and answers the permission's 500: permission beats terminal", async () => {
    const user = `two-${suffix()}`;
    await grantList(user, ["create"]);
    await untilMayCreate(user);
    const { io, lines } = await ioFor(user);
    const denied = { cluster: HUB, namespace: "default", name: `denied-${suffix()}` };
    const refused = { cluster: HUB, namespace: "default", name: `listed-${suffix()}` };
    const spec: FunctionSpec<null> = {
      name: "two-ways",
      keys: () => [denied, refused],
      async reconcile(io, key) {
        if (key === refused) await io.cluster(HUB).list(ConfigMapResource, { namespace: "default" }); // list: not granted
        else await io.cluster(HUB).create(ConfigMapResource, { metadata: { name: key.name, namespace: key.namespace } });
        return done;
      },
    };
    const tick = tickEvent(HUB);
    const reply = await handleEvent(spec, io, tick);
    expect(reply.statusCode, reply.body).toBe(500);
    expect(reply.body).toBe(`permission missing: ${user} may not list configmaps in default`);
    const failed = lines.filter((l) => l.level !== "info").map((l) => [(l.key as Key).name, l.decision, l.ce, l.fn]);
    expect(failed).toEqual([
      [denied.name, "terminal", tick.id, "two-ways"],
      [refused.name, "permission", tick.id, "two-ways"],
    ]);
  });

  it("answers 422 when every failure is terminal, and 204 resumes once nothing fails (control)", async () => {
    const user = `all-denied-${suffix()}`;
    await grantList(user, ["create"]);
    await untilMayCreate(user);
    const { io } = await ioFor(user);
    const denied = [1, 2].map((n) => ({ cluster: HUB, namespace: "default", name: `denied-${n}-${suffix()}` }));
    expect((await handleEvent(creator(denied), io, tickEvent(HUB))).statusCode).toBe(422);
    expect((await handleEvent(creator([{ cluster: HUB, namespace: "default", name: `fine-${suffix()}` }]), io, tickEvent(HUB))).statusCode).toBe(204);
  });
});

// Any object event: the lister's keys do not depend on it.
const thing = () => objectEvent({ cluster: HUB, object: { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "thing", namespace: "default" } } });

describe("one key at a time", () => {
  it("never runs a key twice at once, and folds the events that come meanwhile into one more run", async () => {
    const user = `turns-${suffix()}`;
    await grantList(user);
    const { io } = await ioFor(user);
    let running = 0;
    let most = 0;
    const runs: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const spec = lister([{ cluster: HUB, namespace: "default", name: "same" }], async () => {
      most = Math.max(most, ++running);
      runs.push(runs.length === 0 ? "first" : "after");
      if (runs.length === 1) await gate; // the first run holds until every other event has arrived
      running--;
    });
    const first = handleEvent(spec, io, thing());
    await new Promise((resolve) => setTimeout(resolve, 50));
    const meanwhile = Array.from({ length: 4 }, () => handleEvent(spec, io, thing()));
    release();
    const replies = await Promise.all([first, ...meanwhile]);
    expect(replies.map((r) => r.statusCode)).toEqual([204, 204, 204, 204, 204]);
    expect(most).toBe(1);
    expect(runs).toEqual(["first", "after"]);
  });

  it("joins a tick that comes during a sweep to that sweep: no second sweep, the same answer", async () => {
    const user = `sweeps-${suffix()}`;
    await grantList(user);
    const { io, lines } = await ioFor(user);
    const runs: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const spec = lister(["a", "b"].map((name) => ({ cluster: HUB, namespace: "default", name })), async (key) => {
      runs.push(key.name);
      if (runs.length === 1) await gate;
    });
    const first = handleEvent(spec, io, tickEvent(HUB));
    await new Promise((resolve) => setTimeout(resolve, 50));
    const again = Array.from({ length: 3 }, () => handleEvent(spec, io, tickEvent(HUB)));
    release();
    const replies = await Promise.all([first, ...again]);
    expect(replies.map((r) => r.statusCode)).toEqual([204, 204, 204, 204]);
    expect(runs).toEqual(["a", "b"]);
    expect(lines.filter((l) => l.msg.startsWith("tick: joined"))).toHaveLength(3);
    // control: once that sweep is over, the next tick sweeps again
    expect((await handleEvent(spec, io, tickEvent(HUB))).statusCode).toBe(204);
    expect(runs).toEqual(["a", "b", "a", "b"]);
  });

  it("runs different keys side by side (control)", async () => {
    const user = `side-${suffix()}`;
    await grantList(user);
    const { io } = await ioFor(user);
    let running = 0;
    let most = 0;
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const spec = (name: string) =>
      lister([{ cluster: HUB, namespace: "default", name }], async () => {
        most = Math.max(most, ++running);
        if (name === "a") await gate;
        running--;
      });
    const a = handleEvent(spec("a"), io, tickEvent(HUB));
    await new Promise((resolve) => setTimeout(resolve, 50));
    const b = await handleEvent(spec("b"), io, tickEvent(HUB));
    release();
    expect([(await a).statusCode, b.statusCode]).toEqual([204, 204]);
    expect(most).toBe(2);
  });
});
