// Running functions in tests as production runs them: under their own RBAC identity (from
// manifests/rbac/<function>.yaml), fed ApiServerSource-shaped CloudEvents, directly or over HTTP.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Server } from "node:http";
import { randomUUID } from "node:crypto";
import { parseAllDocuments } from "yaml";
import faas from "faas-js-runtime";
import type { LocalCluster } from "../../shared/control-plane/clusters.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { ClusterRoleBindingResource, ClusterRoleResource, NamespaceResource, RoleBindingResource, RoleResource } from "../../shared/api/kube.ts";
import { createOrUpdate } from "../../shared/apply.ts";
import { jsonLog, type Io } from "../../shared/harness.ts";
import { clientsFromKubeconfigs } from "../../shared/kube/clients.ts";
import type { Clock } from "../../shared/clock.ts";
import { systemClock } from "../../shared/clock.ts";

const root = join(import.meta.dirname, "..", "..");

// Applies the function's ClusterRoles/Roles from manifests/rbac/<name>.yaml on the cluster, binds them
// to a user named after the function, and returns that user's kubeconfig.
export async function identityFor(cluster: LocalCluster, fn: string, suffix = ""): Promise<string> {
  const admin = KubeClient.fromKubeconfig(cluster.adminKubeconfig);
  const user = `ocm-functions:${fn}${suffix}`;
  const docs = parseAllDocuments(readFileSync(join(root, "manifests", "rbac", `${fn}.yaml`), "utf8")).map((d) => d.toJS() as KubeObject & { rules?: unknown });
  const subjects = [{ kind: "User", apiGroup: "rbac.authorization.k8s.io", name: user }];
  for (const doc of docs) {
    if (doc.kind === "ClusterRole") {
      await createOrUpdate(admin, ClusterRoleResource, doc, ["rules"]);
      await createOrUpdate(admin, ClusterRoleBindingResource, { metadata: { name: `${doc.metadata.name}${suffix}` }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: doc.metadata.name }, subjects }, ["subjects"]);
    } else if (doc.kind === "Role") {
      await createNamespaceIfMissing(admin, doc.metadata.namespace!);
      await createOrUpdate(admin, RoleResource, doc, ["rules"]);
      await createOrUpdate(admin, RoleBindingResource, { metadata: { name: `${doc.metadata.name}${suffix}`, namespace: doc.metadata.namespace }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: doc.metadata.name }, subjects }, ["subjects"]);
    }
  }
  admin.close();
  return cluster.kubeconfigFor({ user });
}

async function createNamespaceIfMissing(admin: KubeClient, name: string): Promise<void> {
  await createOrUpdate(admin, NamespaceResource, { metadata: { name } }, []);
}

export function testIo<C>(kubeconfigs: Record<string, string>, config: C, clock: Clock = systemClock): Io<C> {
  return { clock, config, log: jsonLog("test", !process.env.DEBUG_FUNCTIONS), cluster: clientsFromKubeconfigs(kubeconfigs) };
}

// The CloudEvent Knative's ApiServerSource would send for obj, plus our cluster extension.
export function objectEvent(o: { cluster: string; object: KubeObject; verb?: "add" | "update" | "delete"; mode?: "resource" | "ref" }): Record<string, unknown> {
  const mode = o.mode ?? "resource";
  const { apiVersion = "", kind = "", metadata } = o.object;
  return {
    specversion: "1.0",
    id: randomUUID(),
    source: `https://${o.cluster}.invalid`,
    type: `dev.knative.apiserver.${mode}.${o.verb ?? "update"}`,
    datacontenttype: "application/json",
    cluster: o.cluster,
    kind,
    apiversion: apiVersion,
    name: metadata.name,
    namespace: metadata.namespace ?? "",
    data: mode === "resource" ? o.object : { apiVersion, kind, name: metadata.name, namespace: metadata.namespace },
  };
}

export function tickEvent(cluster?: string): Record<string, unknown> {
  return { specversion: "1.0", id: randomUUID(), source: "/apis/v1/namespaces/ocm/pingsources/resync", type: "dev.knative.sources.ping", ...(cluster ? { cluster } : {}) };
}

// The function behind faas-js-runtime's real HTTP server, on a free loopback port.
export async function startFunctionServer(handle: (context: unknown, event?: unknown) => Promise<unknown>): Promise<{ url: string; close(): Promise<void> }> {
  const server: Server = await faas.start(handle as never, { port: 0, logLevel: "silent" } as never);
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}/`, close: () => new Promise<void>((r) => server.close(() => r())) };
}

// POST in binary mode, as the ApiServerSource adapter does.
export async function postEvent(url: string, ce: Record<string, unknown>): Promise<{ status: number; body: string }> {
  const headers: Record<string, string> = { "content-type": "application/json" };
  for (const [k, v] of Object.entries(ce)) if (k !== "data" && k !== "datacontenttype") headers[`ce-${k}`] = String(v);
  const res = await fetch(url, { method: "POST", headers, body: ce.data === undefined ? "" : JSON.stringify(ce.data) });
  return { status: res.status, body: await res.text() };
}

