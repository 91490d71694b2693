// Writes manifests/hub/knative.yaml and manifests/spoke/knative.yaml: cli/render with its default
// options, from every functions/*/func.yaml (npm run gen:manifests). test/render.test.ts fails when
// they are stale.
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { renderedManifests } from "../cli/render/files.ts";

const root = join(import.meta.dirname, "..");
for (const { file, yaml, count } of renderedManifests()) {
  mkdirSync(dirname(join(root, file)), { recursive: true });
  writeFileSync(join(root, file), yaml);
  console.log(`wrote ${file}: ${count} objects`);
}
