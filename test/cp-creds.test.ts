// The ClusterProfile credentials plugin (components/cp-creds) as client-go runs an exec plugin: a process
// with KUBERNETES_EXEC_INFO, against a real hub under a consumer's own identity. It prints the synced
// token as an ExecCredential, and says why on stderr with exit code 1, in OCM's plugin's words, when
// anything it needs is missing; it reads only its own namespace's Secret.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { NamespaceResource, RoleBindingResource, RoleResource, SecretResource } from "../shared/api/kube.ts";
import { startHub, type Hub } from "./support/fixtures.ts";
import { eventually } from "./support/eventually.ts";
import { KubeClient } from "../shared/kube/client.ts";

const NS = "consumer";
const plugin = join(import.meta.dirname, "..", "components", "cp-creds", "main.ts");
let hub: Hub;
let dir: string;
let kubeconfig: string;

beforeAll(async () => {
  hub = await startHub("hub");
  dir = mkdtempSync(join(tmpdir(), "cp-creds-"));
  for (const name of [NS, "elsewhere"]) await hub.admin.create(NamespaceResource, { metadata: { name } });
  for (const ns of [NS, "elsewhere"]) await hub.admin.create(SecretResource, { metadata: { name: "cluster1-multikueue", namespace: ns }, data: { token: Buffer.from(`token-in-${ns}`).toString("base64") } });
  await hub.admin.create(SecretResource, { metadata: { name: "cluster1-empty", namespace: NS }, data: {} });
  await hub.admin.create(RoleResource, { metadata: { name: "consumer", namespace: NS }, rules: [{ apiGroups: [""], resources: ["secrets"], verbs: ["get"] }] });
  await hub.admin.create(RoleBindingResource, { metadata: { name: "consumer", namespace: NS }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "consumer" }, subjects: [{ kind: "User", apiGroup: "rbac.authorization.k8s.io", name: "consumer" }] });
  const text = await hub.cluster.kubeconfigFor({ user: "consumer" });
  kubeconfig = join(dir, "hub.kubeconfig");
  writeFileSync(kubeconfig, text, { mode: 0o600 });
  const probe = KubeClient.fromKubeconfig(text);
  await eventually(() => probe.get(SecretResource, "cluster1-multikueue", NS));
  probe.close();
});
afterAll(async () => {
  await hub?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const execInfo = (config?: object) => JSON.stringify({ apiVersion: "client.authentication.k8s.io/v1", kind: "ExecCredential", spec: { interactive: false, cluster: { server: "https://cluster1.example.com:6443", ...(config ? { config } : {}) } } });

function run(args: string[], env: Record<string, string | undefined>): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [plugin, ...args], { env: { PATH: process.env.PATH, HOME: dir, KUBECONFIG: kubeconfig, NAMESPACE: NS, ...env } as NodeJS.ProcessEnv }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

describe("the ClusterProfile credentials plugin", () => {
  it("prints the token synced for the cluster the exec extension names, as a client.authentication.k8s.io/v1 ExecCredential", async () => {
    const r = await run(["--managed-serviceaccount=multikueue"], { KUBERNETES_EXEC_INFO: execInfo({ clusterName: "cluster1" }) });
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ kind: "ExecCredential", apiVersion: "client.authentication.k8s.io/v1", spec: { interactive: false }, status: { token: "token-in-consumer" } });
  });

  it.each([
    { name: "without --managed-serviceaccount", args: [], info: execInfo({ clusterName: "cluster1" }), says: "--managed-serviceaccount flag is required" },
    { name: "without KUBERNETES_EXEC_INFO (provideClusterInfo off)", args: ["--managed-serviceaccount=multikueue"], info: undefined, says: "failed to read KUBERNETES_EXEC_INFO: KUBERNETES_EXEC_INFO env var is unset or empty" },
    { name: "without the exec extension's config", args: ["--managed-serviceaccount=multikueue"], info: execInfo(), says: "missing ExecCredential.Spec.Cluster.Config" },
    { name: "without a cluster name in it", args: ["--managed-serviceaccount=multikueue"], info: execInfo({}), says: "missing clusterName in ExecCredential.Spec.Cluster.Config" },
    { name: "for a token never synced here", args: ["--managed-serviceaccount=other"], info: execInfo({ clusterName: "cluster1" }), says: "failed to get synced credential secret consumer/cluster1-other" },
    { name: "for a synced Secret without a token", args: ["--managed-serviceaccount=empty"], info: execInfo({ clusterName: "cluster1" }), says: 'secret consumer/cluster1-empty missing or empty "token" key' },
  ])("exits 1 $name, saying so on stderr", async ({ args, info, says }) => {
    const r = await run(args, { KUBERNETES_EXEC_INFO: info });
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr).toContain(`[open-cluster-management] ${says}`);
  });

  it("reads only the consumer's own namespace: pointed at another one, its identity is refused", async () => {
    const r = await run(["--managed-serviceaccount=multikueue"], { KUBERNETES_EXEC_INFO: execInfo({ clusterName: "cluster1" }), NAMESPACE: "elsewhere" });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/failed to get synced credential secret elsewhere\/cluster1-multikueue: .*403/);
  });
});
