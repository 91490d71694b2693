// Least-privilege identities on local clusters, bound to a user named after what they are for, with a
// client certificate from the cluster's CA. A function's roles come from its definition, as `ocmf render`
// makes them (cli/render/rbac.ts, with func.yaml's default settings); the local hub relay's from what the
// hub functions watch (cli/render/hub.ts); another component's (spoke relay, heartbeat) from
// manifests/rbac/<name>.yaml.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { ClusterRoleBindingResource, ClusterRoleResource, NamespaceResource, RoleBindingResource, RoleResource } from "../../shared/api/kube.ts";
import { createOrUpdate } from "../../shared/apply.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { readFunctions } from "../../cli/render/func-yaml.ts";
import { functionEnv } from "../../cli/render/objects.ts";
import { deployedRoles } from "../../cli/render/rbac.ts";
import { spokeEnvValues } from "../../cli/render/spoke.ts";
import { LocalHubRelayIdentity, localHubRelayRole } from "../../cli/render/hub.ts";
import type { LocalCluster } from "./clusters.ts";

const rbacDir = join(import.meta.dirname, "..", "..", "manifests", "rbac");

type RoleDoc = KubeObject & { rules?: unknown };

export function rolesOf(name: string, rbacFile?: string): RoleDoc[] {
  const file = rbacFile ?? join(rbacDir, `${name}.yaml`);
  if (rbacFile || existsSync(file)) return parseAllDocuments(readFileSync(file, "utf8")).map((d) => d.toJS() as RoleDoc);
  if (name === LocalHubRelayIdentity) return [localHubRelayRole() as RoleDoc];
  const f = readFunctions().find((f) => f.name === name);
  if (!f) throw new Error(`no function or component named ${name}: no functions/${name}/ and no manifests/rbac/${name}.yaml`);
  return deployedRoles({ name, env: functionEnv(f, f.side === "spoke" ? spokeEnvValues({}) : {}) }) as RoleDoc[];
}

// `rbacFile`: roles from this file instead (a user's function, an example).
export async function identityFor(cluster: LocalCluster, fn: string, suffix = "", rbacFile?: string): Promise<string> {
  const admin = KubeClient.fromKubeconfig(cluster.adminKubeconfig);
  const user = `ocm-functions:${fn}${suffix}`;
  const subjects = [{ kind: "User", apiGroup: "rbac.authorization.k8s.io", name: user }];
  const docs = rolesOf(fn, rbacFile);
  try {
    for (const doc of docs) {
      const roleRef = { apiGroup: "rbac.authorization.k8s.io", kind: doc.kind, name: doc.metadata.name };
      if (doc.kind === "ClusterRole") {
        await createOrUpdate(admin, ClusterRoleResource, doc, ["rules"]);
        await createOrUpdate(admin, ClusterRoleBindingResource, { metadata: { name: `${doc.metadata.name}${suffix}` }, roleRef, subjects }, ["subjects"]);
      } else if (doc.kind === "Role") {
        await createOrUpdate(admin, NamespaceResource, { metadata: { name: doc.metadata.namespace! } }, []);
        await createOrUpdate(admin, RoleResource, doc, ["rules"]);
        await createOrUpdate(admin, RoleBindingResource, { metadata: { name: `${doc.metadata.name}${suffix}`, namespace: doc.metadata.namespace }, roleRef, subjects }, ["subjects"]);
      }
    }
  } finally {
    admin.close();
  }
  return cluster.kubeconfigFor({ user });
}
