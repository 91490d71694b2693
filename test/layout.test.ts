// What ships where: shared/ is the runtime library inside every function image, so it imports nothing
// above it; a function imports only shared/ (and its own folder); a component (relay, heartbeat) only
// shared/ and itself. Dev tooling (dev/, cli/, bench/, scripts/, test/) may import anything.
import { describe, it, expect } from "vitest";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

const root = resolve(import.meta.dirname, "..");

function tsFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((entry) => {
    const path = join(dir, entry);
    return statSync(path).isDirectory() ? tsFiles(path) : path.endsWith(".ts") ? [path] : [];
  });
}

// Every relative import of a file, as a path from the repository root.
function importsOf(file: string): string[] {
  const text = readFileSync(file, "utf8");
  return [...text.matchAll(/(?:from|import)\s*\(?\s*["'](\.{1,2}\/[^"']+)["']/g)].map((m) => relative(root, resolve(dirname(file), m[1]!)));
}

const top = (path: string) => path.split("/")[0]!;
const home = (path: string) => path.split("/").slice(0, 2).join("/"); // functions/<name>, components/<name>

const rules: { from: string; may: (file: string, target: string) => boolean }[] = [
  { from: "shared", may: (_f, t) => top(t) === "shared" },
  { from: "functions", may: (f, t) => top(t) === "shared" || home(t) === home(f) },
  { from: "components", may: (f, t) => top(t) === "shared" || home(t) === home(f) },
];

describe("imports point down", () => {
  it.each(rules)("$from/ imports only what ships with it", ({ from, may }) => {
    const wrong = tsFiles(join(root, from)).flatMap((file) => {
      const f = relative(root, file);
      return importsOf(file).filter((t) => !may(f, t)).map((t) => `${f} → ${t}`);
    });
    expect(wrong).toEqual([]);
  });

  it("the check sees a wrong import (control)", () => {
    const f = "shared/x.ts";
    expect(rules[0]!.may(f, "dev/control-plane/clusters.ts")).toBe(false);
    expect(rules[1]!.may("functions/a/reconcile.ts", "functions/b/reconcile.ts")).toBe(false);
    expect(rules[1]!.may("functions/a/reconcile.ts", "functions/a/steps/x.ts")).toBe(true);
  });
});
