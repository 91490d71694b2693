// Auto-approval entries: a plain user keeps OCM's meaning (any cluster); USER=PATTERN|... narrows the
// user to the cluster names its patterns match, whole names only; malformed entries are refused when
// the settings are read, so a typo cannot widen what a user may register.
import { describe, it, expect } from "vitest";
import { mayAutoApprove } from "../shared/auto-approval.ts";
import { HubSettingsSchema } from "../shared/settings.ts";
import { readEnvSettings } from "../shared/env-settings.ts";

const hubSettingsFromEnv = (env: NodeJS.ProcessEnv) => HubSettingsSchema.parse(readEnvSettings("test", HubSettingsSchema, env));

const U = "system:bootstrap:abcdef";

describe("auto-approval entries", () => {
  it.each([
    { entries: [U], cluster: "anything", allowed: true },
    { entries: [`${U}=edge-*`], cluster: "edge-7", allowed: true },
    { entries: [`${U}=edge-*`], cluster: "core-edge-7", allowed: false },
    { entries: [`${U}=lab|edge-*`], cluster: "lab", allowed: true },
    { entries: [`${U}=lab|edge-*`], cluster: "lab2", allowed: false },
    { entries: [`${U}=a.b`], cluster: "axb", allowed: false },
    { entries: [`${U}=*`], cluster: "any", allowed: true },
    { entries: ["system:bootstrap:other"], cluster: "lab", allowed: false },
    { entries: [], cluster: "lab", allowed: false },
  ])("$entries lets $cluster in: $allowed", ({ entries, cluster, allowed }) => {
    expect(mayAutoApprove(entries, U, cluster)).toBe(allowed);
  });

  it.each([`${U}=`, `=edge-*`, `${U}=Edge`, `${U}=edge-*|`, `${U}=a/b`])("refuses the malformed entry %s when settings are read", (entry) => {
    expect(() => hubSettingsFromEnv({ OCM_CLUSTER_AUTO_APPROVAL_USERS: entry })).toThrow(/auto-approval entry/);
  });

  it("reads a comma list of plain and narrowed entries", () => {
    expect(hubSettingsFromEnv({ OCM_CLUSTER_AUTO_APPROVAL_USERS: `${U}, ${U}2=edge-*` }).autoApprovalUsers).toEqual([U, `${U}2=edge-*`]);
  });
});
