// The host side of a node (see dev/control-plane/node.ts): what it changes on this machine, recorded
// in <root>/node.json, and cleanupNode, which undoes all of it from that file; with the commands and
// waits the node's start-up shares.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync, rmdirSync, lstatSync, writeFileSync } from "node:fs";
import { request as httpsRequest } from "node:https";
import { request as httpRequest, type IncomingMessage } from "node:http";
import { join } from "node:path";
import { poller } from "./processes.ts";
import { SERVICE_CIDR } from "./node-network.ts";

// kube-proxy's nftables mode keeps all its rules in one table of this name per family.
const KUBE_PROXY_TABLES = ["ip kube-proxy", "ip6 kube-proxy"] as const;

// Settings kubelet or the bridge plugin may change; each is put back as it was.
export const SYSCTLS = [
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
export type NodeState = {
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

export const run = (cmd: string, args: readonly string[]): string =>
  execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], maxBuffer: 16 << 20 });

// The error of a failed command with what it wrote, not just "Command failed".
export function runOrExplain(cmd: string, args: readonly string[]): string {
  try {
    return run(cmd, args);
  } catch (err) {
    const e = err as { stderr?: string; stdout?: string; message: string };
    throw new Error(`${cmd} ${args.join(" ")}: ${(e.stderr || e.stdout || e.message).trim()}`);
  }
}

// A node's parts (containerd, kubelet, kube-proxy, DNS) start in seconds to tens of them, and some
// checks run a command: looked at less often than a control plane's.
export const poll = poller({ firstMs: 50, maxMs: 500 });

// Whether a loopback health endpoint answers 200: kube-scheduler's over TLS with the certificate it
// made itself, kube-proxy's in plain HTTP.
export function healthOk(url: string): Promise<boolean> {
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

export const readSysctl = (key: string): string => readFileSync(`/proc/sys/${key}`, "utf8").trim();

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
export function createCgroupRoot(cgroup: string): void {
  for (const m of cgroupMounts().filter((x) => x.v1)) {
    const dir = join(m.path, cgroup);
    mkdirSync(dir, { recursive: true });
    for (const f of ["cpuset.cpus", "cpuset.mems"]) {
      if (existsSync(join(m.path, f))) writeFileSync(join(dir, f), readFileSync(join(m.path, f), "utf8"));
    }
  }
}

// Every cgroup directory of the node, children before parents, in every hierarchy. One that goes while
// the tree is walked (a container's, as its last process exits) is left out: there is nothing in it.
export function nodeCgroups(cgroup: string): string[] {
  const out: string[] = [];
  const visit = (dir: string) => {
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
      throw err;
    }
    for (const e of entries) if (e.isDirectory()) visit(join(dir, e.name));
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

const linkExists = (name: string): boolean => {
  const links = run("ip", ["-o", "link", "show"]);
  return links.includes(` ${name}:`) || links.includes(` ${name}@`);
};

// Deletes a link; one that is gone by the time the delete runs (its veth peer went first, its pod's
// network namespace closed) is what was asked for, not a failure.
function deleteLink(name: string): void {
  try {
    run("ip", ["link", "del", name]);
  } catch (err) {
    if (linkExists(name)) throw err;
  }
}

// The veths of the node's pods vanish with their network namespaces, any time, also between the list
// of the bridge's ports and their deletion; any left on the bridge go first.
export function deleteBridge(bridge: string): void {
  if (!linkExists(bridge)) return;
  for (const line of run("ip", ["-o", "link", "show", "master", bridge]).split("\n")) {
    const port = /^\d+:\s+([^:@]+)/.exec(line)?.[1];
    if (port) deleteLink(port);
  }
  deleteLink(bridge);
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
export function checkServiceRoutingFree(): void {
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
