// A function's RBAC, from its definition alone: on the cluster it runs on, get, list and watch on every
// kind it watches there, and the grants its `writes` declare. What spans the cluster goes into one
// ClusterRole, what is confined to a namespace into a Role there, all named after the function. Rules
// on the same resources merge their verbs, so each resource appears once per role.
import type { Grant, MultiClusterFunction, RbacRule } from "../../shared/sdk.ts";
import { watchesOf } from "./definitions.ts";
import { envValue } from "./objects.ts";

export type RoleManifest = { apiVersion: string; kind: "ClusterRole" | "Role"; metadata: { name: string; namespace?: string }; rules: RbacRule[] };

export const functionRoleName = (fn: string) => `open-cluster-management:functions:${fn}`;

// kube's own order for the common verbs; any other verb (approve, renew, escalate, *) follows, sorted
const VERB_ORDER = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"];
const verbRank = (v: string) => (VERB_ORDER.includes(v) ? VERB_ORDER.indexOf(v) : VERB_ORDER.length);
const sortVerbs = (verbs: Iterable<string>) => [...new Set(verbs)].sort((a, b) => verbRank(a) - verbRank(b) || a.localeCompare(b));

export function functionRoles<C>(fn: MultiClusterFunction<C>, config: C, cluster: string, roleName = functionRoleName(fn.definition.name)): RoleManifest[] {
  const d = fn.definition;
  const grants: Grant[] = [
    ...d.watches(config).map((w) => ({ cluster: w.cluster, namespace: w.namespace, why: "watched", apiGroups: [w.resource.group], resources: [w.resource.plural], verbs: ["get", "list", "watch"] })),
    ...(d.writes?.(config) ?? []),
  ].filter((g) => g.cluster === cluster);
  // scope (a namespace, or a role of its own, or "" for the ClusterRole) → what a rule applies to → its verbs
  const scopes = new Map<string, Map<string, Set<string>>>();
  for (const g of grants) {
    if (g.role && g.namespace) throw new Error(`${d.name}: a grant with a role of its own is cluster-wide: ${g.why}`);
    const key = g.namespace ? `ns:${g.namespace}` : g.role ? `role:${g.role}` : "";
    const scope = scopes.get(key) ?? new Map<string, Set<string>>();
    scopes.set(key, scope);
    const target = JSON.stringify({ apiGroups: g.apiGroups, resources: g.resources, resourceNames: g.resourceNames, nonResourceURLs: g.nonResourceURLs });
    const verbs = scope.get(target) ?? new Set<string>();
    for (const v of g.verbs) verbs.add(v);
    scope.set(target, verbs);
  }
  const name = roleName;
  return [...scopes]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([key, rules]) => ({
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: key.startsWith("ns:") ? "Role" : "ClusterRole",
      metadata: key.startsWith("ns:") ? { name, namespace: key.slice(3) } : { name: key ? `${name}:${key.slice(5)}` : name },
      rules: [...rules].sort(([a], [b]) => a.localeCompare(b)).map(([target, verbs]) => ({ ...(JSON.parse(target) as Omit<RbacRule, "verbs">), verbs: sortVerbs(verbs) })),
    }));
}

// A deployed function's roles: its definition with the settings of its container's env, on the cluster
// that env names as its own (OCM_CLUSTER_NAME, which every function reads).
export function deployedRoles(f: { name: string; env: readonly { name: string; value: string }[] }): RoleManifest[] {
  const { fn, config } = watchesOf(f.name, f.env);
  const home = envValue([...f.env], "OCM_CLUSTER_NAME");
  if (!home) throw new Error(`functions/${f.name}/func.yaml: no OCM_CLUSTER_NAME, the cluster the function runs on`);
  return functionRoles(fn, config, home);
}
