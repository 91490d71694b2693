// What ships where: shared/ is the runtime library inside every function image, so it imports nothing
// above it; a function imports only shared/ (and its own folder); a component (relay, heartbeat) only
// shared/ and itself. Dev tooling (dev/, cli/, bench/, scripts/, test/) may import anything. No
// shipping file reaches itself through its imports, type-only ones included: a cycle is a layer that
// is not one (a step that needs its runner, a source that needs its credentials), so the types both
// sides share get a small module of their own.
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

// The files that ship (shared/, functions/, components/) and their relative imports among them.
function shippingGraph(): Map<string, string[]> {
  const files = ["shared", "functions", "components"].flatMap((d) => tsFiles(join(root, d)).map((f) => relative(root, f)));
  return new Map(files.map((f) => [f, importsOf(join(root, f))]));
}

// Every cycle's files (Tarjan's strongly connected components of two or more files, or one importing
// itself), each sorted, so a failure names them all.
function cyclesOf(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (v: string) => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    for (let w = stack.pop()!; ; w = stack.pop()!) {
      onStack.delete(w);
      component.push(w);
      if (w === v) break;
    }
    if (component.length > 1 || graph.get(v)!.includes(v)) cycles.push(component.sort());
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return cycles;
}

describe("no import cycles", () => {
  it("no shipping file imports itself back through its imports, type imports included", () => {
    expect(cyclesOf(shippingGraph())).toEqual([]);
  });

  it("the check sees a cycle through a type import, and a self-import (control)", () => {
    expect(shippingGraph().get("functions/work-applier/finalize.ts")).toContain("functions/work-applier/context.ts"); // an import type is read
    const graph = new Map([
      ["shared/a.ts", ["shared/b.ts"]],
      ["shared/b.ts", ["shared/c.ts", "shared/e.ts"]],
      ["shared/c.ts", ["shared/a.ts"]],
      ["shared/d.ts", ["shared/d.ts"]],
      ["shared/e.ts", []],
    ]);
    expect(cyclesOf(graph)).toEqual([["shared/a.ts", "shared/b.ts", "shared/c.ts"], ["shared/d.ts"]]);
    expect(cyclesOf(new Map([...graph].filter(([f]) => f !== "shared/c.ts" && f !== "shared/d.ts")))).toEqual([]);
  });
});
