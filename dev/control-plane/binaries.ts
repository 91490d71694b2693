// Where etcd, kube-apiserver and kube-controller-manager come from: KUBEBUILDER_ASSETS (envtest's
// convention) when set, else the cache scripts/build-tools.sh fills from the Go module proxy. Also
// where OCM's clusteradm is (tools/clusteradm).
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

// The cache every run on this machine shares (scripts/build-tools.sh's): OCM_FUNCTIONS_CACHE, else
// ocm-functions under XDG_CACHE_HOME or ~/.cache.
export function cacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  return env.OCM_FUNCTIONS_CACHE ?? join(env.XDG_CACHE_HOME ?? join(homedir(), ".cache"), "ocm-functions");
}

export type Binaries = { etcd: string; apiserver: string; controllerManager: string };

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

function binDir(): string {
  if (process.env.KUBEBUILDER_ASSETS) return process.env.KUBEBUILDER_ASSETS;
  if (process.env.OCM_FUNCTIONS_BIN) return process.env.OCM_FUNCTIONS_BIN;
  // Not started through scripts/run.sh: build (or find) them now, showing the build's progress.
  const out = execFileSync(join(repoRoot, "scripts", "build-tools.sh"), { stdio: ["ignore", "pipe", "inherit"] });
  return out.toString().trim().split("\n").pop()!;
}

export function findBinaries(): Binaries {
  const dir = binDir();
  const b = { etcd: join(dir, "etcd"), apiserver: join(dir, "kube-apiserver"), controllerManager: join(dir, "kube-controller-manager") };
  for (const path of Object.values(b)) if (!existsSync(path)) throw new Error(`control plane binary missing: ${path}`);
  return b;
}

// scripts/run.sh builds clusteradm before the tests and names it in OCM_FUNCTIONS_CLUSTERADM; otherwise
// the build script is asked (it builds it once, then answers at once).
export function findClusteradm(): string {
  const path =
    process.env.OCM_FUNCTIONS_CLUSTERADM ||
    execFileSync(join(repoRoot, "scripts", "build-tools.sh"), ["clusteradm"], { stdio: ["ignore", "pipe", "inherit"] }).toString().trim().split("\n").pop()!;
  if (!existsSync(path)) throw new Error(`clusteradm missing: ${path} (scripts/build-tools.sh clusteradm builds it)`);
  return path;
}

// Our Go consumer of the cluster inventory (tools/inventory-consumer).
export function findInventoryConsumer(): string {
  const path =
    process.env.OCM_FUNCTIONS_INVENTORY_CONSUMER ||
    execFileSync(join(repoRoot, "scripts", "build-tools.sh"), ["inventory-consumer"], { stdio: ["ignore", "pipe", "inherit"] }).toString().trim().split("\n").pop()!;
  if (!existsSync(path)) throw new Error(`the inventory consumer is missing: ${path} (scripts/build-tools.sh inventory-consumer builds it)`);
  return path;
}

export type OcmPrograms = { registration: string; work: string; addon: string; placement: string };
type OcmProgram = keyof OcmPrograms;
const ocmPrograms: readonly OcmProgram[] = ["registration", "work", "addon", "placement"];

// OCM v1.2.0's own programs (tools/ocm), those `needed` (default all). scripts/run.sh builds them before
// the tests and names each in OCM_FUNCTIONS_OCM_REGISTRATION, _WORK, _ADDON and _PLACEMENT; when one
// needed is not named, the build script is asked (it builds them once, then answers at once with one
// `<program> <path>` line each).
export function findOcm(): OcmPrograms;
export function findOcm<P extends OcmProgram>(needed: readonly P[]): Pick<OcmPrograms, P>;
export function findOcm(needed: readonly OcmProgram[] = ocmPrograms): Partial<OcmPrograms> {
  const fromEnv: Partial<OcmPrograms> = {
    registration: process.env.OCM_FUNCTIONS_OCM_REGISTRATION,
    work: process.env.OCM_FUNCTIONS_OCM_WORK,
    addon: process.env.OCM_FUNCTIONS_OCM_ADDON,
    placement: process.env.OCM_FUNCTIONS_OCM_PLACEMENT,
  };
  let found = fromEnv;
  if (needed.some((p) => !fromEnv[p])) {
    const out = execFileSync(join(repoRoot, "scripts", "build-tools.sh"), ["ocm"], { stdio: ["ignore", "pipe", "inherit"] }).toString();
    const lines = out.trim().split("\n").map((l) => l.split(" "));
    found = Object.fromEntries(lines.filter((l) => l.length === 2 && ocmPrograms.includes(l[0] as OcmProgram)));
  }
  for (const p of needed) if (!found[p] || !existsSync(found[p])) throw new Error(`OCM's ${p} missing: ${found[p] ?? "(not built)"} (scripts/build-tools.sh ocm builds it)`);
  return Object.fromEntries(needed.map((p) => [p, found[p]!]));
}

// The folder of the open-cluster-management.io/api module tools/ocm builds with (its CRD files among
// it), in the Go module cache; `go mod download` fetches it first if the cache lacks it.
export const ocmApiModuleDir = () => toolsOcmModuleDir("open-cluster-management.io/api");
// The same for open-cluster-management.io/ocm itself (its hub manifests: the add-on manager's ClusterRole).
export const ocmModuleDir = () => toolsOcmModuleDir("open-cluster-management.io/ocm");
// SIG-Multicluster's Cluster Inventory API (its ClusterProfile and PlacementDecision CRDs) and OCM's
// managed-serviceaccount add-on (its API and credentials plugin), at the versions tools/apis names.
export const inventoryApiModuleDir = () => toolsOcmModuleDir("sigs.k8s.io/cluster-inventory-api", "apis");
export const managedServiceAccountModuleDir = () => toolsOcmModuleDir("open-cluster-management.io/managed-serviceaccount", "apis");

function toolsOcmModuleDir(module: string, tool = "ocm"): string {
  const out = execFileSync("go", ["mod", "download", "-json", module], {
    cwd: join(repoRoot, "tools", tool),
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, GOTOOLCHAIN: "local", GOFLAGS: "-mod=mod", GONOSUMDB: "open-cluster-management.io,sigs.k8s.io/about-api" },
  });
  const dir = (JSON.parse(out.toString()) as { Dir?: string }).Dir;
  if (!dir || !existsSync(dir)) throw new Error(`${module} is not in the Go module cache: ${out}`);
  return dir;
}
