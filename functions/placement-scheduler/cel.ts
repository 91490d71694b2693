// The CEL of a Placement's celSelector, with what OCM's placement controller (v1.2.0) declares:
// the variable `managedCluster` (the object as JSON), Kubernetes' semver and quantity libraries
// (`semver(s)`, `isSemver(s)`, `quantity(s)`, `isQuantity(s)` and their comparisons and accessors), and
// OCM's `parseJSON()` on strings. `scores` needs AddOnPlacementScores, which this hub does not serve, so
// an expression using it does not compile.
import { Environment } from "@marcbachmann/cel-js";
import { compareQuantities, parseQuantity, quantityToNumber, type Quantity } from "../../shared/quantity.ts";
import type { ManagedCluster } from "../../shared/api/cluster.ts";

// Semantic Versioning 2.0: strict, or (normalize) as Kubernetes' semver(s, true) reads it: a leading
// "v" dropped and a missing minor or patch taken as 0.
const strict = /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$/;

export class Semver {
  readonly major: number;
  readonly minor: number;
  readonly patch: number;
  readonly pre: string[];
  constructor(text: string, normalize = false) {
    let t = text;
    if (normalize) {
      t = t.replace(/^v/, "");
      const [core, ...rest] = t.split(/(?=[-+])/);
      const parts = core!.split(".");
      while (parts.length < 3) parts.push("0");
      t = [parts.map((p) => p.replace(/^0+(?=\d)/, "")).join("."), ...rest].join("");
    }
    const m = strict.exec(t);
    if (!m) throw new Error(`${JSON.stringify(text)} is not a semantic version`);
    this.major = Number(m[1]);
    this.minor = Number(m[2]);
    this.patch = Number(m[3]);
    this.pre = m[4] ? m[4].split(".") : [];
  }
}

// Semantic Versioning precedence: -1, 0 or 1.
export function compareSemver(a: Semver, b: Semver): number {
  for (const k of ["major", "minor", "patch"] as const) if (a[k] !== b[k]) return Math.sign(a[k] - b[k]);
  if (!a.pre.length || !b.pre.length) return a.pre.length === b.pre.length ? 0 : a.pre.length ? -1 : 1;
  for (let i = 0; i < Math.min(a.pre.length, b.pre.length); i++) {
    const [s, t] = [a.pre[i]!, b.pre[i]!];
    if (s === t) continue;
    const [ns, nt] = [/^\d+$/.test(s), /^\d+$/.test(t)];
    if (ns && nt) return Math.sign(Number(s) - Number(t));
    if (ns !== nt) return ns ? -1 : 1;
    return s < t ? -1 : 1;
  }
  return Math.sign(a.pre.length - b.pre.length);
}

export class QuantityValue {
  readonly q: Quantity;
  constructor(text: string | Quantity) {
    this.q = typeof text === "string" ? parseQuantity(text) : text;
  }
}
const integerOf = (q: Quantity): bigint => {
  if (q.exponent >= 0) return q.unscaled * 10n ** BigInt(q.exponent);
  const d = 10n ** BigInt(-q.exponent);
  if (q.unscaled % d !== 0n) throw new Error("quantity is not an integer");
  return q.unscaled / d;
};
const isValid = (f: () => unknown) => {
  try {
    f();
    return true;
  } catch {
    return false;
  }
};

const env = new Environment({ unlistedVariablesAreDyn: false })
  .registerVariable("managedCluster", "map")
  .registerType("Semver", Semver)
  .registerFunction("isSemver(string): bool", (s: string) => isValid(() => new Semver(s)))
  .registerFunction("isSemver(string, bool): bool", (s: string, n: boolean) => isValid(() => new Semver(s, n)))
  .registerFunction("semver(string): Semver", (s: string) => new Semver(s))
  .registerFunction("semver(string, bool): Semver", (s: string, n: boolean) => new Semver(s, n))
  .registerFunction("Semver.isGreaterThan(Semver): bool", (a: Semver, b: Semver) => compareSemver(a, b) > 0)
  .registerFunction("Semver.isLessThan(Semver): bool", (a: Semver, b: Semver) => compareSemver(a, b) < 0)
  .registerFunction("Semver.compareTo(Semver): int", (a: Semver, b: Semver) => BigInt(compareSemver(a, b)))
  .registerFunction("Semver.major(): int", (a: Semver) => BigInt(a.major))
  .registerFunction("Semver.minor(): int", (a: Semver) => BigInt(a.minor))
  .registerFunction("Semver.patch(): int", (a: Semver) => BigInt(a.patch))
  .registerType("Quantity", QuantityValue)
  .registerFunction("isQuantity(string): bool", (s: string) => isValid(() => parseQuantity(s)))
  .registerFunction("quantity(string): Quantity", (s: string) => new QuantityValue(s))
  .registerFunction("Quantity.isLessThan(Quantity): bool", (a: QuantityValue, b: QuantityValue) => compareQuantities(a.q, b.q) < 0)
  .registerFunction("Quantity.isGreaterThan(Quantity): bool", (a: QuantityValue, b: QuantityValue) => compareQuantities(a.q, b.q) > 0)
  .registerFunction("Quantity.compareTo(Quantity): int", (a: QuantityValue, b: QuantityValue) => BigInt(compareQuantities(a.q, b.q)))
  .registerFunction("Quantity.sign(): int", (a: QuantityValue) => BigInt(a.q.unscaled === 0n ? 0 : a.q.unscaled < 0n ? -1 : 1))
  .registerFunction("Quantity.isInteger(): bool", (a: QuantityValue) => isValid(() => integerOf(a.q)))
  .registerFunction("Quantity.asInteger(): int", (a: QuantityValue) => integerOf(a.q))
  .registerFunction("Quantity.asApproximateFloat(): double", (a: QuantityValue) => quantityToNumber(a.q))
  .registerFunction("string.parseJSON(): dyn", (s: string) => celValue(JSON.parse(s)));

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
