// `ocmf join`, what `clusteradm join` does for this project: check the bootstrap credentials on the hub,
// render the spoke with them as the bootstrap-hub-kubeconfig Secret, apply it, wait as --wait says, and
// say what the hub admin does next.
import { ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { KubeClient, resourcePath } from "../shared/kube/client.ts";
import { hubEndpoint } from "../shared/hub-credentials.ts";
import { KubeError } from "../shared/kube/errors.ts";
import { readFileSync } from "node:fs";
import { applyAll } from "./apply.ts";
import { bootstrapKubeconfig } from "./bootstrap-token.ts";
import { readBootstrapKubeconfig } from "./kubeconfig-file.ts";
import { refuseMissingKinds, type Waiting } from "./install.ts";
import { waitUntilReady } from "./readiness.ts";
import { renderSpoke, type SpokeOptions } from "./render/index.ts";
import { renderManaged } from "./render/spoke.ts";
import { sleep } from "../shared/timers.ts";

export type HubConnectionFlags = { hubKubeconfig?: string; hubToken?: string; hubApiserver?: string; hubCaData?: string; hubCaFile?: string };

// The bootstrap kubeconfig from either form: a file (--hub-kubeconfig), or a token with the hub's URL
// and CA (--hub-token, as `ocmf install hub` prints it).
export function bootstrapKubeconfigFrom(f: HubConnectionFlags): string {
  if (f.hubKubeconfig) {
    if (f.hubToken || f.hubApiserver || f.hubCaData || f.hubCaFile) throw new Error("give --hub-kubeconfig, or --hub-token with --hub-apiserver and the hub's CA, not both");
    return readBootstrapKubeconfig(f.hubKubeconfig);
  }
  if (!f.hubToken) throw new Error("give the hub: --hub-kubeconfig FILE, or --hub-token with --hub-apiserver and --hub-ca-data or --hub-ca-file (ocmf install hub prints them)");
  if (!/^[a-z0-9]{6}\.[a-z0-9]{16}$/.test(f.hubToken)) throw new Error("--hub-token is not a bootstrap token (<6 of a-z0-9>.<16 of a-z0-9>)");
  if (!f.hubApiserver) throw new Error("--hub-token needs --hub-apiserver, the hub's URL");
  let server: URL;
  try {
    server = new URL(f.hubApiserver);
  } catch {
    throw new Error(`--hub-apiserver is not a URL: ${f.hubApiserver}`);
  }
  if (server.protocol !== "https:") throw new Error(`--hub-apiserver must be an https URL: ${f.hubApiserver}`);
  if (f.hubCaData && f.hubCaFile) throw new Error("give --hub-ca-data or --hub-ca-file, not both");
  let caPem: string;
  if (f.hubCaData) caPem = Buffer.from(f.hubCaData, "base64").toString();
  else if (f.hubCaFile) {
    try {
      caPem = readFileSync(f.hubCaFile, "utf8");
    } catch (err) {
      throw new Error(`cannot read the hub CA: ${(err as Error).message}`);
    }
  } else throw new Error("--hub-token needs the hub's CA: --hub-ca-data (as ocmf install hub prints it) or --hub-ca-file");
  if (!caPem.includes("-----BEGIN CERTIFICATE-----")) throw new Error("the hub CA is not a PEM certificate");
  return bootstrapKubeconfig({ server: f.hubApiserver.replace(/\/$/, ""), caPem }, f.hubToken);
}

// One bootstrap kubeconfig, or several (OCM's MultipleHubs: the agent joins the first hub of the list that
// takes it and moves on down the list, see functions/spoke-registration/hubs.ts).
// render.managedKubeconfig: Hosted mode; `spoke` is then the management cluster, and the managed cluster
// gets only renderManaged's objects, applied with that kubeconfig.
export type JoinOptions = { bootstrapKubeconfigs: readonly string[]; render: SpokeOptions & { clusterName: string }; wait: Waiting };

// --mode hosted --managed-kubeconfig FILE, as clusteradm join names them.
export function managedKubeconfigFrom(f: { mode?: string; managedKubeconfig?: string }): string | undefined {
  if ((f.mode ?? "default") === "default") {
    if (f.managedKubeconfig) throw new Error("--managed-kubeconfig is for --mode hosted");
    return undefined;
  }
  if (!f.managedKubeconfig) throw new Error("--mode hosted needs --managed-kubeconfig, the managed cluster's kubeconfig (--kubeconfig is then the management cluster)");
  return readBootstrapKubeconfig(f.managedKubeconfig, "the managed cluster's kubeconfig");
}

// --bootstrap-kubeconfigs: files, in the order the agent tries their hubs.
export function bootstrapKubeconfigsFrom(f: HubConnectionFlags & { bootstrapKubeconfigs?: string[]; hubConnectionTimeoutSeconds?: number }): string[] {
  if (!f.bootstrapKubeconfigs) {
    if (f.hubConnectionTimeoutSeconds !== undefined) throw new Error("--hub-connection-timeout-seconds is for several hubs: give them with --bootstrap-kubeconfigs");
    return [bootstrapKubeconfigFrom(f)];
  }
  if (f.hubKubeconfig || f.hubToken || f.hubApiserver || f.hubCaData || f.hubCaFile) throw new Error("give the hubs with --bootstrap-kubeconfigs, or one hub with --hub-kubeconfig or --hub-token, not both");
  if (f.bootstrapKubeconfigs.length < 2) throw new Error("--bootstrap-kubeconfigs takes at least two kubeconfig files, comma-separated; for one hub use --hub-kubeconfig");
  const texts = f.bootstrapKubeconfigs.map((file) => readBootstrapKubeconfig(file));
  const servers = texts.map((t) => hubEndpoint(t).server);
  const twice = servers.find((s, i) => servers.indexOf(s) !== i);
  if (twice) throw new Error(`--bootstrap-kubeconfigs names the hub at ${twice} twice: the agent tells its hubs apart by their URL`);
  return texts;
}

// The bootstrap identity may list ManagedClusters (manifests/hub/bootstrap-rbac.yaml): a list proves
// the hub is reachable, trusts the credentials, and has OCM installed.
async function checkHub(bootstrap: KubeClient): Promise<void> {
  try {
    await bootstrap.request("GET", `${resourcePath(ManagedClusterResource)}?limit=1`);
  } catch (err) {
    if (!(err instanceof KubeError)) throw err;
    const at = `the hub at ${bootstrap.server}`;
    if (err.code === 0) throw new Error(`cannot reach ${at} with the bootstrap kubeconfig: ${err.message}`);
    if (err.code === 401) throw new Error(`${at} refused the bootstrap credentials (401): the token is wrong, expired or deleted`);
    if (err.code === 403) throw new Error(`${at} does not let the bootstrap identity list ManagedClusters (403): it needs the group system:bootstrappers:managedcluster, bound by ocmf install hub`);
    if (err.code === 404) throw new Error(`${at} does not serve ManagedClusters (404): run ocmf install hub there first`);
    throw new Error(`checking the bootstrap credentials on ${at}: ${err.message}`);
  }
}

export async function joinSpoke(spoke: KubeClient, o: JoinOptions, print: (line: string) => void): Promise<void> {
  const cluster = o.render.clusterName;
  const several = o.bootstrapKubeconfigs.length > 1;
  const hubs = o.bootstrapKubeconfigs.map((k) => KubeClient.fromKubeconfig(k));
  try {
    // One hub must answer; with several, the agent passes over those that do not, so each is only said.
    const answers = await Promise.allSettled(hubs.map(checkHub));
    const failures = answers.flatMap((a) => (a.status === "rejected" ? [(a.reason as Error).message] : []));
    if (failures.length === hubs.length) throw new Error(failures.join("; "));
    for (const f of failures) print(`warning: ${f}; the agent passes over that hub until it answers`);
    const objects = renderSpoke({ ...o.render, ...(several ? { bootstrapKubeconfigs: o.bootstrapKubeconfigs } : { bootstrapKubeconfig: o.bootstrapKubeconfigs[0]! }) });
    await refuseMissingKinds(spoke, objects, "spoke");
    if (o.render.managedKubeconfig !== undefined) {
      const managed = KubeClient.fromKubeconfig(o.render.managedKubeconfig);
      try {
        const onManaged = renderManaged();
        print(`hosted: applying to the managed cluster at ${managed.server} only what the agent records there: ${onManaged.length} objects`);
        await applyAll(managed, onManaged, { waitForCrds: o.wait.level !== "none", deadline: Date.now() + o.wait.timeoutMs, print });
      } finally {
        managed.close();
      }
    }
    print(`joining ${spoke.server} to ${several ? `the first usable of the hubs at ${hubs.map((h) => h.server).join(", ")}` : `the hub at ${hubs[0]!.server}`} as cluster ${cluster}: ${objects.length} objects, --wait ${o.wait.level}`);
    const deadline = Date.now() + o.wait.timeoutMs;
    await applyAll(spoke, objects, { waitForCrds: o.wait.level !== "none", deadline, print });
    let accepted: boolean | undefined;
    if (o.wait.level === "all") {
      await waitUntilReady(spoke, objects, { deadline, timeoutText: o.wait.timeoutText, print });
      // The agent runs: its first act is to register the cluster on the hub, as the bootstrap identity sees.
      print(`waiting (--wait all): cluster ${cluster} registered on ${several ? "a hub" : "the hub"}`);
      for (let delay = 500; ; delay = Math.min(delay * 1.5, 3_000)) {
        const found = await Promise.all(hubs.map((h) => h.get<ManagedCluster & { metadata: { name: string } }>(ManagedClusterResource, cluster).catch(() => undefined)));
        const at = found.findIndex((mc) => mc !== undefined);
        if (at >= 0) {
          accepted = found[at]!.spec?.hubAcceptsClient === true;
          if (several) print(`cluster ${cluster} registered on the hub at ${hubs[at]!.server}`);
          break;
        }
        if (Date.now() > deadline) throw new Error(`not ready after ${o.wait.timeoutText}: the agent has not registered cluster ${cluster} on the hub`);
        await sleep(delay);
      }
    }
    print("");
    if (accepted) {
      print(`Cluster ${cluster} is registered and the hub accepted it.`);
    } else {
      print(`The agent is installed${accepted === false ? ` and cluster ${cluster} is registered` : ""}. On the hub, accept the cluster (unless the hub auto-approves this bootstrap identity):`);
      print("");
      print(`    ocmf accept --clusters ${cluster}`);
    }
  } finally {
    for (const h of hubs) h.close();
  }
}
