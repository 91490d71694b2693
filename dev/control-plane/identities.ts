// Least-privilege identities for functions on local clusters: the RBAC of manifests/rbac/<fn>.yaml,
// bound to a user named after the function, with a client certificate from the cluster's CA.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { ClusterRoleBindingResource, ClusterRoleResource, NamespaceResource, RoleBindingResource, RoleResource } from "../../shared/api/kube.ts";
import { createOrUpdate } from "../../shared/apply.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import type { LocalCluster } from "./clusters.ts";

const rbacDir = join(import.meta.dirname, "..", "..", "manifests", "rbac");

// `rbacFile`: another file than manifests/rbac/<fn>.yaml (a user's function, an example).
export async function identityFor(cluster: LocalCluster, fn: string, suffix = "", rbacFile = join(rbacDir, `${fn}.yaml`)): Promise<string> {
  const admin = KubeClient.fromKubeconfig(cluster.adminKubeconfig);
  const user = `ocm-functions:${fn}${suffix}`;
  const subjects = [{ kind: "User", apiGroup: "rbac.authorization.k8s.io", name: user }];
  const docs = parseAllDocuments(readFileSync(rbacFile, "utf8")).map((d) => d.toJS() as KubeObject & { rules?: unknown });
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
