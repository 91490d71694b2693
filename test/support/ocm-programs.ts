// OCM's own hub programs (registration, placement and add-on controllers, v1.2.0 from tools/ocm) run
// beside our functions in the conformance tests. Each runs in its control plane's run directory, so the
// plane's guard reaps it too if the test process dies.
import { dirname } from "node:path";
import { freePort } from "../../dev/control-plane/clusters.ts";
import { startProcess, type Managed } from "../../dev/control-plane/processes.ts";

// `<binary> <command> --kubeconfig … --namespace … --disable-leader-election --listen 127.0.0.1:<free>`,
// the way OCM's cluster manager starts each of its hub controllers.
export async function startOcmHubProgram(o: { planeDir: string; name: string; binary: string; command: string; kubeconfig: string; namespace: string }): Promise<Managed> {
  return startProcess(dirname(o.planeDir), o.name, o.binary, [
    o.command,
    `--kubeconfig=${o.kubeconfig}`,
    `--namespace=${o.namespace}`,
    "--disable-leader-election",
    `--listen=127.0.0.1:${await freePort()}`,
  ]);
}
