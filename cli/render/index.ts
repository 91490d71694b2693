// Manifests for running OCM on Knative, rendered from the functions' func.yaml: `renderHub` and
// `renderSpoke` return plain objects; `toYaml` writes them as one multi-document file.
import { stringify } from "yaml";
import type { Manifest } from "./objects.ts";

export { renderHub, HubNamespaceDefault, type HubOptions } from "./hub.ts";
export { renderSpoke, type SpokeOptions } from "./spoke.ts";
export { partOfSelector, PartOfLabel, PartOf, type Manifest, type CommonOptions, type Workloads } from "./objects.ts";

export function toYaml(objects: readonly Manifest[], header?: string): string {
  const docs = objects.map((o) => stringify(o, { lineWidth: 0 }));
  const head = header ? `${header.trimEnd().split("\n").map((l) => `# ${l}`.trimEnd()).join("\n")}\n` : "";
  return head + docs.join("---\n");
}
