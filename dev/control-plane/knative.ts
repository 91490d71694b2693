// Knative's own manifests for test clusters, from the Go module cache at the versions
// tools/knative-webhooks pins: where each module's source is, and its CRDs, so a local cluster can
// serve Knative's kinds (Service, Broker, Trigger, the sources) without Knative's controllers.
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";

const repoRoot = join(import.meta.dirname, "..", "..");

export type KnativeModule = "serving" | "eventing";
export type KnativeManifest = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string }; [field: string]: unknown };

export function yamlIn(moduleDir: string, dir: string): string[] {
  return readdirSync(join(moduleDir, dir))
    .filter((f) => f.endsWith(".yaml"))
    .sort()
    .map((f) => `${dir}/${f}`);
}

// The Knative modules' source in the Go module cache (downloaded when missing).
export function knativeModuleDirs(): Record<KnativeModule, string> {
  const cwd = join(repoRoot, "tools", "knative-webhooks");
  const env = { ...process.env, GOTOOLCHAIN: "local", GOFLAGS: "-mod=mod" };
  const modules = ["knative.dev/serving", "knative.dev/eventing"];
  execFileSync("go", ["mod", "download", ...modules], { cwd, env, stdio: ["ignore", "ignore", "inherit"] });
  const lines = execFileSync("go", ["list", "-m", "-f", "{{.Path}} {{.Dir}}", ...modules], { cwd, env }).toString().trim().split("\n");
  const dir = (m: string) => {
    const d = lines.find((l) => l.startsWith(`${m} `))?.slice(m.length + 1);
    if (!d || !existsSync(d)) throw new Error(`${m} is not in the Go module cache (go list said: ${lines.join("; ")})`);
    return d;
  };
  return { serving: dir(modules[0]!), eventing: dir(modules[1]!) };
}

export function readKnativeManifests(moduleDir: string, files: readonly string[]): KnativeManifest[] {
  return files
    .flatMap((f) => parseAllDocuments(readFileSync(join(moduleDir, f), "utf8")).map((d) => d.toJS() as KnativeManifest | null))
    .filter((d): d is KnativeManifest => d !== null);
}

// Serving's and Eventing's CRDs as their releases install them, except that a CRD converting between
// versions through Eventing's webhook (PingSource, EventType) converts by apiVersion alone, since no
// webhook runs: its versions' fields are the same ones, so the objects we render read back alike.
export function knativeCrds(dirs: Record<KnativeModule, string> = knativeModuleDirs()): KnativeManifest[] {
  const crds = [...readKnativeManifests(dirs.serving, yamlIn(dirs.serving, "config/core/300-resources")), ...readKnativeManifests(dirs.eventing, yamlIn(dirs.eventing, "config/core/resources"))].filter(
    (d) => d.kind === "CustomResourceDefinition",
  );
  return crds.map((crd) => ((crd.spec as { conversion?: { strategy?: string } }).conversion?.strategy === "Webhook" ? { ...crd, spec: { ...(crd.spec as object), conversion: { strategy: "None" } } } : crd));
}
