// Where a cluster serves any kind, read from its discovery documents (/api/v1, /apis/<group>/<version>),
// so rendered objects of kinds this project has no ApiResource for (Knative's) can be applied and found.
import type { ApiResource } from "../shared/api/meta.ts";
import type { KubeClient } from "../shared/kube/client.ts";
import { KubeError } from "../shared/kube/errors.ts";
import { again } from "./transient.ts";

export type TypeRef = { apiVersion: string; kind: string };

type ResourceList = { resources: { name: string; kind: string; namespaced: boolean }[] };

export class NotServedError extends Error {
  override name = "NotServedError";
}

export const typeName = (t: TypeRef) => `${t.apiVersion} ${t.kind}`;

export class Discovery {
  private readonly lists = new Map<string, Promise<ResourceList | undefined>>();
  private readonly client: KubeClient;

  constructor(client: KubeClient) {
    this.client = client;
  }

  // The resource serving a kind; NotServedError when the cluster does not serve it (yet: a CRD just
  // established shows up in discovery a moment later, so callers that expect it ask again after forget()).
  async resourceOf(t: TypeRef): Promise<ApiResource> {
    const [group, version] = t.apiVersion.includes("/") ? (t.apiVersion.split("/") as [string, string]) : ["", t.apiVersion];
    const list = await this.list(t.apiVersion);
    const r = list?.resources.find((x) => x.kind === t.kind && !x.name.includes("/"));
    if (!r) throw new NotServedError(`${typeName(t)} is not served`);
    return { group, version, kind: t.kind, plural: r.name, namespaced: r.namespaced };
  }

  async isServed(t: TypeRef): Promise<boolean> {
    try {
      await this.resourceOf(t);
      return true;
    } catch (err) {
      if (err instanceof NotServedError) return false;
      throw err;
    }
  }

  forget(apiVersion?: string): void {
    if (apiVersion) this.lists.delete(apiVersion);
    else this.lists.clear();
  }

  private list(apiVersion: string): Promise<ResourceList | undefined> {
    let got = this.lists.get(apiVersion);
    if (!got) {
      const path = apiVersion.includes("/") ? `/apis/${apiVersion}` : `/api/${apiVersion}`;
      got = again(() => this.client.request<ResourceList>("GET", path)).catch((err: unknown) => {
        if (err instanceof KubeError && err.code === 404) return undefined; // the group/version is not served
        this.lists.delete(apiVersion); // a failed read is not remembered
        throw err;
      });
      this.lists.set(apiVersion, got);
    }
    return got;
  }
}
