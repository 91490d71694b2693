// `npm start`: a local hub and two spokes on real control planes, every function running as a
// CloudEvents server (shared/cloudevents-server.ts) under its own identity, fed by the relays, plus each spoke's heartbeat
// sidecar, until Ctrl-C. cluster1 joins by auto-approval; cluster2 waits for `ocmf accept`.
import { appendFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { startFleet } from "../dev/local/fleet.ts";
import { applyManifests } from "../shared/apply.ts";
import { addonTable, clusterDetails, clusterTable } from "./cluster-table.ts";
import { serveControl } from "./control.ts";
import { writeSecretFile } from "./secret-file.ts";
import { sleep } from "../shared/timers.ts";

const root = join(import.meta.dirname, "..");
const outDir = join(root, ".local");
const rel = (p: string) => relative(process.cwd(), p) || ".";
rmSync(outDir, { recursive: true, force: true });
mkdirSync(join(outDir, "logs"), { recursive: true });

// Short leases so the demo shows a stopped sidecar within seconds: 10 s leases, and the hub calls a
// cluster Unknown after 2 missed (OCM's default is 60 s and 5; both are settings).
const fleet = await startFleet({
  spokes: [
    { name: "cluster1", autoApprove: true },
    { name: "cluster2", autoApprove: false },
  ],
  resyncMs: 5_000,
  leaseDurationSeconds: 10,
  leaseGraceMultiplier: 2,
  addonAgents: true, // the helloworld add-on's agent, which no kubelet runs here
  log: (line) => appendFileSync(join(outDir, "logs", `${(JSON.parse(line) as { fn: string }).fn}.log`), line),
  record: (relay) => join(outDir, "logs", `events-${relay}.jsonl`),
});
for (const addon of ["helloworld.yaml", "managed-serviceaccount.yaml"]) await applyManifests(fleet.hub, readFileSync(join(root, "manifests", "addons", addon), "utf8"));
const control = await serveControl(fleet);

// The functions' runtime also handles SIGINT: it runs fleet.stop() and exits itself, so the folder
// goes in an exit hook, whoever ends the process.
process.on("exit", () => rmSync(outDir, { recursive: true, force: true }));
let stopping = false;
async function shutdown(signal: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  process.stderr.write(`\n${signal}: stopping the functions, relays, sidecars and clusters\n`);
  control.server.close();
  await fleet.stop();
  process.exit(0);
}
process.on("SIGINT", () => void shutdown("SIGINT"));
process.on("SIGTERM", () => void shutdown("SIGTERM"));

for (const c of fleet.clusters.clusters) writeSecretFile(join(outDir, `${c.name}.kubeconfig`), c.adminKubeconfig);
writeFileSync(join(outDir, "control.json"), JSON.stringify({ url: control.url }));
console.log(`
Local clusters are up (control planes started in ${(fleet.clusters.startupMs / 1000).toFixed(1)} s):
${fleet.clusters.clusters.map((c) => `  ${c.name.padEnd(9)} ${c.url}   kubeconfig: ${rel(join(outDir, `${c.name}.kubeconfig`))}`).join("\n")}

Functions, relays and sidecars log to ${rel(join(outDir, "logs"))}/ (events-*.jsonl: every event delivered).
cluster1 joins by auto-approval. In another terminal:
  npm run ocmf -- accept --clusters cluster2                        # cluster2 joins
  npm run ocmf -- sidecar stop --cluster cluster1                   # AVAILABLE turns Unknown after 20 s
  npm run ocmf -- sidecar start --cluster cluster1                  # and True again
  npm run ocmf -- addon enable --names helloworld --clusters cluster1
  kubectl --kubeconfig ${rel(join(outDir, "hub.kubeconfig"))} get managedclusters,managedclusteraddons -A
Ctrl-C stops every process and removes ${rel(outDir)}/.
`);

// The live view: the tables whenever something in them changes.
let last = "";
for (;;) {
  if (stopping) break;
  const parts = await Promise.all([clusterTable(fleet.hub), clusterDetails(fleet.hub), addonTable(fleet.hub)]).catch((err: Error) => [`(hub not answering: ${err.message})`]);
  const view = parts.filter(Boolean).join("\n\n");
  // The cluster table's last column (AGE) changes every second; every other column is compared.
  const shape = [parts[0]!.replace(/\s+\S+$/gm, ""), ...parts.slice(1)].join("\n\n");
  if (shape !== last) {
    console.log(`${new Date().toISOString().slice(11, 19)}\n${view}\n`);
    last = shape;
  }
  await sleep(1_000);
}
