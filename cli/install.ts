// `ocmf install hub`, what `clusteradm init` does for this project: render the hub, apply it, wait as
// --wait says, then make a bootstrap token and print the command that joins a cluster with it. The
// render also holds the ServiceAccount `clusteradm get token` asks a token of (cli/render/hub.ts).
import type { KubeClient } from "../shared/kube/client.ts";
import { applyAll, missingKinds } from "./apply.ts";
import { checkWritableFolder, hubEndpointOf, issueJoinToken, type TokenTtl } from "./bootstrap-token.ts";
import { Discovery } from "./discovery.ts";
import { waitUntilReady, type WaitLevel } from "./readiness.ts";
import { HubNamespaceDefault, renderHub, type HubOptions } from "./render/index.ts";

export type Waiting = { level: WaitLevel; timeoutMs: number; timeoutText: string };

export type InstallHubOptions = {
  render: HubOptions;
  wait: Waiting;
  tokenTtlMs?: TokenTtl; // none: DefaultTokenTtlMs, a day
  bootstrapKubeconfigFile?: string; // also write the bootstrap kubeconfig here, for `ocmf join --hub-kubeconfig`
};

// The kinds the render needs the cluster to serve already, with what to do about it.
export async function refuseMissingKinds(client: KubeClient, objects: Parameters<typeof missingKinds>[1], side: "hub" | "spoke"): Promise<void> {
  const missing = await missingKinds(new Discovery(client), objects);
  if (!missing.length) return;
  // Serving only when a Knative Service is rendered (not with --workloads deployments).
  const knative = missing.some((k) => k.startsWith("serving.knative.dev/")) ? "Knative Serving and Eventing" : "Knative Eventing";
  throw new Error(`the ${side} at ${client.server} does not serve ${missing.join(", ")}: install ${knative} there first (ocmf render ${side} shows what would be applied)`);
}

export async function installHub(hub: KubeClient, o: InstallHubOptions, print: (line: string) => void): Promise<void> {
  hubEndpointOf(hub); // before anything is applied: the join command needs the CA
  if (o.bootstrapKubeconfigFile) checkWritableFolder(o.bootstrapKubeconfigFile); // and the file its folder
  const objects = renderHub(o.render);
  await refuseMissingKinds(hub, objects, "hub");
  print(`installing the hub on ${hub.server}: ${objects.length} objects, --wait ${o.wait.level}`);
  const deadline = Date.now() + o.wait.timeoutMs;
  await applyAll(hub, objects, { waitForCrds: o.wait.level !== "none", deadline, print });
  if (o.wait.level === "all") await waitUntilReady(hub, objects, { deadline, timeoutText: o.wait.timeoutText, print });

  const ns = o.render.namespace ?? HubNamespaceDefault;
  print("");
  print(`The hub is installed (namespace ${ns}).`);
  await issueJoinToken(hub, { ttlMs: o.tokenTtlMs, bootstrapKubeconfigFile: o.bootstrapKubeconfigFile }, print);
}
