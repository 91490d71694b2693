// Images of one static binary on an empty base (the pause image a node's sandboxes run, and test
// probes): no libc, no shell, no Debian layer, just the file, so the image is a few hundred KB and
// holds nothing we did not build.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, posix } from "node:path";
import { cacheDir } from "./images.ts";
import { image, layer, sourceDateEpoch, writeArchive, type Image } from "./oci.ts";

export type StaticImage = { reference: string; binary: string; path?: string; user?: string; args?: string[] };

export function staticImage(s: StaticImage, mtime = sourceDateEpoch()): Image {
  const path = s.path ?? `/${posix.basename(s.binary).replace(/-[0-9a-f]{12}$/, "")}`;
  const only = layer([{ type: "file", path, data: readFileSync(s.binary), mode: 0o755 }], { mtime, createdBy: `COPY ${posix.basename(s.binary)} ${path}` });
  // 65535 is the user the upstream pause image runs as: neither program needs any privilege.
  return image([only], { user: s.user ?? "65535:65535", entrypoint: [path], cmd: s.args, env: [], workingDir: "/", labels: {} }, { created: mtime });
}

// One archive, as `ctr images import` reads it, holding every image under its reference.
export function writeStaticImages(archivePath: string, images: readonly StaticImage[]): void {
  const mtime = sourceDateEpoch();
  writeArchive(archivePath, images.map((s) => ({ image: staticImage(s, mtime), reference: s.reference })), mtime);
}

// The archive of these images in the images cache, named `<name>-<hash of the binaries>.tar` and written
// only when that set of binaries has none yet (compressing hundreds of MB takes seconds).
export function cachedStaticImages(name: string, images: readonly StaticImage[]): string {
  const stamp = createHash("sha256");
  for (const i of images) stamp.update(`${i.reference} ${i.binary} ${statSync(i.binary).size} ${statSync(i.binary).mtimeMs}\n`);
  const archive = join(cacheDir(), `${name}-${stamp.digest("hex").slice(0, 12)}.tar`);
  if (!existsSync(archive)) {
    mkdirSync(dirname(archive), { recursive: true });
    writeStaticImages(archive, images);
  }
  return archive;
}
