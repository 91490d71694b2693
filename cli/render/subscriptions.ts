// func.yaml's deploy.subscriptions, derived from each function's definition (its watches and whether
// ticks wake it): scripts/render-manifests.ts writes them, test/render.test.ts fails when they are stale.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { YAMLSeq, isMap, parseDocument } from "yaml";
import type { Subscription } from "../../shared/sdk.ts";
import { definitionOf } from "./definitions.ts";
import type { FunctionDeployment } from "./func-yaml.ts";
import { functionEnv } from "./objects.ts";
import { spokeEnvValues } from "./spoke.ts";

const functionsDir = join(import.meta.dirname, "..", "..", "functions");

// With the settings a default render gives (subscriptions name kinds and event types, which no
// setting changes).
export function derivedSubscriptions(f: FunctionDeployment): Subscription[] {
  const fn = definitionOf(f.name);
  const env = Object.fromEntries(functionEnv(f, spokeEnvValues({})).map((e) => [e.name, e.value]));
  return fn.subscriptions(fn.configFromEnv(env));
}

const Note = " Derived from the watches in reconcile.ts by `npm run gen:manifests`; do not edit.";

// The func.yaml text with its subscriptions replaced by the derived ones, one flow mapping per line;
// every other line (and comment) kept.
export function funcYamlWithDerivedSubscriptions(f: FunctionDeployment): string {
  const file = join(functionsDir, f.name, "func.yaml");
  const doc = parseDocument(readFileSync(file, "utf8"));
  const deploy = doc.get("deploy");
  if (!isMap(deploy)) throw new Error(`${file}: no deploy mapping`);
  const seq = new YAMLSeq();
  for (const s of derivedSubscriptions(f)) {
    const item = doc.createNode(s);
    item.flow = true;
    for (const pair of item.items) if (isMap(pair.value)) pair.value.flow = true;
    seq.items.push(item);
  }
  const old = deploy.get("subscriptions", true);
  seq.commentBefore = Note;
  if (old && typeof old === "object" && "comment" in old && old.comment) seq.comment = old.comment as string;
  deploy.set("subscriptions", seq);
  return doc.toString({ lineWidth: 0 });
}
