// `ocmf`: the project's command line, in the manner of clusteradm.
//   ocmf accept --clusters c1[,c2]                       approve the bootstrap CSRs, set hubAcceptsClient
//          [--requesters u1[,u2]]                        the bootstrap users to trust (needed when more
//                                                        than one asks for the same cluster)
//   ocmf get clusters | addons                           the ManagedCluster / ManagedClusterAddOn tables
//   ocmf addon enable --names a[,b] --clusters c1[,c2]   create the ManagedClusterAddOns
//   ocmf sidecar stop|start --cluster c1                 a local spoke's heartbeat sidecar (npm start)
// --kubeconfig F picks the hub (default: the one `npm start` wrote).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { KubeClient } from "../shared/kube/client.ts";
import { acceptCluster, describeAccept } from "./accept.ts";
import { enableAddon } from "./addon.ts";
import { addonTable, clusterDetails, clusterTable } from "./cluster-table.ts";
import { callControl } from "./control.ts";

const local = join(import.meta.dirname, "..", ".local");
const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    kubeconfig: { type: "string", default: join(local, "hub.kubeconfig") },
    clusters: { type: "string" },
    cluster: { type: "string" },
    names: { type: "string" },
    requesters: { type: "string" },
    namespace: { type: "string" },
  },
});
const list = (s: string | undefined, flag: string) => {
  const items = (s ?? "").split(",").map((x) => x.trim()).filter(Boolean);
  if (!items.length) throw new Error(`${flag} is required`);
  return items;
};

async function main(hub: KubeClient): Promise<void> {
  const [verb, noun] = positionals;
  if (verb === "accept") {
    const requesters = values.requesters === undefined ? undefined : list(values.requesters, "--requesters");
    const failed: string[] = [];
    for (const c of list(values.clusters, "--clusters")) {
      const r = await acceptCluster(hub, c, { requesters });
      for (const line of describeAccept(c, r)) console.log(line);
      if (r.csr === "none") failed.push(`no CSR to approve for cluster ${c}`);
      if (r.csr === "refused") failed.push(`nothing approved for cluster ${c}: its CSRs were refused`);
    }
    if (failed.length) throw new Error(failed.join("; "));
  } else if (verb === "get" && noun === "clusters") {
    console.log(`${await clusterTable(hub)}\n\n${await clusterDetails(hub)}`);
  } else if (verb === "get" && noun === "addons") {
    console.log((await addonTable(hub)) || "No add-ons enabled.");
  } else if (verb === "addon" && noun === "enable") {
    for (const addon of list(values.names, "--names")) {
      for (const r of await enableAddon(hub, { addon, clusters: list(values.clusters, "--clusters"), namespace: values.namespace })) console.log(`${addon} on ${r.cluster}: ${r.result}`);
    }
  } else if (verb === "sidecar" && (noun === "stop" || noun === "start")) {
    const [cluster] = list(values.cluster, "--cluster");
    console.log(await callControl(join(local, "control.json"), `/heartbeats/${cluster}/${noun}`));
  } else {
    throw new Error("usage: ocmf accept --clusters C [--requesters U] | get clusters|addons | addon enable --names A --clusters C | sidecar stop|start --cluster C");
  }
}

const hub = KubeClient.fromKubeconfig(readFileSync(values.kubeconfig!, "utf8"));
try {
  await main(hub);
} catch (err) {
  console.error(`error: ${(err as Error).message}`);
  process.exitCode = 1;
} finally {
  hub.close();
}
