// Who may bootstrap which clusters without an admin (OCM's --cluster-auto-approval-users, narrowed).
// Each entry is a user, optionally with the cluster names it may register:
//   "system:bootstrap:abcdef"                        any cluster (OCM's meaning of a plain user)
//   "system:bootstrap:abcdef=cluster1|edge-*"         only cluster1 and names starting with edge-
// A pattern is a cluster name in which `*` stands for any run of characters.
import { z } from "zod";

export type AutoApprovalRule = { user: string; clusters?: readonly RegExp[] };

const patternText = /^[a-z0-9*]([-a-z0-9.*]*[a-z0-9*])?$/;

export const AutoApprovalEntry = z
  .string()
  .min(1)
  .refine((entry) => {
    const at = entry.indexOf("=");
    if (at === 0) return false;
    if (at < 0) return true;
    const patterns = entry.slice(at + 1).split("|");
    return patterns.every((p) => patternText.test(p));
  }, "an auto-approval entry is USER or USER=PATTERN|PATTERN..., each pattern a cluster name in which * matches any characters");

function compile(entry: string): AutoApprovalRule {
  const at = entry.indexOf("=");
  if (at < 0) return { user: entry };
  const clusters = entry.slice(at + 1).split("|").map((p) => new RegExp(`^${p.replaceAll(".", "\\.").replaceAll("*", ".*")}$`));
  return { user: entry.slice(0, at), clusters };
}

// The entries come from a function's configuration, fixed for its life: each is compiled once.
const compiled = new Map<string, AutoApprovalRule>();

export function parseAutoApproval(entries: readonly string[]): AutoApprovalRule[] {
  return entries.map((entry) => {
    let rule = compiled.get(entry);
    if (!rule) compiled.set(entry, (rule = compile(entry)));
    return rule;
  });
}

// True when some entry names this user and lets it register this cluster.
export function mayAutoApprove(entries: readonly string[], user: string, cluster: string): boolean {
  return parseAutoApproval(entries).some((r) => r.user === user && (!r.clusters || r.clusters.some((p) => p.test(cluster))));
}
