// `npm start`: a local hub and two spokes on real control planes, every function running as a
// faas-js-runtime server under its own identity, fed by the relays, until Ctrl-C.
// cluster1 joins by auto-approval; cluster2 waits until `npm run ocmf -- accept --clusters cluster2`.
import { appendFileSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { startFleet } from "../shared/local/fleet.ts";
import { clusterTable } from "./cluster-table.ts";

const root = join(import.meta.dirname, "..");
const outDir = join(root, ".local");
const rel = (p: string) => relative(process.cwd(), p) || ".";
rmSync(outDir, { recursive: true, force: true });
mkdirSync(join(outDir, "logs"), { recursive: true });

const fleet = await startFleet({
  spokes: [
    { name: "cluster1", autoApprove: true },
    { name: "cluster2", autoApprove: false },
  ],
  resyncMs: 5_000,
  log: (line) => appendFileSync(join(outDir, "logs", `${(JSON.parse(line) as { fn: string }).fn}.log`), line),
  record: (relay) => join(outDir, "logs", `events-${relay}.jsonl`),
});

// The functions' runtime also handles SIGINT: it runs fleet.stop() and exits itself, so the folder
// goes in an exit hook, whoever ends the process.
process.on("exit", () => rmSync(outDir, { recursive: true, force: true }));
let stopping = false;
async function shutdown(signal: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  process.stderr.write(`\n${signal}: stopping the functions, relays and clusters\n`);
  await fleet.stop();
  process.exit(0);
}
process.on("SIGINT", () => void shutdown("SIGINT"));
process.on("SIGTERM", () => void shutdown("SIGTERM"));

for (const c of fleet.clusters.clusters) writeFileSync(join(outDir, `${c.name}.kubeconfig`), c.adminKubeconfig, { mode: 0o600 });
console.log(`
Local clusters are up (control planes started in ${(fleet.clusters.startupMs / 1000).toFixed(1)} s):
${fleet.clusters.clusters.map((c) => `  ${c.name.padEnd(9)} ${c.url}   kubeconfig: ${rel(join(outDir, `${c.name}.kubeconfig`))}`).join("\n")}

Functions and relays log to ${rel(join(outDir, "logs"))}/ (events-*.jsonl: every event delivered).
cluster1 joins by auto-approval. cluster2 waits for you:
  npm run ocmf -- accept --clusters cluster2
  kubectl --kubeconfig ${rel(join(outDir, "hub.kubeconfig"))} get managedclusters
Ctrl-C stops every process and removes ${rel(outDir)}/.
`);

// The live view: the ManagedCluster table whenever it changes.
let last = "";
for (;;) {
  if (stopping) break;
  const table = await clusterTable(fleet.hub).catch((err: Error) => `(hub not answering: ${err.message})`);
  const shape = table.replace(/\s+\S+$/gm, ""); // ignore the AGE column when deciding what changed
  if (shape !== last) {
    console.log(`${new Date().toISOString().slice(11, 19)}\n${table}\n`);
    last = shape;
  }
  await new Promise((r) => setTimeout(r, 1_000));
}
