// `npm run bench [name...]`: runs the benchmarks (all, or the named ones) and prints their figures.
import { controlPlane } from "./control-plane.ts";

type Bench = { name: string; run(): Promise<Record<string, string | number>> };
const benches: Bench[] = [controlPlane];

const wanted = process.argv.slice(2);
for (const b of benches.filter((x) => wanted.length === 0 || wanted.includes(x.name))) {
  process.stdout.write(`\n# ${b.name}\n`);
  const figures = await b.run();
  for (const [k, v] of Object.entries(figures)) process.stdout.write(`${k.padEnd(44)} ${v}\n`);
}
