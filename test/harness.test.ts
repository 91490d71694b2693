// The harness's error path against a real API server: every key is settled, then one answer comes from
// the failures' classes; a refused call is tried again briefly (permissions granted by another
// reconciler arrive a moment late), then answered 500 and logged as an RBAC defect that names the
// missing verb and resource.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { LocalCluster } from "../dev/control-plane/clusters.ts";
import { startHub, type Hub } from "./support/fixtures.ts";
import { ClusterRoleBindingResource, ClusterRoleResource, ConfigMapResource } from "../shared/api/kube.ts";
import { done, handleEvent, type FunctionSpec, type Io, type Key } from "../shared/harness.ts";
import { KubeClient } from "../shared/kube/client.ts";
import { KubeError } from "../shared/kube/errors.ts";
import { clientsFromKubeconfigs } from "../shared/kube/clients.ts";
import { systemClock } from "../shared/clock.ts";
import { objectEvent, tickEvent } from "./support/functions.ts";

const HUB = "hub";
const suffix = () => Math.random().toString(36).slice(2, 7);

let plane: Hub;
let hub: LocalCluster;
let admin: KubeClient;

beforeAll(async () => {
  plane = await startHub(HUB, { crds: false });
  ({ cluster: hub, admin } = plane);
});

afterAll(() => plane?.stop());

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

async function grantList(user: string): Promise<void> {
  const name = `test:list-configmaps:${user}`;
  await admin.create(ClusterRoleResource, { metadata: { name }, rules: [{ apiGroups: [""], resources: ["configmaps"], verbs: ["list"] }] });
  await admin.create(ClusterRoleBindingResource, {
    metadata: { name },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name },
    subjects: [{ kind: "User", apiGroup: "rbac.authorization.k8s.io", name: user }],
  });
}

describe("a permission that never comes", () => {
  it("is answered 500 and logged once as an RBAC defect naming the user, verb and resource", async () => {
    const user = `nobody-${suffix()}`;
    const { io, lines } = await ioFor(user);
    const reply = await handleEvent(lister([{ cluster: HUB, namespace: "default", name: "x" }]), io, tickEvent(HUB));
    expect(reply.statusCode).toBe(500);
    expect(reply.body).toBe(`RBAC defect: ${user} may not list configmaps in default`);
    const defects = lines.filter((l) => l.msg === "RBAC defect: a permission is missing");
    expect(defects).toEqual([expect.objectContaining({ level: "error", missing: { user, verb: "list", resource: "configmaps", group: "", namespace: "default" } })]);
    // tried again before giving up (control: the retries happened)
    expect(lines.filter((l) => l.msg === "forbidden: waiting for the permission to arrive")).toHaveLength(2);
  });
});

describe("a permission that arrives a moment late", () => {
  it("is waited for, and the reconcile succeeds (204)", async () => {
    const user = `late-${suffix()}`;
    const { io, lines } = await ioFor(user);
    let granted = false;
    const spec = lister([{ cluster: HUB, namespace: "default", name: "x" }], async () => {
      if (!granted) {
        granted = true;
        // granted after the first refusal, as acceptance grants a cluster's agent
        setTimeout(() => void grantList(user), 50);
      }
    });
    const reply = await handleEvent(spec, io, tickEvent(HUB));
    expect(reply.statusCode, reply.body).toBe(204);
    expect(lines.some((l) => l.msg === "forbidden: waiting for the permission to arrive")).toBe(true);
    expect(lines.some((l) => l.msg.startsWith("RBAC defect"))).toBe(false);
  });
});

describe("several keys", () => {
  it("settles every key, then answers 503 when any key needs a retry, though another is a defect", async () => {
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
    const reply = await handleEvent(spec, io, tickEvent(HUB));
    expect(reply.statusCode).toBe(503);
    expect(new Set(reached)).toEqual(new Set(["defect", "busy", "fine"]));
    expect(lines.filter((l) => l.level === "error" && l.msg.startsWith("RBAC defect")).map((l) => (l.key as Key).name)).toEqual(["defect"]);
    expect(lines.filter((l) => l.msg === "reconcile failed").map((l) => (l.key as Key).name)).toEqual(["busy"]);
  });

  it("answers the defect's 500 when no key needs a retry (control)", async () => {
    const user = `only-${suffix()}`;
    const { io } = await ioFor(user);
    const reply = await handleEvent(lister(["a", "b"].map((name) => ({ cluster: HUB, namespace: "default", name }))), io, tickEvent(HUB));
    expect(reply.statusCode).toBe(500);
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
