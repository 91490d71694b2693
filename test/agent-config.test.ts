// shared/agent-config.ts on values: the canonical hash every component and the hub agree on, the merge
// over install-time settings, the allow-list, and the checkpoint read back when parts are missing or
// unreadable. The function that writes these is tested against real clusters in
// test/functions/agent-config.test.ts.
import { describe, it, expect } from "vitest";
import {
  InstallTimeHash,
  canonicalJson,
  checkpointData,
  disallowedPath,
  installTimeConfig,
  mergeSettings,
  nextHealthRecord,
  parseAllowList,
  parseCheckpoint,
  settingsHash,
  validateSettings,
  type AllowList,
} from "../shared/agent-config.ts";
import type { AgentSettings } from "../shared/api/agent-config.ts";

describe("the settings hash", () => {
  it("is the first 16 hex digits of sha256 over the canonical JSON; {} is the install-time hash", () => {
    // sha256("{}") = 44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a
    expect(InstallTimeHash).toBe("44136fa355b3678a");
    expect(settingsHash(undefined)).toBe(InstallTimeHash);
    expect(canonicalJson({ logLevel: "debug", features: { B: true, A: false }, heartbeat: undefined })).toBe('{"features":{"A":false,"B":true},"logLevel":"debug"}');
  });

  it("does not depend on the order a writer used, and changes with any value", () => {
    expect(settingsHash({ logLevel: "debug", features: { A: true, B: false } })).toBe(settingsHash({ features: { B: false, A: true }, logLevel: "debug" }));
    expect(settingsHash({ logLevel: "debug" })).not.toBe(settingsHash({ logLevel: "info" }));
    expect(settingsHash({ features: { A: true } })).not.toBe(settingsHash({ features: { A: false } }));
  });
});

describe("mergeSettings", () => {
  it.each<{ name: string; installTime: AgentSettings; settings: AgentSettings; merged: AgentSettings }>([
    { name: "keeps install-time values the config leaves out", installTime: { logLevel: "info", statusSyncIntervalSeconds: 60 }, settings: { logLevel: "debug" }, merged: { logLevel: "debug", statusSyncIntervalSeconds: 60 } },
    { name: "merges feature gates key by key", installTime: { features: { A: true, B: true } }, settings: { features: { B: false, C: true } }, merged: { features: { A: true, B: false, C: true } } },
    { name: 'takes an empty proxy ("" = none) over an install-time one', installTime: { heartbeat: { proxyURL: "http://p:3128" } }, settings: { heartbeat: { proxyURL: "" } }, merged: { heartbeat: { proxyURL: "" } } },
    { name: "is the install-time settings for {}", installTime: { relayResyncSeconds: 300 }, settings: {}, merged: { relayResyncSeconds: 300 } },
  ])("$name", ({ installTime, settings, merged }) => {
    expect(mergeSettings(installTime, settings)).toEqual(merged);
  });
});

describe("the allow-list", () => {
  it.each<{ text: string | undefined; allow: AllowList }>([
    { text: undefined, allow: "all" },
    { text: "", allow: "all" },
    { text: "none", allow: [] },
    { text: " logLevel, heartbeat.proxyURL ,features.FastResync", allow: ["logLevel", "heartbeat.proxyURL", "features.FastResync"] },
  ])("reads $text as $allow", ({ text, allow }) => {
    expect(parseAllowList(text)).toEqual(allow);
  });

  it("refuses a path that is no setting", () => {
    expect(() => parseAllowList("logLevel,heartbeat.proxyUrl")).toThrow(/heartbeat\.proxyUrl is not a setting path/);
  });

  it.each<{ name: string; allow: string; settings: AgentSettings; installTime?: AgentSettings; path: string | undefined }>([
    { name: "a path under an allowed parent is allowed", allow: "heartbeat,features", settings: { heartbeat: { proxyURL: "http://p:1" }, features: { X: true } }, path: undefined },
    { name: "the first path outside the list, in sorted order", allow: "logLevel", settings: { relayResyncSeconds: 1, clusterClaimLimit: 2, logLevel: "warn" }, path: "clusterClaimLimit" },
    { name: "a sibling of an allowed gate is not allowed", allow: "features.A", settings: { features: { A: true, B: true } }, path: "features.B" },
    { name: "a value equal to the install-time one may be set anywhere", allow: "none", settings: { logLevel: "info" }, installTime: { logLevel: "info" }, path: undefined },
    { name: "an empty object sets nothing", allow: "none", settings: { heartbeat: {}, features: {} }, path: undefined },
    // issue 23: paths are compared segment by segment, never as strings
    { name: 'an allowed gate "a" does not admit a gate named "a.b" (no string prefix)', allow: "features.a", settings: { features: { "a.b": true } }, path: 'features."a.b"' },
    { name: 'an allowed gate "Fast" does not admit "FastResync"', allow: "features.Fast", settings: { features: { FastResync: true } }, path: "features.FastResync" },
  ])("$name", ({ allow, settings, installTime, path }) => {
    expect(disallowedPath(settings, parseAllowList(allow), installTime)).toBe(path);
  });

  it("refuses an allow-list entry naming a gate the schema would refuse (a dotted name)", () => {
    expect(() => parseAllowList("features.a.b")).toThrow(/features\.a\.b is not a setting path/);
  });
});

describe("the bounds of every remotely assignable setting (issue 23)", () => {
  it.each<{ name: string; settings: Record<string, unknown>; error: string }>([
    { name: "relayResyncSeconds past a day (2147484 s overflowed Node's timer into a 1 ms tick)", settings: { relayResyncSeconds: 2_147_484 }, error: "spec.settings.relayResyncSeconds: Too big: expected number to be <=86400" },
    { name: "relayResyncSeconds of a day and a second", settings: { relayResyncSeconds: 86_401 }, error: "spec.settings.relayResyncSeconds: Too big: expected number to be <=86400" },
    { name: "statusSyncIntervalSeconds past a day", settings: { statusSyncIntervalSeconds: 86_401 }, error: "spec.settings.statusSyncIntervalSeconds: Too big: expected number to be <=86400" },
    { name: "statusSyncIntervalSeconds of 0", settings: { statusSyncIntervalSeconds: 0 }, error: "spec.settings.statusSyncIntervalSeconds: Too small: expected number to be >=1" },
    { name: "clusterClaimLimit past 1000", settings: { clusterClaimLimit: 1_001 }, error: "spec.settings.clusterClaimLimit: Too big: expected number to be <=1000" },
    { name: "a proxy URL whose user name is not percent-encoded (http://%zz@…, which crashed the agent)", settings: { heartbeat: { proxyURL: "http://%zz@127.0.0.1:9" } }, error: 'spec.settings.heartbeat.proxyURL: must be an http, https or socks5 URL with well-formed % escapes, or "" for none' },
    { name: "a proxy URL whose user name is not UTF-8 once decoded", settings: { heartbeat: { proxyURL: "http://%ff@127.0.0.1:9" } }, error: "spec.settings.heartbeat.proxyURL: proxy URL http://127.0.0.1:9: the user name is not valid percent-encoded UTF-8" },
    { name: "a SOCKS5 password longer than RFC 1929's 255 bytes", settings: { heartbeat: { proxyURL: `socks5://u:${"p".repeat(256)}@127.0.0.1:1080` } }, error: "spec.settings.heartbeat.proxyURL: proxy URL socks5://127.0.0.1:1080: a SOCKS5 user name and password are at most 255 bytes each" },
    { name: "a proxy URL longer than 2048 characters", settings: { heartbeat: { proxyURL: `http://${"h".repeat(2_050)}:3128` } }, error: "spec.settings.heartbeat.proxyURL: Too big: expected string to have <=2048 characters" },
    { name: "a feature gate named with a dot", settings: { features: { "a.b": true } }, error: 'spec.settings.features."a.b": Invalid key in record: a feature gate is named by a letter, then letters and digits' },
    { name: "more than 64 feature gates", settings: { features: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`Gate${i}`, true])) }, error: "spec.settings.features: at most 64 feature gates" },
  ])("refuses $name", ({ settings, error }) => {
    expect(validateSettings(settings)).toEqual({ ok: false, error });
  });

  it("accepts every bound itself", () => {
    const settings: AgentSettings = {
      statusSyncIntervalSeconds: 86_400,
      clusterClaimLimit: 1_000,
      relayResyncSeconds: 86_400,
      heartbeat: { proxyURL: `socks5://${"u".repeat(255)}:p%C3%A9@127.0.0.1:1080` },
      features: Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`Gate${i}`, true])),
    };
    expect(validateSettings(settings)).toEqual({ ok: true, settings });
    expect(validateSettings({ statusSyncIntervalSeconds: 1, clusterClaimLimit: 0, relayResyncSeconds: 1, heartbeat: { proxyURL: "" } }).ok).toBe(true);
  });
});

describe("the checkpoint", () => {
  const good = { hash: settingsHash({ logLevel: "debug" }), settings: { logLevel: "debug" as const } };

  it("reads back what it wrote", () => {
    const c = { active: good, lastKnownGood: good, assigned: { ...good, trialSeconds: 120, since: "2026-12-01T10:00:00.000Z" }, failed: { hash: "0123456789abcdef", reason: "heartbeat failing" } };
    expect(parseCheckpoint(checkpointData(c))).toEqual(c);
  });

  it.each<{ name: string; data: Record<string, string> | undefined; active: object }>([
    { name: "no ConfigMap is the install-time settings", data: undefined, active: installTimeConfig() },
    { name: "an unreadable active falls back to last-known-good", data: { active: "{not json", lastKnownGood: JSON.stringify(good) }, active: good },
    { name: "active settings the schema refuses fall back to the install-time settings", data: { active: JSON.stringify({ hash: "x", settings: { logLevel: "loud" } }) }, active: installTimeConfig() },
  ])("$name", ({ data, active }) => {
    expect(parseCheckpoint(data).active).toEqual(active);
  });
});

describe("health records", () => {
  const now = new Date("2026-12-01T10:00:00.000Z");
  it("are rewritten only when the hash or the outcome changes", () => {
    const first = nextHealthRecord(undefined, { hash: "h1", ok: true }, now);
    expect(first).toEqual({ hash: "h1", ok: true, since: now.toISOString() });
    expect(nextHealthRecord(first, { hash: "h1", ok: true }, new Date(now.getTime() + 60_000))).toBeUndefined();
    expect(nextHealthRecord(first, { hash: "h1", ok: false, error: "refused" }, new Date(now.getTime() + 60_000))).toEqual({ hash: "h1", ok: false, since: "2026-12-01T10:01:00.000Z", error: "refused" });
    expect(nextHealthRecord(first, { hash: "h2", ok: true }, new Date(now.getTime() + 1_000))?.since).toBe("2026-12-01T10:00:01.000Z");
  });
});

describe("validateSettings", () => {
  it("names the field and the schema's complaint", () => {
    expect(validateSettings({ logLevel: "loud", heartbeat: { proxyURL: "ftp://x" } })).toEqual({
      ok: false,
      error: 'spec.settings.heartbeat.proxyURL: must be an http, https or socks5 URL with well-formed % escapes, or "" for none; spec.settings.logLevel: Invalid option: expected one of "error"|"warn"|"info"|"debug"',
    });
    expect(validateSettings(undefined)).toEqual({ ok: true, settings: {} });
  });
});
