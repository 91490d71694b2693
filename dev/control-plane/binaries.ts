// Where etcd, kube-apiserver and kube-controller-manager come from: KUBEBUILDER_ASSETS (envtest's
// convention) when set, else the cache scripts/build-tools.sh fills from the Go module proxy.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

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
