// Adding a function means adding one folder (its definition in reconcile.ts and its func.yaml), and
// nothing else in the tree: in a copy of this checkout, a small function is added as functions/<name>/
// alone, and from that folder alone it is in the rendered hub (its Knative Service, its Trigger, its
// RBAC made from its watches and writes, its kind in the hub's Broker relay), in the build (a bundle
// whose entry was generated), and in the list local mode serves. Its bundle then runs under that
// rendered RBAC on a real hub and does its one write; a bad setting stops it at start.
import { RecheckDueType, TargetExtension } from "../shared/events.ts";
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { spawn, execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { parse, parseAllDocuments } from "yaml";
import { freePort } from "../dev/control-plane/clusters.ts";
import { ClusterRoleBindingResource, ClusterRoleResource, ConfigMapResource, NamespaceResource } from "../shared/api/kube.ts";
import type { KubeObject } from "../shared/kube/client.ts";
import { eventually } from "./support/eventually.ts";
import { objectEvent, postEvent } from "./support/functions.ts";
import { startHub, type Hub } from "./support/fixtures.ts";

const root = join(import.meta.dirname, "..");
const NAME = "config-echo";
const LABEL = "example.ocm-functions.io/echo";
const ANNOTATION = "example.ocm-functions.io/echoed";

// The whole function: it watches labelled ConfigMaps on the hub and annotates each with its own name.
const definition = `import { defineFunction, done, type Io, type Key } from "../../shared/sdk.ts";
import { HubClusterSchema, type HubCluster } from "../../shared/settings.ts";
import { ConfigMapResource } from "../../shared/api/kube.ts";

export default defineFunction({
  name: "${NAME}",
  config: HubClusterSchema,
  watches: (c) => [{ cluster: c.hubCluster, resource: ConfigMapResource, labelSelector: "${LABEL}", root: true }],
  writes: (c) => [{ cluster: c.hubCluster, why: "the echo annotation", apiGroups: [""], resources: ["configmaps"], verbs: ["patch"] }],
  reconcile: async (io: Io<HubCluster>, key: Key) => {
    const hub = io.cluster(key.cluster);
    const cm = await hub.get(ConfigMapResource, key.name, key.namespace);
    if (!cm || cm.metadata.annotations?.["${ANNOTATION}"] === key.name) return done;
    await hub.patch(ConfigMapResource, key.name, { metadata: { annotations: { "${ANNOTATION}": key.name }, resourceVersion: cm.metadata.resourceVersion } }, { namespace: key.namespace });
    return done;
  },
});
`;

const funcYaml = `specVersion: 0.35.0
name: ${NAME}
runtime: typescript
created: 2026-11-27T00:00:00Z
invoke: cloudevent
run:
  envs:
    - name: OCM_CLUSTER_NAME
      value: hub
    - name: OCM_KUBECONFIG_DIR
      value: ""
deploy:
  serviceAccountName: ${NAME}
  subscriptions:
    - { source: default, filters: { type: dev.knative.apiserver.resource.add, kind: ConfigMap } }
    - { source: default, filters: { type: dev.knative.apiserver.resource.update, kind: ConfigMap } }
    - { source: default, filters: { type: dev.knative.apiserver.resource.delete, kind: ConfigMap } }
`;

let copy: string;
let plane: Hub;

// A program of the copy, as a user runs it from the copy's root.
function inCopy(args: string[], env: Record<string, string> = {}): string {
  return execFileSync(process.execPath, args, { cwd: copy, env: { PATH: process.env.PATH ?? "", ...env }, encoding: "utf8", maxBuffer: 64 << 20 });
}

beforeAll(async () => {
  const [hub] = await Promise.all([
    startHub("hub"),
    (async () => {
      copy = mkdtempSync(join(tmpdir(), "one-folder-"));
      // the checkout's files as they are (tracked, and new ones not ignored) and its node_modules
      const tracked = execFileSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], { cwd: root, encoding: "utf8" })
        .split("\0")
        .filter((f) => f && existsSync(join(root, f)));
      for (const f of tracked) {
        mkdirSync(dirname(join(copy, f)), { recursive: true });
        cpSync(join(root, f), join(copy, f), { dereference: false });
      }
      symlinkSync(join(root, "node_modules"), join(copy, "node_modules"));
      execFileSync("git", ["init", "-q"], { cwd: copy });
      execFileSync("git", ["add", "-A"], { cwd: copy });
      execFileSync("git", ["-c", "user.name=test", "-c", "user.email=test@invalid", "commit", "-q", "--no-verify", "-m", "the checkout as it is"], { cwd: copy });
      mkdirSync(join(copy, "functions", NAME));
      writeFileSync(join(copy, "functions", NAME, "reconcile.ts"), definition);
      writeFileSync(join(copy, "functions", NAME, "func.yaml"), funcYaml);
    })(),
  ]);
  plane = hub;
});

afterAll(async () => {
  await plane?.stop();
  if (copy) rmSync(copy, { recursive: true, force: true });
});

describe("a function added as one folder", () => {
  it("is the only change in the tree", () => {
    expect(execFileSync("git", ["status", "--porcelain"], { cwd: copy, encoding: "utf8" }).trim()).toBe(`?? functions/${NAME}/`);
  });

  it("is in the list local mode and the render take, and its func.yaml's subscriptions are what its definition derives", () => {
    const script = `import { definitions } from "./cli/render/definitions.ts"; import { readFunctions } from "./cli/render/func-yaml.ts"; import { derivedSubscriptions } from "./cli/render/subscriptions.ts";
      const f = readFunctions().find((f) => f.name === "${NAME}");
      console.log(JSON.stringify({ names: [...definitions.keys()], side: f.side, written: f.deploy.subscriptions, derived: derivedSubscriptions(f) }));`;
    const out = JSON.parse(inCopy(["--input-type=module", "-e", script])) as { names: string[]; side: string; written: unknown; derived: unknown };
    expect(out.names).toContain(NAME);
    expect(out.side).toBe("hub");
    expect(out.written).toEqual(out.derived);
  });

  let rendered: (KubeObject & { rules?: unknown; spec?: Record<string, unknown> })[];
  it("is in the rendered hub: its Knative Service, its Trigger, its RBAC from its watches and writes, its kind in the hub's source", () => {
    rendered = parseAllDocuments(inCopy(["cli/ocmf.ts", "render", "hub"])).map((d) => d.toJS());
    const find = (kind: string, name: string) => rendered.find((o) => o.kind === kind && o.metadata.name === name);
    expect(find("Service", NAME)).toBeDefined();
    const triggers = rendered.filter((o) => o.kind === "Trigger" && (o.spec as { subscriber?: { ref?: { name?: string } } }).subscriber?.ref?.name === NAME);
    expect(triggers.map((t) => t.spec?.filters)).toEqual([
      [{ any: [...["add", "update", "delete"].map((verb) => ({ exact: { type: `dev.knative.apiserver.resource.${verb}`, kind: "ConfigMap", [TargetExtension]: NAME } })), { exact: { type: RecheckDueType, [TargetExtension]: NAME } }] }],
    ]);
    expect(find("ClusterRole", `open-cluster-management:functions:${NAME}`)?.rules).toEqual([{ apiGroups: [""], resources: ["configmaps"], verbs: ["get", "list", "watch", "patch"] }]);
    expect(find("ClusterRoleBinding", `open-cluster-management:functions:${NAME}`)).toBeDefined();
    // the Broker's relay watches its kind and sends it its own events
    const source = rendered.find((o) => o.kind === "ContainerSource" && o.metadata.name === "ocm-hub-relay") as { spec: { template: { spec: { containers: { env: { name: string; value: string }[] }[] } } } } | undefined;
    const config = parse(source!.spec.template.spec.containers[0]!.env.find((e) => e.name === "OCM_RELAY_CONFIG")!.value) as { sources: { resource: { kind: string } }[]; kSinkTargets: { name: string }[] };
    expect(config.sources.map((s) => s.resource.kind)).toContain("ConfigMap");
    expect(config.kSinkTargets.map((t) => t.name)).toContain(NAME);
  });

  it("is built into a bundle whose generated entry runs it under the rendered RBAC on a real hub, and stops at start on a bad setting", async () => {
    const dist = join(copy, "dist");
    inCopy(["dev/build/bundle.ts", "--outdir", dist]);
    const bundle = join(dist, "functions", NAME, "index.js");

    // the rendered ClusterRole, bound to a user of the function's name
    const role = rendered.find((o) => o.kind === "ClusterRole" && o.metadata.name === `open-cluster-management:functions:${NAME}`)!;
    await plane.admin.create(ClusterRoleResource, { metadata: { name: role.metadata.name }, rules: role.rules });
    await plane.admin.create(ClusterRoleBindingResource, {
      metadata: { name: role.metadata.name },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: role.metadata.name },
      subjects: [{ kind: "User", apiGroup: "rbac.authorization.k8s.io", name: NAME }],
    });
    const kubeconfigs = join(copy, "kubeconfigs");
    mkdirSync(kubeconfigs);
    writeFileSync(join(kubeconfigs, "hub.kubeconfig"), await plane.cluster.kubeconfigFor({ user: NAME }), { mode: 0o600 });

    const bad = spawn(process.execPath, [bundle], { env: { PATH: process.env.PATH ?? "", PORT: "0" }, stdio: ["ignore", "pipe", "pipe"] });
    let badOutput = "";
    bad.stderr.on("data", (d: Buffer) => (badOutput += d));
    expect(await new Promise((resolve) => bad.on("exit", resolve))).toBe(1);
    expect(badOutput.trim()).toMatch(new RegExp(`^${NAME}: invalid configuration: PORT\\b[^\\n]*$`));

    const port = await freePort();
    const child = spawn(process.execPath, [bundle], { env: { PATH: process.env.PATH ?? "", PORT: String(port), OCM_CLUSTER_NAME: "hub", OCM_KUBECONFIG_DIR: kubeconfigs }, stdio: "ignore" });
    try {
      await plane.admin.create(NamespaceResource, { metadata: { name: "echo" } });
      const cm = await plane.admin.create<KubeObject>(ConfigMapResource, { metadata: { name: "hello", namespace: "echo", labels: { [LABEL]: "true" } }, data: { a: "b" } });
      await eventually(async () => expect((await postEvent(`http://127.0.0.1:${port}/`, objectEvent({ cluster: "hub", object: { ...cm, apiVersion: "v1", kind: "ConfigMap" }, verb: "add" }))).status).toBe(204));
      const echoed = await plane.admin.get<KubeObject & { metadata: { annotations?: Record<string, string> } }>(ConfigMapResource, "hello", "echo");
      expect(echoed?.metadata.annotations?.[ANNOTATION]).toBe("hello");
    } finally {
      child.kill("SIGKILL");
    }
  });
});
