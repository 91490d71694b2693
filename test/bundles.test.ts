// `npm run build`: every bundle is a whole program. Built into a temporary folder outside the
// repository (so nothing can resolve from node_modules or load a .ts file) and run there as processes:
// a function bundle serves its health paths and accepts a ManagedCluster on a real hub under
// its own identity, fed by hand and by the relay bundle; a bad setting stops it at start with one line;
// the heartbeat and CLI bundles run too.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { isBuiltin } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { bundle, functionNames, OPTIONAL_EXTERNALS, type BundleResult } from "../dev/build/bundle.ts";
import { freePort, startClusters, type LocalCluster, type LocalClusters } from "../dev/control-plane/clusters.ts";
import { KubeClient } from "../shared/kube/client.ts";
import { ClusterFinalizer, ManagedClusterConditionType, ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { findCondition } from "../shared/conditions.ts";
import { identityFor, objectEvent, postEvent } from "./support/functions.ts";
import { readFunctions } from "../cli/render/func-yaml.ts";
import { functionEnv } from "../cli/render/objects.ts";
import { eventually } from "./support/eventually.ts";

const root = join(import.meta.dirname, "..");
const HUB = "hub";
const suffix = () => Math.random().toString(36).slice(2, 7);

let work: string;
let bundles: BundleResult[];
let local: LocalClusters;
let hub: LocalCluster;
let admin: KubeClient;
let acceptor: Program;
let acceptorUrl: string;
const started: Program[] = [];

type Program = { child: ChildProcess; output(): string; exit: Promise<number | null> };

// A program as a container runs it: its own folder as the working directory, only the variables given.
function run(args: string[], env: Record<string, string>, cwd = work): Program {
  const child = spawn(process.execPath, args, { cwd, env: { PATH: process.env.PATH ?? "", ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  child.stdout!.on("data", (d: Buffer) => (output += d.toString()));
  child.stderr!.on("data", (d: Buffer) => (output += d.toString()));
  const exit = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  const program = { child, output: () => output, exit };
  started.push(program);
  return program;
}

const file = (name: string) => bundles.find((b) => b.name === name)!.file;

async function get(url: string): Promise<{ status: number; body: string }> {
  const res = await fetch(url);
  return { status: res.status, body: await res.text() };
}

function writeKubeconfig(dir: string, cluster: string, text: string): string {
  mkdirSync(dir, { recursive: true });
  const path = join(dir, `${cluster}.kubeconfig`);
  writeFileSync(path, text, { mode: 0o600 });
  return path;
}

async function acceptedState(name: string) {
  const mc = await admin.get<ManagedCluster>(ManagedClusterResource, name);
  const accepted = findCondition(mc?.status?.conditions, ManagedClusterConditionType.HubAccepted);
  return { finalizers: mc?.metadata.finalizers, accepted: accepted && `${accepted.status}/${accepted.reason}` };
}
const accepted = { finalizers: [ClusterFinalizer.ApiResourceCleanup, ClusterFinalizer.ResourceCleanup], accepted: "True/HubClusterAdminAccepted" };

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "bundles-"));
  const [built, clusters] = await Promise.all([bundle({ outdir: join(work, "dist") }), startClusters({ names: [HUB] })]);
  bundles = built.bundles;
  local = clusters;
  hub = local.get(HUB);
  admin = KubeClient.fromKubeconfig(hub.adminKubeconfig);
  const kubeconfigs = join(work, "acceptor");
  writeKubeconfig(kubeconfigs, HUB, await identityFor(hub, "cluster-acceptor"));
  const port = await freePort();
  acceptorUrl = `http://127.0.0.1:${port}`;
  acceptor = run([file("cluster-acceptor")], { PORT: String(port), OCM_CLUSTER_NAME: HUB, OCM_KUBECONFIG_DIR: kubeconfigs, OCM_CLUSTER_AUTO_APPROVAL_USERS: "" });
  await eventually(async () => expect((await get(`${acceptorUrl}/health/readiness`)).status).toBe(200));
});

afterAll(async () => {
  for (const p of started) if (p.child.exitCode === null) p.child.kill("SIGKILL");
  admin?.close();
  await local?.stop();
  if (work) rmSync(work, { recursive: true, force: true });
});

describe("a function bundle", () => {
  it("accepts a ManagedCluster that an event names, on a real hub under the function's own identity", async () => {
    const name = `c${suffix()}`;
    const mc = await admin.create<ManagedCluster>(ManagedClusterResource, { metadata: { name }, spec: { hubAcceptsClient: true } });
    // The identity's RBAC and the CRD's storage take a moment to be in force: 503 until then. A 204 that
    // asks for a recheck (the authorizer catching up with the grants) is posted again, as a relay would.
    await eventually(async () => {
      expect((await postEvent(`${acceptorUrl}/`, objectEvent({ cluster: HUB, object: mc, verb: "add" }))).status).toBe(204);
      expect(await acceptedState(name)).toEqual(accepted);
    });
  });

  it("answers a malformed event with 400 and the reason", async () => {
    const { cluster: _dropped, ...noCluster } = objectEvent({ cluster: HUB, object: { apiVersion: "cluster.open-cluster-management.io/v1", kind: "ManagedCluster", metadata: { name: "x" } } });
    const reply = await postEvent(`${acceptorUrl}/`, noCluster);
    expect(reply.status).toBe(400);
    expect(reply.body).toContain("cluster");
  });

  it("answers readiness and liveness on the health paths Knative probes", async () => {
    for (const path of ["/health/readiness", "/health/liveness"]) expect(await get(`${acceptorUrl}${path}`)).toEqual({ status: 200, body: "OK" });
  });

  it("accepts a cluster fed by the relay bundle, which stops cleanly on SIGTERM", async () => {
    const relay = run([file("relay")], {
      OCM_RELAY_CONFIG: JSON.stringify({
        clusters: { [HUB]: { kubeconfig: await identityFor(hub, "relay-hub") } },
        sources: [{ cluster: HUB, resource: ManagedClusterResource, mode: "Resource" }],
        sinks: [{ name: "cluster-acceptor", url: `${acceptorUrl}/` }],
        resync: { intervalMs: 0 },
      }),
    });
    const name = `c${suffix()}`;
    await admin.create<ManagedCluster>(ManagedClusterResource, { metadata: { name }, spec: { hubAcceptsClient: true } });
    await eventually(async () => expect(await acceptedState(name)).toEqual(accepted));
    relay.child.kill("SIGTERM");
    expect(await relay.exit).toBe(0);
  });

  it("exits 0 on SIGTERM", async () => {
    acceptor.child.kill("SIGTERM");
    expect(await acceptor.exit).toBe(0);
  });
});

describe("a bad setting stops a function bundle at start with one line naming the variable", () => {
  const rows: { name: string; fn: string; env: Record<string, string>; variable: string }[] = [
    { name: "an auto-approval entry without a user", fn: "cluster-acceptor", env: { OCM_CLUSTER_AUTO_APPROVAL_USERS: "=x" }, variable: "OCM_CLUSTER_AUTO_APPROVAL_USERS" },
    { name: "an empty spoke cluster name", fn: "spoke-cluster-status", env: { SPOKE_CLUSTER_NAME: "" }, variable: "SPOKE_CLUSTER_NAME" },
    { name: "a lease grace the hub would flap with", fn: "cluster-lease-monitor", env: { OCM_LEASE_GRACE_MULTIPLIER: "1" }, variable: "OCM_LEASE_GRACE_MULTIPLIER" },
    { name: "a kubeconfig folder that is not there", fn: "cluster-taints", env: { OCM_KUBECONFIG_DIR: "/nonexistent" }, variable: "OCM_KUBECONFIG_DIR" },
    { name: "port 0, which would be a random port", fn: "cluster-taints", env: { PORT: "0" }, variable: "PORT" },
  ];
  it.each(rows)("$name ($variable)", async ({ fn, env, variable }) => {
    const p = run([file(fn)], { PORT: String(await freePort()), ...env });
    expect(await p.exit).toBe(1);
    const lines = p.output().trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`^${fn}: invalid configuration: ${variable}\\b`));
  });

  // A setting is checked after the module's imports have run, so this also shows that every bundle
  // loads all it holds (a library needing another loaded first fails here, not in production).
  it("every function bundle loads all its modules, then stops at the missing kubeconfig folder", async () => {
    const functions = bundles.filter((b) => functionNames().includes(b.name));
    expect(functions).toHaveLength(functionNames().length);
    const lines = await Promise.all(
      functions.map(async (b) => {
        const p = run([b.file], { PORT: String(await freePort()), OCM_KUBECONFIG_DIR: "/nonexistent" });
        return { code: await p.exit, output: p.output().trim() };
      }),
    );
    for (const [i, b] of functions.entries()) expect(lines[i], b.name).toEqual({ code: 1, output: expect.stringMatching(new RegExp(`^${b.name}: invalid configuration: [A-Z_]+\\b[^\\n]*$`)) });
  });

  // faas-js-runtime stays a development dependency: no bundle carries it, but every function's built
  // entry (generated from its definition, exporting `handle`) loads under the Knative Functions runtime's
  // own CLI (`func run`), given its func.yaml settings, and is served by it rather than by ours.
  it("every function bundle, given its func.yaml settings, is served by faas-js-runtime's own CLI: readiness answers, SIGTERM ends it with 0", async () => {
    const cli = join(root, "node_modules/faas-js-runtime/bin/cli.js");
    const kubeconfigs = join(work, "faas-kubeconfigs");
    mkdirSync(kubeconfigs, { recursive: true });
    const deployments = new Map(readFunctions().map((f) => [f.name, f]));
    const functions = bundles.filter((b) => deployments.has(b.name));
    expect(functions).toHaveLength(deployments.size);
    for (const b of functions) {
      const vars = functionEnv(deployments.get(b.name)!, { SPOKE_CLUSTER_NAME: "cluster1", SPOKE_EXTERNAL_SERVER_URLS: "https://127.0.0.1:6443" });
      const port = await freePort();
      const p = run([cli, b.file], { ...Object.fromEntries(vars.map((v) => [v.name, v.value])), OCM_KUBECONFIG_DIR: kubeconfigs, FUNC_PORT: String(port), FUNC_LOG_LEVEL: "error" });
      await eventually(async () => {
        expect(p.child.exitCode, `${b.name} ended: ${p.output()}`).toBeNull();
        expect(await get(`http://127.0.0.1:${port}/health/readiness`), b.name).toEqual({ status: 200, body: "OK" });
      });
      // our server is not started beside it: the port is faas-js-runtime's, and the bundle's own (8080 by default) is not taken
      p.child.kill("SIGTERM");
      expect(await p.exit, `${b.name}: ${p.output()}`).toBe(0);
    }
  });

  it("a bad setting ends the process with exit code 1 and one line when faas-js-runtime's CLI loads a function bundle", async () => {
    const p = run([join(root, "node_modules/faas-js-runtime/bin/cli.js"), file("cluster-acceptor")], { FUNC_PORT: String(await freePort()), OCM_CLUSTER_AUTO_APPROVAL_USERS: "=x" });
    expect(await p.exit).toBe(1);
    expect(p.output().trim()).toMatch(/^cluster-acceptor: invalid configuration: OCM_CLUSTER_AUTO_APPROVAL_USERS\b[^\n]*$/);
  });
});

describe("the other bundles", () => {
  it("the relay bundle with a heartbeat setting serves the heartbeat's health endpoint and stops cleanly on SIGTERM", async () => {
    const kubeconfig = writeKubeconfig(join(work, "heartbeat"), HUB, await identityFor(hub, "heartbeat"));
    const port = await freePort();
    const config = { clusters: { spoke: { kubeconfigFile: kubeconfig } }, heartbeat: { cluster: "spoke", clusterName: "cluster1", health: { port } } };
    const relay = run([file("relay")], { OCM_RELAY_CONFIG: JSON.stringify(config) });
    await eventually(async () => expect(await get(`http://127.0.0.1:${port}/healthz`)).toEqual({ status: 200, body: "ok" }));
    relay.child.kill("SIGTERM");
    expect(await relay.exit).toBe(0);
    expect(relay.output()).toContain('"msg":"heartbeat stopped"');
  });

  it("the CLI bundle answers --help and lists the hub's clusters from KUBECONFIG", async () => {
    const help = run([file("ocmf"), "--help"], {});
    expect(await help.exit).toBe(0);
    expect(help.output()).toContain("accept");
    const name = `c${suffix()}`;
    await admin.create<ManagedCluster>(ManagedClusterResource, { metadata: { name }, spec: { hubAcceptsClient: false } });
    const kubeconfig = writeKubeconfig(join(work, "admin"), HUB, hub.adminKubeconfig);
    const clusters = run([file("ocmf"), "get", "clusters"], { KUBECONFIG: kubeconfig });
    expect(await clusters.exit).toBe(0);
    expect(clusters.output()).toMatch(new RegExp(`^${name}\\s+false`, "m"));
  });
});

describe("what the bundles hold", () => {
  it("imports nothing at run time but Node's built-ins and the optional packages ws and debug do without", () => {
    const foreign = bundles.flatMap((b) => b.imports.filter((i) => !isBuiltin(i) && !OPTIONAL_EXTERNALS.includes(i)).map((i) => `${b.name} → ${i}`));
    expect(foreign).toEqual([]);
  });

  // A function bundle loads only node:http for its server: faas-js-runtime and what it brought
  // (fastify, ajv, raw-body's iconv-lite tables, pino, prom-client) were most of its size and start-up.
  it("a function bundle holds no HTTP framework, JSON-schema compiler or charset tables", () => {
    const heavy = /node_modules\/(faas-js-runtime|fastify|@fastify\/[^/]+|ajv|iconv-lite|raw-body|pino|prom-client|cloudevents)\//;
    const functions = bundles.filter((b) => functionNames().includes(b.name));
    expect(functions).toHaveLength(functionNames().length);
    const found = functions.flatMap((b) => [...new Set(b.inputs.flatMap((i) => heavy.exec(i)?.[1] ?? []))].map((p) => `${b.name} ← ${p}`));
    expect(found).toEqual([]);
    for (const b of functions) expect(b.inputs, b.name).toContain("shared/cloudevents-server.ts");
  });

  it("holds only what its entry imports: no other function's or component's code", () => {
    const own = (b: BundleResult) => (b.name === "ocmf" ? "cli/" : ["relay", "cp-creds"].includes(b.name) ? `components/${b.name}/` : `functions/${b.name}/`);
    // The CLI renders the spoke relay's configuration and checks it with the relay's own schema, and
    // derives every source and subscription from the functions' definitions (cli/render/definitions.ts);
    // `ocmf run function` runs a user's function locally: its server and a relay (dev/local/run-function.ts).
    const runFunction = ["dev/local/run-function.ts", "dev/local/functions.ts"];
    const shared: Record<string, (i: string) => boolean> = { ocmf: (i) => i.startsWith("components/relay/") || i.startsWith("functions/") || runFunction.includes(i) };
    const strays = bundles.flatMap((b) => b.inputs.filter((i) => /^(functions|components|cli|dev)\//.test(i) && !i.startsWith(own(b)) && !shared[b.name]?.(i)).map((i) => `${b.name} ← ${i}`));
    expect(strays).toEqual([]);
    expect(bundles.map((b) => b.name).sort()).toEqual([...functionNames(), "cp-creds", "ocmf", "relay"].sort());
  });
});
