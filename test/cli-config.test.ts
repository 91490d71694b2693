// `ocmf config set|get|rollout status` against a real hub, run as the hub admin runs them (the CLI as a
// process): a cluster's AgentConfig written with each value as its type and read back with what its agent
// reports, every refusal before anything is written, a fleet-level config with its placement and
// strategy, and the rollout's status with an exit code a script can gate on. The agents' and the
// rollout's status fields are written here as those functions write them (test/functions/ tests them).
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse } from "yaml";
import { startHub, type Hub } from "./support/fixtures.ts";
import { NamespaceResource } from "../shared/api/kube.ts";
import { ClusterLabel, ManagedClusterResource, PlacementDecisionResource, PlacementResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { AgentConfigConditionType, AgentConfigMessage, AgentConfigName, AgentConfigReason, AgentConfigResource, type AgentConfig, type AgentSettings } from "../shared/api/agent-config.ts";
import { InstallTimeHash, settingsHash } from "../shared/agent-config.ts";
import { rfc3339 } from "../shared/clock.ts";
import { RolloutLabel, RolloutNamespaceAnnotation } from "../shared/agent-config.ts";

const root = join(import.meta.dirname, "..");
const suffix = () => Math.random().toString(36).slice(2, 7);

let plane: Hub;
let dir: string;
let kubeconfig: string;

beforeAll(async () => {
  plane = await startHub("hub");
  dir = mkdtempSync(join(tmpdir(), "cli-config-"));
  kubeconfig = join(dir, "hub.kubeconfig");
  writeFileSync(kubeconfig, plane.cluster.adminKubeconfig);
}, 120_000);
afterAll(async () => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  await plane?.stop();
});

type Result = { code: number; stdout: string; stderr: string };
function ocmf(args: string[]): Promise<Result> {
  return new Promise((resolve) => {
    execFile(process.execPath, [join(root, "cli/ocmf.ts"), ...args, "--kubeconfig", kubeconfig], { cwd: dir, env: { PATH: process.env.PATH ?? "" } }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}
const config = (...args: string[]) => ocmf(["config", ...args]);

const admin = () => plane.admin;
const configOf = (namespace: string, name = AgentConfigName) => admin().get<AgentConfig>(AgentConfigResource, name, namespace);

// A cluster as the acceptor leaves it: the ManagedCluster and its namespace (either can be left out).
async function newCluster(o: { managedCluster?: boolean; namespace?: boolean } = {}): Promise<string> {
  const name = `c-${suffix()}`;
  if (o.managedCluster ?? true) await admin().create<ManagedCluster>(ManagedClusterResource, { metadata: { name }, spec: { hubAcceptsClient: true } });
  if (o.namespace ?? true) await admin().create(NamespaceResource, { metadata: { name } });
  return name;
}

// The status the cluster's agent writes once it has judged the assigned settings.
async function agentVerdict(cluster: string, settings: AgentSettings, outcome: "active" | "rolledBack", lastError = ""): Promise<void> {
  const hash = settingsHash(settings);
  const lkg = outcome === "active" ? hash : InstallTimeHash;
  const [status, reason, message] =
    outcome === "active"
      ? (["True", AgentConfigReason.ConfigActive, AgentConfigMessage.active(hash)] as const)
      : (["False", AgentConfigReason.ConfigRolledBack, AgentConfigMessage.rolledBack({ lastKnownGood: lkg, assigned: hash, why: lastError })] as const);
  await admin().patch(
    AgentConfigResource,
    AgentConfigName,
    { status: { assigned: { hash }, active: { hash: lkg }, lastKnownGood: { hash: lkg }, lastError, conditions: [{ type: AgentConfigConditionType.AgentConfigOK, status, reason, message, lastTransitionTime: rfc3339(new Date()) }] } },
    { namespace: cluster, subresource: "status" },
  );
}

// The `NAME   value` line of a two-column listing.
const field = (out: string, name: string) => new RegExp(`^${name.replace(/[-]/g, "\\-")}\\s{3,}(.*)$`, "m").exec(out)?.[1];

describe("help", () => {
  it.each([
    { command: ["config"], names: ["set", "get", "rollout"] },
    { command: ["config", "set"], names: ["KEY=VALUE", "--cluster", "--fleet", "--unset", "--trial-seconds", "--placement", "--namespace", "--strategy", "--max-concurrency", "--max-rolled-back", "heartbeat.proxyURL", "features.<name>"] },
    { command: ["config", "get"], names: ["--cluster", "--output", "yaml", "json"] },
    { command: ["config", "rollout", "status"], names: ["<name>", "--namespace", "Halted"] },
  ])("ocmf $command --help names $names", async ({ command, names }) => {
    const r = await ocmf([...command, "--help"]);
    expect(r.code).toBe(0);
    for (const n of names) expect(r.stdout).toContain(n);
  });
});

describe("config set --cluster, config get --cluster", () => {
  it("creates the cluster's config with each value as its type, says its hash, and get shows the settings", async () => {
    const cluster = await newCluster();
    const r = await config("set", "--cluster", cluster, "--trial-seconds", "60", "statusSyncIntervalSeconds=30", "heartbeat.proxyURL=http://proxy:3128", "logLevel=debug", "features.FastSync=true", "clusterClaimLimit=0");
    const settings = { statusSyncIntervalSeconds: 30, heartbeat: { proxyURL: "http://proxy:3128" }, logLevel: "debug", features: { FastSync: true }, clusterClaimLimit: 0 };
    expect(r).toEqual({ code: 0, stdout: `agentconfig ${cluster}/agent created (settings hash ${settingsHash(settings)})\n`, stderr: "" });
    expect((await configOf(cluster))?.spec).toEqual({ settings, trialSeconds: 60 });

    const got = await config("get", "--cluster", cluster);
    expect(got).toMatchObject({ code: 0, stderr: "" });
    expect(field(got.stdout, "CLUSTER")).toBe(cluster);
    expect(field(got.stdout, "SETTINGS HASH")).toBe(settingsHash(settings));
    expect(field(got.stdout, "ASSIGNED")).toBe("-"); // no agent has reported yet
    expect(field(got.stdout, "TRIAL")).toBe("60s");
    expect(got.stdout).toMatch(/^SETTING\s+VALUE$/m);
    expect(field(got.stdout, "statusSyncIntervalSeconds")).toBe("30");
    expect(field(got.stdout, "heartbeat.proxyURL")).toBe("http://proxy:3128");
    expect(field(got.stdout, "features.FastSync")).toBe("true");
    expect(field(got.stdout, "clusterClaimLimit")).toBe("0");
  });

  it("updates what was read, keeps what it does not set and the agent's status, --unset removes a setting, and a second run writes nothing", async () => {
    const cluster = await newCluster();
    const before = { logLevel: "info", heartbeat: { proxyURL: "http://proxy:3128" } } as const;
    await admin().create<AgentConfig>(AgentConfigResource, { metadata: { name: AgentConfigName, namespace: cluster, labels: { team: "a" } }, spec: { settings: before, trialSeconds: 30 } });
    await agentVerdict(cluster, before, "active");
    const read = (await configOf(cluster))!;

    const r = await config("set", "--cluster", cluster, "logLevel=warn", "--unset", "heartbeat.proxyURL", "features.Gate=false");
    const after = { logLevel: "warn", features: { Gate: false } };
    expect(r).toEqual({ code: 0, stdout: `agentconfig ${cluster}/agent updated (settings hash ${settingsHash(after)})\n`, stderr: "" });
    const now = (await configOf(cluster))!;
    expect(now.spec).toEqual({ settings: after, trialSeconds: 30 }); // the emptied heartbeat group is gone too
    expect(now.metadata.labels).toEqual({ team: "a" });
    expect(now.status).toEqual(read.status);
    expect(now.metadata.resourceVersion).not.toBe(read.metadata.resourceVersion);

    const again = await config("set", "--cluster", cluster, "logLevel=warn");
    expect(again).toEqual({ code: 0, stdout: `agentconfig ${cluster}/agent unchanged (settings hash ${settingsHash(after)})\n`, stderr: "" });
    expect((await configOf(cluster))!.metadata.resourceVersion).toBe(now.metadata.resourceVersion);
  });

  it("get shows what the agent reports: the three hashes, AgentConfigOK and the last error; -o json and -o yaml print the object", async () => {
    const cluster = await newCluster();
    const settings = { heartbeat: { proxyURL: "http://nowhere:3128" } };
    await admin().create<AgentConfig>(AgentConfigResource, { metadata: { name: AgentConfigName, namespace: cluster }, spec: { settings } });
    await agentVerdict(cluster, settings, "rolledBack", "heartbeat: renewals failed for 60s");
    const hash = settingsHash(settings);

    const got = await config("get", "--cluster", cluster);
    expect(got).toMatchObject({ code: 0, stderr: "" });
    expect(field(got.stdout, "ASSIGNED")).toBe(hash);
    expect(field(got.stdout, "ACTIVE")).toBe(InstallTimeHash);
    expect(field(got.stdout, "LAST-KNOWN-GOOD")).toBe(InstallTimeHash);
    expect(field(got.stdout, "AGENTCONFIGOK")).toBe("False");
    expect(field(got.stdout, "REASON")).toBe("ConfigRolledBack");
    expect(field(got.stdout, "MESSAGE")).toBe(`using last-known-good ${InstallTimeHash}: assigned config ${hash} failed its trial: heartbeat: renewals failed for 60s`);
    expect(field(got.stdout, "LAST ERROR")).toBe("heartbeat: renewals failed for 60s");
    expect(field(got.stdout, "TRIAL")).toMatch(/^the agent's default/);
    expect(field(got.stdout, "heartbeat.proxyURL")).toBe("http://nowhere:3128");

    const stored = (await configOf(cluster))!;
    const { managedFields: _, ...metadata } = stored.metadata;
    const expected = { ...stored, metadata };
    const json = await config("get", "--cluster", cluster, "-o", "json");
    expect(json).toMatchObject({ code: 0, stderr: "" });
    expect(JSON.parse(json.stdout)).toEqual(expected);
    const yaml = await config("get", "--cluster", cluster, "-o", "yaml");
    expect(yaml).toMatchObject({ code: 0, stderr: "" });
    expect(parse(yaml.stdout)).toEqual(expected);
  });

  it("a cluster without a config: get says so and shows the agent's own report; -o has nothing to print", async () => {
    const cluster = await newCluster();
    await admin().patch(
      ManagedClusterResource,
      cluster,
      { status: { conditions: [{ type: AgentConfigConditionType.AgentConfigOK, status: "True", reason: AgentConfigReason.ConfigNotAssigned, message: AgentConfigMessage.notAssigned, lastTransitionTime: rfc3339(new Date()) }] } },
      { subresource: "status" },
    );
    const got = await config("get", "--cluster", cluster);
    expect(got).toMatchObject({ code: 0, stderr: "" });
    expect(field(got.stdout, "SETTINGS HASH")).toBe("-");
    expect(field(got.stdout, "REASON")).toBe("ConfigNotAssigned");
    expect(got.stdout).toContain("No AgentConfig: the agent runs its install-time settings.");
    const yaml = await config("get", "--cluster", cluster, "-o", "yaml");
    expect(yaml).toEqual({ code: 1, stdout: "", stderr: `error: ${cluster} has no AgentConfig (agentconfigs.config.ocm-functions.io agent in namespace ${cluster})\n` });
    expect(await config("get", "--cluster", `missing-${suffix()}`)).toMatchObject({ code: 1, stdout: "", stderr: expect.stringMatching(/^error: no cluster missing-\w+ on the hub/) });
  });

  it("a cluster's config a fleet rollout wrote: get names the rollout, and set warns that the rollout may assign its own again", async () => {
    const cluster = await newCluster();
    await admin().create<AgentConfig>(AgentConfigResource, {
      metadata: { name: AgentConfigName, namespace: cluster, labels: { [RolloutLabel]: "tuning" }, annotations: { [RolloutNamespaceAnnotation]: "fleet" } },
      spec: { settings: { logLevel: "debug" } },
    });
    const got = await config("get", "--cluster", cluster);
    expect(field(got.stdout, "ROLLOUT")).toBe("fleet/tuning");
    const set = await config("set", "--cluster", cluster, "logLevel=info");
    expect(set.code).toBe(0);
    expect(set.stdout).toContain("note: the fleet-level config fleet/tuning wrote this cluster's config");
  });
});

describe("refusals write nothing", () => {
  // `existing`: a cluster with a config (it must keep its resourceVersion); `fresh`: a cluster without one
  // (none may appear); `no-cluster`: a namespace without a ManagedCluster; `not-accepted`: a
  // ManagedCluster without its namespace yet.
  const refusals: { name: string; on: "existing" | "fresh" | "no-cluster" | "not-accepted"; args: string[]; says: string }[] = [
    { name: "an unknown key", on: "existing", args: ["statusSyncInterval=5"], says: "error: unknown setting statusSyncInterval: the settings are statusSyncIntervalSeconds, clusterClaimLimit, relayResyncSeconds, heartbeat.proxyURL, logLevel, features.<name>" },
    { name: "an unknown key beside good ones", on: "fresh", args: ["logLevel=debug", "heartbeat.proxyUrl=http://p:1"], says: "error: unknown setting heartbeat.proxyUrl" },
    { name: "a number that is not one", on: "existing", args: ["statusSyncIntervalSeconds=30s"], says: "error: statusSyncIntervalSeconds=30s: give a whole number" },
    { name: "a number below the minimum", on: "fresh", args: ["relayResyncSeconds=0"], says: "error: relayResyncSeconds=0: Too small: expected number to be >=1" },
    { name: "a number past int32", on: "existing", args: ["clusterClaimLimit=3000000000"], says: "error: clusterClaimLimit=3000000000: Too big" },
    { name: "a log level that does not exist", on: "existing", args: ["logLevel=loud"], says: 'error: logLevel=loud: Invalid option: expected one of "error"|"warn"|"info"|"debug"' },
    { name: "a proxy that is not a URL of a proxy", on: "fresh", args: ["heartbeat.proxyURL=ftp://proxy"], says: 'error: heartbeat.proxyURL=ftp://proxy: must be an http, https or socks5 URL with well-formed % escapes, or "" for none' },
    // issue 23: the bounds of the settings, before anything is written
    { name: "a resync past a day (2147484 s overflowed Node's timer)", on: "existing", args: ["relayResyncSeconds=2147484"], says: "error: relayResyncSeconds=2147484: Too big: expected number to be <=86400" },
    { name: "a proxy whose credentials do not decode", on: "fresh", args: ["heartbeat.proxyURL=http://%ff@127.0.0.1:9"], says: "error: heartbeat.proxyURL=http://%ff@127.0.0.1:9: proxy URL http://127.0.0.1:9: the user name is not valid percent-encoded UTF-8" },
    { name: "a feature switch that is not a boolean", on: "existing", args: ["features.FastSync=yes"], says: "error: features.FastSync=yes: give true or false" },
    { name: "a group set as one value", on: "existing", args: ["heartbeat=http://p:1"], says: "error: heartbeat is a group of settings: set heartbeat.proxyURL" },
    { name: "a word that is not KEY=VALUE", on: "fresh", args: ["logLevel"], says: 'error: "logLevel" is not KEY=VALUE' },
    { name: "an unknown key to unset", on: "existing", args: ["--unset", "logLevl"], says: "error: unknown setting logLevl" },
    { name: "a key both set and unset", on: "existing", args: ["features.A=true", "--unset", "features"], says: "error: features.A is both set and unset (--unset features)" },
    { name: "a trial of zero seconds", on: "existing", args: ["--trial-seconds", "0", "logLevel=info"], says: "error: option '--trial-seconds <seconds>' argument '0' is invalid" },
    { name: "nothing to set", on: "existing", args: [], says: "error: nothing to set: give KEY=VALUE, --unset KEY or --trial-seconds" },
    { name: "a fleet flag on a cluster's config", on: "existing", args: ["--placement", "all", "logLevel=info"], says: "error: option '--placement <name>' cannot be used with option '--cluster <name>'" },
    { name: "a cluster the hub does not know", on: "no-cluster", args: ["logLevel=info"], says: "error: no cluster " },
    { name: "a cluster not accepted yet", on: "not-accepted", args: ["logLevel=info"], says: "does not exist on the hub (the cluster's namespace is made when the cluster is accepted)" },
  ];
  it.each(refusals)("$name", async ({ on, args, says }) => {
    const cluster = await newCluster({ managedCluster: on !== "no-cluster", namespace: on !== "not-accepted" });
    if (on === "existing") await admin().create<AgentConfig>(AgentConfigResource, { metadata: { name: AgentConfigName, namespace: cluster }, spec: { settings: { logLevel: "info", features: { A: false } } } });
    const before = await configOf(cluster).catch(() => undefined);
    const r = await config("set", "--cluster", cluster, ...args);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr.trimEnd().split("\n")).toEqual([expect.stringContaining(says)]);
    if (on !== "not-accepted") expect((await configOf(cluster))?.metadata.resourceVersion).toBe(before?.metadata.resourceVersion);
  });

  it("neither --cluster nor --fleet", async () => {
    expect(await config("set", "logLevel=info")).toEqual({ code: 1, stdout: "", stderr: "error: give --cluster NAME (a cluster's own config) or --fleet NAME (a fleet-level config)\n" });
  });
});

describe("config get: every cluster", () => {
  it("one row per cluster: the hashes and the reason, from the agent's config or, without one, its ManagedCluster", async () => {
    const [active, fresh, none] = [await newCluster(), await newCluster(), await newCluster()];
    const settings = { logLevel: "debug" } as const;
    await admin().create<AgentConfig>(AgentConfigResource, { metadata: { name: AgentConfigName, namespace: active }, spec: { settings } });
    await agentVerdict(active, settings, "active");
    await admin().create<AgentConfig>(AgentConfigResource, { metadata: { name: AgentConfigName, namespace: fresh }, spec: { settings } });
    await admin().patch(
      ManagedClusterResource,
      none,
      { status: { conditions: [{ type: AgentConfigConditionType.AgentConfigOK, status: "True", reason: AgentConfigReason.ConfigNotAssigned, message: AgentConfigMessage.notAssigned, lastTransitionTime: rfc3339(new Date()) }] } },
      { subresource: "status" },
    );
    // a fleet-level config is not a cluster's
    const fleetNs = `fleet-${suffix()}`;
    await admin().create(NamespaceResource, { metadata: { name: fleetNs } });
    await admin().create<AgentConfig>(AgentConfigResource, { metadata: { name: "tuning", namespace: fleetNs }, spec: { placementRef: { name: "all" } } });

    const r = await config("get");
    expect(r).toMatchObject({ code: 0, stderr: "" });
    const lines = r.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^CLUSTER\s+ASSIGNED\s+ACTIVE\s+LAST-KNOWN-GOOD\s+REASON$/);
    const row = (c: string) => lines.find((l) => l.startsWith(`${c} `))?.split(/\s+/);
    const hash = settingsHash(settings);
    expect(row(active)).toEqual([active, hash, hash, hash, "ConfigActive"]);
    expect(row(fresh)).toEqual([fresh, "-", "-", "-", "-"]);
    expect(row(none)).toEqual([none, "-", "-", "-", "ConfigNotAssigned"]);
    expect(lines.filter((l) => l.startsWith(`${fleetNs} `))).toEqual([]);

    const json = await config("get", "-o", "json");
    const items = (JSON.parse(json.stdout) as { kind: string; items: AgentConfig[] }).items;
    expect(items.map((i) => i.metadata.namespace)).toEqual(expect.arrayContaining([active, fresh]));
    expect(items.every((i) => i.metadata.name === AgentConfigName)).toBe(true);
  });
});

// A namespace with a Placement `all` and its decision naming `n` clusters, as placement-scheduler writes them.
async function placedFleet(n: number, o: { placement?: boolean } = {}): Promise<{ ns: string; clusters: string[] }> {
  const ns = `fleet-${suffix()}`;
  await admin().create(NamespaceResource, { metadata: { name: ns } });
  const clusters = await Promise.all(Array.from({ length: n }, () => newCluster()));
  clusters.sort();
  if (o.placement ?? true) {
    await admin().create(PlacementResource, { metadata: { name: "all", namespace: ns }, spec: {} });
    const name = "all-decision-1";
    await admin().create(PlacementDecisionResource, { metadata: { name, namespace: ns, labels: { [ClusterLabel.Placement]: "all", [ClusterLabel.DecisionGroupIndex]: "0" } } });
    await admin().patch(PlacementDecisionResource, name, { status: { decisions: clusters.map((clusterName) => ({ clusterName, reason: "" })) } }, { namespace: ns, subresource: "status" });
  }
  return { ns, clusters };
}

describe("config set --fleet", () => {
  it("writes a fleet-level config: settings, placementRef, rolloutStrategy, maxRolledBack; an update keeps what it does not set", async () => {
    const { ns } = await placedFleet(0, { placement: false });
    const r = await config("set", "--fleet", "tuning", "--namespace", ns, "--placement", "all", "--strategy", "Progressive", "--max-concurrency", "25%", "--max-rolled-back", "1", "--trial-seconds", "90", "logLevel=debug");
    expect(r.code).toBe(0);
    expect(r.stderr).toBe("");
    expect(r.stdout).toBe(
      `agentconfig ${ns}/tuning created (settings hash ${settingsHash({ logLevel: "debug" })})\nnote: there is no Placement all in ${ns} yet; the rollout starts when there is\n`,
    );
    const created = (await configOf(ns, "tuning"))!;
    expect(created.spec).toMatchObject({ settings: { logLevel: "debug" }, placementRef: { name: "all" }, rolloutStrategy: { type: "Progressive", progressive: { maxConcurrency: "25%" } }, maxRolledBack: 1, trialSeconds: 90 });

    const update = await config("set", "--fleet", "tuning", "--namespace", ns, "--max-rolled-back", "20%", "statusSyncIntervalSeconds=45");
    expect(update.code).toBe(0);
    expect(update.stdout).toMatch(new RegExp(`^agentconfig ${ns}/tuning updated `));
    const updated = (await configOf(ns, "tuning"))!;
    expect(updated.spec).toEqual({ ...created.spec, settings: { logLevel: "debug", statusSyncIntervalSeconds: 45 }, maxRolledBack: "20%" });

    const all = await config("set", "--fleet", "tuning", "--namespace", ns, "--strategy", "All");
    expect(all.code).toBe(0);
    expect((await configOf(ns, "tuning"))!.spec?.rolloutStrategy).toEqual({ type: "All" });
  });

  it("without --namespace, the config is in default", async () => {
    const name = `tuning-${suffix()}`;
    const r = await config("set", "--fleet", name, "--placement", "all", "logLevel=warn");
    expect(r.code).toBe(0);
    expect((await configOf("default", name))?.spec?.placementRef).toEqual({ name: "all" });
  });

  const refusals = [
    { name: "a new fleet-level config without --placement", args: ["logLevel=debug"], says: "is a new fleet-level config: give --placement NAME" },
    { name: "--max-concurrency for a strategy other than Progressive", args: ["--placement", "all", "--strategy", "All", "--max-concurrency", "2"], says: "--max-concurrency applies to the Progressive strategy only (this config's is All)" },
    { name: "a percentage over 100", args: ["--placement", "all", "--max-rolled-back", "150%"], says: "error: option '--max-rolled-back <n|n%>' argument '150%' is invalid. give a percentage from 0% up to 100%" },
    { name: "a strategy OCM does not have", args: ["--placement", "all", "--strategy", "Canary"], says: "error: option '--strategy <type>' argument 'Canary' is invalid" },
    { name: "a bad value", args: ["--placement", "all", "logLevel=loud"], says: "error: logLevel=loud: Invalid option" },
    { name: "the name of a cluster's own config", args: ["--placement", "all", "logLevel=info"], fleet: "agent", says: "error: --fleet agent: that name is a cluster's own config" },
  ];
  it.each(refusals)("refuses $name and writes nothing", async ({ args, says, fleet }) => {
    const { ns } = await placedFleet(0);
    const r = await config("set", "--fleet", fleet ?? "tuning", "--namespace", ns, ...args);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr.trimEnd().split("\n")).toEqual([expect.stringContaining(says)]);
    expect((await admin().list(AgentConfigResource, { namespace: ns })).items).toEqual([]);
  });
});

describe("config rollout status", () => {
  const settings = { statusSyncIntervalSeconds: 30 } as const;
  const hash = settingsHash(settings);

  async function fleetConfig(ns: string, maxRolledBack?: number | string): Promise<void> {
    await admin().create<AgentConfig>(AgentConfigResource, { metadata: { name: "tuning", namespace: ns }, spec: { settings, placementRef: { name: "all" }, rolloutStrategy: { type: "Progressive", progressive: { maxConcurrency: 3 } }, maxRolledBack } });
  }
  // What agent-config-rollout writes: each cluster's own config, then its own status.
  async function assign(clusters: string[]): Promise<void> {
    for (const c of clusters) await admin().create<AgentConfig>(AgentConfigResource, { metadata: { name: AgentConfigName, namespace: c }, spec: { settings } });
  }
  async function rolloutReports(ns: string, rollout: { phase: string; updated: string[]; rolledBack: string[] }): Promise<void> {
    await admin().patch(AgentConfigResource, "tuning", { status: { assigned: { hash }, rollout } }, { namespace: ns, subresource: "status" });
  }

  it("Succeeded: every decided cluster updated and succeeded, exit code 0", async () => {
    const { ns, clusters } = await placedFleet(3);
    await fleetConfig(ns);
    await assign(clusters);
    for (const c of clusters) await agentVerdict(c, settings, "active");
    await rolloutReports(ns, { phase: "Succeeded", updated: clusters, rolledBack: [] });
    const r = await config("rollout", "status", "tuning", "--namespace", ns);
    expect(r).toMatchObject({ code: 0, stderr: "" });
    expect(field(r.stdout, "AGENTCONFIG")).toBe(`${ns}/tuning`);
    expect(field(r.stdout, "PLACEMENT")).toBe("all (3 clusters decided)");
    expect(field(r.stdout, "STRATEGY")).toBe("Progressive (maxConcurrency 3)");
    expect(field(r.stdout, "PHASE")).toBe("Succeeded");
    expect(field(r.stdout, "UPDATED")).toBe("3/3");
    expect(field(r.stdout, "SUCCEEDED")).toBe("3/3");
    expect(field(r.stdout, "ROLLED BACK")).toBe("0/3 (halts past 0, maxRolledBack 10% by default)");
    expect(field(r.stdout, "ROLLED-BACK CLUSTERS")).toBe("-");
  });

  it("Progressing exits 0; Halted prints the rolled-back clusters and exits 1 with one line saying why", async () => {
    const { ns, clusters } = await placedFleet(5);
    const [a, b, c] = clusters as [string, string, string];
    await fleetConfig(ns, 1);
    await assign([a, b, c]);
    await agentVerdict(a, settings, "active");
    await agentVerdict(b, settings, "rolledBack", "heartbeat failing");
    await rolloutReports(ns, { phase: "Progressing", updated: [a, b, c], rolledBack: [b] });
    const progressing = await config("rollout", "status", "tuning", "--namespace", ns);
    expect(progressing).toMatchObject({ code: 0, stderr: "" });
    expect(field(progressing.stdout, "PHASE")).toBe("Progressing");
    expect(field(progressing.stdout, "ROLLED BACK")).toBe("1/5 (halts past 1, maxRolledBack 1)");

    await agentVerdict(c, settings, "rolledBack", "heartbeat failing");
    await rolloutReports(ns, { phase: "Halted", updated: [a, b, c], rolledBack: [b, c] });
    const halted = await config("rollout", "status", "tuning", "--namespace", ns);
    expect(halted.code).toBe(1);
    expect(field(halted.stdout, "PHASE")).toBe("Halted");
    expect(field(halted.stdout, "UPDATED")).toBe("3/5");
    expect(field(halted.stdout, "SUCCEEDED")).toBe("1/5");
    expect(field(halted.stdout, "ROLLED BACK")).toBe("2/5 (halts past 1, maxRolledBack 1)");
    expect(field(halted.stdout, "ROLLED-BACK CLUSTERS")).toBe(`${b}, ${c}`);
    expect(halted.stderr).toBe(`error: the rollout of ${ns}/tuning is Halted: 2 of 5 clusters rolled back (${b}, ${c}), more than maxRolledBack allows; the clusters not updated keep their last-known-good\n`);
  });

  it("a config the rollout has not reported on, a missing one and a cluster's own are told apart", async () => {
    const { ns, clusters } = await placedFleet(2);
    await fleetConfig(ns);
    const fresh = await config("rollout", "status", "tuning", "--namespace", ns);
    expect(fresh).toMatchObject({ code: 0, stderr: "" });
    expect(field(fresh.stdout, "PHASE")).toBe("- (the rollout has not reported yet)");
    expect(field(fresh.stdout, "UPDATED")).toBe("0/2");
    expect(await config("rollout", "status", "nope", "--namespace", ns)).toEqual({ code: 1, stdout: "", stderr: `error: no AgentConfig nope in namespace ${ns}\n` });
    await assign(clusters.slice(0, 1));
    expect(await config("rollout", "status", AgentConfigName, "--namespace", clusters[0]!)).toEqual({ code: 1, stdout: "", stderr: `error: ${clusters[0]}/agent is not a fleet-level AgentConfig: it names no spec.placementRef\n` });
  });
});
