// shared/kube/reflector.ts, the one list-then-watch loop of the relay, the heartbeat sidecar and the
// spoke simulator (issue 25 item 4), against a real kube-apiserver and etcd. Every reflector runs as a
// minted user holding only list and watch in one namespace (or nothing at all), never as cluster admin.
import { describe, it, expect, beforeAll, afterAll, afterEach } from "vitest";
import { startClusters, type LocalCluster, type LocalClusters } from "../dev/control-plane/clusters.ts";
import { startApiserver, stopApiserver } from "../dev/control-plane/restart.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { ConfigMapResource, NamespaceResource, RoleBindingResource, RoleResource } from "../shared/api/kube.ts";
import { startReflector, type Reflector, type ReflectorChange, type ReflectorOptions } from "../shared/kube/reflector.ts";
import { eventually } from "./support/eventually.ts";
import { startCuttableProxy } from "./support/tcp-proxy.ts";

const suffix = () => Math.random().toString(36).slice(2, 8);

let local: LocalClusters;
let hub: LocalCluster;
let admin: KubeClient;

beforeAll(async () => {
  local = await startClusters({ names: ["hub"], crds: false, controllers: false });
  hub = local.get("hub");
  admin = KubeClient.fromKubeconfig(hub.adminKubeconfig);
});
afterAll(async () => {
  admin?.close();
  await local?.stop();
});

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((f) => f()));
});

type LogLine = { level: string; msg: string; [k: string]: unknown };
function memoryLog() {
  const lines: LogLine[] = [];
  const write = (level: string) => (fields: object, msg: string) => void lines.push({ level, msg, ...fields });
  return { lines, info: write("info"), warn: write("warn"), error: write("error") };
}

async function namespace(): Promise<string> {
  const name = `reflect-${suffix()}`;
  await admin.create(NamespaceResource, { metadata: { name } });
  return name;
}

// A user holding list and watch on ConfigMaps in ns, and nothing else; grant: false mints one with nothing.
async function watcher(ns: string, o: { grant?: boolean; server?: string } = {}): Promise<{ client: KubeClient; grant(): Promise<void> }> {
  const user = `reflector-${suffix()}`;
  const grant = async () => {
    const metadata = { name: user, namespace: ns };
    await admin.create(RoleResource, { metadata, rules: [{ apiGroups: [""], resources: ["configmaps"], verbs: ["list", "watch"] }] });
    await admin.create(RoleBindingResource, { metadata, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: user }, subjects: [{ kind: "User", apiGroup: "rbac.authorization.k8s.io", name: user }] });
  };
  if (o.grant !== false) await grant();
  let kubeconfig = await hub.kubeconfigFor({ user });
  if (o.server) kubeconfig = kubeconfig.replace(hub.url, o.server);
  const client = KubeClient.fromKubeconfig(kubeconfig);
  cleanups.push(async () => client.close());
  return { client, grant };
}

type Watching = Reflector<KubeObject> & { changes: string[]; log: ReturnType<typeof memoryLog> };
function reflect(o: Omit<ReflectorOptions<KubeObject>, "name" | "log" | "resource" | "timeoutSeconds" | "backoff"> & Partial<ReflectorOptions<KubeObject>>): Watching {
  const changes: string[] = [];
  const log = memoryLog();
  const r = startReflector<KubeObject>({
    name: "test",
    resource: ConfigMapResource,
    timeoutSeconds: 60,
    backoff: { initialMs: 20, maxMs: 300 },
    log,
    ...o,
    onChange: (c: ReflectorChange<KubeObject>) => changes.push(`${c.type} ${c.object.metadata.name} ${(c.object as { data?: { v?: string } }).data?.v ?? ""}`.trim()),
  });
  cleanups.push(() => r.stop());
  return Object.assign(r, { changes, log });
}

const configMap = (ns: string, name: string, v = "1") => ({ metadata: { name, namespace: ns }, data: { v } });
const names = (r: Reflector<KubeObject>) => r.objects().map((x) => `${x.metadata.name} ${(x as { data?: { v?: string } }).data?.v}`).sort();


describe("the reflector", () => {
  it("lists what exists, then delivers each add, update and delete as the watch sees it, holding what the server holds", async () => {
    const ns = await namespace();
    await admin.create(ConfigMapResource, configMap(ns, "before"));
    const { client } = await watcher(ns);
    const r = reflect({ client, namespace: ns });
    await r.ready;
    expect(r.changes).toEqual(["ADDED before 1"]);

    await admin.create(ConfigMapResource, configMap(ns, "after"));
    await admin.patch(ConfigMapResource, "before", { data: { v: "2" } }, { namespace: ns });
    await admin.delete(ConfigMapResource, "after", ns);
    await eventually(() => expect(r.changes).toEqual(["ADDED before 1", "ADDED after 1", "MODIFIED before 2", "DELETED after 1"]));
    expect(names(r)).toEqual(["before 2"]);
    expect(r.synced()).toBe(true);
    expect(r.status()).toMatchObject({ state: "watching", lists: 1, objects: 1 });
    expect(r.log.lines.filter((l) => l.level !== "info")).toEqual([]);
  });

  it("after 410 Gone (its resourceVersion too old for a restarted apiserver) lists again and delivers every change it missed, none lost", async () => {
    const ns = await namespace();
    for (const name of ["stays", "changes", "goes"]) await admin.create(ConfigMapResource, configMap(ns, name));
    const port = Number(new URL(hub.url).port);
    const proxy = await startCuttableProxy(port);
    const { client } = await watcher(ns, { server: proxy.url });
    const r = reflect({ client, namespace: ns });
    await r.ready;
    const before = r.status().resourceVersion;

    // Cut off, the reflector misses these writes. The restarted apiserver fills its watch cache from a
    // fresh list, so the reflector's resourceVersion is older than anything it can serve: 410 Gone, as
    // after etcd compaction on a long-lived server.
    await proxy.cut();
    await admin.patch(ConfigMapResource, "changes", { data: { v: "2" } }, { namespace: ns });
    await stopApiserver(hub);
    await startApiserver(hub);
    await admin.delete(ConfigMapResource, "goes", ns);
    await admin.create(ConfigMapResource, configMap(ns, "comes"));
    const restored = await startCuttableProxy(port, Number(new URL(proxy.url).port));
    cleanups.push(() => restored.cut());

    await eventually(() => expect(names(r)).toEqual(["changes 2", "comes 1", "stays 1"]), { timeoutMs: 60_000 });
    expect(r.changes.slice(3).sort()).toEqual(["ADDED comes 1", "DELETED goes 1", "MODIFIED changes 2"]);
    expect(r.log.lines.some((l) => l.msg.startsWith("resourceVersion expired (410)") && l.resourceVersion === before)).toBe(true);
    await eventually(() => expect(r.status()).toMatchObject({ state: "watching", lists: 2 }));

    // and the watch from the new list carries on
    await admin.patch(ConfigMapResource, "stays", { data: { v: "3" } }, { namespace: ns });
    await eventually(() => expect(r.changes.at(-1)).toBe("MODIFIED stays 3"));
  });

  it("retries a refused list with back-off, logs the failure once, and lists once the permission is granted", async () => {
    const ns = await namespace();
    await admin.create(ConfigMapResource, configMap(ns, "there"));
    const { client, grant } = await watcher(ns, { grant: false });
    let attempts = 0;
    const r = reflect({ client: () => (attempts++, client), namespace: ns, backoff: { initialMs: 50, maxMs: 400 } });

    await new Promise((resolve) => setTimeout(resolve, 2_500));
    // 50, 100, 200, 400, 400 … ms (±20 %): a handful of tries in 2.5 s, not a tight loop, not one.
    expect(attempts).toBeGreaterThanOrEqual(3);
    expect(attempts).toBeLessThanOrEqual(15);
    expect(r.synced()).toBe(false);
    // between two tries (a try in flight says "listing", and under load one takes a while)
    await eventually(() => expect(r.status()).toMatchObject({ state: "backing-off", lists: 0 }), { timeoutMs: 5_000, intervalMs: 10 });
    expect(r.status().lastError).toMatch(/forbidden/i);
    const failures = r.log.lines.filter((l) => l.level === "warn");
    expect(failures).toHaveLength(1);
    expect(failures[0]).toMatchObject({ msg: "list failed: retrying after a backoff", reflector: "test", failures: 1 });
    expect(String(failures[0]!.error)).toMatch(/configmaps/);

    await grant();
    await r.ready;
    expect(r.changes).toEqual(["ADDED there 1"]);
    expect(r.log.lines.filter((l) => l.msg.startsWith("recovered"))).toHaveLength(1);
    expect(r.log.lines.filter((l) => l.level === "warn")).toHaveLength(1);
    expect(r.status().lastError).toBeUndefined();
  });

  it("stop() ends it at once, even in a long back-off, and nothing is delivered after it resolves", async () => {
    const ns = await namespace();
    const { client } = await watcher(ns);
    const r = reflect({ client, namespace: ns });
    await r.ready;
    await r.stop();
    expect(r.status().state).toBe("stopped");
    await admin.create(ConfigMapResource, configMap(ns, "late"));
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(r.changes).toEqual([]);

    const refused = await watcher(ns, { grant: false });
    const waiting = reflect({ client: refused.client, namespace: ns, backoff: { initialMs: 600_000, maxMs: 600_000 } });
    await eventually(() => expect(waiting.status().state).toBe("backing-off"));
    const started = performance.now();
    await waiting.stop();
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(waiting.status().state).toBe("stopped");
  });
});
