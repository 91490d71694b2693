// The spec hash OCM records for an add-on config (addon-framework utils.GetSpecHash): sha256, in
// lower-case hex, of Go's json.Marshal of the object without apiVersion, kind, metadata and status.
import { createHash } from "node:crypto";

export function specHash(object: Record<string, unknown>): string {
  const config = Object.fromEntries(Object.entries(object).filter(([k]) => !["apiVersion", "kind", "metadata", "status"].includes(k)));
  return createHash("sha256").update(goJson(config)).digest("hex");
}

// encoding/json as Go writes a map[string]interface{}: keys sorted by bytes, no spaces, and <, >, &,
// U+2028 and U+2029 escaped (Go's HTML-safe default).
export function goJson(value: unknown): string {
  if (value === null || value === undefined) return "null";
  if (Array.isArray(value)) return `[${value.map(goJson).join(",")}]`;
  if (typeof value === "object") {
    const keys = Object.keys(value as object).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
    return `{${keys.map((k) => `${goString(k)}:${goJson((value as Record<string, unknown>)[k])}`).join(",")}}`;
  }
  if (typeof value === "string") return goString(value);
  return JSON.stringify(value);
}

const goString = (s: string) =>
  JSON.stringify(s).replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
