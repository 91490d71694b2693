// OCM's own hub programs (registration, placement and add-on controllers, v1.2.0 from tools/ocm) run
// beside our functions in the conformance tests. Each runs in its control plane's run directory, so the
// plane's guard reaps it too if the test process dies.
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { parse } from "yaml";
import { freePort, startClusters, type LocalCluster } from "../../dev/control-plane/clusters.ts";
import { logTail, startProcess, stopProcess, type Managed } from "../../dev/control-plane/processes.ts";
import { findOcm, ocmApiModuleDir, ocmModuleDir } from "../../dev/control-plane/binaries.ts";
import { KubeClient } from "../../shared/kube/client.ts";
import { NamespaceResource } from "../../shared/api/kube.ts";
import { applyManifests } from "../../shared/apply.ts";

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

// OCM's ClusterRole for one of its hub controllers (manifests/cluster-manager/hub/<component>/ in its
// module), its Go template filled for the default ClusterManager with every optional part left out.
export function ocmHubControllerRules(component: "addon-manager" | "registration"): unknown[] {
  const file = join(ocmModuleDir(), "manifests", "cluster-manager", "hub", component, "clusterrole.yaml");
  const text = readFileSync(file, "utf8")
    .replace(/\{\{\s*if [^}]*\}\}[\s\S]*?\{\{\s*end\s*\}\}/g, "")
    .replaceAll("{{ .ClusterManagerName }}", "cluster-manager")
    .split("\n")
    .filter((line) => !line.includes("{{"))
    .join("\n");
  const rules = (parse(text) as { rules?: unknown[] }).rules;
  if (!rules?.length) throw new Error(`no rules in ${file}`);
  return rules;
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

// OCM's registration controller on a hub of its own (OCM's CRDs and `crds`; no admission policies,
// since OCM's webhooks do not run beside it) next to a hub of ours with every CRD and policy: the two
// sides of a conformance test. `alive` throws with the controller's log once it has exited.
export type Beside = { ocm: KubeClient; ours: KubeClient; ourPlane: LocalCluster; alive(): void; stop(): Promise<void> };
export async function registrationBesideOurs(o: { crds?: readonly object[]; args?: readonly string[] } = {}): Promise<Beside> {
  const programs = findOcm(["registration"]);
  const [ocmPlanes, ourPlanes] = await Promise.all([startClusters({ names: ["ocm"], crds: [...ocmOwnCrds(), ...(o.crds ?? [])], admission: false }), startClusters({ names: ["ours"] })]);
  const ocmPlane = ocmPlanes.get("ocm");
  const ocm = KubeClient.fromKubeconfig(ocmPlane.adminKubeconfig);
  const ours = KubeClient.fromKubeconfig(ourPlanes.get("ours").adminKubeconfig);
  let controller: Managed | undefined;
  const stop = async () => {
    if (controller) await stopProcess(controller);
    ocm.close();
    ours.close();
    await Promise.all([ocmPlanes.stop(), ourPlanes.stop()]);
  };
  try {
    await applyManifests(ocm, readFileSync(join(import.meta.dirname, "..", "..", "manifests", "hub", "bootstrap-rbac.yaml"), "utf8"));
    await ocm.create(NamespaceResource, { metadata: { name: "open-cluster-management-hub" } });
    // In the control plane's run directory: its guard reaps the process too if this one dies.
    controller = await startOcmHubProgram({ planeDir: ocmPlane.dir, name: "ocm-registration-controller", binary: programs.registration, command: "controller", kubeconfig: join(ocmPlane.dir, "admin.kubeconfig"), namespace: "open-cluster-management-hub", args: o.args });
  } catch (err) {
    await stop();
    throw err;
  }
  const alive = () => {
    if (controller!.child.exitCode !== null) throw new Error(`OCM's registration controller exited with ${controller!.child.exitCode}:\n${logTail(controller!)}`);
  };
  return { ocm, ours, ourPlane: ourPlanes.get("ours"), alive, stop };
}
