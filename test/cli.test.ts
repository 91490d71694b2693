// `ocmf` as a user runs it, a process from source: help for every command, failures as one line with
// exit code 1, and the hub chosen as kubectl chooses it (--kubeconfig, else KUBECONFIG) on a real hub.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { execFile } from "node:child_process";
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { freePort, startClusters, type LocalClusters } from "../dev/control-plane/clusters.ts";
import { KubeClient } from "../shared/kube/client.ts";
import { buildKubeconfig } from "../shared/kube/kubeconfig.ts";
import { ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { SecretResource } from "../shared/api/kube.ts";

const ocmf = join(import.meta.dirname, "..", "cli", "ocmf.ts");
const suffix = () => Math.random().toString(36).slice(2, 7);

let dir: string;
let local: LocalClusters;
let admin: KubeClient;
let hubKubeconfig: string;
let deadKubeconfig: string; // a hub that answers nothing: a loopback port nobody listens on

type Result = { code: number; stdout: string; stderr: string };

function run(args: string[], env: Record<string, string> = {}): Promise<Result> {
  return new Promise((resolve) => {
    execFile(process.execPath, [ocmf, ...args], { cwd: dir, env: { PATH: process.env.PATH ?? "", ...env } }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "cli-"));
  local = await startClusters({ names: ["hub"], controllers: false });
  const hub = local.get("hub");
  admin = KubeClient.fromKubeconfig(hub.adminKubeconfig);
  hubKubeconfig = join(dir, "hub.kubeconfig");
  writeFileSync(hubKubeconfig, hub.adminKubeconfig);
  deadKubeconfig = join(dir, "dead.kubeconfig");
  writeFileSync(deadKubeconfig, buildKubeconfig({ server: `https://127.0.0.1:${await freePort()}`, caPem: hub.caPem, credentials: { kind: "token", token: "nobody" } }));
});

afterAll(async () => {
  admin?.close();
  await local?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("help", () => {
  const commands = [
    { command: [], flags: ["--kubeconfig", "accept", "get", "addon", "sidecar", "render", "install", "join", "token", "uninstall"] },
    { command: ["accept"], flags: ["--clusters", "--requesters", "--csr", "--kubeconfig"] },
    { command: ["get"], flags: ["clusters", "addons", "clusterprofiles"] },
    { command: ["get", "clusterprofiles"], flags: ["--namespace", "--kubeconfig"] },
    { command: ["get", "clusters"], flags: ["--kubeconfig"] },
    { command: ["get", "addons"], flags: ["--kubeconfig"] },
    { command: ["addon", "enable"], flags: ["--names", "--clusters", "--namespace", "--kubeconfig"] },
    { command: ["sidecar", "stop"], flags: ["--cluster"] },
    { command: ["sidecar", "start"], flags: ["--cluster"] },
    { command: ["render", "hub"], flags: ["--registry", "--tag", "--namespace", "--env", "--workloads"] },
    { command: ["render", "spoke"], flags: ["--cluster-name", "--bootstrap-kubeconfig", "--spoke-external-server-urls", "--agent-config-allow", "--workloads"] },
    { command: ["install", "hub"], flags: ["--workloads", "--wait <level>", "--wait-timeout", "--token-ttl", "--output-bootstrap-kubeconfig", "--kubeconfig"] },
    { command: ["join"], flags: ["--workloads", "--agent-config-allow", "--hub-kubeconfig", "--hub-token", "--hub-apiserver", "--hub-ca-data", "--hub-ca-file", "--bootstrap-kubeconfigs", "--hub-connection-timeout-seconds", "--cluster-name", "--wait <level>", "--kubeconfig"] },
    { command: ["token", "create"], flags: ["--ttl", "--output-bootstrap-kubeconfig", "--kubeconfig"] },
    { command: ["uninstall", "hub"], flags: ["--purge-clusters", "--wait-timeout", "--kubeconfig"] },
    { command: ["uninstall", "spoke"], flags: ["--wait-timeout", "--kubeconfig"] },
  ];
  it.each(commands)("ocmf $command --help exits 0 and names $flags", async ({ command, flags }) => {
    const r = await run([...command, "--help"]);
    expect(r.code).toBe(0);
    for (const flag of flags) expect(r.stdout).toContain(flag);
  });
});

describe("failures are one line on stderr with exit code 1", () => {
  const failures = [
    { name: "a hub that does not answer", args: () => ["get", "clusters", "--kubeconfig", deadKubeconfig], says: "error: cannot reach the hub at https://127.0.0.1:" },
    { name: "a kubeconfig that is not there", args: () => ["get", "addons", "--kubeconfig", join(dir, "missing")], says: "error: cannot read the hub kubeconfig" },
    { name: "KUBECONFIG naming no file that exists", args: () => ["get", "clusters"], env: () => ({ KUBECONFIG: join(dir, "missing") }), says: "error: KUBECONFIG names no file that exists" },
    { name: "a required flag left out", args: () => ["accept", "--kubeconfig", hubKubeconfig], says: "error: required option '--clusters <names>' not specified" },
    { name: "an empty list", args: () => ["addon", "enable", "--names", ",", "--clusters", "c1"], says: "error: option '--names <addons>' argument ',' is invalid" },
    { name: "an unknown command", args: () => ["bogus"], says: "error: unknown command 'bogus'" },
    { name: "a join without the hub", args: () => ["join", "--cluster-name", "c1", "--kubeconfig", hubKubeconfig], says: "error: give the hub: --hub-kubeconfig FILE, or --hub-token" },
    { name: "a join whose token is not a bootstrap token", args: () => ["join", "--cluster-name", "c1", "--hub-token", "abc"], says: "error: --hub-token is not a bootstrap token" },
    { name: "a join with one hub in --bootstrap-kubeconfigs", args: () => ["join", "--cluster-name", "c1", "--bootstrap-kubeconfigs", hubKubeconfig, "--kubeconfig", hubKubeconfig], says: "error: --bootstrap-kubeconfigs takes at least two kubeconfig files" },
    { name: "a join with both --bootstrap-kubeconfigs and --hub-kubeconfig", args: () => ["join", "--cluster-name", "c1", "--bootstrap-kubeconfigs", `${hubKubeconfig},${hubKubeconfig}`, "--hub-kubeconfig", hubKubeconfig, "--kubeconfig", hubKubeconfig], says: "error: give the hubs with --bootstrap-kubeconfigs, or one hub with --hub-kubeconfig or --hub-token, not both" },
    { name: "a join naming one hub twice", args: () => ["join", "--cluster-name", "c1", "--bootstrap-kubeconfigs", `${hubKubeconfig},${hubKubeconfig}`, "--kubeconfig", hubKubeconfig], says: "twice: the agent tells its hubs apart by their URL" },
    { name: "a hub connection timeout for one hub", args: () => ["join", "--cluster-name", "c1", "--hub-kubeconfig", hubKubeconfig, "--hub-connection-timeout-seconds", "300", "--kubeconfig", hubKubeconfig], says: "error: --hub-connection-timeout-seconds is for several hubs" },
    { name: "a spoke with no kubeconfig", args: () => ["uninstall", "spoke"], says: "error: no spoke kubeconfig: pass --kubeconfig or set KUBECONFIG" },
    { name: "a workload form that does not exist", args: () => ["render", "hub", "--workloads", "bogus"], says: "error: option '--workloads <form>' argument 'bogus' is invalid. Allowed choices are knative, deployments." },
    { name: "an install of Knative Services on a hub without Knative", args: () => ["install", "hub", "--kubeconfig", hubKubeconfig], says: "install Knative Serving and Eventing there first" },
    { name: "an install of Deployments on a hub without Knative Eventing", args: () => ["install", "hub", "--workloads", "deployments", "--kubeconfig", hubKubeconfig], says: ": install Knative Eventing there first" },
    { name: "an agent setting path that does not exist", args: () => ["render", "spoke", "--agent-config-allow", "logLevel,heartbeat.proxyUrl"], says: "error: option '--agent-config-allow <paths>' argument 'logLevel,heartbeat.proxyUrl' is invalid. heartbeat.proxyUrl is not a setting path" },
    { name: "a wait level that does not exist", args: () => ["install", "hub", "--wait", "forever"], says: "error: option '--wait <level>' argument 'forever' is invalid" },
    { name: "a token lifetime that is not a duration", args: () => ["token", "create", "--ttl", "forever", "--kubeconfig", hubKubeconfig], says: "error: option '--ttl <duration>' argument 'forever' is invalid" },
    { name: "an install token lifetime that is not a duration", args: () => ["install", "hub", "--token-ttl", "1d"], says: "error: option '--token-ttl <duration>' argument '1d' is invalid" },
    { name: "a wait timeout that is not a duration", args: () => ["install", "hub", "--wait-timeout", "5"], says: "error: option '--wait-timeout <duration>' argument '5' is invalid" },
  ];
  it.each(failures)("$name", async ({ args, env, says }) => {
    const r = await run(args(), env?.());
    expect(r.code).toBe(1);
    expect(r.stderr.trimEnd().split("\n")).toEqual([expect.stringContaining(says)]);
    expect(r.stdout).toBe("");
  });
});

describe("render --workloads deployments", () => {
  it.each(["hub", "spoke"])("prints the %s's functions as Deployments and Services, nothing of Knative Serving", async (side) => {
    const r = await run(["render", side, "--workloads", "deployments"]);
    expect(r).toMatchObject({ code: 0, stderr: "" });
    expect(r.stdout).not.toContain("serving.knative.dev");
    expect(r.stdout).toMatch(/^apiVersion: apps\/v1\nkind: Deployment\n/m);
    expect(r.stdout).toMatch(/ref:\n\s+apiVersion: v1\n\s+kind: Service\n/);
  });
});

describe("render spoke --agent-config-allow", () => {
  it("gives the agent-config function the allow-list, and no other function", async () => {
    const r = await run(["render", "spoke", "--agent-config-allow", "logLevel,features"]);
    expect(r).toMatchObject({ code: 0, stderr: "" });
    expect(r.stdout.match(/- name: OCM_AGENT_CONFIG_ALLOW\n\s+value: (.*)\n/g)).toEqual([expect.stringContaining("value: logLevel,features")]);
  });
});

describe("the hub's kubeconfig", () => {
  it("is KUBECONFIG's first file that exists, as kubectl reads it", async () => {
    const name = `c${suffix()}`;
    await admin.create<ManagedCluster>(ManagedClusterResource, { metadata: { name }, spec: { hubAcceptsClient: false } });
    const r = await run(["get", "clusters"], { KUBECONFIG: [join(dir, "missing"), hubKubeconfig].join(delimiter) });
    expect(r).toMatchObject({ code: 0, stderr: "" });
    expect(r.stdout).toMatch(new RegExp(`^${name}\\s+false`, "m"));
  });

  it("is --kubeconfig over KUBECONFIG", async () => {
    const r = await run(["get", "addons", "--kubeconfig", hubKubeconfig], { KUBECONFIG: deadKubeconfig });
    expect(r).toEqual({ code: 0, stdout: "No add-ons enabled.\n", stderr: "" });
  });
});

// What a hub admin runs when the join token has expired (install hub's expires after 24 hours).
describe("token create", () => {
  type Secret = { metadata: { creationTimestamp: string }; type: string; data?: Record<string, string> };
  const field = (s: Secret | undefined, key: string) => (s?.data?.[key] === undefined ? undefined : Buffer.from(s.data[key]!, "base64").toString());
  async function tokenOf(r: Result): Promise<{ id: string; secret: Secret | undefined }> {
    const token = /^ {4}ocmf join --hub-token (\S+) --hub-apiserver https:\/\/\S+ --hub-ca-data \S+ --cluster-name <cluster_name>$/m.exec(r.stdout)?.[1];
    expect(token, r.stdout).toMatch(/^[a-z0-9]{6}\.[a-z0-9]{16}$/);
    const id = token!.split(".")[0]!;
    return { id, secret: await admin.get<Secret & { metadata: { name: string } }>(SecretResource, `bootstrap-token-${id}`, "kube-system") };
  }
  const lifetimeMs = (s: Secret | undefined) => new Date(field(s, "expiration")!).getTime() - new Date(s!.metadata.creationTimestamp).getTime();

  it.each([
    { name: "without --ttl, 24 hours, as kubeadm's", args: [] as string[], ttlMs: 24 * 3_600_000 },
    { name: "with --ttl 90m, 90 minutes", args: ["--ttl", "90m"], ttlMs: 90 * 60_000 },
  ])("makes a bootstrap token for the join group that expires $name, and prints the join command with it", async ({ args, ttlMs }) => {
    const r = await run(["token", "create", "--kubeconfig", hubKubeconfig, ...args]);
    expect(r).toMatchObject({ code: 0, stderr: "" });
    const { id, secret } = await tokenOf(r);
    expect(secret?.type).toBe("bootstrap.kubernetes.io/token");
    expect(field(secret, "auth-extra-groups")).toBe("system:bootstrappers:managedcluster");
    expect(Math.abs(lifetimeMs(secret) - ttlMs)).toBeLessThanOrEqual(60_000);
    expect(r.stdout).toContain(`Bootstrap token ${id} (kube-system/bootstrap-token-${id}) expires ${field(secret, "expiration")}.`);
  });

  it("with --ttl 0 makes a token that never expires, and says so", async () => {
    const r = await run(["token", "create", "--ttl", "0", "--kubeconfig", hubKubeconfig]);
    expect(r).toMatchObject({ code: 0, stderr: "" });
    const { id, secret } = await tokenOf(r);
    expect(secret).toBeDefined();
    expect(field(secret, "expiration")).toBeUndefined();
    expect(r.stdout).toContain(`Bootstrap token ${id} (kube-system/bootstrap-token-${id}) does not expire.`);
  });

  it("writes --output-bootstrap-kubeconfig over a world-readable file as a new file only its owner can read", async () => {
    const file = join(dir, "token-bootstrap.kubeconfig");
    writeFileSync(file, "old\n");
    chmodSync(file, 0o644);
    const r = await run(["token", "create", "--kubeconfig", hubKubeconfig, "--output-bootstrap-kubeconfig", file]);
    expect(r).toMatchObject({ code: 0, stderr: "" });
    const { id } = await tokenOf(r);
    expect((statSync(file).mode & 0o777).toString(8)).toBe("600");
    expect(readFileSync(file, "utf8")).toContain(`token: ${id}.`);
    expect(readdirSync(dir).filter((f) => f.startsWith(".token-bootstrap.kubeconfig"))).toEqual([]);
  });

  it("refuses a file in a folder that does not exist, with the reason, and leaves no token behind", async () => {
    const before = await admin.list(SecretResource, { namespace: "kube-system" });
    const r = await run(["token", "create", "--kubeconfig", hubKubeconfig, "--output-bootstrap-kubeconfig", join(dir, "missing", "b.kubeconfig")]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`cannot write ${join(dir, "missing", "b.kubeconfig")}`);
    const after = await admin.list(SecretResource, { namespace: "kube-system" });
    expect(after.items.map((s) => s.metadata.name).sort()).toEqual(before.items.map((s) => s.metadata.name).sort());
  });
});
