// `npm run images`: OCI archives built from tiny bundles are reproducible, share their base and Node
// layers, run as the non-root user from their own file system, fit the size budget, and push to
// distribution's real registry (open, and behind Bearer token auth) with the same digests read back.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { execFileSync } from "node:child_process";
import { generateKeyPairSync, sign, randomUUID } from "node:crypto";
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { freePort } from "../dev/control-plane/clusters.ts";
import { logTail, startGuard, startProcess, stopProcess, type Managed } from "../dev/control-plane/processes.ts";
import { buildImages, planImages, pushImages, sizeTable, USER, NODE, type Build, type BuiltImage } from "../dev/build/images.ts";
import { MediaType, sha256, tar } from "../dev/build/oci.ts";
import { Registry } from "../dev/build/push.ts";
import { eventually } from "./support/eventually.ts";

const repoRoot = join(import.meta.dirname, "..");
const work = mkdtempSync(join(tmpdir(), "ocmf-images-test-"));

// A function bundle that says who runs it; the components only need to exist.
const bundle = (name: string) => `console.log(JSON.stringify({ name: ${JSON.stringify(name)}, uid: process.getuid(), gid: process.getgid(), node: process.version }));\n`;

function writeDist(dist: string, functions: Record<string, string>): void {
  for (const [name, code] of Object.entries(functions)) {
    mkdirSync(join(dist, "functions", name), { recursive: true });
    writeFileSync(join(dist, "functions", name, "index.js"), code);
  }
  mkdirSync(join(dist, "components"), { recursive: true });
  for (const name of ["relay"]) writeFileSync(join(dist, "components", `${name}.js`), bundle(name));
}

// The archive as any reader sees it: unpacked by GNU tar, not by our own code.
type Unpacked = { dir: string; index: { manifests: { digest: string; mediaType: string; annotations: Record<string, string> }[] }; read(digest: string): Buffer };
function unpack(archive: string): Unpacked {
  const dir = mkdtempSync(join(work, "unpacked-"));
  execFileSync("tar", ["-xf", archive, "-C", dir]);
  const read = (digest: string) => readFileSync(join(dir, "blobs", "sha256", digest.replace("sha256:", "")));
  return { dir, index: JSON.parse(readFileSync(join(dir, "index.json"), "utf8")), read };
}

const tarList = (gz: Buffer): string[] => execFileSync("tar", ["-tz"], { input: gz, encoding: "utf8" }).trim().split("\n");
const layerDigests = (b: BuiltImage) => b.image.layers.map((l) => l.digest);
const byName = (build: Build, name: string): BuiltImage => build.images.find((b) => b.name === name)!;

let first: Build;
let again: Build;
const dist = join(work, "dist");

beforeAll(() => {
  writeDist(dist, { alpha: bundle("alpha"), beta: bundle("beta") });
  first = buildImages({ specs: planImages(dist), out: join(work, "first") });
  again = buildImages({ specs: planImages(dist), out: join(work, "again") });
}, 600_000);

afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("the tar writer", () => {
  it("writes long and non-ASCII names, links, modes and owners that GNU tar reads back", () => {
    const long = `app/${"deep/".repeat(25)}bundle.js`; // 134 bytes: past ustar's 100, so a pax record
    const dir = mkdtempSync(join(work, "tar-"));
    execFileSync("tar", ["-x", "--same-owner", "-C", dir], {
      input: tar(
        [
          { type: "file", path: long, data: Buffer.from("long") },
          { type: "file", path: "app/grüße.txt", data: Buffer.from("unicode") },
          { type: "symlink", path: "app/link", target: `/${long}` },
          { type: "dir", path: "home/nonroot", mode: 0o700, uid: 65532, gid: 65532 },
          { type: "file", path: "usr/local/bin/tool", mode: 0o755, data: Buffer.from("#!") },
        ],
        1_700_000_000,
      ),
    });
    expect(readFileSync(join(dir, long), "utf8")).toBe("long");
    expect(readFileSync(join(dir, "app/grüße.txt"), "utf8")).toBe("unicode");
    expect(readlinkSync(join(dir, "app/link"))).toBe(`/${long}`);
    const home = statSync(join(dir, "home/nonroot"));
    expect([home.mode & 0o7777, home.uid, home.gid]).toEqual([0o700, 65532, 65532]);
    expect(statSync(join(dir, "usr/local/bin/tool")).mode & 0o7777).toBe(0o755);
    expect(statSync(join(dir, "usr/local/bin")).mtimeMs).toBe(1_700_000_000_000); // parents added, same mtime
  });

  it("refuses a path given twice and paths that climb out of the root", () => {
    const file = (path: string) => ({ type: "file" as const, path, data: Buffer.from("x") });
    expect(() => tar([file("a/b"), file("/a/b/")], 0)).toThrow(/a\/b given twice/);
    expect(() => tar([file("../etc/passwd")], 0)).toThrow(/bad path/);
  });
});

describe("npm run images", () => {
  it("writes each image as an OCI layout archive whose blobs match their digests and sizes", () => {
    const alpha = byName(first, "alpha");
    const { dir, index, read } = unpack(alpha.archive);
    expect(JSON.parse(readFileSync(join(dir, "oci-layout"), "utf8"))).toEqual({ imageLayoutVersion: "1.0.0" });
    expect(index.manifests).toHaveLength(1);
    expect(index.manifests[0]).toMatchObject({
      digest: alpha.image.manifest.digest,
      mediaType: MediaType.manifest,
      annotations: { "io.containerd.image.name": "dev.local/ocm-functions/alpha:latest", "org.opencontainers.image.ref.name": "latest" },
    });
    const manifest = JSON.parse(read(index.manifests[0]!.digest).toString());
    const config = JSON.parse(read(manifest.config.digest).toString());
    for (const d of [manifest.config, ...manifest.layers] as { digest: string; size: number }[]) {
      expect(sha256(read(d.digest))).toBe(d.digest);
      expect(read(d.digest).length).toBe(d.size);
    }
    // The config names each layer by the digest of its uncompressed tar.
    expect(config.rootfs.diff_ids).toEqual(manifest.layers.map((l: { digest: string }) => sha256(gunzipSync(read(l.digest)))));
  });

  it("builds the same bytes from the same inputs", () => {
    for (const b of first.images) {
      const twin = byName(again, b.name);
      expect(twin.image.manifest.digest).toBe(b.image.manifest.digest);
      expect(sha256(readFileSync(twin.archive))).toBe(sha256(readFileSync(b.archive)));
    }
  });

  it("changes only the app layer (and so the config and manifest) when a bundle changes", () => {
    const changed = join(work, "dist-changed");
    cpSync(dist, changed, { recursive: true });
    writeFileSync(join(changed, "functions", "beta", "index.js"), bundle("beta, changed"));
    const rebuilt = buildImages({ specs: planImages(changed).filter((s) => s.name === "beta"), out: join(work, "changed") });
    const [before, after] = [byName(first, "beta"), byName(rebuilt, "beta")];
    expect(layerDigests(after).slice(0, 2)).toEqual(layerDigests(before).slice(0, 2));
    expect(after.image.layers[2]!.digest).not.toBe(before.image.layers[2]!.digest);
    expect(after.image.config.digest).not.toBe(before.image.config.digest);
    expect(after.image.manifest.digest).not.toBe(before.image.manifest.digest);
  }, 300_000); // builds the base and Node layers anew

  it("shares the base and Node layers between images, each app layer holding only its own bundle", () => {
    expect(first.images.map((b) => b.name)).toEqual(["alpha", "beta", "relay"]);
    for (const b of first.images) expect(layerDigests(b).slice(0, 2)).toEqual([first.base.digest, first.node.digest]);
    expect(tarList(byName(first, "alpha").image.layers[2]!.data)).toEqual(["app/", "app/index.js"]);
    expect(tarList(byName(first, "relay").image.layers[2]!.data)).toEqual(["app/", "app/relay.js"]);
    expect(tarList(first.node.data)).toContain(NODE.slice(1));
    // merged /usr: the loader's path /lib64/ld-linux-x86-64.so.2 resolves through links into /usr.
    expect(tarList(first.base.data)).toEqual(expect.arrayContaining(["lib", "lib64", "usr/lib/x86_64-linux-gnu/libc.so.6", "usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30", "etc/ssl/certs/ca-certificates.crt"]));
  });

  it("configures a non-root user, the entrypoint, the working directory and the environment", () => {
    const relay = byName(first, "relay");
    const config = JSON.parse(relay.image.config.data.toString());
    expect(config).toMatchObject({
      architecture: "amd64",
      os: "linux",
      config: {
        User: `${USER.uid}:${USER.gid}`,
        Entrypoint: [NODE, "/app/relay.js"],
        WorkingDir: "/app",
        Labels: { "org.opencontainers.image.title": "relay" },
      },
    });
    expect(config.config.Env).toEqual(expect.arrayContaining(["NODE_ENV=production", "PATH=/usr/local/bin:/usr/bin:/bin"]));
    expect(config.config.User).not.toMatch(/^0(:|$)/);
  });

  it("runs the bundle from the image's own file system as the image's user", () => {
    // Layers applied in order, as a runtime does, then the entrypoint run in that root as the user.
    const root = mkdtempSync(join(work, "rootfs-"));
    chmodSync(root, 0o755); // as a runtime's rootfs; mkdtemp's 0700 would keep the user out of /
    const alpha = byName(first, "alpha");
    for (const l of alpha.image.layers) execFileSync("tar", ["-xz", "-C", root], { input: l.data });
    const { Entrypoint, User, Env } = JSON.parse(alpha.image.config.data.toString()).config as { Entrypoint: string[]; User: string; Env: string[] };
    const env = Object.fromEntries(Env.map((e) => [e.slice(0, e.indexOf("=")), e.slice(e.indexOf("=") + 1)]));
    const out = execFileSync("/usr/sbin/chroot", [`--userspec=${User}`, root, ...Entrypoint], { encoding: "utf8", env });
    expect(JSON.parse(out)).toEqual({ name: "alpha", uid: USER.uid, gid: USER.gid, node: process.version });
    expect(readFileSync(join(root, "etc/passwd"), "utf8")).toContain(`${USER.name}:x:${USER.uid}:${USER.gid}:`);
  });

  it("reports compressed sizes within the budget: 60 MB an image, 5 MB an app layer", () => {
    console.log(sizeTable(first));
    for (const { image } of first.images) {
      const total = image.layers.reduce((n, l) => n + l.size, image.config.size + image.manifest.size);
      expect(total).toBeLessThanOrEqual(60e6);
      expect(image.layers[2]!.size).toBeLessThanOrEqual(5e6);
    }
  });
});

// distribution's registry from its Go module, on loopback with filesystem storage in a temp dir.
function registryBinary(): string {
  const out = execFileSync(join(repoRoot, "scripts", "build-tools.sh"), ["registry"], { stdio: ["ignore", "pipe", "inherit"] });
  const binary = out.toString().trim().split("\n").pop()!;
  if (!existsSync(binary)) throw new Error(`${binary} is missing after scripts/build-tools.sh registry`);
  return binary;
}

type RunningRegistry = { target: string; origin: string; process: Managed };

async function startRegistry(runDir: string, name: string, auth = ""): Promise<RunningRegistry> {
  const port = await freePort();
  const config = join(runDir, `${name}.yml`);
  writeFileSync(
    config,
    `version: 0.1
log: { level: info }
storage: { filesystem: { rootdirectory: ${join(runDir, `${name}-data`)} } }
http: { addr: 127.0.0.1:${port} }
${auth}`,
  );
  const managed = startProcess(runDir, name, registryBinary(), ["serve", config]);
  const origin = `http://127.0.0.1:${port}`;
  await eventually(
    async () => {
      if (managed.child.exitCode !== null) throw new Error(`${name} exited:\n${logTail(managed)}`);
      expect([200, 401]).toContain((await fetch(`${origin}/v2/`)).status);
    },
    { timeoutMs: 30_000 },
  );
  return { target: `127.0.0.1:${port}/ocm-functions`, origin, process: managed };
}

// A token service as the registry's auth spec describes it: Basic credentials in, an ES256 JWT out,
// granting what the challenge's scopes asked; the registry trusts its key through a JWKS file.
function startTokenService(runDir: string, o: { user: string; password: string }): Promise<{ realm: string; jwks: string; issued: () => number; server: Server }> {
  const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const kid = randomUUID();
  const jwks = join(runDir, "jwks.json");
  writeFileSync(jwks, JSON.stringify({ keys: [{ ...publicKey.export({ format: "jwk" }), kid, alg: "ES256", use: "sig" }] }));
  let issued = 0;
  const b64 = (v: object | Buffer) => Buffer.from(Buffer.isBuffer(v) ? v : JSON.stringify(v)).toString("base64url");
  const server = createServer((req, res) => {
    const url = new URL(req.url!, "http://x");
    if (req.headers.authorization !== `Basic ${Buffer.from(`${o.user}:${o.password}`).toString("base64")}`) {
      res.writeHead(401).end();
      return;
    }
    const now = Math.floor(Date.now() / 1000);
    const access = url.searchParams.getAll("scope").map((s) => {
      const [type, name, actions] = [s.slice(0, s.indexOf(":")), s.slice(s.indexOf(":") + 1, s.lastIndexOf(":")), s.slice(s.lastIndexOf(":") + 1)];
      return { type, name, actions: actions.split(",") };
    });
    const claims = { iss: "ocmf-test", sub: o.user, aud: url.searchParams.get("service"), exp: now + 300, nbf: now - 10, iat: now, jti: randomUUID(), access };
    const signed = `${b64({ alg: "ES256", typ: "JWT", kid })}.${b64(claims)}`;
    const signature = sign("sha256", Buffer.from(signed), { key: privateKey, dsaEncoding: "ieee-p1363" });
    issued++;
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ token: `${signed}.${b64(signature)}` }));
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      resolve({ realm: `http://127.0.0.1:${port}/token`, jwks, issued: () => issued, server });
    }),
  );
}

describe("npm run images -- --push", () => {
  const runDir = join(work, "registries");
  let open: RunningRegistry;
  let guarded: RunningRegistry;
  let tokens: Awaited<ReturnType<typeof startTokenService>>;
  const credentials = { user: "ci", password: randomUUID() };

  beforeAll(async () => {
    mkdirSync(runDir, { recursive: true });
    startGuard(runDir);
    open = await startRegistry(runDir, "registry");
    tokens = await startTokenService(runDir, credentials);
    guarded = await startRegistry(
      runDir,
      "registry-token",
      `auth: { token: { realm: "${tokens.realm}", service: ocmf-registry, issuer: ocmf-test, jwks: ${tokens.jwks} } }\n`,
    );
  }, 900_000); // a cold build of the registry takes minutes

  afterAll(async () => {
    for (const r of [open, guarded]) if (r) await stopProcess(r.process);
    tokens?.server.close();
  });

  const getManifest = (r: RunningRegistry, repo: string, tag: string, headers: Record<string, string> = {}) =>
    fetch(`${r.origin}/v2/ocm-functions/${repo}/manifests/${tag}`, { headers: { accept: MediaType.manifest, ...headers } });

  it("uploads each blob once, mounts shared layers, skips what the registry has, and reads the same digests back", async () => {
    const results = await pushImages(first, open.target, "latest");
    expect(results.map((r) => [r.uploaded, r.mounted, r.skipped])).toEqual([
      [4, 0, 0], // alpha: base, node, app, config
      [2, 2, 0], // the others mount base and node from alpha's repository
      [2, 2, 0],
    ]);
    const again = await pushImages(first, open.target, "latest");
    expect(again.map((r) => [r.uploaded, r.mounted, r.skipped])).toEqual(first.images.map(() => [0, 0, 4]));

    for (const b of first.images) {
      const res = await getManifest(open, b.name, "latest");
      const body = Buffer.from(await res.arrayBuffer());
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toBe(MediaType.manifest);
      expect(res.headers.get("docker-content-digest")).toBe(b.image.manifest.digest);
      expect(sha256(body)).toBe(b.image.manifest.digest);
      expect(results.find((r) => r.digest === b.image.manifest.digest)?.reference).toBe(`${open.target}/${b.name}@${b.image.manifest.digest}`);
    }
    const layer = await fetch(`${open.origin}/v2/ocm-functions/relay/blobs/${first.base.digest}`);
    expect(sha256(Buffer.from(await layer.arrayBuffer()))).toBe(first.base.digest);
  });

  it("pushes through Bearer token auth with the registry's realm, and refuses a wrong password", async () => {
    const alpha = byName(first, "alpha");
    const registry = new Registry(guarded.target, { username: credentials.user, password: credentials.password });
    const result = await registry.push("alpha", "v1", alpha.image);
    expect(result).toMatchObject({ digest: alpha.image.manifest.digest, uploaded: 4 });
    expect(tokens.issued()).toBeGreaterThan(0);
    expect((await getManifest(guarded, "alpha", "v1")).status).toBe(401);
    const wrong = new Registry(guarded.target, { username: credentials.user, password: "wrong" });
    await expect(wrong.push("alpha", "v2", alpha.image)).rejects.toThrow(/token from .*: 401/);
  });

  it("builds, prints the size table and pushes from the command line", async () => {
    const out = join(work, "cli");
    const stdout = execFileSync(process.execPath, [join(repoRoot, "dev/build/images.ts"), "--dist", dist, "--out", out, "--only", "beta", "--tag", "cli", "--push", open.target], {
      encoding: "utf8",
    });
    console.log(stdout);
    const digest = unpack(join(out, "beta.tar")).index.manifests[0]!.digest;
    expect(digest).toBe(byName(first, "beta").image.manifest.digest); // the tag is in index.json only
    expect(stdout).toMatch(/^beta\s+\d+\.\d\d MB\s+\d+\.\d\d MB\s+\d+\.\d\d MB\s+\d+\.\d\d MB\s+sha256:/m);
    expect(stdout).toContain(`pushed ${open.target}/beta@${digest}`);
    const res = await getManifest(open, "beta", "cli");
    expect(res.headers.get("docker-content-digest")).toBe(digest);
  }, 300_000); // builds the base and Node layers anew
});
