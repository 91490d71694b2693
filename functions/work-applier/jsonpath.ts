// The part of Kubernetes JSONPath that feedback rules and SSA ignoreFields use: fields (`.a`, `['a.b']`),
// indexes (`[0]`, `[-1]`), wildcards (`[*]`, `.*`) and equality filters (`[?(@.type=="Ready")]`), with
// missing keys allowed, as OCM evaluates them (client-go jsonpath with AllowMissingKeys).

type Literal = string | number | boolean | null;
type Step =
  | { kind: "field"; name: string }
  | { kind: "index"; index: number }
  | { kind: "wildcard" }
  | { kind: "filter"; path: Step[]; op: "==" | "!="; value: Literal };

export type JsonPath = { steps: Step[] };

// Throws on syntax outside the subset (slices, unions, recursive descent, other operators).
export function parseJsonPath(text: string): JsonPath {
  let src = text.trim();
  if (src.startsWith("{") && src.endsWith("}")) src = src.slice(1, -1).trim();
  if (src.startsWith("$")) src = src.slice(1);
  return { steps: parseSteps(src, 0, src.length, text) };
}

function parseSteps(src: string, from: number, to: number, whole: string): Step[] {
  const steps: Step[] = [];
  let i = from;
  const fail = (why: string): never => {
    throw new Error(`unsupported JSONPath ${JSON.stringify(whole)}: ${why}`);
  };
  while (i < to) {
    const c = src[i];
    if (c === ".") {
      if (src[i + 1] === ".") fail("recursive descent (..) is not supported");
      if (src[i + 1] === "*") {
        steps.push({ kind: "wildcard" });
        i += 2;
        continue;
      }
      const m = /^[A-Za-z0-9_\-$]+/.exec(src.slice(i + 1, to));
      if (!m) fail(`expected a field name at offset ${i + 1}`);
      steps.push({ kind: "field", name: m![0] });
      i += 1 + m![0].length;
      continue;
    }
    if (c === "[") {
      const close = matchingBracket(src, i, to);
      if (close < 0) fail(`unclosed [ at offset ${i}`);
      const inner = src.slice(i + 1, close).trim();
      if (inner === "*") steps.push({ kind: "wildcard" });
      else if (/^-?\d+$/.test(inner)) steps.push({ kind: "index", index: Number(inner) });
      else if (/^'[^']*'$|^"[^"]*"$/.test(inner)) steps.push({ kind: "field", name: inner.slice(1, -1) });
      else if (inner.startsWith("?(") && inner.endsWith(")")) steps.push(parseFilter(inner.slice(2, -1).trim(), whole));
      else fail(`[${inner}] is not supported`);
      i = close + 1;
      continue;
    }
    if (/\s/.test(c!)) {
      i++;
      continue;
    }
    fail(`unexpected ${JSON.stringify(c)} at offset ${i}`);
  }
  return steps;
}

function matchingBracket(src: string, open: number, to: number): number {
  let depth = 0;
  let quote: string | undefined;
  for (let i = open; i < to; i++) {
    const c = src[i];
    if (quote) {
      if (c === quote) quote = undefined;
    } else if (c === "'" || c === '"') quote = c;
    else if (c === "[" || c === "(") depth++;
    else if (c === "]" || c === ")") {
      depth--;
      if (depth === 0) return c === "]" ? i : -1;
    }
  }
  return -1;
}

function parseFilter(expr: string, whole: string): Step {
  const m = /^@((?:\.[A-Za-z0-9_\-$]+|\[(?:'[^']*'|"[^"]*"|-?\d+)\])*)\s*(==|!=)\s*(.+)$/.exec(expr);
  if (!m) throw new Error(`unsupported JSONPath ${JSON.stringify(whole)}: filter ${JSON.stringify(expr)} is not @.path == value`);
  const path = parseSteps(m[1]!, 0, m[1]!.length, whole);
  return { kind: "filter", path, op: m[2] as "==" | "!=", value: parseLiteral(m[3]!.trim(), whole) };
}

function parseLiteral(text: string, whole: string): Literal {
  if (/^'[^']*'$/.test(text)) return text.slice(1, -1);
  if (/^"[^"]*"$/.test(text)) return text.slice(1, -1);
  if (text === "true" || text === "false") return text === "true";
  if (text === "nil" || text === "null") return null;
  if (/^-?\d+(\.\d+)?$/.test(text)) return Number(text);
  throw new Error(`unsupported JSONPath ${JSON.stringify(whole)}: literal ${text}`);
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

function step(values: unknown[], s: Step): unknown[] {
  const out: unknown[] = [];
  for (const v of values) {
    switch (s.kind) {
      case "field":
        if (isObject(v) && s.name in v) out.push(v[s.name]);
        break;
      case "index":
        if (Array.isArray(v)) {
          const i = s.index < 0 ? v.length + s.index : s.index;
          if (i >= 0 && i < v.length) out.push(v[i]);
        }
        break;
      case "wildcard":
        if (Array.isArray(v)) out.push(...v);
        else if (isObject(v)) out.push(...Object.keys(v).sort().map((k) => v[k]));
        break;
      case "filter":
        if (Array.isArray(v)) {
          for (const item of v) {
            const found = evaluate({ steps: s.path }, item);
            const hit = found.some((f) => f === s.value);
            if (s.op === "==" ? hit : found.length > 0 && !hit) out.push(item);
          }
        }
        break;
    }
  }
  return out;
}

// Every value the path reaches; a missing key or index reaches nothing.
export function evaluate(path: JsonPath, root: unknown): unknown[] {
  return path.steps.reduce<unknown[]>((values, s) => step(values, s), [root]);
}
