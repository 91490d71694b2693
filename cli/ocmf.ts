// `ocmf`: the project's command line, in the manner of clusteradm.
//   ocmf accept --clusters c1[,c2] [--kubeconfig F]    approve the bootstrap CSR, set hubAcceptsClient
//   ocmf get clusters [--kubeconfig F]                 the ManagedCluster table
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { KubeClient } from "../shared/kube/client.ts";
import { acceptCluster } from "./accept.ts";
import { clusterTable } from "./cluster-table.ts";

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: { kubeconfig: { type: "string", default: join(import.meta.dirname, "..", ".local", "hub.kubeconfig") }, clusters: { type: "string" } },
});
const hub = KubeClient.fromKubeconfig(readFileSync(values.kubeconfig!, "utf8"));
const [verb, noun] = positionals;
try {
  if (verb === "accept") {
    const clusters = (values.clusters ?? "").split(",").map((c) => c.trim()).filter(Boolean);
    if (!clusters.length) throw new Error("accept needs --clusters");
    for (const c of clusters) {
      const r = await acceptCluster(hub, c);
      if (r.csr === "none") throw new Error(`no CSR to approve for cluster ${c}`);
      console.log(`${c}: CSR ${r.csr}; hubAcceptsClient ${r.accepted}`);
    }
  } else if (verb === "get" && noun === "clusters") {
    console.log(await clusterTable(hub));
  } else {
    throw new Error("usage: ocmf accept --clusters NAMES | ocmf get clusters");
  }
} catch (err) {
  console.error(`error: ${(err as Error).message}`);
  process.exitCode = 1;
} finally {
  hub.close();
}
