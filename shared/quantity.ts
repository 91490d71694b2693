// resource.Quantity as apimachinery parses, adds and prints it, so sums of node resources read exactly
// as OCM's agent writes them into a ManagedCluster ("2" + "500m" is "2500m", "4Gi" + "2Gi" is "6Gi").

export type QuantityFormat = "DecimalSI" | "BinarySI" | "DecimalExponent";
// The value is unscaled × 10^exponent, exact; like Kubernetes, nothing finer than nano is kept.
export type Quantity = { unscaled: bigint; exponent: number; format: QuantityFormat };

const decimalSuffixes: Readonly<Record<string, number>> = { n: -9, u: -6, m: -3, "": 0, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 };
const binarySuffixes: Readonly<Record<string, number>> = { Ki: 10, Mi: 20, Gi: 30, Ti: 40, Pi: 50, Ei: 60 };
const decimalSuffixOf = new Map(Object.entries(decimalSuffixes).map(([s, e]) => [e, s]));
const binarySuffixOf = new Map(Object.entries(binarySuffixes).map(([s, e]) => [e, s]));

const NANO = -9;
// apimachinery caps binary quantities at the largest int64.
const MAX_BINARY = 2n ** 63n - 1n;
const shape = /^([+-]?)(\d*)(?:\.(\d*))?([a-zA-Z]*|[eE][+-]?\d+)$/;

const pow10 = (n: number) => 10n ** BigInt(n);
const abs = (n: bigint) => (n < 0n ? -n : n);

export function parseQuantity(input: string | number): Quantity {
  const text = String(input);
  const m = shape.exec(text);
  const [, sign = "", whole = "", fraction = "", suffix = ""] = m ?? [];
  if (!m || whole + fraction === "") throw new Error(`quantity ${JSON.stringify(text)} does not match the format Kubernetes accepts`);
  let unscaled = BigInt(whole + fraction);
  let exponent = -fraction.length;
  let format: QuantityFormat;
  if (suffix in decimalSuffixes) {
    format = "DecimalSI";
    exponent += decimalSuffixes[suffix]!;
  } else if (suffix in binarySuffixes) {
    format = "BinarySI";
    unscaled *= 2n ** BigInt(binarySuffixes[suffix]!);
  } else if (/^[eE][+-]?\d+$/.test(suffix)) {
    format = "DecimalExponent";
    exponent += Number(suffix.slice(1));
  } else {
    throw new Error(`quantity ${JSON.stringify(text)} has an unknown suffix ${JSON.stringify(suffix)}`);
  }
  // apimachinery rounds anything finer than nano up (away from zero): asking for some of a
  // resource should never read as asking for none.
  if (exponent < NANO) {
    const divisor = pow10(NANO - exponent);
    const rounded = unscaled / divisor + (unscaled % divisor === 0n ? 0n : 1n);
    unscaled = rounded;
    exponent = NANO;
  }
  let q: Quantity = { unscaled: sign === "-" ? -unscaled : unscaled, exponent, format };
  if (format === "BinarySI") {
    if (compareMagnitude(q, MAX_BINARY) > 0) q = { unscaled: sign === "-" ? -MAX_BINARY : MAX_BINARY, exponent: 0, format };
    // a binary amount between 0 and 1 is printed in decimal, to avoid rounding
    if (q.unscaled !== 0n && compareMagnitude(q, 1n) < 0) q = { ...q, format: "DecimalSI" };
  }
  return q;
}

// Quantity.Add: the sum keeps the first operand's format unless that operand is zero.
export function addQuantities(a: Quantity, b: Quantity): Quantity {
  const exponent = Math.min(a.exponent, b.exponent);
  const unscaled = a.unscaled * pow10(a.exponent - exponent) + b.unscaled * pow10(b.exponent - exponent);
  return { unscaled, exponent, format: a.unscaled === 0n ? b.format : a.format };
}

// Quantity.String(): the canonical form the API server would also print.
export function formatQuantity(q: Quantity): string {
  if (q.unscaled === 0n) return "0";
  let format = q.format;
  // Binary only for whole numbers of at least 1024 in magnitude; anything else would round or confuse.
  if (format === "BinarySI" && (compareMagnitude(q, 1024n) < 0 || !isWhole(q))) format = "DecimalSI";
  if (format === "BinarySI") {
    let value = q.exponent >= 0 ? q.unscaled * pow10(q.exponent) : q.unscaled / pow10(-q.exponent);
    let bits = 0;
    while (value % 1024n === 0n && binarySuffixOf.has(bits + 10)) {
      value /= 1024n;
      bits += 10;
    }
    return `${value}${binarySuffixOf.get(bits) ?? ""}`;
  }
  let unscaled = q.unscaled;
  let exponent = q.exponent;
  while (unscaled % 10n === 0n) {
    unscaled /= 10n;
    exponent++;
  }
  // the exponent moves down to a multiple of three, so the number stays whole ("2500m", not "2.5")
  const down = ((exponent % 3) + 3) % 3;
  unscaled *= pow10(down);
  exponent -= down;
  if (format === "DecimalExponent") return exponent === 0 ? `${unscaled}` : `${unscaled}e${exponent}`;
  const suffix = decimalSuffixOf.get(exponent);
  return suffix === undefined ? `${unscaled}e${exponent}` : `${unscaled}${suffix}`;
}

// Sums per resource name, in the order given, as OCM adds node resources one node at a time.
export function sumResourceLists(lists: readonly Readonly<Record<string, string | number>>[]): Record<string, string> {
  const sums = new Map<string, Quantity>();
  for (const list of lists) {
    for (const [name, value] of Object.entries(list)) {
      const q = parseQuantity(value);
      const sum = sums.get(name);
      sums.set(name, sum ? addQuantities(sum, q) : q);
    }
  }
  return Object.fromEntries([...sums].map(([name, q]) => [name, formatQuantity(q)]));
}

function isWhole(q: Quantity): boolean {
  return q.exponent >= 0 || q.unscaled % pow10(-q.exponent) === 0n;
}

// Compares |q| with a whole number n >= 0.
function compareMagnitude(q: Quantity, n: bigint): number {
  const left = q.exponent >= 0 ? abs(q.unscaled) * pow10(q.exponent) : abs(q.unscaled);
  const right = q.exponent >= 0 ? n : n * pow10(-q.exponent);
  return left < right ? -1 : left > right ? 1 : 0;
}

// Quantity.AsApproximateFloat64: near enough to rank clusters by, never to write back.
export function quantityToNumber(q: Quantity): number {
  return Number(q.unscaled) * 10 ** q.exponent;
}

// Quantity.Cmp: exact, whatever the two formats.
export function compareQuantities(a: Quantity, b: Quantity): -1 | 0 | 1 {
  const exponent = Math.min(a.exponent, b.exponent);
  const x = a.unscaled * pow10(a.exponent - exponent);
  const y = b.unscaled * pow10(b.exponent - exponent);
  return x < y ? -1 : x > y ? 1 : 0;
}
