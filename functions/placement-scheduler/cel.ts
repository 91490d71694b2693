// The CEL of a Placement's celSelector, with the variable and functions of OCM's ManagedCluster library:
// `managedCluster` (the object as JSON), `versionIsGreaterThan`/`versionIsLessThan` on semantic versions
// and `quantityIsGreaterThan`/`quantityIsLessThan` on Kubernetes quantities. `scores` needs
// AddOnPlacementScores, which this hub does not serve, so an expression using it does not compile.
import { Environment } from "@marcbachmann/cel-js";
import { compareQuantities, parseQuantity } from "../../shared/quantity.ts";
import type { ManagedCluster } from "../../shared/api/cluster.ts";

const semver = /^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$/;

// Semantic Versioning 2.0 precedence; a string that is not a version is an evaluation error.
export function compareVersions(a: string, b: string): number {
  const [x, y] = [a, b].map((v) => {
    const m = semver.exec(v);
    if (!m) throw new Error(`${JSON.stringify(v)} is not a semantic version`);
    return m;
  });
  for (let i = 1; i <= 3; i++) {
    const d = Number(x![i]) - Number(y![i]);
    if (d !== 0) return Math.sign(d);
  }
  const [pa, pb] = [x![4], y![4]];
  if (pa === undefined || pb === undefined) return pa === pb ? 0 : pa === undefined ? 1 : -1;
  const [ia, ib] = [pa.split("."), pb.split(".")];
  for (let i = 0; i < Math.min(ia.length, ib.length); i++) {
    const [s, t] = [ia[i]!, ib[i]!];
    if (s === t) continue;
    const [ns, nt] = [/^\d+$/.test(s), /^\d+$/.test(t)];
    if (ns && nt) return Math.sign(Number(s) - Number(t));
    if (ns !== nt) return ns ? -1 : 1;
    return s < t ? -1 : 1;
  }
  return Math.sign(ia.length - ib.length);
}

const env = new Environment({ unlistedVariablesAreDyn: false })
  .registerVariable("managedCluster", "map")
  .registerFunction("string.versionIsGreaterThan(string): bool", (a: string, b: string) => compareVersions(a, b) > 0)
  .registerFunction("string.versionIsLessThan(string): bool", (a: string, b: string) => compareVersions(a, b) < 0)
  .registerFunction("string.quantityIsGreaterThan(string): bool", (a: string, b: string) => compareQuantities(parseQuantity(a), parseQuantity(b)) > 0)
  .registerFunction("string.quantityIsLessThan(string): bool", (a: string, b: string) => compareQuantities(parseQuantity(a), parseQuantity(b)) < 0);

export type CelProgram = (cluster: ManagedCluster) => boolean;

// A compiled expression, or the reason it does not compile (the placement is then misconfigured).
export function compileCel(expression: string): CelProgram | { error: string } {
  let program: ReturnType<typeof env.parse>;
  try {
    program = env.parse(expression);
    const checked = env.check(expression);
    if (!checked.valid) return { error: `compilation failed: ${firstLine(checked.error)}` };
  } catch (err) {
    return { error: `compilation failed: ${firstLine(err)}` };
  }
  return (cluster) => {
    try {
      return program({ managedCluster: celValue(cluster) }) === true;
    } catch {
      return false; // a missing key or a bad version rejects the cluster, as an evaluation error does in OCM
    }
  };
}

const firstLine = (err: unknown) => (err instanceof Error ? err.message : String(err)).split("\n")[0];

// JSON as CEL sees unstructured objects: whole numbers are ints.
function celValue(v: unknown): unknown {
  if (typeof v === "number") return Number.isInteger(v) ? BigInt(v) : v;
  if (Array.isArray(v)) return v.map(celValue);
  if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, celValue(x)]));
  return v;
}
