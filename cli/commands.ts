// Every `ocmf` command: its words, flags and help, and the module that does the work, imported only
// when the command runs, so that `ocmf --help` loads the parser and nothing else. A new command is one
// more registration in `commands`.
import { resolve } from "node:path";
import { InvalidArgumentError, Option, type Command } from "commander";
import type { KubeClient } from "../shared/kube/client.ts";
import { hubFlags, spokeFlags, type HubFlags, type SpokeFlags } from "./render-options.ts";
import type { WaitLevel } from "./readiness.ts";
import type { HubConnectionFlags } from "./join.ts";
import type { Strategy } from "./config.ts";

type ConfigSetFlags = {
  cluster?: string;
  fleet?: string;
  unset?: string[];
  trialSeconds?: number;
  placement?: string;
  namespace: string;
  strategy?: Strategy;
  maxConcurrency?: number | string;
  maxRolledBack?: number | string;
};

// What a command may use: the cluster --kubeconfig names (the hub, or the spoke for join and uninstall
// spoke; opened on first use, closed at exit), files of the running `npm start`, and the terminal.
export type Cli = {
  hub(): Promise<KubeClient>;
  cluster(role: "hub" | "spoke"): Promise<KubeClient>;
  localFile(name: string): string;
  print(line: string): void;
};

export type Registration = (ocmf: Command, cli: Cli) => void;

// "a, b" → ["a", "b"]; an empty list is refused, as clusteradm refuses it.
function names(value: string): string[] {
  const items = value.split(",").map((x) => x.trim()).filter(Boolean);
  if (!items.length) throw new InvalidArgumentError("give at least one name (comma-separated)");
  return items;
}

// Go's duration syntax (90s, 5m, 1h30m), as kubectl's --timeout takes it.
type Duration = { ms: number; text: string };
const units: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };
function duration(value: string): Duration {
  const parts = [...value.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)];
  if (!parts.length || parts.map((p) => p[0]).join("") !== value) throw new InvalidArgumentError("give a duration such as 90s, 5m or 1h30m");
  const ms = parts.reduce((sum, p) => sum + Number(p[1]) * units[p[2]!]!, 0);
  if (ms <= 0) throw new InvalidArgumentError("give a duration longer than zero");
  return { ms, text: value };
}

// Whole seconds, as the agent takes them; OCM's Klusterlet API asks at least 180 of its operator's users.
function hubConnectionTimeout(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || n < 1 || n > 86_400) throw new InvalidArgumentError("give whole seconds from 1 to 86400");
  return n;
}

// A join token's lifetime: a duration, or 0 for one that never expires (kubeadm's --ttl 0). Left out,
// it is kubeadm's day (DefaultTokenTtlMs in cli/bootstrap-token.ts, which --help does not load).
type TokenLifetime = { ms: number | "never"; text: string };
const tokenLifetime = (value: string): TokenLifetime => (value === "0" ? { ms: "never", text: value } : duration(value));
const tokenTtlOption = (flag: string) =>
  new Option(`${flag} <duration>`, "the bootstrap token's lifetime, e.g. 2h or 30m, or 0: it never expires (as clusteradm's) (default: 24h, as kubeadm's)").argParser(tokenLifetime);

const waitOption = () =>
  new Option("--wait <level>", "what to wait for after applying: none; crds (CRDs Established before the rest is applied); all (crds, then every Knative object Ready and Deployment Available, which needs Knative's controllers)")
    .choices(["none", "crds", "all"] satisfies WaitLevel[])
    .default("all");
const timeoutOption = (what: string) => new Option("--wait-timeout <duration>", `how long ${what} may take`).argParser(duration).default(duration("5m"), "5m");
const waiting = (o: { wait: WaitLevel; waitTimeout: Duration }) => ({ level: o.wait, timeoutMs: o.waitTimeout.ms, timeoutText: o.waitTimeout.text });

// The command `name` under `parent`, created with this summary the first time a registration asks.
function group(parent: Command, name: string, summary: string): Command {
  return parent.commands.find((c) => c.name() === name) ?? parent.command(name).description(summary);
}

const get = (ocmf: Command) => group(ocmf, "get", "show OCM objects on the hub as tables");
const addon = (ocmf: Command) => group(ocmf, "addon", "manage add-ons on the hub");
const sidecar = (ocmf: Command) => group(ocmf, "sidecar", "a local spoke's heartbeat sidecar (npm start)");
const render = (ocmf: Command) => group(ocmf, "render", "print the Knative manifests of the hub or a spoke, rendered from the functions' func.yaml");
const install = (ocmf: Command) => group(ocmf, "install", "install OCM on functions on a cluster with Knative");
const uninstall = (ocmf: Command) => group(ocmf, "uninstall", "remove what install or join made from a cluster");
const config = (ocmf: Command) => group(ocmf, "config", "the agents' dynamic configuration: AgentConfigs on the hub (docs/agent-config.md)");
const scaffold = (ocmf: Command) => group(ocmf, "new", "start a multi-cluster function of your own (docs/writing-functions.md)");
const token = (ocmf: Command) => group(ocmf, "token", "the bootstrap tokens clusters join the hub with");
const run = (ocmf: Command) => group(ocmf, "run", "run a function of your own on this machine, against real clusters");

// A flag's value through a check that throws Error, as commander reports an invalid argument.
const checked =
  <T>(check: (value: string) => T) =>
  (value: string): T => {
    try {
      return check(value);
    } catch (err) {
      throw new InvalidArgumentError((err as Error).message);
    }
  };
const wholeNumber = (min: number, what: string) =>
  checked((value) => {
    if (!/^\d+$/.test(value) || Number(value) < min || Number(value) > 2 ** 31 - 1) throw new Error(`give ${what}, a whole number of at least ${min}`);
    return Number(value);
  });
// --max-concurrency, --max-rolled-back: N, or N% of the placement's clusters (at most 100%).
function countOrPercent(text: string, min: number): number | string {
  const pct = /^(\d+(?:\.\d+)?)%$/.exec(text);
  if (pct) {
    const n = Number(pct[1]);
    if (n > 100 || (min > 0 && n === 0)) throw new Error(`give a percentage ${min > 0 ? "above 0%" : "from 0%"} up to 100%`);
    return text;
  }
  if (!/^\d+$/.test(text) || Number(text) < min || Number(text) > 2 ** 31 - 1) throw new Error(`give a whole number of at least ${min}, or a percentage such as 10%`);
  return Number(text);
}
const outputOption = () => new Option("-o, --output <format>", "print the object(s) instead of the table").choices(["yaml", "json"]);

export const commands: Registration[] = [
  (ocmf, cli) =>
    ocmf
      .command("accept")
      .description("approve the clusters' bootstrap CSRs and set hubAcceptsClient, as clusteradm accept does")
      .requiredOption("--clusters <names>", "the clusters to accept, comma-separated", names)
      .option("--requesters <users>", "the bootstrap users to trust (spec.username), comma-separated; needed when more than one asks for a cluster", names)
      .option("--csr <names>", "the CSRs to approve, comma-separated, every other one refused; needed when a cluster has more than one pending (the spoke keeps its agent's in Secret open-cluster-management-agent/hub-kubeconfig-secret-pending-csr, key csr-name)", names)
      .action(async (o: { clusters: string[]; requesters?: string[]; csr?: string[] }) => {
        const { acceptClusters } = await import("./accept.ts");
        await acceptClusters(await cli.hub(), { clusters: o.clusters, requesters: o.requesters, csrs: o.csr }, cli.print);
      }),

  (ocmf, cli) =>
    get(ocmf)
      .command("clusters")
      .description("the ManagedClusters: acceptance, joined, available, then version, capacity and taints")
      .action(async () => {
        const { clusterTable, clusterDetails } = await import("./cluster-table.ts");
        const hub = await cli.hub();
        cli.print(`${await clusterTable(hub)}\n\n${await clusterDetails(hub)}`);
      }),

  (ocmf, cli) =>
    get(ocmf)
      .command("clusterprofiles")
      .description("the ClusterProfiles (multicluster.x-k8s.io) published in each namespace a cluster set is bound to: health, version and API server")
      .option("-n, --namespace <namespace>", "only this namespace's")
      .action(async (o: { namespace?: string }) => {
        const { profileTable } = await import("./cluster-table.ts");
        cli.print((await profileTable(await cli.hub(), o)) || `No ClusterProfiles${o.namespace ? ` in ${o.namespace}` : ""}: bind a ManagedClusterSet to a namespace (a ManagedClusterSetBinding) to publish its clusters there.`);
      }),

  (ocmf, cli) =>
    get(ocmf)
      .command("addons")
      .description("the ManagedClusterAddOns of every cluster and their conditions")
      .action(async () => {
        const { addonTable } = await import("./cluster-table.ts");
        cli.print((await addonTable(await cli.hub())) || "No add-ons enabled.");
      }),

  (ocmf, cli) =>
    addon(ocmf)
      .command("enable")
      .description("create the add-ons' ManagedClusterAddOns in the clusters' namespaces, as clusteradm addon enable does")
      .requiredOption("--names <addons>", "the add-ons to enable, comma-separated", names)
      .requiredOption("--clusters <names>", "the clusters to enable them on, comma-separated", names)
      .option("--namespace <namespace>", "the agent's install namespace on the spoke (default open-cluster-management-agent-addon)")
      .action(async (o: { names: string[]; clusters: string[]; namespace?: string }) => {
        const { enableAddon } = await import("./addon.ts");
        const hub = await cli.hub();
        for (const name of o.names) {
          for (const r of await enableAddon(hub, { addon: name, clusters: o.clusters, namespace: o.namespace })) cli.print(`${name} on ${r.cluster}: ${r.result}`);
        }
      }),

  ...(["stop", "start"] as const).map(
    (verb): Registration =>
      (ocmf, cli) =>
        sidecar(ocmf)
          .command(verb)
          .description(`${verb} the heartbeat sidecar of a spoke that npm start runs`)
          .requiredOption("--cluster <name>", "the spoke")
          .action(async (o: { cluster: string }) => {
            const { callControl } = await import("./control.ts");
            cli.print(await callControl(cli.localFile("control.json"), `/heartbeats/${o.cluster}/${verb}`));
          }),
  ),

  (ocmf, cli) =>
    hubFlags(render(ocmf).command("hub").description("the hub: OCM's CRDs and admission policies, the bootstrap RBAC, the hub functions and their event sources")).action(async (f: HubFlags) => {
      const [{ renderHub, toYaml }, { hubOptions }] = await Promise.all([import("./render/index.ts"), import("./render-options.ts")]);
      cli.print(toYaml(renderHub(hubOptions(f))).trimEnd());
    }),

  (ocmf, cli) =>
    spokeFlags(render(ocmf).command("spoke").description("a spoke: the agent's namespace and CRDs, the spoke functions, the relay and the heartbeat"), { clusterNameRequired: false })
      .option("--bootstrap-kubeconfig <file>", "a kubeconfig for the hub, rendered as the bootstrap-hub-kubeconfig Secret")
      .action(async (f: SpokeFlags & { bootstrapKubeconfig?: string }) => {
        const [{ renderSpoke, toYaml }, { spokeOptions }, { readBootstrapKubeconfig }] = await Promise.all([import("./render/index.ts"), import("./render-options.ts"), import("./kubeconfig-file.ts")]);
        const bootstrap = f.bootstrapKubeconfig === undefined ? undefined : readBootstrapKubeconfig(f.bootstrapKubeconfig);
        cli.print(toYaml(renderSpoke(spokeOptions(f, bootstrap))).trimEnd());
      }),

  (ocmf, cli) =>
    hubFlags(install(ocmf).command("hub").description("render the hub and apply it server-side, wait, then make a bootstrap token and print the join command, as clusteradm init does"))
      .addOption(waitOption())
      .addOption(timeoutOption("the wait"))
      .addOption(tokenTtlOption("--token-ttl"))
      .option("--output-bootstrap-kubeconfig <file>", "also write the bootstrap kubeconfig to this file (mode 0600), for ocmf join --hub-kubeconfig")
      .action(async (f: HubFlags & { wait: WaitLevel; waitTimeout: Duration; tokenTtl?: TokenLifetime; outputBootstrapKubeconfig?: string }) => {
        const [{ installHub }, { hubOptions }] = await Promise.all([import("./install.ts"), import("./render-options.ts")]);
        await installHub(await cli.cluster("hub"), { render: hubOptions(f), wait: waiting(f), tokenTtlMs: f.tokenTtl?.ms, bootstrapKubeconfigFile: f.outputBootstrapKubeconfig }, cli.print);
      }),

  (ocmf, cli) =>
    token(ocmf)
      .command("create")
      .description("make a new bootstrap token on the hub and print the ocmf join command with it, as kubeadm token create --print-join-command does: for clusters joining after install hub's token expired")
      .addOption(tokenTtlOption("--ttl"))
      .option("--output-bootstrap-kubeconfig <file>", "also write the bootstrap kubeconfig to this file (mode 0600), for ocmf join --hub-kubeconfig")
      .action(async (f: { ttl?: TokenLifetime; outputBootstrapKubeconfig?: string }) => {
        const { issueJoinToken } = await import("./bootstrap-token.ts");
        await issueJoinToken(await cli.hub(), { ttlMs: f.ttl?.ms, bootstrapKubeconfigFile: f.outputBootstrapKubeconfig }, cli.print);
      }),

  (ocmf, cli) =>
    spokeFlags(ocmf.command("join").description("join the cluster --kubeconfig names to a hub: render the spoke with the bootstrap credentials and apply it server-side, as clusteradm join does"), { clusterNameRequired: true })
      .option("--hub-kubeconfig <file>", "the bootstrap kubeconfig for the hub (ocmf install hub --output-bootstrap-kubeconfig writes one)")
      .option("--hub-token <id.secret>", "a bootstrap token of the hub, with --hub-apiserver and --hub-ca-data or --hub-ca-file")
      .option("--hub-apiserver <url>", "the hub's API server URL")
      .option("--hub-ca-data <base64>", "the hub's CA certificate, base64 PEM, as ocmf install hub prints it")
      .option("--hub-ca-file <file>", "the hub's CA certificate, a PEM file")
      .option("--bootstrap-kubeconfigs <files>", "several hubs (OCM's MultipleHubs): their bootstrap kubeconfig files, comma-separated, in the order the agent tries them; it moves down the list when its hub stops accepting it or stops answering", (v: string) => v.split(",").map((s) => s.trim()).filter(Boolean))
      .addOption(new Option("--mode <mode>", "default: the agent runs on the cluster --kubeconfig names; hosted: it runs there (the management cluster) for the cluster --managed-kubeconfig names, which gets none of its workloads").choices(["default", "hosted"]).default("default"))
      .option("--managed-kubeconfig <file>", "with --mode hosted: the managed cluster's kubeconfig (OCM's external-managed-kubeconfig); its identity is the agent's there")
      .option("--hub-connection-timeout-seconds <n>", "with --bootstrap-kubeconfigs: how long the cluster's lease may go unrenewed, or its hub not answer, before the agent moves to the next hub (default 600)", hubConnectionTimeout)
      .addOption(waitOption())
      .addOption(timeoutOption("the wait"))
      .action(async (f: SpokeFlags & HubConnectionFlags & { bootstrapKubeconfigs?: string[]; hubConnectionTimeoutSeconds?: number; mode: string; managedKubeconfig?: string; wait: WaitLevel; waitTimeout: Duration }) => {
        const [{ joinSpoke, bootstrapKubeconfigsFrom, managedKubeconfigFrom }, { spokeOptions }] = await Promise.all([import("./join.ts"), import("./render-options.ts")]);
        const bootstrapKubeconfigs = bootstrapKubeconfigsFrom(f);
        const managedKubeconfig = managedKubeconfigFrom(f);
        const render = {
          ...spokeOptions(f),
          ...(f.hubConnectionTimeoutSeconds !== undefined ? { hubConnectionTimeoutSeconds: f.hubConnectionTimeoutSeconds } : {}),
          ...(managedKubeconfig !== undefined ? { managedKubeconfig } : {}),
        };
        await joinSpoke(await cli.cluster("spoke"), { bootstrapKubeconfigs, render, wait: waiting(f) }, cli.print);
      }),

  (ocmf, cli) =>
    config(ocmf)
      .command("set")
      .description("write a cluster's AgentConfig (--cluster) or a fleet-level one rolled out over a Placement (--fleet); every KEY=VALUE is checked against the settings schema before anything is written")
      .argument("[settings...]", "KEY=VALUE, KEY one of statusSyncIntervalSeconds, clusterClaimLimit, relayResyncSeconds, heartbeat.proxyURL, logLevel, features.<name>")
      .option("--cluster <name>", "the cluster whose own config (agent in its namespace) to write")
      .addOption(new Option("--fleet <name>", "the fleet-level config to write, in --namespace").conflicts("cluster"))
      .option("--unset <key>", "remove a setting (or a group: heartbeat, features); repeatable", (key: string, keys: string[] | undefined) => [...(keys ?? []), key])
      .option("--trial-seconds <seconds>", "how long the config must run healthy before it becomes last-known-good", wholeNumber(1, "the seconds"))
      .addOption(new Option("--placement <name>", "fleet: the Placement whose decided clusters get the config (needed when the config is new)").conflicts("cluster"))
      .addOption(new Option("--namespace <namespace>", "fleet: the namespace of the config and its Placement").default("default").conflicts("cluster"))
      .addOption(new Option("--strategy <type>", "fleet: OCM's rollout strategy").choices(["All", "Progressive", "ProgressivePerGroup"]).conflicts("cluster"))
      .addOption(new Option("--max-concurrency <n|n%>", "fleet, Progressive: clusters on trial at a time").argParser(checked((v) => countOrPercent(v, 1))).conflicts("cluster"))
      .addOption(new Option("--max-rolled-back <n|n%>", "fleet: the rollout halts when more clusters than this roll back (default 10%)").argParser(checked((v) => countOrPercent(v, 0))).conflicts("cluster"))
      .action(async (assignments: string[], o: ConfigSetFlags) => {
        const { parseSettingsChange, setConfig } = await import("./config.ts");
        if (!o.cluster && !o.fleet) throw new Error("give --cluster NAME (a cluster's own config) or --fleet NAME (a fleet-level config)");
        const change = parseSettingsChange(assignments, o.unset ?? []);
        const common = { change, trialSeconds: o.trialSeconds };
        const r = await setConfig(
          await cli.hub(),
          o.fleet
            ? { ...common, fleet: o.fleet, namespace: o.namespace, placement: o.placement, strategy: o.strategy, maxConcurrency: o.maxConcurrency, maxRolledBack: o.maxRolledBack }
            : { ...common, cluster: o.cluster! },
        );
        cli.print(`agentconfig ${r.namespace}/${r.name} ${r.result} (settings hash ${r.hash})`);
        for (const note of r.notes) cli.print(note);
      }),

  (ocmf, cli) =>
    config(ocmf)
      .command("get")
      .description("every cluster's config state (assigned, active and last-known-good hashes, AgentConfigOK's reason), or one cluster's in full with --cluster")
      .option("--cluster <name>", "one cluster: its hashes, the AgentConfigOK condition and its settings")
      .addOption(outputOption())
      .action(async (o: { cluster?: string; output?: "yaml" | "json" }) => {
        const { getClusterConfig, listClusterConfigs } = await import("./config.ts");
        const hub = await cli.hub();
        cli.print(o.cluster ? await getClusterConfig(hub, o.cluster, o.output) : await listClusterConfigs(hub, o.output));
      }),

  (ocmf, cli) =>
    group(config(ocmf), "rollout", "a fleet-level AgentConfig's rollout")
      .command("status")
      .description("the rollout's phase, and how many of the placement's clusters are updated, succeeded and rolled back; exits 1 when it is Halted")
      .argument("<name>", "the fleet-level AgentConfig")
      .option("--namespace <namespace>", "its namespace", "default")
      .action(async (name: string, o: { namespace: string }) => {
        const { rolloutStatus } = await import("./config.ts");
        const status = await rolloutStatus(await cli.hub(), name, o.namespace);
        cli.print(status.text);
        if (status.halted) throw new Error(status.summary);
      }),

  ...(["hub", "spoke"] as const).map(
    (side): Registration =>
      (ocmf, cli) => {
        const c = uninstall(ocmf)
          .command(side)
          .description(`delete everything labelled app.kubernetes.io/part-of=ocm-functions of the kinds ocmf render ${side} makes, in reverse order, CRDs last, and wait until it is gone`)
          .addOption(timeoutOption("the removal"));
        if (side === "hub") c.option("--purge-clusters", "delete the ManagedClusters first (the hub's functions release them); without it, uninstall refuses while any is registered");
        else {
          c.addOption(new Option("--mode <mode>", "hosted: --kubeconfig is the management cluster, and only the agent of --cluster-name goes from it; the managed cluster's records go too").choices(["default", "hosted"]).default("default"));
          c.option("--cluster-name <name>", "with --mode hosted: the managed cluster whose agent goes");
          c.option("--managed-kubeconfig <file>", "with --mode hosted: the managed cluster's kubeconfig, to remove what the agent recorded there");
        }
        return c.action(async (f: { waitTimeout: Duration; purgeClusters?: boolean; mode?: string; clusterName?: string; managedKubeconfig?: string }) => {
          const { uninstall, uninstallHosted } = await import("./uninstall.ts");
          const o = { purgeClusters: f.purgeClusters ?? false, timeoutMs: f.waitTimeout.ms, timeoutText: f.waitTimeout.text };
          if (f.mode === "hosted") await uninstallHosted(await cli.cluster(side), { ...o, clusterName: f.clusterName, managedKubeconfig: f.managedKubeconfig }, cli.print);
          else if (f.clusterName || f.managedKubeconfig) throw new Error("--cluster-name and --managed-kubeconfig are for --mode hosted");
          else await uninstall(await cli.cluster(side), side, o, cli.print);
        });
      },
  ),

  (ocmf, cli) =>
    scaffold(ocmf)
      .command("function")
      .description("write NAME/: function.ts (a working function that copies labelled ConfigMaps from a source cluster to targets), function.test.ts (its test against real clusters), rbac-source.yaml and rbac-target.yaml (its ClusterRoles) and func.yaml (knative/func's metadata). Refuses to overwrite a file")
      .argument("<name>", "the function's name, a DNS label")
      .option("--dir <dir>", "the directory NAME/ is made in (default: the one you ran the command in)")
      .option("--source <cluster>", "the cluster the function copies from", "hub")
      .addOption(new Option("--targets <names>", "the clusters it copies to, comma-separated (npm start names its spokes so)").argParser(names).default(["cluster1", "cluster2"], "cluster1,cluster2"))
      .action(async (name: string, o: { dir?: string; source: string; targets: string[] }) => {
        const { newFunction, invocationDir } = await import("./new-function.ts");
        await newFunction({ name, dir: resolve(invocationDir(), o.dir ?? "."), source: o.source, targets: o.targets }, cli.print);
      }),

  (ocmf, cli) =>
    run(ocmf)
      .command("function")
      .description("run a function written with defineFunction until Ctrl-C: its runtime server and a relay built from its watches, its settings from the environment (as func.yaml's run.envs give them)")
      .argument("<file>", "the module whose default export defineFunction made (NAME/function.ts)")
      .requiredOption("--kubeconfig-dir <dir>", "a directory of <cluster>.kubeconfig files, one per cluster the function watches or writes (npm start writes .local/)")
      .action(async (file: string, o: { kubeconfigDir: string }) => {
        const [{ runFunctionFile }, { invocationDir }] = await Promise.all([import("./run-function.ts"), import("./new-function.ts")]);
        await runFunctionFile({ file: resolve(invocationDir(), file), kubeconfigDir: resolve(invocationDir(), o.kubeconfigDir) }, cli.print);
      }),
];
