// OCM's own hub programs (registration, placement and add-on controllers, v1.2.0 from tools/ocm) run
// beside our functions in the conformance tests. Each runs in its control plane's run directory, so the
// plane's guard reaps it too if the test process dies.
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { parse } from "yaml";
import { ocmApiModuleDir } from "../../dev/control-plane/binaries.ts";
import { freePort } from "../../dev/control-plane/clusters.ts";
import { startProcess, type Managed } from "../../dev/control-plane/processes.ts";

// `<binary> <command> --kubeconfig … --namespace … --disable-leader-election --listen 127.0.0.1:<free>`,
// the way OCM's cluster manager starts each of its hub controllers.
// `args`: more flags (a feature gate).
export async function startOcmHubProgram(o: { planeDir: string; name: string; binary: string; command: string; kubeconfig: string; namespace: string; args?: readonly string[] }): Promise<Managed> {
  return startProcess(dirname(o.planeDir), o.name, o.binary, [
    o.command,
    `--kubeconfig=${o.kubeconfig}`,
    `--namespace=${o.namespace}`,
    "--disable-leader-election",
    `--listen=127.0.0.1:${await freePort()}`,
    ...(o.args ?? []),
  ]);
}

// OCM's CRDs as its module publishes them; of a kind shipped twice, the file with the most versions
// (the one its operator installs).
export function ocmOwnCrds(): object[] {
  const dir = ocmApiModuleDir();
  const byKind = new Map<string, { spec: { names: { kind: string }; versions: unknown[] } }>();
  for (const file of readdirSync(dir, { recursive: true, encoding: "utf8" }).filter((f) => f.endsWith(".crd.yaml"))) {
    const crd = parse(readFileSync(join(dir, file), "utf8")) as { spec: { names: { kind: string }; versions: unknown[] } };
    const seen = byKind.get(crd.spec.names.kind);
    if (!seen || seen.spec.versions.length < crd.spec.versions.length) byKind.set(crd.spec.names.kind, crd);
  }
  return [...byKind.values()];
}
