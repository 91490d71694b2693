// Writes every functions/*/func.yaml's subscriptions (derived from the definitions), then
// manifests/hub/knative.yaml and manifests/spoke/knative.yaml: cli/render with its default options
// (npm run gen:manifests). test/render.test.ts fails when any of them is stale.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { renderedManifests } from "../cli/render/files.ts";
import { readFunctions } from "../cli/render/func-yaml.ts";
import { funcYamlWithDerivedSubscriptions } from "../cli/render/subscriptions.ts";

const root = join(import.meta.dirname, "..");
// func.yaml's subscriptions, from the definitions (cli/render/subscriptions.ts).
for (const f of readFunctions()) {
  const file = join(root, "functions", f.name, "func.yaml");
  const text = funcYamlWithDerivedSubscriptions(f);
  if (readFileSync(file, "utf8") !== text) {
    writeFileSync(file, text);
    console.log(`wrote functions/${f.name}/func.yaml: subscriptions`);
  }
}

// then the manifests, from the func.yaml files just written
for (const { file, yaml, count } of renderedManifests()) {
  mkdirSync(dirname(join(root, file)), { recursive: true });
  writeFileSync(join(root, file), yaml);
  console.log(`wrote ${file}: ${count} objects`);
}
