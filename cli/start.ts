// `npm start`: a local hub and two spoke clusters with the OCM API, until Ctrl-C.
import { mkdirSync, writeFileSync, rmSync } from "node:fs";
import { join, relative } from "node:path";
import { startClusters } from "../shared/control-plane/clusters.ts";

const root = join(import.meta.dirname, "..");
const outDir = join(root, ".local");
const names = ["hub", "cluster1", "cluster2"];

const local = await startClusters({ names });
let stopping = false;
async function shutdown(signal: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  process.stderr.write(`\n${signal}: stopping the local clusters\n`);
  await local.stop();
  rmSync(outDir, { recursive: true, force: true });
  process.exit(0);
}
process.on("SIGINT", () => void shutdown("SIGINT"));
process.on("SIGTERM", () => void shutdown("SIGTERM"));

mkdirSync(outDir, { recursive: true });
for (const c of local.clusters) writeFileSync(join(outDir, `${c.name}.kubeconfig`), c.adminKubeconfig, { mode: 0o600 });
const rel = (name: string) => relative(process.cwd(), join(outDir, `${name}.kubeconfig`)) || ".";
console.log(`
Local clusters are up (started in ${(local.startupMs / 1000).toFixed(1)} s):
${local.clusters.map((c) => `  ${c.name.padEnd(9)} ${c.url}   kubeconfig: ${rel(c.name)}`).join("\n")}

Try:
  kubectl --kubeconfig ${rel("hub")} get managedclusters
  kubectl --kubeconfig ${rel("cluster1")} get clusterclaims
  kubectl --kubeconfig ${rel("hub")} api-resources --api-group=cluster.open-cluster-management.io

Ctrl-C stops every process and removes ${relative(process.cwd(), outDir) || outDir}/.`);
