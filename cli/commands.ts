// Every `ocmf` command: its words, flags and help, and the module that does the work, imported only
// when the command runs, so that `ocmf --help` loads the parser and nothing else. A new command is one
// more registration in `commands`.
import { InvalidArgumentError, type Command } from "commander";
import type { KubeClient } from "../shared/kube/client.ts";

// What a command may use: the hub (opened on first use from the chosen kubeconfig, closed at exit),
// files of the running `npm start`, and the terminal.
export type Cli = {
  hub(): Promise<KubeClient>;
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

// The command `name` under `parent`, created with this summary the first time a registration asks.
function group(parent: Command, name: string, summary: string): Command {
  return parent.commands.find((c) => c.name() === name) ?? parent.command(name).description(summary);
}

const get = (ocmf: Command) => group(ocmf, "get", "show OCM objects on the hub as tables");
const addon = (ocmf: Command) => group(ocmf, "addon", "manage add-ons on the hub");
const sidecar = (ocmf: Command) => group(ocmf, "sidecar", "a local spoke's heartbeat sidecar (npm start)");

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
];
