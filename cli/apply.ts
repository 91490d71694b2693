// Putting rendered objects on a cluster as `kubectl apply --server-side --force-conflicts` does: one
// apply patch per object under field manager `ocmf`, in an order that lets each object land (CRDs
// first and Established, then namespaces, identities, RBAC, admission policies, secrets, workloads and
// the Knative objects), and the reverse of that order for removal.
import type { Manifest } from "./render/index.ts";
import { CustomResourceDefinitionResource } from "../shared/api/kube.ts";
import { resourcePath, type KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { Discovery, typeName, type TypeRef } from "./discovery.ts";
import { again } from "./transient.ts";
import { sleep } from "../shared/timers.ts";

export const FieldManager = "ocmf";

// Kinds in the order they are applied; a kind not listed goes after all of them.
const order: readonly string[] = [
  "CustomResourceDefinition",
  "Namespace",
  "ServiceAccount",
  "ClusterRole",
  "Role",
  "ClusterRoleBinding",
  "RoleBinding",
  "ValidatingAdmissionPolicy",
  "ValidatingAdmissionPolicyBinding",
  "ConfigMap",
  "Secret",
  "Deployment",
  "Broker",
  "Service",
  "Trigger",
  "ApiServerSource",
  "PingSource",
  "ContainerSource",
];
export const rankOf = (t: TypeRef) => {
  const i = order.indexOf(t.kind);
  return i < 0 ? order.length : i;
};

// The objects grouped by kind, each group in apply order, objects in render order within it.
export function applyGroups<T extends TypeRef>(objects: readonly T[]): T[][] {
  const groups = new Map<string, T[]>();
  for (const o of objects) {
    const key = typeName(o);
    groups.set(key, [...(groups.get(key) ?? []), o]);
  }
  return [...groups.values()].sort((a, b) => rankOf(a[0]!) - rankOf(b[0]!));
}

export const isCrd = (t: TypeRef) => t.kind === "CustomResourceDefinition" && t.apiVersion.startsWith("apiextensions.k8s.io/");

export function plural(n: number, kind: string): string {
  if (n === 1) return `${n} ${kind}`;
  if (/[^aeiou]y$/.test(kind)) return `${n} ${kind.slice(0, -1)}ies`;
  return `${n} ${kind}${kind.endsWith("s") ? "es" : "s"}`;
}

// The kinds the cluster must already serve: every kind but those the objects' own CRDs bring.
export async function missingKinds(discovery: Discovery, objects: readonly Manifest[]): Promise<string[]> {
  const brought = new Set(
    objects.filter(isCrd).flatMap((crd) => {
      const spec = crd.spec as { group: string; names: { kind: string }; versions: { name: string }[] };
      return spec.versions.map((v) => `${spec.group}/${v.name} ${spec.names.kind}`);
    }),
  );
  const kinds = [...new Map(objects.map((o) => [typeName(o), o])).values()].filter((o) => !brought.has(typeName(o)));
  const served = await Promise.all(kinds.map((k) => discovery.isServed(k)));
  return kinds.filter((_, i) => !served[i]).map(typeName);
}

type Crd = KubeObject & { status?: { conditions?: { type: string; status: string }[] } };
const isEstablished = (crd: Crd | undefined) => crd?.status?.conditions?.some((c) => c.type === "Established" && c.status === "True") ?? false;

export type ApplyOptions = {
  waitForCrds: boolean; // wait for every CRD to be Established (and served) before applying the rest
  deadline: number; // epoch ms
  print: (line: string) => void;
};

async function until<T>(what: () => string, deadline: number, check: () => Promise<T | undefined>): Promise<T> {
  for (let delay = 100; ; delay = Math.min(delay * 1.5, 1_000)) {
    const got = await check();
    if (got !== undefined) return got;
    if (Date.now() > deadline) throw new Error(what());
    await sleep(delay);
  }
}

// One server-side apply: the object is the whole of what this manager owns; `force` takes over fields
// another manager set, as --force-conflicts does.
export async function applyObject(client: KubeClient, discovery: Discovery, o: Manifest): Promise<void> {
  const r = await discovery.resourceOf(o);
  if (r.namespaced && !o.metadata.namespace) throw new Error(`${o.kind} ${o.metadata.name} has no namespace`);
  const path = `${resourcePath(r, { name: o.metadata.name, namespace: r.namespaced ? o.metadata.namespace : undefined })}?fieldManager=${FieldManager}&force=true`;
  await again(() => client.request("PATCH", path, JSON.stringify(o), "application/apply-patch+yaml"));
}

// At most `limit` at a time: objects of one kind do not depend on each other.
async function inParallel<T>(items: readonly T[], limit: number, each: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) await each(items[next++]!);
    }),
  );
}

export async function applyAll(client: KubeClient, objects: readonly Manifest[], o: ApplyOptions): Promise<void> {
  const discovery = new Discovery(client);
  for (const group of applyGroups(objects)) {
    const first = group[0]!;
    await inParallel(group, 8, async (obj) => {
      try {
        await applyObject(client, discovery, obj);
      } catch (err) {
        throw new Error(`applying ${obj.kind} ${obj.metadata.namespace ? `${obj.metadata.namespace}/` : ""}${obj.metadata.name}: ${err instanceof Error ? err.message : String(err)}`);
      }
    });
    o.print(`applied ${plural(group.length, first.kind)}`);
    if (isCrd(first) && o.waitForCrds) {
      await until(() => `CRDs not Established in time: ${group.map((c) => c.metadata.name).join(", ")}`, o.deadline, async () => {
        const got = await Promise.all(group.map((c) => again(() => client.get<Crd>(CustomResourceDefinitionResource, c.metadata.name))));
        return got.every(isEstablished) ? true : undefined;
      });
      // Discovery follows an Established CRD a moment later; what is applied next may be of its kinds.
      await until(() => `CRDs Established but not served in time: ${group.map((c) => c.metadata.name).join(", ")}`, o.deadline, async () => {
        discovery.forget();
        const served = await Promise.all(
          group.map((c) => {
            const spec = c.spec as { group: string; names: { kind: string }; versions: { name: string; served?: boolean }[] };
            const v = spec.versions.find((x) => x.served !== false)!;
            return discovery.isServed({ apiVersion: `${spec.group}/${v.name}`, kind: spec.names.kind });
          }),
        );
        return served.every(Boolean) ? true : undefined;
      });
      o.print(`${plural(group.length, "CRD")} Established`);
    }
  }
}
