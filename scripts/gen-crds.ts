// Writes manifests/crds/ from the zod schemas in shared/api: one CRD file per kind, stale files removed.
import { mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { crdManifestDir, crdManifests } from "../shared/api/crds.ts";

const dir = join(import.meta.dirname, "..", crdManifestDir);
const manifests = crdManifests();
mkdirSync(dir, { recursive: true });
const wanted = new Set(manifests.map((m) => m.file));
for (const file of readdirSync(dir))
  if (file.endsWith(".crd.yaml") && !wanted.has(file)) {
    rmSync(join(dir, file));
    console.log(`removed ${file}: no kind generates it any more`);
  }
for (const { file, yaml } of manifests) writeFileSync(join(dir, file), yaml);
console.log(`wrote ${manifests.length} CRDs to ${crdManifestDir}/`);
