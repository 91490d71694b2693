// Every `ocmf` command: its words, flags and help, and the module that does the work, imported only
// when the command runs, so that `ocmf --help` loads the parser and nothing else. A new command is one
// more registration in `commands`.
import { InvalidArgumentError, Option, type Command } from "commander";
import type { KubeClient } from "../shared/kube/client.ts";
import { hubFlags, spokeFlags, type HubFlags, type SpokeFlags } from "./render-options.ts";
import type { WaitLevel } from "./readiness.ts";
import type { HubConnectionFlags } from "./join.ts";

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

export const commands: Registration[] = [
  (ocmf, cli) =>
    ocmf
      .command("accept")
      .description("approve the clusters' bootstrap CSRs and set hubAcceptsClient, as clusteradm accept does")
      .requiredOption("--clusters <names>", "the clusters to accept, comma-separated", names)
      .option("--requesters <users>", "the bootstrap users to trust (spec.username), comma-separated; needed when more than one asks for a cluster", names)
      .action(async (o: { clusters: string[]; requesters?: string[] }) => {
        const { acceptClusters } = await import("./accept.ts");
        await acceptClusters(await cli.hub(), o, cli.print);
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
      .addOption(new Option("--token-ttl <duration>", "the bootstrap token's lifetime (default: it does not expire, as clusteradm's)").argParser(duration))
      .option("--output-bootstrap-kubeconfig <file>", "also write the bootstrap kubeconfig to this file, for ocmf join --hub-kubeconfig")
      .action(async (f: HubFlags & { wait: WaitLevel; waitTimeout: Duration; tokenTtl?: Duration; outputBootstrapKubeconfig?: string }) => {
        const [{ installHub }, { hubOptions }] = await Promise.all([import("./install.ts"), import("./render-options.ts")]);
        await installHub(await cli.cluster("hub"), { render: hubOptions(f), wait: waiting(f), tokenTtlMs: f.tokenTtl?.ms, bootstrapKubeconfigFile: f.outputBootstrapKubeconfig }, cli.print);
      }),

  (ocmf, cli) =>
    spokeFlags(ocmf.command("join").description("join the cluster --kubeconfig names to a hub: render the spoke with the bootstrap credentials and apply it server-side, as clusteradm join does"), { clusterNameRequired: true })
      .option("--hub-kubeconfig <file>", "the bootstrap kubeconfig for the hub (ocmf install hub --output-bootstrap-kubeconfig writes one)")
      .option("--hub-token <id.secret>", "a bootstrap token of the hub, with --hub-apiserver and --hub-ca-data or --hub-ca-file")
      .option("--hub-apiserver <url>", "the hub's API server URL")
      .option("--hub-ca-data <base64>", "the hub's CA certificate, base64 PEM, as ocmf install hub prints it")
      .option("--hub-ca-file <file>", "the hub's CA certificate, a PEM file")
      .addOption(waitOption())
      .addOption(timeoutOption("the wait"))
      .action(async (f: SpokeFlags & HubConnectionFlags & { wait: WaitLevel; waitTimeout: Duration }) => {
        const [{ joinSpoke, bootstrapKubeconfigFrom }, { spokeOptions }] = await Promise.all([import("./join.ts"), import("./render-options.ts")]);
        const bootstrapKubeconfig = bootstrapKubeconfigFrom(f);
        await joinSpoke(await cli.cluster("spoke"), { bootstrapKubeconfig, render: spokeOptions(f), wait: waiting(f) }, cli.print);
      }),

  ...(["hub", "spoke"] as const).map(
    (side): Registration =>
      (ocmf, cli) => {
        const c = uninstall(ocmf)
          .command(side)
          .description(`delete everything labelled app.kubernetes.io/part-of=ocm-functions of the kinds ocmf render ${side} makes, in reverse order, CRDs last, and wait until it is gone`)
          .addOption(timeoutOption("the removal"));
        if (side === "hub") c.option("--purge-clusters", "delete the ManagedClusters first (the hub's functions release them); without it, uninstall refuses while any is registered");
        return c.action(async (f: { waitTimeout: Duration; purgeClusters?: boolean }) => {
          const { uninstall } = await import("./uninstall.ts");
          await uninstall(await cli.cluster(side), side, { purgeClusters: f.purgeClusters ?? false, timeoutMs: f.waitTimeout.ms, timeoutText: f.waitTimeout.text }, cli.print);
        });
      },
  ),
];
