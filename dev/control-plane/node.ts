// A real Kubernetes node on this machine, joined to a LocalCluster: Debian's containerd and runc run
// the pods, our own kubelet (built by scripts/build-tools.sh from the same Go module as the API server)
// registers the node and drives them, and CNI's bridge plugin gives each pod an address on a bridge of
// the node's own. No image is ever pulled: the sandbox image is our own pause program, and every other
// image is imported from a local archive (pods use imagePullPolicy: Never). Needs root. The cluster's
// API server must authorize nodes (--authorization-mode=Node); startScheduler adds kube-scheduler to a
// cluster, and apiserverProxy lets pods reach the API server without kube-proxy. With services, the
// node also routes Services (kube-proxy on the host, nftables mode) and runs cluster DNS (CoreDNS as a
// Deployment in kube-system behind the kube-dns Service at 10.0.0.10), so pods reach each other and the
// API server by Service names such as kubernetes.default.svc.cluster.local.
//
// Everything the node creates on the host is named after its id and recorded in <root>/node.json before
// it is created, so cleanupNode(root) can undo it all from that file alone: stop() calls it, and so does
// a guard process when the process that started the node dies without calling stop().
//
// Host state a node touches, and how it is kept to itself:
//   directories  /var/lib/ocm-functions-node-<id> (containerd's root and state, kubelet's root-dir, pod
//                logs, CNI config and IPAM state); absent host directories that containerd or kubelet
//                create anyway (/run/containerd/s for shim sockets, /var/log/containers for log links,
//                /var/lib/cni for libcni's result cache, /var/lib/kubelet/device-plugins for kubelet's
//                device-plugin socket) are removed again when only empty directories and sockets remain
//   cgroups      /sys/fs/cgroup/<each hierarchy>/ocmf-node-<id> (kubelet's cgroupRoot), with kubepods below
//   network      bridge ocmf-<id> with 10.78.<k>.1/24, and conntrack's entries of that /24; pods get
//                no default route and no masquerading, so their traffic cannot leave the machine;
//                kubelet makes no iptables chains (makeIPTablesUtilChains: false) and the CNI chain
//                has no portmap or firewall plugin
//   services     kube-proxy's nftables tables (ip and ip6 kube-proxy: the name is fixed, so one node
//                with services at a time), and a route `unreachable 10.0.0.0/24` so that traffic to a
//                Service address kube-proxy has no rule for is refused here instead of following the
//                default route off the machine; kube-proxy changes no conntrack sysctl (all set to 0)
//   sysctls      kubelet sets vm.overcommit_memory, kernel.panic, kernel.panic_on_oops and the bridge
//                plugin net.ipv4.ip_forward; the values from before are restored
//   processes    containerd, kubelet and kube-proxy (also in the cluster harness's pid files, so its
//                guard kills them), containerd-shim-runc-v2 per pod, the containers (found through
//                their cgroups)
// Caveats for two nodes at once on one machine: they share the sysctls, so the second records the
// first's changes, and kubelet's device-plugin socket path, which neither needs.
//
// The node's parts: node-network.ts (its fixed names and addresses), node-host.ts (host state and
// cleanupNode), node-config.ts (the programs' configuration files), node-services.ts (the API server
// forwarder, kube-proxy and cluster DNS); this file starts and stops it all.
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import { freePort, type LocalCluster } from "./clusters.ts";
import { exitedEarly, logTail, startProcess, stopProcess, type Managed } from "./processes.ts";
import { writeStaticImages } from "../build/static-image.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { NodeResource } from "../../shared/api/kube.ts";
import { PAUSE_IMAGE } from "./node-network.ts";
import { HOST_PATHS, type NodeState, SYSCTLS, checkServiceRoutingFree, cleanupNode, createCgroupRoot, freeNodeSubnet, healthOk, poll, readSysctl, run, runOrExplain } from "./node-host.ts";
import { cniConfig, containerdConfig, kubeletConfig } from "./node-config.ts";
import { type Proxy, startApiserverProxy, startServices } from "./node-services.ts";
import type { NodeBinaries } from "./node-network.ts";

export {
  PAUSE_IMAGE,
  PROBE_IMAGE,
  COREDNS_IMAGE,
  SERVICE_CIDR,
  KUBERNETES_SERVICE_IP,
  CLUSTER_DNS_IP,
  CLUSTER_DOMAIN,
  KUBERNETES_SERVICE_HOSTS,
  SERVICE_CONTROLLERS,
  type NodeBinaries,
} from "./node-network.ts";
export { HOST_PATHS, cleanupNode, freeNodeSubnet, mountsUnder, nodeCgroups, nodeProcesses } from "./node-host.ts";

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..");


export type NodeOptions = {
  name?: string;
  // Which 10.78.<subnet>.0/24 the node's bridge gets (default: the first free one). A test picks it
  // first with freeNodeSubnet() when the API server's certificate must name the node's address.
  subnet?: number;
  // Pods reach the API server at <node address>:443, forwarded by this process to the API server on
  // loopback (which pods cannot reach), in place of the kubernetes Service and kube-proxy. TLS passes
  // through: the certificate must name the node's address (StartOptions.servingHosts).
  apiserverProxy?: boolean;
  // Service routing and cluster DNS (see the top of this file); implies apiserverProxy, since the
  // kubernetes Service's only endpoint is that forwarder. The cluster needs SERVICE_CONTROLLERS, the
  // ServiceAccount admission plugin and controllers, and KUBERNETES_SERVICE_HOSTS in servingHosts.
  services?: boolean;
  log?: (line: string) => void;
  readyTimeoutMs?: number;
};

export type LocalNode = {
  name: string;
  root: string;
  bridge: string;
  address: string;
  subnet: string;
  cgroup: string;
  podLogsDir: string;
  apiserver?: { host: string; port: number }; // with apiserverProxy: what pods set KUBERNETES_SERVICE_HOST/_PORT to
  binaries: NodeBinaries;
  containerd: Managed;
  kubelet: Managed;
  kubeProxy?: Managed;
  readyMs: number;
  servicesReadyMs?: number; // with services: from node Ready until kube-proxy routes to a Ready CoreDNS
  importImage(archivePath: string): void;
  images(): string[];
  stop(): Promise<void>;
};

// scripts/build-tools.sh builds them once (kubelet, kube-scheduler and kube-proxy from tools/kube, pause
// and probe from tools/pause, CoreDNS from tools/coredns) and then only names them, in this order.
export function findNodeBinaries(): NodeBinaries {
  const out = execFileSync(join(repoRoot, "scripts", "build-tools.sh"), ["node"], { stdio: ["ignore", "pipe", "inherit"] }).toString().trim().split("\n");
  const names = ["scheduler", "pause", "probe", "kubeProxy", "coredns", "kubelet"] as const;
  const paths = out.slice(-names.length);
  for (const b of paths) if (!existsSync(b)) throw new Error(`${b} is missing after scripts/build-tools.sh node`);
  return Object.fromEntries(names.map((n, i) => [n, paths[i]!])) as NodeBinaries;
}

// containerd, runc, the CNI plugins, iptables and conntrack from Debian; installs only what is missing.
export function ensureHostPackages(): void {
  execFileSync(join(repoRoot, "scripts", "setup-node.sh"), { stdio: ["ignore", "inherit", "inherit"] });
}

// Runs cleanupNode once the starting process is gone and the node's root still exists, i.e. stop()
// was never called: the harness's guard only kills the pids it knows, and shims, containers, mounts,
// cgroups and the bridge would outlive it.
function startNodeGuard(root: string): void {
  const script = `
parent=$1; root=$2; node=$3; self=$4
while kill -0 "$parent" 2>/dev/null && [ -d "$root" ]; do sleep 1; done
# its log stays next to the root only when the cleanup failed
[ -d "$root" ] && "$node" "$self" cleanup "$root" >"$root.cleanup.log" 2>&1 && rm -f "$root.cleanup.log"
`;
  spawn("sh", ["-c", script, "ocmf-node-guard", String(process.pid), root, process.execPath, fileURLToPath(import.meta.url)], { detached: true, stdio: "ignore" }).unref();
}

type NodeCondition = { type: string; status: string; reason?: string; message?: string };
type NodeObject = KubeObject & { status?: { conditions?: NodeCondition[] } };

export async function startNode(cluster: LocalCluster, o: NodeOptions = {}): Promise<LocalNode> {
  const log = o.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const t0 = Date.now();
  ensureHostPackages();
  const binaries = findNodeBinaries();
  const id = randomBytes(3).toString("hex");
  const name = o.name ?? `node-${id}`;
  const root = `/var/lib/ocm-functions-node-${id}`;
  const k = o.subnet ?? freeNodeSubnet();
  const s: NodeState = {
    id,
    name,
    root,
    bridge: `ocmf-${id}`,
    address: `10.78.${k}.1`,
    subnet: `10.78.${k}.0/24`,
    cgroup: `ocmf-node-${id}`,
    socket: join(root, "containerd.sock"),
    network: `ocmf-${id}`,
    sysctls: Object.fromEntries(SYSCTLS.map((key) => [key, readSysctl(key)])),
    absentBefore: HOST_PATHS.filter((p) => !existsSync(p)),
    services: !!o.services,
  };
  if (s.services) checkServiceRoutingFree();
  mkdirSync(root, { mode: 0o700 });
  writeFileSync(join(root, "node.json"), JSON.stringify(s, null, 2));
  startNodeGuard(root);
  // The harness's run dir: its guard kills containerd and kubelet by pid if this process is killed.
  const runDir = dirname(cluster.dir);
  const podLogsDir = join(root, "pod-logs");
  let containerd: Managed | undefined;
  let kubelet: Managed | undefined;
  let kubeProxy: Managed | undefined;
  let proxy: Proxy | undefined;
  let servicesReadyMs: number | undefined;
  let readyMs = 0;
  const stop = async () => {
    proxy?.close();
    if (kubelet) await stopProcess(kubelet);
    if (kubeProxy) await stopProcess(kubeProxy);
    await cleanupNode(root); // containers and shims before containerd, which it stops too
    if (containerd) await stopProcess(containerd, 1_000);
  };
  const importImage = (archivePath: string) => {
    runOrExplain("ctr", ["--address", s.socket, "--namespace", "k8s.io", "images", "import", archivePath]);
  };
  const images = () => runOrExplain("ctr", ["--address", s.socket, "--namespace", "k8s.io", "images", "list", "--quiet"]).trim().split("\n").filter(Boolean);
  try {
    runOrExplain("ip", ["link", "add", s.bridge, "type", "bridge"]);
    runOrExplain("ip", ["addr", "add", `${s.address}/24`, "dev", s.bridge]);
    runOrExplain("ip", ["link", "set", s.bridge, "up"]);
    createCgroupRoot(s.cgroup);
    if (o.apiserverProxy || o.services) proxy = await startApiserverProxy(s.address, Number(new URL(cluster.url).port));

    mkdirSync(join(root, "cni", "net.d"), { recursive: true });
    writeFileSync(join(root, "cni", "net.d", "10-ocmf.conflist"), JSON.stringify(cniConfig(s), null, 2));
    writeFileSync(join(root, "containerd.toml"), containerdConfig(s, await freePort()));
    containerd = startProcess(runDir, `${name}-containerd`, "containerd", ["--config", join(root, "containerd.toml")]);
    await poll(`containerd of ${name}`, () => existsSync(s.socket) && run("ctr", ["--address", s.socket, "version"]).includes("Server:"), 30_000, exitedEarly(containerd));

    // The sandbox image before kubelet: every pod needs it, and it is never pulled.
    const archive = join(root, "pause.tar");
    writeStaticImages(archive, [{ reference: PAUSE_IMAGE, binary: binaries.pause, path: "/pause" }]);
    importImage(archive);

    const kubeconfig = await cluster.kubeconfigFor({ user: `system:node:${name}`, groups: ["system:nodes"] });
    writeFileSync(join(root, "kubelet.kubeconfig"), kubeconfig, { mode: 0o600 });
    const config = kubeletConfig(s, { clientCaFile: join(cluster.dir, "client-ca.crt"), port: await freePort(), healthzPort: await freePort(), podLogsDir });
    writeFileSync(join(root, "kubelet.yaml"), JSON.stringify(config, null, 2)); // JSON is YAML
    kubelet = startProcess(runDir, `${name}-kubelet`, binaries.kubelet, [
      `--config=${join(root, "kubelet.yaml")}`,
      `--kubeconfig=${join(root, "kubelet.kubeconfig")}`,
      `--root-dir=${join(root, "kubelet")}`,
      `--cert-dir=${join(root, "kubelet", "pki")}`, // its default is /var/lib/kubelet/pki whatever the root-dir
      `--hostname-override=${name}`,
      `--node-ip=${s.address}`,
      "--v=1",
    ]);
    const client = KubeClient.fromKubeconfig(cluster.adminKubeconfig);
    try {
      let last = "not registered";
      await poll(
        `node ${name} Ready`,
        async () => {
          const node = await client.get<NodeObject>(NodeResource, name);
          const ready = node?.status?.conditions?.find((c) => c.type === "Ready");
          if (ready) last = `${ready.status} ${ready.reason ?? ""}: ${ready.message ?? ""}`;
          return ready?.status === "True";
        },
        o.readyTimeoutMs ?? 90_000,
        () => exitedEarly(kubelet!)() ?? exitedEarly(containerd!)(),
      ).catch((err: Error) => {
        const tail = logTail(kubelet!, 40);
        const hint = tail.includes(`User \\"system:node:${name}\\" cannot`)
          ? "\nThe API server refuses the node's own identity: start it with --authorization-mode=Node (apiserverFlags)."
          : "";
        throw new Error(`${err.message}; last Ready condition: ${last}${hint}\nkubelet log:\n${tail}`);
      });
    } finally {
      client.close();
    }
    readyMs = Date.now() - t0;
    log(`[node] ${name} Ready in ${(readyMs / 1000).toFixed(1)} s (bridge ${s.bridge} ${s.subnet}, root ${root})`);
    if (o.services) {
      const t1 = Date.now();
      await startServices(cluster, s, { runDir, binaries, importImage, started: (m) => (kubeProxy = m) });
      servicesReadyMs = Date.now() - t1;
      log(`[node] ${name}: kube-proxy and cluster DNS ready in ${(servicesReadyMs / 1000).toFixed(1)} s`);
    }
  } catch (err) {
    await stop().catch((e: Error) => log(`[node] ${name}: cleanup after a failed start: ${e.message}`));
    throw err;
  }
  return {
    name,
    root,
    bridge: s.bridge,
    address: s.address,
    subnet: s.subnet,
    cgroup: s.cgroup,
    podLogsDir,
    apiserver: proxy ? { host: s.address, port: 443 } : undefined,
    binaries,
    containerd,
    kubelet,
    kubeProxy,
    readyMs,
    servicesReadyMs,
    importImage,
    images,
    stop,
  };
}

// kube-scheduler for a cluster with nodes, as system:kube-scheduler (the identity the API server's
// default RBAC bindings give the scheduler's rights to), so pods need no nodeName. A control-plane
// process: in the harness's run dir and pid files, stopped with the cluster or by stop().
export async function startScheduler(cluster: LocalCluster, binaries: NodeBinaries = findNodeBinaries()): Promise<{ process: Managed; stop(): Promise<void> }> {
  const runDir = dirname(cluster.dir);
  const kubeconfig = join(cluster.dir, "scheduler.kubeconfig");
  writeFileSync(kubeconfig, await cluster.kubeconfigFor({ user: "system:kube-scheduler" }), { mode: 0o600 });
  const port = await freePort();
  const p = startProcess(runDir, `${cluster.name}-scheduler`, binaries.scheduler, [
    `--kubeconfig=${kubeconfig}`,
    "--leader-elect=false",
    "--bind-address=127.0.0.1",
    `--secure-port=${port}`,
    `--cert-dir=${join(cluster.dir, "scheduler")}`,
  ]);
  try {
    await poll(`kube-scheduler of ${cluster.name}`, () => healthOk(`https://127.0.0.1:${port}/healthz`), 60_000, exitedEarly(p));
  } catch (err) {
    await stopProcess(p);
    throw err;
  }
  return { process: p, stop: () => stopProcess(p) };
}

// `node dev/control-plane/node.ts cleanup <root>`: what the guard runs; also by hand after a crash.
if (import.meta.main && process.argv[2] === "cleanup" && process.argv[3]) {
  cleanupNode(process.argv[3]).then(
    () => console.log(`cleaned up ${process.argv[3]}`),
    (err: Error) => {
      console.error(err.message);
      process.exitCode = 1;
    },
  );
}
