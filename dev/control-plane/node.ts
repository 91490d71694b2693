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
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync, rmdirSync, lstatSync, writeFileSync } from "node:fs";
import { connect, createServer, type Socket } from "node:net";
import { request as httpsRequest } from "node:https";
import { request as httpRequest, type IncomingMessage } from "node:http";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import { freePort, type LocalCluster } from "./clusters.ts";
import { logTail, startProcess, stopProcess, type Managed } from "./processes.ts";
import { writeStaticImages } from "../build/static-image.ts";
import { KubeClient } from "../../shared/kube/client.ts";
import { KubeError } from "../../shared/kube/errors.ts";
import { NodeResource } from "../../shared/api/kube.ts";
import type { KubeObject } from "../../shared/kube/client.ts";

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const CNI_BIN = "/usr/lib/cni"; // containernetworking-plugins' directory on Debian

export const PAUSE_IMAGE = "dev.local/ocm-functions/pause:local";
// What a test names the image of binaries.probe when it imports it.
export const PROBE_IMAGE = "dev.local/ocm-functions/probe:local";
export const COREDNS_IMAGE = "dev.local/ocm-functions/coredns:local";

// The cluster's Service range (kube-apiserver's --service-cluster-ip-range in clusters.ts) and the
// fixed addresses in it: the API server gives the first to default/kubernetes, and cluster DNS gets
// the tenth, as kubeadm does.
export const SERVICE_CIDR = "10.0.0.0/24";
export const KUBERNETES_SERVICE_IP = "10.0.0.1";
export const CLUSTER_DNS_IP = "10.0.0.10";
export const CLUSTER_DOMAIN = "cluster.local";
// The names a pod reaches the API server by through the kubernetes Service: a cluster for a node with
// services adds them to the API server's certificate (StartOptions.servingHosts), with the node's address.
export const KUBERNETES_SERVICE_HOSTS = [KUBERNETES_SERVICE_IP, "kubernetes", "kubernetes.default", "kubernetes.default.svc", `kubernetes.default.svc.${CLUSTER_DOMAIN}`] as const;
// Controllers such a cluster runs besides the ServiceAccount ones: EndpointSlices for Services with
// selectors (kube-proxy and CoreDNS read only those), and CoreDNS's Deployment and its ReplicaSet.
export const SERVICE_CONTROLLERS = ["endpointslice-controller", "deployment-controller", "replicaset-controller"] as const;
// kube-proxy's nftables mode keeps all its rules in one table of this name per family.
const KUBE_PROXY_TABLES = ["ip kube-proxy", "ip6 kube-proxy"] as const;

// Settings kubelet or the bridge plugin may change; each is put back as it was.
const SYSCTLS = [
  "net/ipv4/ip_forward",
  "vm/overcommit_memory",
  "vm/panic_on_oom",
  "kernel/panic",
  "kernel/panic_on_oops",
  "kernel/keys/root_maxkeys",
  "kernel/keys/root_maxbytes",
] as const;

// Host directories containerd, kubelet or libcni create at fixed places whatever their configuration
// says. Those absent before the node are removed after it when nothing but empty directories is left.
export const HOST_PATHS = [
  "/run/containerd",
  "/var/lib/cni",
  "/var/log/containers",
  "/var/log/pods",
  "/var/lib/kubelet",
  "/var/lib/containerd",
  "/opt/containerd",
  "/etc/cni",
  "/opt/cni",
  "/etc/kubernetes",
  "/usr/libexec/kubernetes",
  "/run/netns",
] as const;

// What cleanupNode needs to undo a node: written before anything it names is created.
type NodeState = {
  id: string;
  name: string;
  root: string;
  bridge: string;
  address: string; // the bridge's (and the node's) address
  subnet: string;
  cgroup: string; // kubelet's cgroupRoot, a directory name in every hierarchy
  socket: string; // containerd's
  network: string; // the CNI network's name, which libcni's result cache files start with
  sysctls: Record<string, string>;
  absentBefore: string[];
  services?: boolean; // kube-proxy's tables and the Service range's route are the node's to remove
};

export type NodeBinaries = { kubelet: string; scheduler: string; pause: string; probe: string; kubeProxy: string; coredns: string };

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

const run = (cmd: string, args: readonly string[]): string =>
  execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], maxBuffer: 16 << 20 });

// The error of a failed command with what it wrote, not just "Command failed".
function runOrExplain(cmd: string, args: readonly string[]): string {
  try {
    return run(cmd, args);
  } catch (err) {
    const e = err as { stderr?: string; stdout?: string; message: string };
    throw new Error(`${cmd} ${args.join(" ")}: ${(e.stderr || e.stdout || e.message).trim()}`);
  }
}

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

async function poll(what: string, check: () => Promise<boolean> | boolean, timeoutMs: number, failed?: () => string | undefined): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (let delay = 50; ; delay = Math.min(delay * 1.5, 500)) {
    try {
      if (await check()) return;
    } catch (err) {
      last = err;
    }
    const why = failed?.();
    if (why !== undefined) throw new Error(`${what}: ${why}`);
    if (Date.now() > deadline) throw new Error(`${what}: not ready after ${timeoutMs} ms${last ? ` (last error: ${(last as Error).message})` : ""}`);
    await new Promise((r) => setTimeout(r, delay));
  }
}

const exitedEarly = (m: Managed) => () => (m.child.exitCode !== null || m.child.signalCode !== null ? `exited with ${m.child.exitCode ?? m.child.signalCode}:\n${logTail(m, 40)}` : undefined);

const readSysctl = (key: string): string => readFileSync(`/proc/sys/${key}`, "utf8").trim();

// A /24 in 10.78.0.0/16 that no interface or route here uses yet.
export function freeNodeSubnet(): number {
  const used = run("ip", ["-4", "-o", "addr", "show"]) + run("ip", ["-4", "route", "show", "table", "all"]);
  for (let k = 0; k < 256; k++) if (!used.includes(`10.78.${k}.`)) return k;
  throw new Error("no free /24 in 10.78.0.0/16 for a node bridge");
}

// Mount points of cgroup hierarchies: v1 controllers (cpu, memory, ..., name=systemd) and, on a hybrid
// host, the v2 one that runc also writes to.
function cgroupMounts(): { path: string; v1: boolean }[] {
  return readFileSync("/proc/self/mounts", "utf8")
    .split("\n")
    .map((l) => l.split(" "))
    .filter((f) => f[2] === "cgroup" || f[2] === "cgroup2")
    .map((f) => ({ path: unescapeMount(f[1]!), v1: f[2] === "cgroup" }));
}

// /proc/mounts writes space, tab, newline and backslash in paths as octal escapes.
const unescapeMount = (s: string): string => s.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8)));

export function mountsUnder(root: string): string[] {
  return readFileSync("/proc/self/mounts", "utf8")
    .split("\n")
    .map((l) => unescapeMount(l.split(" ")[1] ?? ""))
    .filter((p) => p === root || p.startsWith(`${root}/`));
}

// kubelet's cgroup-root must exist in every v1 hierarchy before it starts. A new cpuset cgroup has
// no CPUs or memory nodes until given some, so it gets its parent's.
function createCgroupRoot(cgroup: string): void {
  for (const m of cgroupMounts().filter((x) => x.v1)) {
    const dir = join(m.path, cgroup);
    mkdirSync(dir, { recursive: true });
    for (const f of ["cpuset.cpus", "cpuset.mems"]) {
      if (existsSync(join(m.path, f))) writeFileSync(join(dir, f), readFileSync(join(m.path, f), "utf8"));
    }
  }
}

// Every cgroup directory of the node, children before parents, in every hierarchy.
export function nodeCgroups(cgroup: string): string[] {
  const out: string[] = [];
  const visit = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) visit(join(dir, e.name));
    out.push(dir);
  };
  for (const m of cgroupMounts()) if (existsSync(join(m.path, cgroup))) visit(join(m.path, cgroup));
  return out;
}

function cgroupProcs(dirs: readonly string[]): number[] {
  const pids = new Set<number>();
  for (const d of dirs) {
    try {
      for (const p of readFileSync(join(d, "cgroup.procs"), "utf8").split("\n")) if (p) pids.add(Number(p));
    } catch {
      // removed meanwhile
    }
  }
  return [...pids];
}

function cmdline(pid: number): string[] {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter((a) => a !== "");
  } catch {
    return [];
  }
}

// The node's own long-running processes, recognised by paths only this node uses.
type NodeProcessKind = "kubelet" | "kube-proxy" | "containerd" | "shim";
export function nodeProcesses(s: { root: string; socket: string }): { pid: number; kind: NodeProcessKind }[] {
  const found: { pid: number; kind: NodeProcessKind }[] = [];
  for (const e of readdirSync("/proc")) {
    if (!/^\d+$/.test(e)) continue;
    const pid = Number(e);
    const args = cmdline(pid);
    if (args.includes(`--root-dir=${join(s.root, "kubelet")}`)) found.push({ pid, kind: "kubelet" });
    else if (args.includes(`--config=${join(s.root, "kube-proxy.yaml")}`)) found.push({ pid, kind: "kube-proxy" });
    else if (args.includes(join(s.root, "containerd.toml"))) found.push({ pid, kind: "containerd" });
    else if (args[0]?.endsWith("containerd-shim-runc-v2") && args.includes(s.socket)) found.push({ pid, kind: "shim" });
  }
  return found;
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    // A zombie answers signal 0 but is gone for our purposes.
    return !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, "utf8"));
  } catch {
    return false;
  }
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function killAndWait(pids: readonly number[], signal: NodeJS.Signals, timeoutMs: number): Promise<number[]> {
  for (const pid of pids) {
    try {
      process.kill(pid, signal);
    } catch {
      // already gone
    }
  }
  const deadline = Date.now() + timeoutMs;
  let left = pids.filter(alive);
  while (left.length && Date.now() < deadline) {
    await sleep(50);
    left = left.filter(alive);
  }
  return left;
}

// The veths of the node's pods vanish with their network namespaces; any left on the bridge go first.
function deleteBridge(bridge: string): void {
  const links = run("ip", ["-o", "link", "show"]);
  if (!links.includes(` ${bridge}:`)) return;
  for (const line of run("ip", ["-o", "link", "show", "master", bridge]).split("\n")) {
    const port = /^\d+:\s+([^:@]+)/.exec(line)?.[1];
    if (port) run("ip", ["link", "del", port]);
  }
  run("ip", ["link", "del", bridge]);
}

function nftTables(): string[] {
  let out: string;
  try {
    out = run("nft", ["list", "tables"]);
  } catch (err) {
    // kube-proxy's nftables mode runs nft too.
    if ((err as { code?: string }).code === "ENOENT") throw new Error("a node with services needs nft: apt-get install nftables");
    throw err;
  }
  return out.split("\n").map((l) => l.replace(/^table /, "").trim()).filter(Boolean);
}
const serviceRoute = (): string => run("ip", ["-4", "route", "show", SERVICE_CIDR]).trim();

// Refuses to start where another node's (or a crashed one's) Service routing is still in place: the
// table names and the route are the same for every node on this machine.
function checkServiceRoutingFree(): void {
  const taken = nftTables().filter((t) => (KUBE_PROXY_TABLES as readonly string[]).includes(t));
  const route = serviceRoute();
  if (taken.length || route) {
    throw new Error(`Service routing is in use on this machine (nft tables: ${taken.join(", ") || "none"}; route: ${route || "none"}): another node with services runs, or one crashed (node dev/control-plane/node.ts cleanup <its root>)`);
  }
}

// After kube-proxy is gone, so nothing writes them again.
function removeServiceRouting(): void {
  for (const t of nftTables()) if ((KUBE_PROXY_TABLES as readonly string[]).includes(t)) run("nft", ["delete", "table", ...t.split(" ")]);
  if (serviceRoute()) run("ip", ["route", "del", "unreachable", SERVICE_CIDR]);
}

// The kernel's connection-tracking entries of the node's pods and of the node's own address, which
// otherwise stay until they time out (2 min in TIME_WAIT, 5 days established); none can be used once
// the bridge is gone. conntrack exits 1 also when there was nothing to delete.
function forgetConnections(subnet: string): void {
  for (const side of ["-s", "-d"]) {
    try {
      run("conntrack", ["-D", side, subnet]);
    } catch (err) {
      const e = err as { status?: number; stderr?: string };
      if (!(e.status === 1 && /\b0 flow entries/.test(e.stderr ?? ""))) throw new Error(`conntrack -D ${side} ${subnet}: ${e.stderr?.trim() ?? (err as Error).message}`);
    }
  }
}

// Paths of the unix sockets some process has bound, from the kernel's table (its last column).
function boundSockets(): Set<string> {
  const lines = readFileSync("/proc/net/unix", "utf8").split("\n").slice(1);
  return new Set(lines.map((l) => l.trim().split(/\s+/)[7]).filter((p): p is string => !!p && p.startsWith("/")));
}

// Removes path when it holds nothing but (possibly nested) empty directories and dead sockets (kubelet's
// device-plugin socket, shims'), so another node's live ones keep theirs.
function removeEmptyTree(path: string, bound = boundSockets()): boolean {
  let st;
  try {
    st = lstatSync(path);
  } catch {
    return true;
  }
  if (st.isSocket() && !bound.has(path)) {
    rmSync(path, { force: true });
    return true;
  }
  if (!st.isDirectory()) return false;
  let empty = true;
  for (const e of readdirSync(path)) if (!removeEmptyTree(join(path, e), bound)) empty = false;
  if (!empty) return false;
  rmdirSync(path);
  return true;
}

// Undoes everything the node with this root did, from its node.json, in dependency order: kubelet
// first (so it restarts nothing), then the containers, their shims and containerd, then the mounts
// they leave, then cgroups, network, sysctls and directories. Goes on after a failed step and throws
// at the end with every failure, so one stuck mount does not leave the rest behind.
export async function cleanupNode(root: string): Promise<void> {
  const stateFile = join(root, "node.json");
  if (!existsSync(stateFile)) {
    if (existsSync(root) && mountsUnder(root).length === 0) rmSync(root, { recursive: true, force: true });
    return;
  }
  const s = JSON.parse(readFileSync(stateFile, "utf8")) as NodeState;
  const problems: string[] = [];
  const step = async (what: string, f: () => unknown) => {
    try {
      await f();
    } catch (err) {
      problems.push(`${what}: ${(err as Error).message}`);
    }
  };
  // Shim sockets live in /run/containerd/s whatever containerd's state dir is; each task's bundle
  // names its own, so read them while the bundles are there. The task ids also name libcni's cached
  // results for the sandboxes' loopback, which a pod that was never torn down leaves behind.
  const shimSockets: string[] = [];
  const taskIds = new Set<string>();
  await step("find shim sockets", () => {
    const tasks = join(root, "state", "io.containerd.runtime.v2.task");
    if (!existsSync(tasks)) return;
    for (const ns of readdirSync(tasks)) {
      for (const id of readdirSync(join(tasks, ns))) {
        taskIds.add(id);
        const address = join(tasks, ns, id, "address");
        if (existsSync(address)) shimSockets.push(readFileSync(address, "utf8").trim().replace(/^unix:\/\//, ""));
      }
    }
  });
  const ofKind = (k: string) => nodeProcesses(s).filter((p) => p.kind === k).map((p) => p.pid);
  await step("stop kubelet and kube-proxy", async () => {
    const left = await killAndWait([...ofKind("kubelet"), ...ofKind("kube-proxy")], "SIGTERM", 5_000);
    await killAndWait(left, "SIGKILL", 5_000);
  });
  await step("kill containers", async () => {
    for (let i = 0; i < 50; i++) {
      const pids = cgroupProcs(nodeCgroups(s.cgroup));
      if (!pids.length) return;
      await killAndWait(pids, "SIGKILL", 1_000);
    }
    throw new Error(`processes still in the node's cgroups: ${cgroupProcs(nodeCgroups(s.cgroup)).join(" ")}`);
  });
  await step("kill shims", async () => {
    const left = await killAndWait(ofKind("shim"), "SIGKILL", 5_000);
    if (left.length) throw new Error(`shims still running: ${left.join(" ")}`);
  });
  await step("stop containerd", async () => {
    const left = await killAndWait(ofKind("containerd"), "SIGTERM", 5_000);
    if ((await killAndWait(left, "SIGKILL", 5_000)).length) throw new Error(`containerd still running: ${left.join(" ")}`);
  });
  await step("unmount", async () => {
    // Deepest first; a busy mount is detached lazily (it goes when its last user does).
    for (let i = 0; i < 5 && mountsUnder(root).length; i++) {
      for (const m of mountsUnder(root).sort((a, b) => b.length - a.length)) {
        try {
          run("umount", [m]);
        } catch {
          try {
            run("umount", ["-l", m]);
          } catch {
            // reported below if it stays
          }
        }
      }
      if (mountsUnder(root).length) await sleep(200);
    }
    const left = mountsUnder(root);
    if (left.length) throw new Error(`still mounted: ${left.join(", ")}`);
  });
  await step("remove cgroups", async () => {
    // rmdir of a cgroup fails (EBUSY) for a moment after its last process exits.
    for (let i = 0; i < 50; i++) {
      for (const d of nodeCgroups(s.cgroup)) {
        try {
          rmdirSync(d);
        } catch {
          // retried
        }
      }
      if (!nodeCgroups(s.cgroup).length) return;
      await sleep(100);
    }
    throw new Error(`cgroups left: ${nodeCgroups(s.cgroup).join(", ")}`);
  });
  await step(`delete bridge ${s.bridge}`, () => deleteBridge(s.bridge));
  if (s.services) await step("remove kube-proxy's tables and the Service range's route", () => removeServiceRouting());
  await step(`forget connections of ${s.subnet}`, () => forgetConnections(s.subnet));
  await step("restore sysctls", () => {
    for (const [key, value] of Object.entries(s.sysctls)) if (readSysctl(key) !== value) writeFileSync(`/proc/sys/${key}`, value);
  });
  await step("remove host files", () => {
    for (const socket of shimSockets) rmSync(socket, { force: true });
    const results = "/var/lib/cni/results";
    if (existsSync(results)) {
      for (const f of readdirSync(results)) {
        const sandbox = f.startsWith(`${s.network}-`) ? f.slice(s.network.length + 1).replace(/-[^-]+$/, "") : undefined;
        if (sandbox) taskIds.add(sandbox);
      }
      for (const f of readdirSync(results)) {
        const id = f.startsWith("cni-loopback-") ? f.slice("cni-loopback-".length).replace(/-lo$/, "") : undefined;
        if (f.startsWith(`${s.network}-`) || (id && taskIds.has(id))) rmSync(join(results, f), { force: true });
      }
    }
    const links = "/var/log/containers";
    if (existsSync(links)) {
      for (const f of readdirSync(links)) {
        const p = join(links, f);
        if (lstatSync(p).isSymbolicLink() && readlinkSync(p).startsWith(`${root}/`)) rmSync(p, { force: true });
      }
    }
    for (const p of s.absentBefore) removeEmptyTree(p);
  });
  const left = mountsUnder(root);
  if (left.length) problems.push(`not removing ${root}: still mounted ${left.join(", ")}`);
  else await step(`remove ${root}`, () => rmSync(root, { recursive: true, force: true }));
  if (problems.length) throw new Error(`node ${s.name} cleanup:\n${problems.join("\n")}`);
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

function containerdConfig(s: NodeState, streamPort: number): string {
  const q = JSON.stringify; // TOML basic strings read JSON's escapes
  return `# containerd for node ${s.name}: its own root, state and socket, so it shares nothing with a
# containerd the host may run.
version = 2
root = ${q(join(s.root, "containerd"))}
state = ${q(join(s.root, "state"))}

[grpc]
  address = ${q(s.socket)}

[plugins."io.containerd.internal.v1.opt"]
  path = ${q(join(s.root, "opt"))}

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = ${q(PAUSE_IMAGE)}
  # root here lacks CAP_SYS_RESOURCE: runc fails to create the sandbox ("can't get final child's PID
  # from pipe: EOF") unless oom_score_adj is kept at or above containerd's own.
  restrict_oom_score_adj = true
  # pod network namespaces under our state dir, not /run/netns
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = ${q(String(streamPort))}
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = ${q(join(s.root, "state", "runc"))}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = ${q(CNI_BIN)}
    conf_dir = ${q(join(s.root, "cni", "net.d"))}
    max_conf_num = 1
`;
}

// A bridge with the node's address as gateway; no default route in pods (isDefaultGateway false) and
// no masquerading, so a pod reaches this machine's bridge address and other pods, nothing beyond. With
// services, pods also route the Service range to the gateway, where kube-proxy's rules turn it into
// pod addresses (or the unreachable route refuses it), and a pod may reach itself through its Service
// (hairpin).
function cniConfig(s: NodeState): object {
  return {
    cniVersion: "1.0.0",
    name: s.network,
    plugins: [
      {
        type: "bridge",
        bridge: s.bridge,
        isGateway: true,
        isDefaultGateway: false,
        ipMasq: false,
        hairpinMode: !!s.services,
        ipam: {
          type: "host-local",
          ranges: [[{ subnet: s.subnet, gateway: s.address }]],
          // A route without gw goes through the range's gateway.
          routes: s.services ? [{ dst: SERVICE_CIDR }] : [],
          dataDir: join(s.root, "cni", "ipam"),
        },
      },
    ],
  };
}

function kubeletConfig(s: NodeState, o: { clientCaFile: string; port: number; healthzPort: number; podLogsDir: string }): object {
  return {
    apiVersion: "kubelet.config.k8s.io/v1beta1",
    kind: "KubeletConfiguration",
    // cgroups are v1 on these hosts, and kubelet 1.35 refuses v1 unless told not to.
    failCgroupV1: false,
    cgroupDriver: "cgroupfs",
    cgroupRoot: `/${s.cgroup}`,
    failSwapOn: false,
    containerRuntimeEndpoint: `unix://${s.socket}`,
    address: s.address,
    port: o.port,
    readOnlyPort: 0,
    healthzBindAddress: "127.0.0.1",
    healthzPort: o.healthzPort,
    // Only holders of a client certificate from the cluster's CA may call the kubelet API.
    authentication: { anonymous: { enabled: false }, webhook: { enabled: false }, x509: { clientCAFile: o.clientCaFile } },
    authorization: { mode: "AlwaysAllow" },
    // No KUBE-FIREWALL/KUBE-KUBELET-CANARY chains: the host's iptables stay as they were.
    makeIPTablesUtilChains: false,
    podLogsDir: o.podLogsDir,
    volumePluginDir: join(s.root, "kubelet-plugins"),
    // A test node on a shared disk should not start evicting at the default 10-15 % free.
    evictionHard: { "memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%" },
    imageGCHighThresholdPercent: 100,
    imageGCLowThresholdPercent: 99,
    registerNode: true,
    // Pods resolve through cluster DNS; the host's resolver (which points off this machine) is never
    // copied into a pod, so a dnsPolicy: Default pod (CoreDNS itself) gets no nameserver at all.
    ...(s.services ? { clusterDNS: [CLUSTER_DNS_IP], clusterDomain: CLUSTER_DOMAIN, resolvConf: "" } : {}),
  };
}

// kube-proxy in nftables mode: all its rules in its own kube-proxy tables, which removeServiceRouting
// deletes whole. Every Service connection is masqueraded to the node's address, because pods share one
// bridge: without it a pod's reply to another pod would go straight back over the bridge, past the
// conntrack entry that must turn its source back into the Service address.
function kubeProxyConfig(s: NodeState, o: { kubeconfig: string; healthzPort: number; metricsPort: number }): object {
  return {
    apiVersion: "kubeproxy.config.k8s.io/v1alpha1",
    kind: "KubeProxyConfiguration",
    mode: "nftables",
    clientConnection: { kubeconfig: o.kubeconfig },
    hostnameOverride: s.name,
    healthzBindAddress: `127.0.0.1:${o.healthzPort}`,
    metricsBindAddress: `127.0.0.1:${o.metricsPort}`,
    nftables: { masqueradeAll: true, syncPeriod: "30s", minSyncPeriod: "0s" },
    clusterCIDR: s.subnet,
    detectLocalMode: "ClusterCIDR",
    // NodePorts only on the node's own address, never on the machine's other interfaces.
    nodePortAddresses: [`${s.address}/32`],
    // 0 leaves each conntrack sysctl as it is (they are the machine's, not the node's).
    conntrack: { maxPerCore: 0, min: 0, tcpEstablishedTimeout: "0s", tcpCloseWaitTimeout: "0s" },
  };
}

// A TCP forwarder from <address>:443 to the API server's loopback port. It lives in this process, so
// it ends with it; the bridge address is local to this machine. close() also ends open connections: a
// pod killed with its network namespace never closes its end.
type Proxy = { close(): void };
function startApiserverProxy(address: string, apiserverPort: number): Promise<Proxy> {
  const open = new Set<Socket>();
  const server = createServer((downstream) => {
    const upstream = connect(apiserverPort, "127.0.0.1");
    downstream.pipe(upstream).pipe(downstream);
    open.add(downstream).add(upstream);
    const end = () => {
      downstream.destroy();
      upstream.destroy();
      open.delete(downstream);
      open.delete(upstream);
    };
    downstream.on("error", end).on("close", end);
    upstream.on("error", end).on("close", end);
  });
  const close = () => {
    server.close();
    for (const socket of open) socket.destroy();
  };
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(443, address, () => resolve({ close }));
  });
}

// Creates obj in collection, or replaces the one a node started before in this cluster left there.
async function createOrReplace(client: KubeClient, collection: string, obj: KubeObject & { metadata: { name: string } }): Promise<void> {
  try {
    await client.request("POST", collection, obj);
  } catch (err) {
    if (!(err instanceof KubeError && err.code === 409)) throw err;
    const path = `${collection}/${obj.metadata.name}`;
    const current = await client.request<KubeObject>("GET", path);
    await client.request("PUT", path, { ...obj, metadata: { ...obj.metadata, resourceVersion: current.metadata.resourceVersion } });
  }
}

// The kube-apiserver binds loopback only and reconciles no endpoints (--endpoint-reconciler-type=none),
// so default/kubernetes gets its one endpoint from us: the node's forwarder at <node address>:443,
// which pods reach and which passes TLS through to the API server. kube-proxy and CoreDNS read
// EndpointSlices only; no Endpoints object is written.
function kubernetesEndpointSlice(s: NodeState): KubeObject & { metadata: { name: string } } {
  return {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: { name: "kubernetes", namespace: "default", labels: { "kubernetes.io/service-name": "kubernetes", "endpointslice.kubernetes.io/managed-by": "ocm-functions-node" } },
    addressType: "IPv4",
    endpoints: [{ addresses: [s.address], conditions: { ready: true }, nodeName: s.name }],
    // Named as the Service's port, which is how kube-proxy pairs them.
    ports: [{ name: "https", port: 443, protocol: "TCP" }],
  };
}

// Names under cluster.local, and reverse names of cluster addresses, come from the API; anything else
// is answered with an error, since no forward plugin is built in (tools/coredns). Port 1053 so the
// server needs no privilege; the kube-dns Service maps 53 to it.
const COREFILE = `.:1053 {
    errors
    log
    health :8080
    ready :8181
    cache 5
    kubernetes ${CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {
        ttl 5
    }
}
`;

// CoreDNS's objects in kube-system, in the order they are created: its identity with no more rights
// than its kubernetes plugin uses (list and watch of Services, EndpointSlices and Namespaces), its
// Corefile, one replica pinned to this node (no scheduler needed) and the kube-dns Service at the
// address kubelet gives pods as their nameserver.
function coreDnsObjects(nodeName: string): [string, KubeObject & { metadata: { name: string } }][] {
  const ns = "/api/v1/namespaces/kube-system";
  const rbac = "/apis/rbac.authorization.k8s.io/v1";
  const labels = { "k8s-app": "kube-dns" };
  const role = "ocm-functions:coredns";
  return [
    [`${ns}/serviceaccounts`, { apiVersion: "v1", kind: "ServiceAccount", metadata: { name: "coredns", namespace: "kube-system" } }],
    [
      `${rbac}/clusterroles`,
      {
        apiVersion: "rbac.authorization.k8s.io/v1",
        kind: "ClusterRole",
        metadata: { name: role },
        rules: [
          { apiGroups: [""], resources: ["services", "namespaces"], verbs: ["list", "watch"] },
          { apiGroups: ["discovery.k8s.io"], resources: ["endpointslices"], verbs: ["list", "watch"] },
        ],
      },
    ],
    [
      `${rbac}/clusterrolebindings`,
      {
        apiVersion: "rbac.authorization.k8s.io/v1",
        kind: "ClusterRoleBinding",
        metadata: { name: role },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: role },
        subjects: [{ kind: "ServiceAccount", name: "coredns", namespace: "kube-system" }],
      },
    ],
    [`${ns}/configmaps`, { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "coredns", namespace: "kube-system" }, data: { Corefile: COREFILE } }],
    [
      "/apis/apps/v1/namespaces/kube-system/deployments",
      {
        apiVersion: "apps/v1",
        kind: "Deployment",
        metadata: { name: "coredns", namespace: "kube-system", labels },
        spec: {
          replicas: 1,
          selector: { matchLabels: labels },
          template: {
            metadata: { labels },
            spec: {
              nodeName,
              serviceAccountName: "coredns",
              dnsPolicy: "Default", // it is the cluster's DNS, so it must not ask itself
              tolerations: [{ key: "node.kubernetes.io/not-ready", operator: "Exists" }],
              containers: [
                {
                  name: "coredns",
                  image: COREDNS_IMAGE,
                  imagePullPolicy: "Never",
                  args: ["-conf", "/etc/coredns/Corefile"],
                  ports: [
                    { name: "dns", containerPort: 1053, protocol: "UDP" },
                    { name: "dns-tcp", containerPort: 1053, protocol: "TCP" },
                  ],
                  // Ready once the kubernetes plugin has listed the API; alive while health answers.
                  readinessProbe: { httpGet: { path: "/ready", port: 8181 }, periodSeconds: 1 },
                  livenessProbe: { httpGet: { path: "/health", port: 8080 }, periodSeconds: 10, failureThreshold: 5 },
                  securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ["ALL"] } },
                  volumeMounts: [{ name: "config", mountPath: "/etc/coredns", readOnly: true }],
                },
              ],
              volumes: [{ name: "config", configMap: { name: "coredns" } }],
            },
          },
        },
      },
    ],
    [
      `${ns}/services`,
      {
        apiVersion: "v1",
        kind: "Service",
        metadata: { name: "kube-dns", namespace: "kube-system", labels },
        spec: {
          clusterIP: CLUSTER_DNS_IP,
          selector: labels,
          ports: [
            { name: "dns", port: 53, targetPort: 1053, protocol: "UDP" },
            { name: "dns-tcp", port: 53, targetPort: 1053, protocol: "TCP" },
          ],
        },
      },
    ],
  ];
}

type EndpointSliceList = { items: { endpoints?: { addresses: string[]; conditions?: { ready?: boolean } }[] }[] };

// kube-proxy on the host, default/kubernetes routed to the node's forwarder, then CoreDNS; returns once
// kube-proxy's rules lead kube-dns to a Ready CoreDNS pod.
async function startServices(cluster: LocalCluster, s: NodeState, o: { runDir: string; binaries: NodeBinaries; importImage: (archive: string) => void; started: (m: Managed) => void }): Promise<void> {
  // system:kube-proxy is the user the API server's default system:node-proxier binding names.
  writeFileSync(join(s.root, "kube-proxy.kubeconfig"), await cluster.kubeconfigFor({ user: "system:kube-proxy" }), { mode: 0o600 });
  const healthzPort = await freePort();
  const config = kubeProxyConfig(s, { kubeconfig: join(s.root, "kube-proxy.kubeconfig"), healthzPort, metricsPort: await freePort() });
  writeFileSync(join(s.root, "kube-proxy.yaml"), JSON.stringify(config, null, 2));
  runOrExplain("ip", ["route", "add", "unreachable", SERVICE_CIDR]);
  const kubeProxy = startProcess(o.runDir, `${s.name}-kube-proxy`, o.binaries.kubeProxy, [`--config=${join(s.root, "kube-proxy.yaml")}`, "--v=1"]);
  o.started(kubeProxy);
  // healthz answers 200 once the first full sync has written the rules.
  await poll(`kube-proxy of ${s.name}`, () => healthOk(`http://127.0.0.1:${healthzPort}/healthz`), 60_000, exitedEarly(kubeProxy));

  const archive = join(s.root, "coredns.tar");
  writeStaticImages(archive, [{ reference: COREDNS_IMAGE, binary: o.binaries.coredns, path: "/coredns" }]);
  o.importImage(archive);
  const client = KubeClient.fromKubeconfig(cluster.adminKubeconfig);
  try {
    await createOrReplace(client, "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", kubernetesEndpointSlice(s));
    for (const [collection, obj] of coreDnsObjects(s.name)) await createOrReplace(client, collection, obj);
    let last = "no EndpointSlice for kube-dns yet";
    await poll(
      `cluster DNS on ${s.name}`,
      async () => {
        const slices = await client.request<EndpointSliceList>("GET", "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dkube-dns");
        const ready = slices.items.flatMap((sl) => sl.endpoints ?? []).filter((e) => e.conditions?.ready).flatMap((e) => e.addresses);
        if (!ready.length) return false;
        last = `CoreDNS Ready at ${ready.join(", ")}, not yet in kube-proxy's rules`;
        const rules = run("nft", ["list", "table", "ip", "kube-proxy"]);
        return ready.some((a) => new RegExp(`${a.replace(/\./g, "\\.")}(?!\\d)`).test(rules));
      },
      90_000,
      exitedEarly(kubeProxy),
    ).catch((err: Error) => {
      throw new Error(`${err.message}; ${last} (the cluster needs ${SERVICE_CONTROLLERS.join(", ")})\nkube-proxy log:\n${logTail(kubeProxy, 20)}`);
    });
  } finally {
    client.close();
  }
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

// Whether a loopback health endpoint answers 200: kube-scheduler's over TLS with the certificate it
// made itself, kube-proxy's in plain HTTP.
function healthOk(url: string): Promise<boolean> {
  return new Promise((resolve) => {
    const done = (res: IncomingMessage) => {
      res.resume();
      resolve(res.statusCode === 200);
    };
    const req = url.startsWith("https:") ? httpsRequest(url, { rejectUnauthorized: false, timeout: 2_000 }, done) : httpRequest(url, { timeout: 2_000 }, done);
    req.on("error", () => resolve(false));
    req.on("timeout", () => req.destroy());
    req.end();
  });
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
