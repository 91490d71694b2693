// Event sources from the functions' watches (shared/sdk.ts): one source per watched kind and cluster,
// shared by every function that watches it, as narrow as they all allow.
import type { ApiResource } from "../../shared/api/meta.ts";
import type { Watch } from "../../shared/sdk.ts";

export type Source = {
  cluster: string;
  resource: ApiResource;
  mode: "Resource" | "Reference";
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
};

// A scope field all the watches of a kind agree on is kept; one they differ on is dropped, so the kind is
// watched wider and each function skips what is not in its own scope (shared/sdk.ts keysOf). The mode:
// Resource when any function needs the object in the event, else Reference ("Either" takes the cheaper).
export function mergeWatches(watches: readonly Watch<unknown>[]): Source[] {
  const groups = new Map<string, Watch<unknown>[]>();
  for (const w of watches) {
    const id = `${w.cluster}\n${w.resource.group}/${w.resource.kind}`;
    groups.set(id, [...(groups.get(id) ?? []), w]);
  }
  return [...groups.values()].map((ws) => {
    const [first] = ws as [Watch<unknown>, ...Watch<unknown>[]];
    const agreed = (field: "namespace" | "labelSelector" | "fieldSelector") => (ws.every((w) => w[field] === first[field]) ? first[field] : undefined);
    const namespace = agreed("namespace");
    const labelSelector = agreed("labelSelector");
    const fieldSelector = agreed("fieldSelector");
    return {
      cluster: first.cluster,
      resource: { ...first.resource },
      mode: ws.some((w) => (w.mode ?? "Resource") === "Resource") ? "Resource" : "Reference",
      ...(namespace !== undefined ? { namespace } : {}),
      ...(labelSelector !== undefined ? { labelSelector } : {}),
      ...(fieldSelector !== undefined ? { fieldSelector } : {}),
    };
  });
}

// A watch's label selector as a LabelSelector object (shared/label-match.ts).
export { labelSelectorObject } from "../../shared/label-match.ts";
