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

// A wait for what a started process makes ready: `check` again and again, each delay half as long again
// as the last, from firstMs up to maxMs, until it holds. It ends at once with `failed`'s reason when that
// names one (the process exited), and after timeoutMs naming the last error `check` threw.
export function poller({ firstMs, maxMs }: { firstMs: number; maxMs: number }) {
  return async (what: string, check: () => Promise<boolean> | boolean, timeoutMs: number, failed?: () => string | undefined): Promise<void> => {
    const deadline = Date.now() + timeoutMs;
    let last: unknown;
    for (let delay = firstMs; ; delay = Math.min(delay * 1.5, maxMs)) {
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
  };
}

// For a wait's `failed`: once the process has exited, its exit code or signal and the tail of its log.
export const exitedEarly = (m: Managed) => () =>
  m.child.exitCode !== null || m.child.signalCode !== null ? `exited with ${m.child.exitCode ?? m.child.signalCode}:\n${logTail(m, 40)}` : undefined;
