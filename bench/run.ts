// `npm run bench [name...]`: runs the benchmarks (all, or the named ones) and prints their figures.
import { controlPlane } from "./control-plane.ts";
import { join } from "./join.ts";
import { heartbeat } from "./heartbeat.ts";
import { work } from "./work.ts";
import { health } from "./health.ts";
import { addon } from "./addon.ts";
import { broker } from "./broker.ts";
import { placement } from "./placement.ts";
import { agentConfigBench } from "./agent-config.ts";
import { coldStart } from "./cold-start.ts";
import { eventsToConverged } from "./events-to-converged.ts";
import { hubCost, fleetScale } from "./scale.ts";
import { spoke } from "./spoke.ts";
import { serving } from "./serving.ts";
import { acceptance } from "./acceptance.ts";

type Bench = { name: string; run(): Promise<Record<string, string | number>> };
// Run only when named: broker and serving need root (a real node); hub-cost, fleet, spoke and acceptance take
// minutes and run OCM's programs beside ours (npm run bench -- hub-cost).
const benches: Bench[] = [controlPlane, join, heartbeat, health, work, addon, placement, agentConfigBench, coldStart, eventsToConverged];
const byName: Bench[] = [broker, serving, hubCost, fleetScale, spoke, acceptance];

// Benchmarks start many function servers in one process, and the functions' runtime adds signal
// listeners for each; they are expected here, not a leak.
process.setMaxListeners(0);
// The functions' runtime turns an uncaught exception into a silent exit(0); say what it was first.
process.on("uncaughtException", (err) => {
  process.stderr.write(`uncaught: ${err.stack ?? err}\n`);
  process.exitCode = 1;
});

const wanted = process.argv.slice(2);
for (const b of wanted.length ? [...benches, ...byName].filter((x) => wanted.includes(x.name)) : benches) {
  process.stdout.write(`\n# ${b.name}\n`);
  const figures = await b.run();
  for (const [k, v] of Object.entries(figures)) process.stdout.write(`${k.padEnd(44)} ${v}\n`);
}
