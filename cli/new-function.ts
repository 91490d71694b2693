// `ocmf new function NAME`: the scaffold of a multi-cluster function of one's own, in DIR/NAME/ inside
// this checkout. The function and its test are cli/templates/ (real files, type-checked with the
// project), renamed and re-pointed at the checkout; the RBAC and func.yaml are derived from the
// template's definition.
import { existsSync, mkdirSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from "node:path";
import type { RbacRule, Subscription } from "../shared/sdk.ts";
import { functionRoles } from "./render/rbac.ts";
import template, { ConfigSchema } from "./templates/function.ts";

const repoRoot = resolve(import.meta.dirname, "..");
const templates = join(import.meta.dirname, "templates");
const PLACEHOLDER = "my-function"; // the templates' own name, replaced by NAME
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

export type NewFunctionOptions = { name: string; dir: string; source: string; targets: string[]; now?: Date };

// Relative paths on the command line are relative to where the user typed it: npm runs scripts in the
// checkout's root and names the user's directory in INIT_CWD.
export const invocationDir = (env: NodeJS.ProcessEnv = process.env) => env.INIT_CWD || process.cwd();

export async function newFunction(o: NewFunctionOptions, print: (line: string) => void): Promise<string[]> {
  if (!existsSync(join(templates, "function.ts"))) throw new Error("ocmf new function runs from a checkout of ocm-functions (npm run ocmf), not from the bundled CLI");
  checkNames(o);
  const out = resolve(o.dir, o.name);
  checkPlace(out);
  const files = scaffold(o, out);
  const present = Object.keys(files).filter((f) => existsSync(join(out, f)));
  if (present.length) throw new Error(`${out} already has ${present.join(", ")}: nothing written (choose another NAME or --dir)`);
  mkdirSync(out, { recursive: true });
  for (const [file, text] of Object.entries(files)) writeFileSync(join(out, file), text, { flag: "wx" });

  // a path as the user would type it where they are: relative below that directory, else absolute
  const shown = (from: string, p: string) => (relative(from, p).startsWith("..") ? p : relative(from, p) || ".");
  print(`wrote ${shown(invocationDir(), out)}/`);
  for (const [file, what] of Object.entries(describeFiles)) print(`  ${file.padEnd(18)} ${what}`);
  const cd = resolve(invocationDir()) === repoRoot ? "" : `cd ${shown(invocationDir(), repoRoot)} && `;
  print(`test it: ${cd}bash scripts/run.sh node node_modules/vitest/vitest.mjs run --no-cache --root ${shown(repoRoot, out)}`);
  print("the guide: docs/writing-functions.md");
  return Object.keys(files).map((f) => join(out, f));
}

const describeFiles: Record<string, string> = {
  "function.ts": "the function: labelled ConfigMaps on the source, copied to every target",
  "function.test.ts": "its test against real clusters, under the RBAC below",
  "rbac-source.yaml": "the ClusterRole for its identity on the source cluster",
  "rbac-target.yaml": "the ClusterRole for its identity on each target cluster",
  "func.yaml": "knative/func's metadata: settings, service account, subscriptions",
  "tsconfig.json": "the project's compiler settings, for tsc -p and your editor",
};

function checkNames(o: NewFunctionOptions): void {
  if (!DNS_LABEL.test(o.name)) throw new Error(`the name ${JSON.stringify(o.name)} is not a DNS label (lower-case letters, digits and "-", at most 63, starting and ending with a letter or digit): nothing written`);
  for (const c of [o.source, ...o.targets]) if (!DNS_SUBDOMAIN.test(c)) throw new Error(`the cluster name ${JSON.stringify(c)} is not a DNS subdomain: nothing written`);
  if (o.targets.includes(o.source)) throw new Error(`the source ${o.source} cannot also be a target: nothing written`);
  if (new Set(o.targets).size !== o.targets.length) throw new Error(`--targets names a cluster twice: nothing written`);
}

// Inside this checkout: the function and its test import the SDK, zod and vitest from it, and its
// package.json makes .ts files ES modules. Not under node_modules, which tools treat as packages.
function checkPlace(out: string): void {
  const existing = (p: string): string => (existsSync(p) ? realpathSync(p) : join(existing(dirname(p)), basename(p)));
  const inside = relative(realpathSync(repoRoot), existing(out));
  if (inside === "" || inside.startsWith("..") || isAbsolute(inside)) throw new Error(`${out} is outside the ocm-functions checkout (${repoRoot}), whose SDK, zod and vitest the function uses: choose a --dir inside it; nothing written`);
  if (inside.split(sep).includes("node_modules")) throw new Error(`${out} is under node_modules: choose another --dir; nothing written`);
}

function scaffold(o: NewFunctionOptions, out: string): Record<string, string> {
  // The watches do not depend on the copy seal key; a throwaway one lets the settings parse.
  const config = ConfigSchema.parse({ source: o.source, targets: o.targets, copySealKey: Buffer.alloc(32).toString("base64") });
  const rules = (cluster: string, role: string) => functionRoles(template, config, cluster, `${o.name}:${role}`).flatMap((r) => r.rules);
  const source = (file: string) => readFileSync(join(templates, file), "utf8");
  let fn = adapt(source("function.ts"), out);
  fn = replaceOnce(fn, '.default("hub")', `.default(${JSON.stringify(o.source)})`);
  fn = replaceOnce(fn, '.default(["cluster1", "cluster2"])', `.default(${list(o.targets)})`);
  return {
    "function.ts": rename(fn, o.name),
    "function.test.ts": rename(adapt(source("function.test.ts"), out), o.name),
    "rbac-source.yaml": clusterRole(o.name, "source", [o.source], rules(o.source, "source")),
    "rbac-target.yaml": clusterRole(o.name, "target", o.targets, rules(o.targets[0]!, "target")),
    "func.yaml": funcYaml(o, template.subscriptions(config)),
    // the project's compiler settings for these files, for tsc -p and for editors
    "tsconfig.json": `{\n  "extends": ${JSON.stringify(`${importPath(out, repoRoot)}/tsconfig.json`)},\n  "include": ["*.ts"]\n}\n`,
  };
}

// A replacement that must find its text exactly once, so a changed template fails loudly here.
function replaceOnce(text: string, from: string, to: string): string {
  const parts = text.split(from);
  if (parts.length !== 2) throw new Error(`the template has ${parts.length - 1} of ${from}, not one`);
  return parts.join(to);
}

function rename(text: string, name: string): string {
  return text.replaceAll(PLACEHOLDER, name);
}

// The templates import the checkout from cli/templates/ ("../../shared/…"); the scaffold from `out`.
function adapt(text: string, out: string): string {
  return text.replaceAll('from "../../', `from "${importPath(out, repoRoot)}/`);
}

function importPath(from: string, to: string): string {
  const path = relative(from, to).split(sep).join("/");
  return path.startsWith(".") ? path : `./${path}`;
}

const list = (items: readonly string[]) => `[${items.map((i) => JSON.stringify(i)).join(", ")}]`;
const ruleYaml = (r: RbacRule) => [
  `  - apiGroups: ${list(r.apiGroups ?? [])}`,
  `    resources: ${list(r.resources ?? [])}`,
  ...(r.resourceNames ? [`    resourceNames: ${list(r.resourceNames)}`] : []),
  `    verbs: ${list(r.verbs)}`,
];

function clusterRole(name: string, role: "source" | "target", clusters: string[], rules: RbacRule[]): string {
  return [
    `# ${name} on the ${role} cluster${clusters.length > 1 ? "s" : ""} (${clusters.join(", ")}): bind it to the function's identity there.`,
    "# Made from function.ts (cli/render/rbac.ts): get, list and watch on what its watches name, and what its",
    "# `writes` declare. When you change function.ts, make this again: the test runs the function under it.",
    "apiVersion: rbac.authorization.k8s.io/v1",
    "kind: ClusterRole",
    "metadata:",
    `  name: ${name}:${role}`,
    "rules:",
    ...rules.flatMap(ruleYaml),
    "",
  ].join("\n");
}

// A YAML scalar: plain when that cannot be misread, else double-quoted (JSON's quoting is YAML's).
const scalar = (s: string) => (/^[a-z][-a-z0-9.]*$/i.test(s) && !/^(true|false|yes|no|on|off|null)$/i.test(s) ? s : JSON.stringify(s));

function funcYaml(o: NewFunctionOptions, subscriptions: Subscription[]): string {
  const created = (o.now ?? new Date()).toISOString().replace(/\.\d+Z$/, "Z");
  const filters = (f: Record<string, string>) => Object.entries(f).map(([k, v]) => `${k}: ${scalar(v)}`).join(", ");
  return [
    `# Knative function ${o.name} (function.ts), in knative/func's format. Made by \`ocmf new function\`; the`,
    "# guide (docs/writing-functions.md) shows how to deploy it.",
    "specVersion: 0.35.0",
    `name: ${o.name}`,
    "runtime: typescript",
    `created: ${created}`,
    "invoke: cloudevent",
    "run:",
    "  envs:",
    "    # The settings (ConfigSchema in function.ts), one variable per field.",
    "    - name: SOURCE",
    `      value: ${scalar(o.source)}`,
    "    - name: TARGETS",
    `      value: ${JSON.stringify(o.targets.join(","))}`,
    `    # The key the function seals its copies with, from a Secret only it reads: create it once with`,
    `    # kubectl create secret generic ${o.name}-copy-seal --from-literal=key="$(openssl rand -base64 32)"`,
    "    - name: COPY_SEAL_KEY",
    `      value: "{{ secret:${o.name}-copy-seal:key }}"`,
    `    # Credentials: the cluster the function runs in (${o.source}) through its ServiceAccount, every other`,
    "    # through <cluster>.kubeconfig in this directory, mounted from the Secret below.",
    "    - name: OCM_CLUSTER_NAME",
    `      value: ${scalar(o.source)}`,
    "    - name: OCM_KUBECONFIG_DIR",
    `      value: /etc/${o.name}/kubeconfigs`,
    "  volumes:",
    `    - secret: ${o.name}-kubeconfigs`,
    `      path: /etc/${o.name}/kubeconfigs`,
    "deploy:",
    `  # Bound to the ClusterRole in rbac-source.yaml.`,
    `  serviceAccountName: ${o.name}`,
    "  # A Trigger on the Broker per subscription: what the watches take (fn.subscriptions(config)).",
    "  subscriptions:",
    ...subscriptions.map((s) => `    - { source: ${scalar(s.source)}, filters: { ${filters(s.filters)} } }`),
    "",
  ].join("\n");
}
