// A small metrics registry and its Prometheus text exposition (format 0.0.4): counters, gauges and
// histograms with fixed label names, written out with HELP and TYPE lines. Dependency-free on purpose:
// prom-client alone would be most of a function bundle. One registry per process (`metrics`), as
// controller-runtime's metrics.Registry: the harness, the Kubernetes client, the relay and the heartbeat
// all register into it, and every server we run answers GET /metrics from it (docs/metrics.md).
//
// The hot path is a Map lookup: a series is found by its label values, joined into one string key
// (no join for a single label), and created at its first use.

export const METRICS_PATH = "/metrics";
export const EXPOSITION_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

// The data model's rules for names; a name starting with __ is reserved for Prometheus itself.
const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

type Kind = "counter" | "gauge" | "histogram";

// A value as the text format writes it: Go's float formatting for the specials.
export function formatValue(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (v === Infinity) return "+Inf";
  if (v === -Infinity) return "-Inf";
  return String(v);
}

// Label values may hold any UTF-8; backslash, double quote and line feed are escaped.
export const escapeLabelValue = (v: string): string => v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
// HELP text escapes backslash and line feed only.
const escapeHelp = (v: string): string => v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");

const SEPARATOR = "\u0000";

abstract class Metric<S extends { values: readonly string[] }> {
  protected readonly series = new Map<string, S>();
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly string[];
  readonly kind: Kind;
  constructor(name: string, help: string, labelNames: readonly string[], kind: Kind) {
    this.name = name;
    this.help = help;
    this.labelNames = [...labelNames];
    this.kind = kind;
  }

  protected abstract fresh(values: readonly string[]): S;

  protected at(values: readonly string[]): S {
    if (values.length !== this.labelNames.length) throw new Error(`metric ${this.name} takes ${this.labelNames.length} label values (${this.labelNames.join(", ")}), not ${values.length}`);
    const key = values.length === 1 ? values[0]! : values.join(SEPARATOR);
    let s = this.series.get(key);
    if (!s) {
      for (const v of values) if (typeof v !== "string") throw new Error(`metric ${this.name}: label values must be strings, not ${typeof v}`);
      this.series.set(key, (s = this.fresh([...values])));
    }
    return s;
  }

  // {a="x",b="y"}, with extra pairs (a histogram's le) after the metric's own.
  protected labels(values: readonly string[], extra?: [string, string]): string {
    const pairs = this.labelNames.map((n, i) => `${n}="${escapeLabelValue(values[i]!)}"`);
    if (extra) pairs.push(`${extra[0]}="${escapeLabelValue(extra[1])}"`);
    return pairs.length ? `{${pairs.join(",")}}` : "";
  }

  abstract samples(): string[];

  expose(): string {
    return [`# HELP ${this.name} ${escapeHelp(this.help)}`, `# TYPE ${this.name} ${this.kind}`, ...this.samples()].join("\n");
  }
}

type Scalar = { values: readonly string[]; value: number };

export class Counter extends Metric<Scalar> {
  constructor(name: string, help: string, labelNames: readonly string[]) {
    super(name, help, labelNames, "counter");
  }
  protected fresh(values: readonly string[]): Scalar {
    return { values, value: 0 };
  }
  inc(values: readonly string[] = [], by = 1): void {
    if (!(by >= 0)) throw new Error(`counter ${this.name} can only go up, not by ${by}`);
    this.at(values).value += by;
  }
  get(values: readonly string[] = []): number {
    return this.at(values).value;
  }
  samples(): string[] {
    return [...this.series.values()].map((s) => `${this.name}${this.labels(s.values)} ${formatValue(s.value)}`);
  }
}

export class Gauge extends Metric<Scalar> {
  constructor(name: string, help: string, labelNames: readonly string[]) {
    super(name, help, labelNames, "gauge");
  }
  protected fresh(values: readonly string[]): Scalar {
    return { values, value: 0 };
  }
  set(values: readonly string[], v: number): void {
    this.at(values).value = v;
  }
  add(values: readonly string[], by: number): void {
    this.at(values).value += by;
  }
  get(values: readonly string[] = []): number {
    return this.at(values).value;
  }
  samples(): string[] {
    return [...this.series.values()].map((s) => `${this.name}${this.labels(s.values)} ${formatValue(s.value)}`);
  }
}

type Buckets = { values: readonly string[]; counts: number[]; sum: number; count: number };

export class Histogram extends Metric<Buckets> {
  readonly bounds: readonly number[];
  constructor(name: string, help: string, labelNames: readonly string[], bounds: readonly number[]) {
    super(name, help, labelNames, "histogram");
    if (labelNames.includes("le")) throw new Error(`histogram ${name}: "le" is the bucket label and cannot be one of its own`);
    if (bounds.length === 0 || bounds.some((b, i) => !Number.isFinite(b) || (i > 0 && b <= bounds[i - 1]!))) throw new Error(`histogram ${name}: bucket bounds must be finite and strictly increasing`);
    this.bounds = [...bounds];
  }
  protected fresh(values: readonly string[]): Buckets {
    return { values, counts: new Array<number>(this.bounds.length).fill(0), sum: 0, count: 0 };
  }
  observe(values: readonly string[], v: number): void {
    const s = this.at(values);
    // Only the first bucket that holds v is counted here; the exposition makes them cumulative.
    const i = this.bounds.findIndex((b) => v <= b);
    if (i >= 0) s.counts[i]!++;
    s.sum += v;
    s.count++;
  }
  samples(): string[] {
    const lines: string[] = [];
    for (const s of this.series.values()) {
      let cumulative = 0;
      this.bounds.forEach((b, i) => {
        cumulative += s.counts[i]!;
        lines.push(`${this.name}_bucket${this.labels(s.values, ["le", formatValue(b)])} ${cumulative}`);
      });
      lines.push(`${this.name}_bucket${this.labels(s.values, ["le", "+Inf"])} ${s.count}`);
      lines.push(`${this.name}_sum${this.labels(s.values)} ${formatValue(s.sum)}`);
      lines.push(`${this.name}_count${this.labels(s.values)} ${s.count}`);
    }
    return lines;
  }
}

export class Registry {
  private readonly metrics = new Map<string, Metric<{ values: readonly string[] }>>();
  private readonly collectors = new Set<() => void>();

  // Registering a name again with the same kind and labels gives the metric already there (a module
  // loaded twice, or a second relay sink); anything else under that name is refused.
  private register<M extends Metric<{ values: readonly string[] }>>(name: string, kind: Kind, labelNames: readonly string[], make: () => M): M {
    if (!METRIC_NAME.test(name) || name.startsWith("__")) throw new Error(`${JSON.stringify(name)} is not a valid metric name`);
    for (const l of labelNames) if (!LABEL_NAME.test(l) || l.startsWith("__")) throw new Error(`metric ${name}: ${JSON.stringify(l)} is not a valid label name`);
    if (new Set(labelNames).size !== labelNames.length) throw new Error(`metric ${name}: a label name is repeated`);
    const existing = this.metrics.get(name);
    if (existing) {
      if (existing.kind !== kind || existing.labelNames.join(",") !== labelNames.join(",")) {
        throw new Error(`metric ${name} is already registered as a ${existing.kind} with labels (${existing.labelNames.join(", ")})`);
      }
      return existing as M;
    }
    const m = make();
    this.metrics.set(name, m);
    return m;
  }

  counter(name: string, help: string, labelNames: readonly string[] = []): Counter {
    return this.register(name, "counter", labelNames, () => new Counter(name, help, labelNames));
  }
  gauge(name: string, help: string, labelNames: readonly string[] = []): Gauge {
    return this.register(name, "gauge", labelNames, () => new Gauge(name, help, labelNames));
  }
  histogram(name: string, help: string, labelNames: readonly string[], bounds: readonly number[]): Histogram {
    const h = this.register(name, "histogram", labelNames, () => new Histogram(name, help, labelNames, bounds));
    if (h.bounds.join(",") !== bounds.join(",")) throw new Error(`histogram ${name} is already registered with other buckets`);
    return h;
  }

  // A function run before each exposition, to set gauges read from state (a queue's length); the
  // returned function removes it.
  onCollect(collect: () => void): () => void {
    this.collectors.add(collect);
    return () => void this.collectors.delete(collect);
  }

  // Every metric, in the order registered; one that has no series yet is still announced (HELP, TYPE).
  expose(): string {
    for (const c of this.collectors) c();
    return [...this.metrics.values()].map((m) => `${m.expose()}\n`).join("");
  }
}

// The process's registry.
export const metrics = new Registry();

// controller-runtime's reconcile-time buckets (metrics.go): from 5 ms to a minute.
export const RECONCILE_TIME_BUCKETS: readonly number[] = [
  0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
];

// One GET /metrics answer, for a node:http handler; undefined when the request is not for /metrics.
export function metricsAnswer(method: string | undefined, path: string, registry: Registry = metrics): { status: number; headers: Record<string, string>; body: string } | undefined {
  if (path !== METRICS_PATH || (method !== "GET" && method !== "HEAD")) return undefined;
  return { status: 200, headers: { "content-type": EXPOSITION_CONTENT_TYPE }, body: registry.expose() };
}
