// What OCM's ManifestWork validating webhook rejects (§1.7). We run no webhook on the hub, so the agent
// checks the same rules before applying anything and reports the webhook's message as Applied=False.
import type { KubeObject } from "../../shared/kube/client.ts";

export const DEFAULT_MANIFEST_LIMIT_BYTES = 500 * 1024; // the webhook's --manifestLimit default

type Manifest = Record<string, unknown>;

// undefined when the webhook would have admitted the manifests.
export function refusal(manifests: readonly Manifest[], limitBytes: number): string | undefined {
  if (manifests.length === 0) return "Workload manifests should not be empty";
  // OCM adds up each manifest's raw JSON size (Manifest.Size()), not the list's.
  const size = manifests.reduce((n, m) => n + Buffer.byteLength(JSON.stringify(m)), 0);
  if (size > limitBytes) return `the size of manifests is ${size} bytes which exceeds the ${limitBytes} limit`;
  const seen = new Set<string>();
  for (const m of manifests) {
    const { apiVersion = "", kind = "", metadata } = m as Partial<KubeObject>;
    const meta = (metadata ?? {}) as { name?: string; namespace?: string; generateName?: string };
    if (!meta.name) return "name must be set in manifest";
    if (meta.generateName) return "generateName must not be set in manifest";
    const key = `${apiVersion}/${kind}/${meta.namespace ?? ""}/${meta.name}`;
    if (seen.has(key)) return `duplicate manifest for resource ${meta.namespace ?? ""}/${meta.name} with resource type ${apiVersion}.${kind}`;
    seen.add(key);
  }
  return undefined;
}
