// Child processes of the control-plane harness: started with their output in log files, and always
// ended, by stop(), by this process's exit, or (if this process is killed outright) by a guard.
import { spawn, type ChildProcess } from "node:child_process";
import { openSync, closeSync, writeFileSync, rmSync, readFileSync, existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";

export type Managed = { name: string; child: ChildProcess; logFile: string; exited: Promise<number | null> };

// The guard outlives a SIGKILLed parent: it polls the parent's pid, then kills every process whose
// pid file is in the run directory and removes that directory.
const GUARD = `
parent=$1; dir=$2
while kill -0 "$parent" 2>/dev/null && [ -d "$dir" ]; do sleep 1; done
for f in "$dir"/pids/*; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
rm -rf "$dir"
`;

const live = new Set<Managed>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // Synchronous last resort when the process exits without stop() (a crash, process.exit).
  process.on("exit", () => {
    for (const m of live) m.child.kill("SIGKILL");
  });
}

export function startGuard(runDir: string): void {
  mkdirSync(join(runDir, "pids"), { recursive: true });
  spawn("sh", ["-c", GUARD, "guard", String(process.pid), runDir], { detached: true, stdio: "ignore" }).unref();
}

export function startProcess(runDir: string, name: string, binary: string, args: string[], env?: Readonly<Record<string, string>>): Managed {
  installExitHook();
  const logFile = join(runDir, `${name}.log`);
  const fd = openSync(logFile, "a");
  // detached: its own process group, so a Ctrl-C in the terminal reaches us, and we stop it in order.
  const child = spawn(binary, args, { stdio: ["ignore", fd, fd], detached: true, env: env ? { ...process.env, ...env } : process.env });
  closeSync(fd);
  const pidFile = join(runDir, "pids", name);
  if (child.pid) writeFileSync(pidFile, String(child.pid));
  const exited = new Promise<number | null>((resolve) => {
    child.on("exit", (code) => {
      rmSync(pidFile, { force: true });
      resolve(code);
    });
    child.on("error", () => resolve(null));
  });
  const managed = { name, child, logFile, exited };
  live.add(managed);
  void exited.then(() => live.delete(managed));
  return managed;
}

export async function stopProcess(m: Managed, graceMs = 5_000): Promise<void> {
  if (m.child.exitCode !== null || m.child.signalCode !== null) return;
  m.child.kill("SIGTERM");
  const timer = setTimeout(() => m.child.kill("SIGKILL"), graceMs);
  await m.exited;
  clearTimeout(timer);
}

export function logTail(m: Managed, lines = 30): string {
  if (!existsSync(m.logFile)) return "";
  return readFileSync(m.logFile, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
}
