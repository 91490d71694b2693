import { readFileSync } from "node:fs";
// Summary statistics for benchmark samples.
export function percentile(samples: readonly number[], p: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

export const ms = (n: number) => `${n.toFixed(0)} ms`;
export const mib = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(0)} MiB`;

// Resident memory of a process from /proc (Linux), in bytes.
export async function rssOf(pid: number): Promise<number> {
  const { readFile } = await import("node:fs/promises");
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  const kb = Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? 0);
  return kb * 1024;
}

// A process's resident and private (anonymous) memory from /proc/PID/status, in bytes.
export function memoryOf(pid: number): { rss: number; anon: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? 0) * 1024;
  return { rss: kb("VmRSS"), anon: kb("RssAnon") };
}

// /proc/PID/stat after the command's closing parenthesis: state is [0], utime [11], stime [12], starttime [19].
export function statFields(pid: number): string[] {
  const text = readFileSync(`/proc/${pid}/stat`, "utf8");
  return text.slice(text.lastIndexOf(") ") + 2).split(" ");
}

const CLK_TCK = 100; // Linux's USER_HZ: /proc times are in 1/100 s

// CPU time (user + system) a process has used, in ms.
export function cpuMsOf(pid: number): number {
  const f = statFields(pid);
  return ((Number(f[11]) + Number(f[12])) * 1000) / CLK_TCK;
}

// How long ago (ms) the process started.
export const startedAgoMs = (pid: number) => Number(readFileSync("/proc/uptime", "utf8").split(" ")[0]) * 1000 - (Number(statFields(pid)[19]) * 1000) / CLK_TCK;
