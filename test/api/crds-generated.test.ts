// Fails when manifests/crds/ is not what scripts/gen-crds.ts would write from the current zod schemas.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { crdManifestDir, crdManifests } from "../../shared/api/crds.ts";

const dir = join(import.meta.dirname, "..", "..", crdManifestDir);

describe(`${crdManifestDir}/`, () => {
  it("holds exactly one file per generated CRD (run `node scripts/gen-crds.ts` to fix)", () => {
    const onDisk = readdirSync(dir).filter((f) => f.endsWith(".crd.yaml")).sort();
    expect(onDisk).toEqual(crdManifests().map((m) => m.file).sort());
  });

  it.each(crdManifests())("$file matches the zod schemas (run `node scripts/gen-crds.ts` to fix)", ({ file, yaml }) => {
    expect(readFileSync(join(dir, file), "utf8")).toBe(yaml);
  });
});
