// Packs an add-on's rendered objects into its deploy ManifestWorks addon-<a>-deploy-<i> as sdk-go's
// work builder does (80 % of 500 KiB per work): objects already in a work stay there, new ones go,
// biggest first, into the existing work with the most room or into new works; emptied works go.
// Pure: objects and existing works in, works to apply and names to delete out.
import type { KubeObject } from "../../shared/kube/client.ts";
import type { ManifestConfigOption, ManifestWork } from "../../shared/api/work.ts";
import type { OwnerReference } from "../../shared/api/meta.ts";
import { AddOnAnnotation, AddOnLabel } from "../../shared/api/addon.ts";
import { WorkAnnotation } from "../../shared/api/work.ts";
import { AddOnManifestLimitBytes, ManifestLimitThreshold, deployWorkName, deployWorkPrefix } from "../../shared/api/addon-strings.ts";
import { goJson } from "./spec-hash.ts";

type Json = Record<string, unknown>;

export type WorkPlanInput = {
  addon: string;
  namespace: string; // the cluster namespace
  objects: readonly KubeObject[];
  existing: readonly ManifestWork[];
  owner: OwnerReference;
  // status.configReferences' desired configs as "<resource>.<group>/<namespace>/<name>" → spec hash
  configSpecHashes: Record<string, string>;
  manifestConfigs: ManifestConfigOption[];
  limitBytes?: number;
};

export type WorkPlan = { apply: ManifestWork[]; remove: string[] };

// What Go's Manifest.Size() counts: the JSON encoder's output, trailing newline included.
export const manifestSize = (m: unknown) => Buffer.byteLength(goJson(m)) + 1;

const manifestKey = (m: KubeObject) => `${m.apiVersion ?? ""}|${m.kind ?? ""}|${m.metadata.namespace ?? ""}|${m.metadata.name ?? ""}`;

export const deployWorkIndex = (addon: string, name: string): number | undefined => {
  const prefix = deployWorkPrefix(addon);
  if (!name.startsWith(prefix)) return undefined;
  const rest = name.slice(prefix.length);
  return /^\d+$/.test(rest) ? Number(rest) : undefined;
};

export function planWorks(i: WorkPlanInput): WorkPlan {
  const limit = Math.trunc((i.limitBytes ?? AddOnManifestLimitBytes) * ManifestLimitThreshold);
  const required = new Map<string, KubeObject>();
  for (const o of i.objects) required.set(manifestKey(o), o);

  const existing = i.existing
    .filter((w) => deployWorkIndex(i.addon, w.metadata.name) !== undefined)
    .sort((a, b) => deployWorkIndex(i.addon, a.metadata.name)! - deployWorkIndex(i.addon, b.metadata.name)!);
  const updated = existing.map((w) => {
    const manifests: KubeObject[] = [];
    for (const m of (w.spec?.workload?.manifests ?? []) as KubeObject[]) {
      const want = required.get(manifestKey(m));
      if (!want) continue;
      manifests.push(want);
      required.delete(manifestKey(m));
    }
    const used = manifests.reduce((n, m) => n + manifestSize(m), 0);
    return { name: w.metadata.name, manifests, buffer: used > limit ? 0 : limit - used };
  });

  // Biggest first; the sort is stable, so equal sizes keep the template's order.
  const fresh = [...required.values()].map((m) => ({ m, size: manifestSize(m) })).sort((a, b) => b.size - a.size);
  const overflow: { m: KubeObject; size: number }[] = [];
  for (const f of fresh) {
    const roomiest = updated.reduce<(typeof updated)[number] | undefined>((best, w) => (w.buffer > (best?.buffer ?? 0) ? w : best), undefined);
    if (roomiest && f.size < roomiest.buffer) {
      roomiest.manifests.push(f.m);
      roomiest.buffer -= f.size;
    } else overflow.push(f);
  }

  // New works take the lowest free indexes (sdk-go counts from the number of existing works, which can
  // land on a name still in use when the existing indexes have a gap).
  const taken = new Set(updated.map((w) => w.name));
  let next = 0;
  const nextName = () => {
    while (taken.has(deployWorkName(i.addon, next))) next++;
    const name = deployWorkName(i.addon, next);
    taken.add(name);
    return name;
  };
  const created: { name: string; manifests: KubeObject[] }[] = [];
  let current: { name: string; manifests: KubeObject[] } | undefined;
  let total = 0;
  for (const f of overflow) {
    if (!current || total + f.size >= limit) {
      current = { name: nextName(), manifests: [] };
      created.push(current);
      total = 0;
    }
    current.manifests.push(f.m);
    total += f.size;
  }

  const build = (name: string, manifests: KubeObject[]) => buildWork(i, name, manifests);
  return {
    apply: [...created.map((w) => build(w.name, w.manifests)), ...updated.filter((w) => w.manifests.length).map((w) => build(w.name, w.manifests))],
    remove: updated.filter((w) => !w.manifests.length).map((w) => w.name),
  };
}

function buildWork(i: WorkPlanInput, name: string, manifests: KubeObject[]): ManifestWork {
  const orphans = manifests.filter((m) => (m.metadata as { annotations?: Record<string, string> }).annotations?.[AddOnAnnotation.DeletionOrphan] !== undefined);
  const hashes = Object.keys(i.configSpecHashes).length ? { annotations: { [WorkAnnotation.ConfigSpecHash]: goJson(i.configSpecHashes) } } : {};
  return {
    metadata: { name, namespace: i.namespace, labels: { [AddOnLabel.AddonName]: i.addon }, ...hashes, ownerReferences: [i.owner] },
    spec: {
      workload: { manifests: manifests as Json[] },
      ...(orphans.length
        ? { deleteOption: { propagationPolicy: "SelectivelyOrphan" as const, selectivelyOrphans: { orphaningRules: orphans.map(orphaningRule) } } }
        : {}),
      ...(i.manifestConfigs.length ? { manifestConfigs: i.manifestConfigs } : {}),
    },
  };
}

function orphaningRule(m: KubeObject) {
  const apiVersion = m.apiVersion ?? "";
  const group = apiVersion.includes("/") ? apiVersion.slice(0, apiVersion.indexOf("/")) : "";
  return { group, resource: guessResource(m.kind ?? ""), namespace: m.metadata.namespace ?? "", name: m.metadata.name ?? "" };
}

// apimachinery's UnsafeGuessKindToResource.
export function guessResource(kind: string): string {
  const singular = kind.toLowerCase();
  if (singular.endsWith("s")) return `${singular}es`;
  if (singular.endsWith("y")) return `${singular.slice(0, -1)}ies`;
  return `${singular}s`;
}

// "<resource>.<group>/<namespace>/<name>" → spec hash, from status.configReferences (addon-framework ConfigsToMap).
export function configSpecHashes(refs: readonly { group?: string; resource: string; desiredConfig?: { namespace?: string; name: string; specHash?: string } }[]): Record<string, string> {
  const map: Record<string, string> = {};
  for (const r of refs) {
    if (!r.desiredConfig) continue;
    const resource = r.group ? `${r.resource}.${r.group}` : r.resource;
    map[`${resource}/${r.desiredConfig.namespace ?? ""}/${r.desiredConfig.name}`] = r.desiredConfig.specHash ?? "";
  }
  return map;
}

// True when every field `want` sets is present with the same value in `have`: the API server adds
// defaults (feedbackScrapeType, group: "") that a desired spec leaves out.
export function covers(have: unknown, want: unknown): boolean {
  if (want === undefined) return true;
  if (Array.isArray(want)) return Array.isArray(have) && have.length === want.length && want.every((w, k) => covers(have[k], w));
  if (want !== null && typeof want === "object") {
    if (have === null || typeof have !== "object" || Array.isArray(have)) return false;
    return Object.entries(want as Json).every(([k, w]) => covers((have as Json)[k], w));
  }
  return have === want;
}
