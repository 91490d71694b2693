// `ocmf new function`, run as a user runs it: the scaffold it writes type-checks, its RBAC and func.yaml
// are what its definition derives, and its own test passes against real clusters (the proof that the
// template works). A bad name, a place outside the checkout and an existing file are refused, and then
// nothing is written.
import { randomBytes } from "node:crypto";
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse, parseAllDocuments } from "yaml";
import { FuncYamlSchema } from "../cli/render/func-yaml.ts";
import type { MultiClusterFunction } from "../shared/sdk.ts";

const root = resolve(import.meta.dirname, "..");
let dir: string; // inside the checkout, as the scaffold must be

type Run = { code: number; stdout: string; stderr: string };
// The child vitest must not take this run's worker variables for its own. COPY_SEAL_KEY: the scaffold's
// one setting without a default, set as the guide sets it.
const env: NodeJS.ProcessEnv = { ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("VITEST"))), NO_COLOR: "1", COPY_SEAL_KEY: randomBytes(32).toString("base64") };
const run = (args: string[], timeoutMs = 60_000, runEnv = env) =>
  new Promise<Run>((done) =>
    execFile(process.execPath, args, { cwd: root, env: runEnv, timeout: timeoutMs, maxBuffer: 16 << 20 }, (err, stdout, stderr) =>
      done({ code: err ? (typeof err.code === "number" ? err.code : 1) : 0, stdout, stderr }),
    ),
  );
const ocmf = (...args: string[]) => run(["cli/ocmf.ts", ...args]);

beforeAll(() => {
  dir = mkdtempSync(join(root, ".new-function-test-"));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("help", () => {
  it.each([
    { command: ["new", "function"], flags: ["<name>", "--dir", "--source", "--targets"] },
    { command: ["run", "function"], flags: ["<file>", "--kubeconfig-dir"] },
  ])("ocmf $command --help names $flags", async ({ command, flags }) => {
    const r = await ocmf(...command, "--help");
    expect(r.code).toBe(0);
    for (const flag of flags) expect(r.stdout).toContain(flag);
  });
});

describe("refusals", () => {
  it.each(["My-Copier", "copier_1", "copier-", "a.b", "../copier", "x".repeat(64), ""])("refuses the name %j, and writes nothing", async (name) => {
    const r = await ocmf("new", "function", name, "--dir", join(dir, "refused"));
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/not a DNS label/);
    expect(existsSync(join(dir, "refused"))).toBe(false);
  });

  it("refuses to overwrite a file, and writes nothing", async () => {
    mkdirSync(join(dir, "taken", "copier"), { recursive: true });
    writeFileSync(join(dir, "taken", "copier", "func.yaml"), "mine\n");
    const r = await ocmf("new", "function", "copier", "--dir", join(dir, "taken"));
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/already has func\.yaml: nothing written/);
    expect(readdirSync(join(dir, "taken", "copier"))).toEqual(["func.yaml"]);
    expect(readFileSync(join(dir, "taken", "copier", "func.yaml"), "utf8")).toBe("mine\n");
  });

  it("refuses a place outside the checkout, and a source that is also a target", async () => {
    const outside = await ocmf("new", "function", "copier", "--dir", tmpdir());
    expect(outside.code).toBe(1);
    expect(outside.stderr).toMatch(/outside the ocm-functions checkout/);
    expect(existsSync(join(tmpdir(), "copier", "function.ts"))).toBe(false);
    const overlap = await ocmf("new", "function", "copier", "--dir", join(dir, "overlap"), "--source", "east", "--targets", "east,west");
    expect(overlap.code).toBe(1);
    expect(overlap.stderr).toMatch(/cannot also be a target/);
    expect(existsSync(join(dir, "overlap"))).toBe(false);
  });
});

describe("the scaffold", () => {
  const fnDir = () => join(dir, "fns", "copier");

  beforeAll(async () => {
    const r = await ocmf("new", "function", "copier", "--dir", join(dir, "fns"), "--source", "home", "--targets", "east, west");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
  });

  it("has the six files, named for the function and importing the SDK from where they are", () => {
    expect(readdirSync(fnDir()).sort()).toEqual(["func.yaml", "function.test.ts", "function.ts", "rbac-source.yaml", "rbac-target.yaml", "tsconfig.json"]);
    const fn = readFileSync(join(fnDir(), "function.ts"), "utf8");
    expect(fn).toContain('name: "copier"');
    expect(fn).toContain('from "../../../shared/sdk.ts"');
    expect(fn).toContain('.default("home")');
    expect(fn).toContain('.default(["east", "west"])');
    expect(fn).not.toContain("my-function");
  });

  it("derives the RBAC from the definition: get, list and watch on what it watches, merged with what its writes declare", () => {
    const role = (file: string) => parseAllDocuments(readFileSync(join(fnDir(), file), "utf8")).map((d) => d.toJS() as { kind: string; metadata: { name: string }; rules: unknown[] });
    const [source] = role("rbac-source.yaml");
    const [target] = role("rbac-target.yaml");
    expect(source).toEqual({ apiVersion: "rbac.authorization.k8s.io/v1", kind: "ClusterRole", metadata: { name: "copier:source" }, rules: [{ apiGroups: [""], resources: ["configmaps"], verbs: ["get", "list", "watch"] }] });
    expect(target).toEqual({
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRole",
      metadata: { name: "copier:target" },
      rules: [
        { apiGroups: [""], resources: ["configmaps"], verbs: ["get", "list", "watch", "create", "update", "patch", "delete"] },
        { apiGroups: [""], resources: ["namespaces"], verbs: ["get", "create"] },
      ],
    });
  });

  it("has a func.yaml in knative/func's format, with the settings and the subscriptions the definition derives", async () => {
    const { default: fn } = (await import(join(fnDir(), "function.ts"))) as { default: MultiClusterFunction<unknown> };
    const yaml = FuncYamlSchema.parse(parse(readFileSync(join(fnDir(), "func.yaml"), "utf8")));
    expect(yaml).toMatchObject({ specVersion: "0.35.0", name: "copier", runtime: "typescript", invoke: "cloudevent", deploy: { serviceAccountName: "copier" } });
    const envs = Object.fromEntries(yaml.run.envs.map((e) => [e.name, e.value]));
    expect(envs).toMatchObject({ SOURCE: "home", TARGETS: "east,west", OCM_CLUSTER_NAME: "home", COPY_SEAL_KEY: "{{ secret:copier-copy-seal:key }}" });
    // deployed, knative/func puts the Secret's key in COPY_SEAL_KEY
    const key = randomBytes(32).toString("base64");
    expect(fn.configFromEnv({ ...envs, COPY_SEAL_KEY: key })).toEqual({ source: "home", targets: ["east", "west"], copySealKey: key });
    expect(() => fn.configFromEnv(envs)).toThrow(/copy seal key is not base64/);
    expect(yaml.deploy.subscriptions).toEqual(fn.subscriptions(fn.configFromEnv({ ...envs, COPY_SEAL_KEY: key })));
  });

  it("type-checks", async () => {
    const r = await run(["node_modules/typescript/bin/tsc", "-p", fnDir()], 300_000);
    expect(r.stdout + r.stderr).toBe("");
    expect(r.code).toBe(0);
  }, 300_000);

  it("is what ocmf run function runs, which names the kubeconfigs it lacks and refuses a module without a definition", async () => {
    mkdirSync(join(dir, "empty"));
    const lacking = await ocmf("run", "function", join(fnDir(), "function.ts"), "--kubeconfig-dir", join(dir, "empty"));
    expect(lacking.code).toBe(1);
    expect(lacking.stderr).toBe(`error: copier watches home, east, west: put home.kubeconfig, east.kubeconfig, west.kubeconfig in ${join(dir, "empty")}\n`);
    const keyless = await run(["cli/ocmf.ts", "run", "function", join(fnDir(), "function.ts"), "--kubeconfig-dir", join(dir, "empty")], 60_000, { ...env, COPY_SEAL_KEY: undefined });
    expect(keyless.code).toBe(1);
    expect(keyless.stderr).toMatch(/^error: copier: invalid settings in the environment: .*copySealKey/);
    writeFileSync(join(dir, "not-a-function.ts"), "export default 1;\n");
    const wrong = await ocmf("run", "function", join(dir, "not-a-function.ts"), "--kubeconfig-dir", join(dir, "empty"));
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toMatch(/^error: .*not-a-function\.ts has no default export made by defineFunction\n$/);
  });

  it("passes its own test against real clusters", async () => {
    const r = await run(["node_modules/vitest/vitest.mjs", "run", "--no-cache", "--root", fnDir()], 300_000);
    expect(r.stdout).toMatch(/Tests\s+5 passed \(5\)/);
    expect(r.code).toBe(0);
    expect(existsSync(join(fnDir(), "node_modules"))).toBe(false);
  }, 300_000);
});
