// `ocmf`: the project's command line, in the manner of clusteradm. The commands are in commands.ts;
// `ocmf <command> --help` describes each. The cluster is the one --kubeconfig names, else KUBECONFIG's,
// else (for the hub) the local hub of `npm start` (hub-kubeconfig.ts): the hub for every command but
// join and uninstall spoke, which act on the spoke. A failure is one line on stderr and exit code 1.
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { Command } from "commander";
import type { KubeClient } from "../shared/kube/client.ts";
import { commands, type Cli } from "./commands.ts";
import { hubKubeconfig, localDir } from "./hub-kubeconfig.ts";

const local = localDir();
const program = new Command("ocmf")
  .description("Open Cluster Management on functions: accept clusters, enable add-ons, show the hub")
  .option("--kubeconfig <file>", "the hub's kubeconfig, or the spoke's for join and uninstall spoke (default: the first file of KUBECONFIG, else .local/hub.kubeconfig of npm start for the hub)")
  .configureHelp({ showGlobalOptions: true })
  .showSuggestionAfterError(false); // the suggestion would be a second line

let opened: { client: KubeClient; file: string; role: "hub" | "spoke" } | undefined;
const cli: Cli = {
  hub: () => cli.cluster("hub"),
  async cluster(role) {
    if (!opened) {
      // a spoke is never the local hub of npm start
      const file = hubKubeconfig({ flag: program.opts<{ kubeconfig?: string }>().kubeconfig, env: process.env, local: role === "hub" ? local : undefined, role });
      let text: string;
      try {
        text = readFileSync(file, "utf8");
      } catch (err) {
        throw new Error(`cannot read the ${role} kubeconfig: ${(err as Error).message}`);
      }
      const [{ KubeClient }, { parseKubeconfig }] = await Promise.all([import("../shared/kube/client.ts"), import("../shared/kube/kubeconfig.ts")]);
      // relative file names in it are relative to the file, as kubectl reads them
      opened = { client: new KubeClient(parseKubeconfig(text, { dir: dirname(resolve(file)), what: file })), file, role };
    }
    return opened.client;
  },
  localFile(name) {
    if (!local) throw new Error("no local fleet: this ocmf is not inside a checkout where npm start runs");
    return join(local, name);
  },
  print: (line) => console.log(line),
};

for (const register of commands) register(program, cli);

try {
  await program.parseAsync();
} catch (err) {
  const message = err instanceof Error ? err.message : String(err);
  // KubeError with code 0: no answer at all, so say which cluster was asked.
  const unreachable = opened && err instanceof Error && err.name === "KubeError" && (err as { code?: number }).code === 0;
  const line = unreachable ? `cannot reach the ${opened!.role} at ${opened!.client.server} (kubeconfig ${opened!.file}): ${message}` : message;
  process.stderr.write(`error: ${line.replace(/\s+/g, " ").trim()}\n`);
  process.exitCode = 1;
} finally {
  opened?.client.close();
}
