// Records the event stream of one join into test/fixtures/join/: a local fleet with one auto-approved
// spoke, its relays recording every delivered event, kept up a few resync ticks past ManagedClusterJoined.
//   node scripts/record-join.ts     (through scripts/run.sh, so the binaries are there)
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { startFleet } from "../dev/local/fleet.ts";
import { ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { isTrue } from "../shared/conditions.ts";
import type { KubeObject } from "../shared/kube/client.ts";

const dir = join(import.meta.dirname, "..", "test", "fixtures", "join");
rmSync(dir, { recursive: true, force: true });
mkdirSync(dir, { recursive: true });

const fleet = await startFleet({ spokes: [{ name: "cluster1", autoApprove: true }], resyncMs: 1_000, record: (relay) => join(dir, `${relay}.jsonl`) });
const deadline = Date.now() + 60_000;
for (;;) {
  const mc = await fleet.hub.get<ManagedCluster & KubeObject>(ManagedClusterResource, "cluster1");
  if (isTrue(mc?.status?.conditions, "ManagedClusterJoined")) break;
  if (Date.now() > deadline) throw new Error("cluster1 did not join within 60 s");
  await new Promise((r) => setTimeout(r, 100));
}
await new Promise((r) => setTimeout(r, 3_500)); // a few more resync ticks, as a real stream has
await fleet.stop();
console.log(`recorded into ${dir}`);
