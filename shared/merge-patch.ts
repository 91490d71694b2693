// RFC 7386 merge patches computed from two versions of a value, as OCM's patcher builds them
// (jsonpatch.CreateMergePatch): a key gone from the new version is sent as null, so maps shrink too.
// Sending the new version whole would merge into the stored maps and leave removed keys behind.
import { isDeepStrictEqual } from "node:util";

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

// Lists and scalars are replaced whole; keys whose new value is undefined count as removed.
export function mergePatchFrom(before: unknown, after: unknown): unknown {
  if (!isObject(before) || !isObject(after)) return after === undefined ? null : after;
  const patch: Json = {};
  for (const key of Object.keys(before)) if (after[key] === undefined && before[key] !== undefined) patch[key] = null;
  for (const [key, value] of Object.entries(after)) {
    if (value === undefined || isDeepStrictEqual(before[key], value)) continue;
    patch[key] = before[key] === undefined ? value : mergePatchFrom(before[key], value);
  }
  return patch;
}
