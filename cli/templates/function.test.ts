// my-function end to end: a real kube-apiserver per cluster (the source and each target), the function
// run as `ocmf run function` runs it (its server and a relay built from its watches), under identities
// that have only the rights of rbac-source.yaml and rbac-target.yaml. Change the cases to your behaviour.
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startClusters, type LocalClusters } from "../../dev/control-plane/clusters.ts";
import { identityFor } from "../../dev/control-plane/identities.ts";
import { runFunction, type RunningFunction } from "../../dev/local/run-function.ts";
import { ConfigMapResource, NamespaceResource } from "../../shared/api/kube.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { eventually } from "../../test/support/eventually.ts";
import fn, { ConfigSchema, CopyLabel } from "./function.ts";

// the defaults, which func.yaml sets too, and a copy seal key of the test's own (func.yaml's comes from a Secret)
const config = ConfigSchema.parse({ copySealKey: randomBytes(32).toString("base64") });
const { source, targets } = config;
// Errors only (a permission missing is named with its verb and resource); drop `log` to see every decision.
const log = { info() {}, warn() {}, error: (fields: object, msg: string) => console.error(msg, fields) };

let planes: LocalClusters;
let admin: Record<string, KubeClient>; // cluster-admin, for the test's own reads and writes
let kubeconfigs: Record<string, string>; // the function's identity on each cluster
let running: RunningFunction;

const start = async () => {
  running = await runFunction(fn, { config, kubeconfigs, log });
  await running.relay.ready;
};

beforeAll(async () => {
  planes = await startClusters({ names: [source, ...targets], controllers: false, crds: false });
  admin = Object.fromEntries([source, ...targets].map((c) => [c, KubeClient.fromKubeconfig(planes.get(c).adminKubeconfig)]));
  const rbac = (file: string) => join(import.meta.dirname, file);
  kubeconfigs = Object.fromEntries([
    [source, await identityFor(planes.get(source), fn.definition.name, "", rbac("rbac-source.yaml"))],
    ...(await Promise.all(targets.map(async (t) => [t, await identityFor(planes.get(t), fn.definition.name, "", rbac("rbac-target.yaml"))]))),
  ]);
  await start();
}, 180_000);

afterAll(async () => {
  await running?.stop();
  for (const client of Object.values(admin ?? {})) client.close();
  await planes?.stop();
});

type ConfigMap = KubeObject & { data?: Record<string, string> };

// A labelled ConfigMap on the source, in a namespace of its own, so the cases do not meet.
async function sourceConfigMap(data: Record<string, string>): Promise<ConfigMap> {
  const namespace = `case-${Math.random().toString(36).slice(2, 8)}`;
  await admin[source]!.create(NamespaceResource, { metadata: { name: namespace } });
  return admin[source]!.create<ConfigMap>(ConfigMapResource, { metadata: { name: "settings", namespace, labels: { [CopyLabel]: "true" } }, data });
}
const copyOn = (target: string, cm: ConfigMap) => admin[target]!.get<ConfigMap>(ConfigMapResource, cm.metadata.name!, cm.metadata.namespace);
const copies = (cm: ConfigMap) => Promise.all(targets.map((t) => copyOn(t, cm).then((c) => c?.data)));

describe("my-function", { timeout: 60_000 }, () => {
  it("copies a labelled ConfigMap to every target and keeps the copies in step", async () => {
    const cm = await sourceConfigMap({ color: "blue" });
    await eventually(async () => expect(await copies(cm)).toEqual(targets.map(() => ({ color: "blue" }))));
    await admin[source]!.patch(ConfigMapResource, "settings", { data: { color: "green" } }, { namespace: cm.metadata.namespace });
    await eventually(async () => expect(await copies(cm)).toEqual(targets.map(() => ({ color: "green" }))));
  });

  it("puts back a copy that was changed or deleted by hand", async () => {
    const cm = await sourceConfigMap({ color: "blue" });
    const target = targets[0]!;
    await eventually(async () => expect((await copyOn(target, cm))?.data).toEqual({ color: "blue" }));
    await admin[target]!.patch(ConfigMapResource, "settings", { data: { color: "red" } }, { namespace: cm.metadata.namespace });
    await eventually(async () => expect((await copyOn(target, cm))?.data).toEqual({ color: "blue" }));
    await admin[target]!.delete(ConfigMapResource, "settings", cm.metadata.namespace);
    await eventually(async () => expect((await copyOn(target, cm))?.data).toEqual({ color: "blue" }));
  });

  it("deletes the copies when the source loses its label, and when it is deleted", async () => {
    const unlabelled = await sourceConfigMap({ color: "blue" });
    const deleted = await sourceConfigMap({ color: "blue" });
    await eventually(async () => expect([...(await copies(unlabelled)), ...(await copies(deleted))].every(Boolean)).toBe(true));
    await admin[source]!.patch(ConfigMapResource, "settings", { metadata: { labels: { [CopyLabel]: null } } }, { namespace: unlabelled.metadata.namespace });
    await admin[source]!.delete(ConfigMapResource, "settings", deleted.metadata.namespace);
    await eventually(async () => expect([...(await copies(unlabelled)), ...(await copies(deleted))]).toEqual([...targets, ...targets].map(() => undefined)));
  });

  it("collects the copies of a source deleted while the function was not running", async () => {
    const cm = await sourceConfigMap({ color: "blue" });
    await eventually(async () => expect((await copies(cm)).every(Boolean)).toBe(true));
    await running.stop();
    try {
      await admin[source]!.delete(ConfigMapResource, "settings", cm.metadata.namespace);
    } finally {
      await start(); // the relay announces every copy again as it starts; each finds its source gone
    }
    await eventually(async () => expect(await copies(cm)).toEqual(targets.map(() => undefined)));
  });
});

describe("the definition", () => {
  it("reads its settings from the environment, and refuses a bad one", () => {
    const key = randomBytes(32).toString("base64");
    expect(fn.configFromEnv({ SOURCE: "hub", TARGETS: "east, west", COPY_SEAL_KEY: key })).toEqual({ source: "hub", targets: ["east", "west"], copySealKey: key });
    expect(() => fn.configFromEnv({ SOURCE: "east", TARGETS: "east,west", COPY_SEAL_KEY: key })).toThrow(/source cannot be one of the targets/);
    expect(() => fn.configFromEnv({ COPY_SEAL_KEY: "too short" })).toThrow(/the copy seal key is not base64/);
  });
});
