// Where an arbitrary manifest's kind is served (plural, scope), from the spoke's discovery API. One
// lookup per group/version per invocation: a resolver lives for one reconcile, never in module scope,
// so a CRD created a moment ago is found on the next run.
import type { ApiResource } from "../../shared/api/meta.ts";
import type { KubeClient } from "../../shared/kube/client.ts";
import { isNotFound } from "../../shared/kube/errors.ts";

type ApiResourceList = { resources?: { name: string; kind: string; namespaced: boolean }[] };

export type Resolver = {
  // undefined when the server does not serve that kind; throws when discovery itself fails.
  resourceFor(apiVersion: string, kind: string): Promise<ApiResource | undefined>;
};

export function splitApiVersion(apiVersion: string): { group: string; version: string } {
  const slash = apiVersion.indexOf("/");
  return slash < 0 ? { group: "", version: apiVersion } : { group: apiVersion.slice(0, slash), version: apiVersion.slice(slash + 1) };
}

export function resolver(client: KubeClient): Resolver {
  const lists = new Map<string, Promise<ApiResourceList | undefined>>();
  const listOf = (apiVersion: string) => {
    let p = lists.get(apiVersion);
    if (!p) {
      const { group } = splitApiVersion(apiVersion);
      const path = group ? `/apis/${apiVersion}` : `/api/${apiVersion}`;
      p = client.request<ApiResourceList>("GET", path).catch((err: unknown) => {
        if (isNotFound(err)) return undefined;
        lists.delete(apiVersion); // a failed lookup is not an answer; the next caller asks again
        throw err;
      });
      lists.set(apiVersion, p);
    }
    return p;
  };
  return {
    async resourceFor(apiVersion, kind) {
      const list = await listOf(apiVersion);
      // subresources (deployments/status) share the kind; the resource itself has no slash
      const found = list?.resources?.find((r) => r.kind === kind && !r.name.includes("/"));
      if (!found) return undefined;
      const { group, version } = splitApiVersion(apiVersion);
      return { group, version, kind, plural: found.name, namespaced: found.namespaced };
    },
  };
}

// An applied resource recorded as {group, version, resource, namespace}: enough to address it, since a
// namespace is recorded exactly for namespaced resources.
export function resourceOfRecord(r: { group?: string; version: string; resource: string; namespace?: string }): ApiResource {
  return { group: r.group ?? "", version: r.version, kind: "", plural: r.resource, namespaced: !!r.namespace };
}
