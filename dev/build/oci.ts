// OCI images without a daemon: a small tar writer, gzipped layers, the image config, manifest and
// index, written as an OCI image layout inside a tar archive (what `ctr images import` and
// `skopeo copy oci-archive:` read). Same inputs, same bytes: fixed mtimes, sorted entries, root-owned
// unless said otherwise, no gzip timestamp, JSON with sorted keys.
import { createHash } from "node:crypto";
import { renameSync, writeFileSync } from "node:fs";
import { posix } from "node:path";
import { gzipSync } from "node:zlib";

export const MediaType = {
  index: "application/vnd.oci.image.index.v1+json",
  manifest: "application/vnd.oci.image.manifest.v1+json",
  config: "application/vnd.oci.image.config.v1+json",
  layer: "application/vnd.oci.image.layer.v1.tar+gzip",
} as const;

// Paths are relative to the image root (`usr/local/bin/node`), as in the layers docker and ko write.
export type TarEntry =
  | { type: "file"; path: string; data: Uint8Array; mode?: number; uid?: number; gid?: number }
  | { type: "dir"; path: string; mode?: number; uid?: number; gid?: number }
  | { type: "symlink"; path: string; target: string };

export type Blob = { mediaType: string; digest: string; size: number; data: Buffer };
// diffId: the digest of the uncompressed tar, which the config's rootfs names.
export type Layer = Blob & { diffId: string; createdBy: string };
export type Image = { manifest: Blob; config: Blob; layers: Layer[] };

export type ImageConfig = {
  user: string;
  entrypoint: string[];
  cmd?: string[];
  env: string[];
  workingDir: string;
  labels: Record<string, string>;
};

// Seconds since 1970 for every mtime and the config's `created`: SOURCE_DATE_EPOCH (the
// reproducible-builds convention) when set, else 0.
export function sourceDateEpoch(env: NodeJS.ProcessEnv = process.env): number {
  const value = Number(env.SOURCE_DATE_EPOCH ?? 0);
  if (!Number.isInteger(value) || value < 0) throw new Error(`SOURCE_DATE_EPOCH must be whole seconds, got ${env.SOURCE_DATE_EPOCH}`);
  return value;
}

export const sha256 = (data: Uint8Array): string => `sha256:${createHash("sha256").update(data).digest("hex")}`;

export function blob(mediaType: string, data: Buffer): Blob {
  return { mediaType, digest: sha256(data), size: data.length, data };
}

// Keys sorted at every level, so equal objects always serialise to equal bytes.
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v && typeof v === "object" && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) : v,
  );
}

const BLOCK = 512;
const TYPE_FLAG = { file: "0", symlink: "2", dir: "5", pax: "x" } as const;

type Header = { path: string; type: keyof typeof TYPE_FLAG; size: number; mode: number; uid: number; gid: number; mtime: number; link: string };

function writeOctal(h: Buffer, offset: number, length: number, value: number): void {
  const digits = value.toString(8);
  if (digits.length > length - 1) throw new Error(`tar: ${value} does not fit a ${length}-byte field`);
  h.write(digits.padStart(length - 1, "0") + "\0", offset, length, "ascii");
}

// ustar header (POSIX.1-1988): name 100, mode 8, uid 8, gid 8, size 12, mtime 12, chksum 8,
// typeflag 1, linkname 100, magic "ustar\0" 6, version "00" 2, uname 32, gname 32, devmajor 8,
// devminor 8, prefix 155. Names longer than 100 bytes go in a pax record before it.
function ustarHeader(e: Header): Buffer {
  const h = Buffer.alloc(BLOCK);
  h.write(e.path, 0, 100, "utf8");
  writeOctal(h, 100, 8, e.mode);
  writeOctal(h, 108, 8, e.uid);
  writeOctal(h, 116, 8, e.gid);
  writeOctal(h, 124, 12, e.size);
  writeOctal(h, 136, 12, e.mtime);
  h.write(TYPE_FLAG[e.type], 156, 1, "ascii");
  h.write(e.link, 157, 100, "utf8");
  h.write("ustar\0" + "00", 257, 8, "ascii");
  // The checksum is computed with its own field read as eight spaces.
  h.fill(" ", 148, 156);
  let sum = 0;
  for (const byte of h) sum += byte;
  h.write(sum.toString(8).padStart(6, "0") + "\0 ", 148, 8, "ascii");
  return h;
}

// A pax record is "<length> <key>=<value>\n", where length counts the whole record, itself included.
function paxRecord(key: string, value: string): string {
  const rest = ` ${key}=${value}\n`;
  const restBytes = Buffer.byteLength(rest);
  let length = restBytes + 1;
  while (String(length).length + restBytes !== length) length = String(length).length + restBytes;
  return `${length}${rest}`;
}

const padding = (size: number): Buffer => Buffer.alloc((BLOCK - (size % BLOCK)) % BLOCK);
const fits = (s: string): boolean => Buffer.byteLength(s) <= 100 && /^[\x20-\x7e]*$/.test(s);
const ascii = (s: string): string => s.replace(/[^\x20-\x7e]/g, "_").slice(0, 100); // what readers without pax see

function normalise(path: string): string {
  const p = posix.normalize(path).replace(/^\/+/, "").replace(/\/+$/, "");
  if (p === "" || p === "." || p === ".." || p.startsWith("../")) throw new Error(`tar: bad path ${JSON.stringify(path)}`);
  return p;
}

// The entries, normalised, with every missing parent directory added (0755, root) and duplicates
// refused (the same directory twice is kept once), sorted bytewise so parents precede children.
export function tarEntries(entries: readonly TarEntry[]): TarEntry[] {
  const byPath = new Map<string, TarEntry>();
  for (const entry of entries) {
    const path = normalise(entry.path);
    const seen = byPath.get(path);
    if (seen && !(seen.type === "dir" && entry.type === "dir")) throw new Error(`tar: ${path} given twice`);
    if (!seen) byPath.set(path, { ...entry, path });
  }
  // After all given entries, so a directory given with its own mode or owner is never a default one.
  for (const path of [...byPath.keys()]) {
    for (let parent = posix.dirname(path); parent !== "." && !byPath.has(parent); parent = posix.dirname(parent)) {
      byPath.set(parent, { type: "dir", path: parent });
    }
  }
  const paths = [...byPath.keys()].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  return paths.map((p) => byPath.get(p)!);
}

export function tar(entries: readonly TarEntry[], mtime: number): Buffer {
  const chunks: Buffer[] = [];
  for (const e of tarEntries(entries)) {
    const path = e.type === "dir" ? `${e.path}/` : e.path;
    const link = e.type === "symlink" ? e.target : "";
    const data = e.type === "file" ? Buffer.from(e.data.buffer, e.data.byteOffset, e.data.byteLength) : Buffer.alloc(0);
    const mode = e.type === "symlink" ? 0o777 : (e.mode ?? (e.type === "dir" ? 0o755 : 0o644));
    const uid = e.type === "symlink" ? 0 : (e.uid ?? 0);
    const gid = e.type === "symlink" ? 0 : (e.gid ?? 0);
    if (!fits(path) || !fits(link)) {
      const records = Buffer.from((fits(path) ? "" : paxRecord("path", path)) + (fits(link) ? "" : paxRecord("linkpath", link)));
      const paxName = `PaxHeaders/${posix.basename(e.path)}`.slice(0, 99).replace(/[^\x20-\x7e]/g, "_");
      chunks.push(ustarHeader({ path: paxName, type: "pax", size: records.length, mode: 0o644, uid: 0, gid: 0, mtime, link: "" }), records, padding(records.length));
    }
    chunks.push(ustarHeader({ path: ascii(path), type: e.type, size: data.length, mode, uid, gid, mtime, link: ascii(link) }));
    if (data.length) chunks.push(data, padding(data.length));
  }
  chunks.push(Buffer.alloc(2 * BLOCK)); // end of archive: two zero blocks
  return Buffer.concat(chunks);
}

// Node's gzip header carries mtime 0 and no file name, so the compressed bytes depend on the tar only.
// zlib's default level 6: level 9 takes the Node binary's layer from 4 s to 9 s to save 0.3 %.
export function layer(entries: readonly TarEntry[], o: { mtime: number; createdBy: string }): Layer {
  const uncompressed = tar(entries, o.mtime);
  return { ...blob(MediaType.layer, gzipSync(uncompressed, { level: 6 })), diffId: sha256(uncompressed), createdBy: o.createdBy };
}

const descriptor = (b: Blob) => ({ mediaType: b.mediaType, digest: b.digest, size: b.size });

export function image(layers: readonly Layer[], c: ImageConfig, o: { created: number }): Image {
  const created = new Date(o.created * 1000).toISOString().replace(/\.000Z$/, "Z");
  const config = blob(
    MediaType.config,
    Buffer.from(
      canonicalJson({
        architecture: "amd64",
        os: "linux",
        created,
        config: { User: c.user, Env: c.env, Entrypoint: c.entrypoint, Cmd: c.cmd, WorkingDir: c.workingDir, Labels: c.labels },
        rootfs: { type: "layers", diff_ids: layers.map((l) => l.diffId) },
        history: layers.map((l) => ({ created, created_by: l.createdBy })),
      }),
    ),
  );
  const manifest = blob(
    MediaType.manifest,
    Buffer.from(canonicalJson({ schemaVersion: 2, mediaType: MediaType.manifest, config: descriptor(config), layers: layers.map(descriptor) })),
  );
  return { manifest, config, layers: [...layers] };
}

// `reference` is the full name (dev.local/ocm-functions/x:latest): containerd names the imported
// image by io.containerd.image.name; ref.name carries the tag, as skopeo's oci-archive:x.tar:tag reads it.
export function archive(images: readonly { image: Image; reference: string }[], mtime: number): Buffer {
  const index = {
    schemaVersion: 2,
    mediaType: MediaType.index,
    manifests: images.map(({ image, reference }) => ({
      ...descriptor(image.manifest),
      platform: { architecture: "amd64", os: "linux" },
      annotations: { "io.containerd.image.name": reference, "org.opencontainers.image.ref.name": reference.slice(reference.lastIndexOf(":") + 1) },
    })),
  };
  const blobs = new Map<string, Blob>();
  for (const { image } of images) for (const b of [image.manifest, image.config, ...image.layers]) blobs.set(b.digest, b);
  return tar(
    [
      { type: "file", path: "oci-layout", data: Buffer.from(canonicalJson({ imageLayoutVersion: "1.0.0" })) },
      { type: "file", path: "index.json", data: Buffer.from(canonicalJson(index)) },
      ...[...blobs.values()].map((b): TarEntry => ({ type: "file", path: `blobs/sha256/${b.digest.slice("sha256:".length)}`, data: b.data })),
    ],
    mtime,
  );
}

export function writeArchive(path: string, images: readonly { image: Image; reference: string }[], mtime: number): void {
  writeFileSync(`${path}.tmp`, archive(images, mtime));
  renameSync(`${path}.tmp`, path);
}
