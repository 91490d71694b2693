// A real Kubernetes node on this machine, joined to a LocalCluster: Debian's containerd and runc run
// the pods, our own kubelet (built by scripts/build-tools.sh from the same Go module as the API server)
// registers the node and drives them, and CNI's bridge plugin gives each pod an address on a bridge of
// the node's own. No image is ever pulled: the sandbox image is our own pause program, and every other
// image is imported from a local archive (pods use imagePullPolicy: Never). Needs root. The cluster's
// API server must authorize nodes (--authorization-mode=Node); startScheduler adds kube-scheduler to a
// cluster, and apiserverProxy lets pods reach the API server without kube-proxy.
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
//   network      bridge ocmf-<id> with 10.78.<k>.1/24; pods get no default route and no masquerading,
//                so their traffic cannot leave the machine; kubelet makes no iptables chains
//                (makeIPTablesUtilChains: false) and the CNI chain has no portmap or firewall plugin
//   sysctls      kubelet sets vm.overcommit_memory, kernel.panic, kernel.panic_on_oops and the bridge
//                plugin net.ipv4.ip_forward; the values from before are restored
//   processes    containerd and kubelet (also in the cluster harness's pid files, so its guard kills
//                them), containerd-shim-runc-v2 per pod, the containers (found through their cgroups)
// Caveats for two nodes at once on one machine: they share the sysctls, so the second records the
// first's changes, and kubelet's device-plugin socket path, which neither needs.
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync, rmdirSync, lstatSync, writeFileSync } from "node:fs";
import { connect, createServer, type Socket } from "node:net";
import { request as httpsRequest } from "node:https";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import { freePort, type LocalCluster } from "./clusters.ts";
import { logTail, startProcess, stopProcess, type Managed } from "./processes.ts";
import { writeStaticImages } from "../build/static-image.ts";
import { KubeClient } from "../../shared/kube/client.ts";
import { NodeResource } from "../../shared/api/kube.ts";
import type { KubeObject } from "../../shared/kube/client.ts";

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const CNI_BIN = "/usr/lib/cni"; // containernetworking-plugins' directory on Debian

export const PAUSE_IMAGE = "dev.local/ocm-functions/pause:local";
// What a test names the image of binaries.probe when it imports it.
export const PROBE_IMAGE = "dev.local/ocm-functions/probe:local";

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
};

export type NodeBinaries = { kubelet: string; scheduler: string; pause: string; probe: string };

export type NodeOptions = {
  name?: string;
  // Which 10.78.<subnet>.0/24 the node's bridge gets (default: the first free one). A test picks it
  // first with freeNodeSubnet() when the API server's certificate must name the node's address.
  subnet?: number;
  // Pods reach the API server at <node address>:443, forwarded by this process to the API server on
  // loopback (which pods cannot reach), in place of the kubernetes Service and kube-proxy. TLS passes
  // through: the certificate must name the node's address (StartOptions.servingHosts).
  apiserverProxy?: boolean;
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
  readyMs: number;
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

// scripts/build-tools.sh builds them once (kubelet and kube-scheduler from tools/kube, pause and probe
// from tools/pause) and then only names them.
export function findNodeBinaries(): NodeBinaries {
  const out = execFileSync(join(repoRoot, "scripts", "build-tools.sh"), ["node"], { stdio: ["ignore", "pipe", "inherit"] }).toString().trim().split("\n");
  const [scheduler, pause, probe, kubelet] = out.slice(-4) as [string, string, string, string];
  for (const b of [scheduler, pause, probe, kubelet]) if (!existsSync(b)) throw new Error(`${b} is missing after scripts/build-tools.sh node`);
  return { kubelet, scheduler, pause, probe };
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
export function nodeProcesses(s: { root: string; socket: string }): { pid: number; kind: "kubelet" | "containerd" | "shim" }[] {
  const found: { pid: number; kind: "kubelet" | "containerd" | "shim" }[] = [];
  for (const e of readdirSync("/proc")) {
    if (!/^\d+$/.test(e)) continue;
    const pid = Number(e);
    const args = cmdline(pid);
    if (args.includes(`--root-dir=${join(s.root, "kubelet")}`)) found.push({ pid, kind: "kubelet" });
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
  await step("stop kubelet", async () => {
    const left = await killAndWait(ofKind("kubelet"), "SIGTERM", 5_000);
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
// no masquerading, so a pod reaches this machine's bridge address and other pods, nothing beyond.
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
        hairpinMode: false,
        ipam: { type: "host-local", ranges: [[{ subnet: s.subnet, gateway: s.address }]], dataDir: join(s.root, "cni", "ipam") },
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
  };
  mkdirSync(root, { mode: 0o700 });
  writeFileSync(join(root, "node.json"), JSON.stringify(s, null, 2));
  startNodeGuard(root);
  // The harness's run dir: its guard kills containerd and kubelet by pid if this process is killed.
  const runDir = dirname(cluster.dir);
  const podLogsDir = join(root, "pod-logs");
  let containerd: Managed | undefined;
  let kubelet: Managed | undefined;
  let proxy: Proxy | undefined;
  const stop = async () => {
    proxy?.close();
    if (kubelet) await stopProcess(kubelet);
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
    if (o.apiserverProxy) proxy = await startApiserverProxy(s.address, Number(new URL(cluster.url).port));

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
  } catch (err) {
    await stop().catch((e: Error) => log(`[node] ${name}: cleanup after a failed start: ${e.message}`));
    throw err;
  }
  const readyMs = Date.now() - t0;
  log(`[node] ${name} Ready in ${(readyMs / 1000).toFixed(1)} s (bridge ${s.bridge} ${s.subnet}, root ${root})`);
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
    readyMs,
    importImage,
    images,
    stop,
  };
}

function httpsOk(url: string): Promise<boolean> {
  return new Promise((resolve) => {
    // A loopback health endpoint with the certificate the process made itself.
    const req = httpsRequest(url, { rejectUnauthorized: false, timeout: 2_000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
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
    await poll(`kube-scheduler of ${cluster.name}`, () => httpsOk(`https://127.0.0.1:${port}/healthz`), 60_000, exitedEarly(p));
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
