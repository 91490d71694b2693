// `npm run build`: one self-contained JavaScript bundle per function, per component and for the CLI,
// each holding only what its entry imports, so production runs plain JavaScript with no node_modules:
//   dist/functions/<name>/index.js   `node index.js` serves the function (shared/serve-main.ts)
//   dist/components/relay.js (a spoke's relay keeps the heartbeat too), dist/components/cp-creds.js
//   dist/cli/ocmf.js
//
//   npm run build [-- --outdir DIR]
//
// ES modules, because our entries use top-level await (the generated function entry, the heartbeat,
// the CLI) and import.meta (the CLI finds its checkout with it), which esbuild cannot carry into
// CommonJS. The CommonJS packages inside (cloudevents in the relay, commander in the CLI) call `require`
// for Node's built-ins, so the banner makes one with createRequire. External are only the
// optional packages that ws and debug try to load inside try/catch and do without when missing.
// The CLI carries the files its render reads (renderSources below), so `ocmf render` works anywhere.
import { mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { isBuiltin } from "node:module";
import { join, relative } from "node:path";
import { parseArgs } from "node:util";
import { build, type Metafile, type Plugin } from "esbuild";

const repoRoot = join(import.meta.dirname, "..", "..");

const banner = [
  'import { createRequire as __bundleCreateRequire } from "node:module";',
  "const require = __bundleCreateRequire(import.meta.url);",
].join("\n");

// ws' native helpers (bufferutil, utf-8-validate) and debug's supports-color: never bundled, so an
// install that happens to have them cannot put a native module into a bundle.
export const OPTIONAL_EXTERNALS = ["bufferutil", "utf-8-validate", "supports-color"];

export type BundleResult = {
  name: string;
  file: string;
  files: number; // the entry and the chunks it loads (the CLI's)
  bytes: number; // all of them
  // Every file of the repository and of node_modules that went in, relative to the repository.
  inputs: string[];
  // What the bundle still imports at run time: Node's built-ins and OPTIONAL_EXTERNALS.
  imports: string[];
};

export function functionNames(root = repoRoot): string[] {
  const dir = join(root, "functions");
  return readdirSync(dir)
    .filter((name) => statSync(join(dir, name, "reconcile.ts"), { throwIfNoEntry: false })?.isFile())
    .sort();
}

// A function's entry exists only at build time, made from its folder's name: our CloudEvents server
// (shared/serve-main.ts) around the definition its reconcile.ts exports by default. It also exports
// `handle`, so faas-js-runtime (Knative Functions' Node runtime) can load the same file.
const FUNCTION_ENTRY = "ocm-function:";
function functionEntries(root: string): Plugin {
  return {
    name: "function-entries",
    setup(b) {
      b.onResolve({ filter: new RegExp(`^${FUNCTION_ENTRY}`) }, (args) => ({ path: args.path.slice(FUNCTION_ENTRY.length), namespace: "function-entry" }));
      b.onLoad({ filter: /.*/, namespace: "function-entry" }, (args) => ({
        resolveDir: root,
        loader: "ts",
        contents: [
          'import { functionMain } from "./shared/serve-main.ts";',
          `export const handle = await functionMain(${JSON.stringify(args.path)}, () => import(${JSON.stringify(`./functions/${args.path}/reconcile.ts`)}), import.meta.main);`,
        ].join("\n"),
      }));
    },
  };
}

// Node's built-ins are taken with process.getBuiltinModule, not imported. An ES module's import of a
// built-in builds its namespace by reading every export, getters included: node:http's WebSocket,
// CloseEvent and MessageEvent getters then load and compile undici (about 60 ms of a function's
// 300 ms cold start budget), node:tls' rootCertificates copies the CA store, node:fs' promises loads
// fs/promises. As a CommonJS shim, esbuild reads each export where the code uses it, so only those run.
const BUILTIN = "node-builtin";
function lazyBuiltins(): Plugin {
  return {
    name: "lazy-builtins",
    setup(b) {
      b.onResolve({ filter: /^(node:)?[a-z_/]+$/ }, (args) => (isBuiltin(args.path) ? { path: args.path.replace(/^node:/, ""), namespace: BUILTIN } : undefined));
      b.onLoad({ filter: /.*/, namespace: BUILTIN }, (args) => ({ contents: `module.exports = process.getBuiltinModule(${JSON.stringify(`node:${args.path}`)});`, loader: "js" }));
    },
  };
}

// cli/render reads func.yaml and manifests/ from the checkout (import.meta.dirname/../../...); the CLI
// bundle runs anywhere, so it holds those files, and cli/render's modules see a file system that serves
// them from memory under EMBEDDED_ROOT and a dirname inside that tree. Only what the render reads is
// held: every func.yaml and manifests/**/*.yaml but the render's own committed output.
const EMBEDDED_ROOT = "/ocmf-embedded";
const RENDER_MODULE = /[\\/]cli[\\/]render[\\/][^\\/]+\.ts$/;

export function renderSourceFiles(root = repoRoot): string[] {
  const under = (dir: string): string[] =>
    readdirSync(join(root, dir), { withFileTypes: true }).flatMap((d) => (d.isDirectory() ? under(`${dir}/${d.name}`) : [`${dir}/${d.name}`]));
  return [
    ...functionNames(root).map((name) => `functions/${name}/func.yaml`),
    ...under("manifests").filter((f) => f.endsWith(".yaml") && !/^manifests\/(hub|spoke)\/knative\.yaml$/.test(f)),
  ].sort();
}

// The node:fs of cli/render inside the bundle: readFileSync, existsSync and readdirSync over the held files.
function embeddedFs(root: string): string {
  const files = Object.fromEntries(renderSourceFiles(root).map((f) => [`${EMBEDDED_ROOT}/${f}`, readFileSync(join(root, f), "utf8")]));
  return `
import { posix } from "node:path";
const files = new Map(Object.entries(${JSON.stringify(files)}));
const norm = (p) => posix.normalize(String(p)).replace(/\\/+$/, "");
const missing = (p) => Object.assign(new Error("ENOENT: not in the files this bundle holds: " + p), { code: "ENOENT" });
export function readFileSync(p, o) {
  const text = files.get(norm(p));
  if (text === undefined) throw missing(p);
  return typeof o === "string" || o?.encoding ? text : Buffer.from(text);
}
export function existsSync(p) {
  const n = norm(p);
  return files.has(n) || [...files.keys()].some((k) => k.startsWith(n + "/"));
}
export function readdirSync(p, o) {
  const dir = norm(p) + "/";
  const entries = new Map();
  for (const k of files.keys()) {
    if (!k.startsWith(dir)) continue;
    const [name, ...rest] = k.slice(dir.length).split("/");
    entries.set(name, entries.get(name) || rest.length > 0);
  }
  if (!entries.size) throw missing(p);
  const names = [...entries.keys()].sort();
  if (!o?.withFileTypes) return names;
  return names.map((name) => ({ name, parentPath: norm(p), isDirectory: () => entries.get(name), isFile: () => !entries.get(name) }));
}
`;
}

function renderSources(root: string): Plugin {
  return {
    name: "render-sources",
    setup(b) {
      b.onResolve({ filter: /^(node:)?fs$/ }, (args) => (RENDER_MODULE.test(args.importer) ? { path: "fs", namespace: "render-sources" } : undefined));
      b.onLoad({ filter: RENDER_MODULE }, (args) => ({
        contents: readFileSync(args.path, "utf8").replaceAll("import.meta.dirname", JSON.stringify(`${EMBEDDED_ROOT}/cli/render`)),
        loader: "ts",
      }));
      b.onLoad({ filter: /.*/, namespace: "render-sources" }, () => ({ contents: embeddedFs(root), loader: "js", resolveDir: root }));
    },
  };
}

type Entry = { in: string; out: string };

export async function bundle(o: { outdir: string }): Promise<{ bundles: BundleResult[]; ms: number }> {
  const root = repoRoot;
  const programs: Entry[] = [
    ...functionNames(root).map((name) => ({ in: `${FUNCTION_ENTRY}${name}`, out: `functions/${name}/index` })),
    { in: join(root, "components/relay/main.ts"), out: "components/relay" },
    // run by a consumer of the cluster inventory, not by us: its exec credential plugin
    { in: join(root, "components/cp-creds/main.ts"), out: "components/cp-creds" },
  ];
  const cli: Entry = { in: join(root, "cli/ocmf.ts"), out: "cli/ocmf" };
  const started = performance.now();
  // Only what this build writes: dist/images belongs to `npm run images`.
  for (const dir of ["functions", "components", "cli"]) rmSync(join(o.outdir, dir), { recursive: true, force: true });
  mkdirSync(o.outdir, { recursive: true });
  const common = {
    absWorkingDir: root,
    outdir: o.outdir,
    bundle: true,
    platform: "node",
    target: "node24",
    format: "esm",
    // No identifier renaming: stack traces keep their function names, and whitespace and syntax
    // minification already take a third off the size.
    minifyWhitespace: true,
    minifySyntax: true,
    banner: { js: banner },
    external: OPTIONAL_EXTERNALS,
    metafile: true,
    logLevel: "warning",
  } as const;
  const [single, split] = await Promise.all([
    // A function or component is one file, so an image holds exactly one.
    build({ ...common, entryPoints: programs, plugins: [functionEntries(root), lazyBuiltins()] }),
    // The CLI imports each command's module when it runs: split into chunks, `ocmf --help` reads only
    // the parser, not the Kubernetes client.
    build({ ...common, entryPoints: [cli], splitting: true, chunkNames: "cli/chunks/[name]-[hash]", plugins: [renderSources(root)] }),
  ]);
  // Every bundle is an ES module: this says so to whatever loads dist/ by its package type (faas-js-runtime does).
  writeFileSync(join(o.outdir, "package.json"), '{ "type": "module" }\n');
  const ms = performance.now() - started;
  return { bundles: [...programs.map((e) => describe(single.metafile, root, e)), describe(split.metafile, root, cli)], ms };
}

// An entry's output file and every chunk it loads, as one bundle.
function describe(meta: Metafile, root: string, entry: Entry): BundleResult {
  const file = Object.keys(meta.outputs).find((f) => f.endsWith(`/${entry.out}.js`))!;
  const files = [file];
  for (const f of files) for (const i of meta.outputs[f]!.imports) if (!i.external && !files.includes(i.path)) files.push(i.path);
  const outputs = files.map((f) => meta.outputs[f]!);
  return {
    name: entry.out.replace(/\/index$/, "").replace(/^[a-z]+\//, ""),
    file: join(root, file),
    files: files.length,
    bytes: outputs.reduce((n, out) => n + out.bytes, 0),
    inputs: [...new Set(outputs.flatMap((out) => Object.keys(out.inputs)))].filter((i) => !i.startsWith("function-entry:") && !i.startsWith("render-sources:") && !i.startsWith(`${BUILTIN}:`)),
    imports: [...new Set(outputs.flatMap((out) => out.imports.filter((i) => i.external).map((i) => i.path)))],
  };
}

export function sizeTable(bundles: BundleResult[]): string {
  const rows = bundles.map((b) => [`${relative(process.cwd(), b.file)}${b.files > 1 ? ` (+${b.files - 1} chunks)` : ""}`, b.bytes.toLocaleString("en-US")]);
  const width = Math.max(...rows.map((r) => r[0]!.length), "bundle".length);
  return [["bundle", "bytes"], ...rows].map(([f, n]) => `${f!.padEnd(width)}  ${n!.padStart(10)}`).join("\n");
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { outdir: { type: "string", default: join(repoRoot, "dist") } } });
  const { bundles, ms } = await bundle({ outdir: values.outdir });
  console.log(sizeTable(bundles));
  console.log(`built ${bundles.length} bundles in ${(ms / 1000).toFixed(1)} s`);
}

if (import.meta.main) {
  main().catch((err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  });
}
