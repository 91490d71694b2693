// The harness's one wait for what a started process makes ready (dev/control-plane/processes.ts), used
// by the control plane's start and the node's with their own delays.
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { exitedEarly, poller, startProcess } from "../dev/control-plane/processes.ts";

const poll = poller({ firstMs: 5, maxMs: 20 });
const runDir = mkdtempSync(join(tmpdir(), "ocmf-poller-"));
mkdirSync(join(runDir, "pids"));
afterAll(() => rmSync(runDir, { recursive: true, force: true }));

describe("poller", () => {
  it("returns once the check holds, after the looks it took", async () => {
    let looks = 0;
    await poll("three looks", () => ++looks === 3, 5_000);
    expect(looks).toBe(3);
  });

  it("times out naming what it waited for and the last error the check threw", async () => {
    let n = 0;
    const failure = await poll("the thing", () => Promise.reject(new Error(`refused ${++n}`)), 50).catch((err: Error) => err);
    expect(n).toBeGreaterThan(1);
    expect((failure as Error).message).toBe(`the thing: not ready after 50 ms (last error: refused ${n})`);
  });

  it("ends at once with the reason `failed` names: a process that exited, with its code and the tail of its log", async () => {
    const p = startProcess(runDir, "quitter", "/bin/sh", ["-c", "echo going away; exit 3"]);
    await p.exited;
    let looks = 0;
    await expect(poll("the quitter", () => (looks++, false), 60_000, exitedEarly(p))).rejects.toThrow("the quitter: exited with 3:\ngoing away");
    // after its first look, not at the timeout
    expect(looks).toBe(1);
  });

  it("names the signal of a process that was killed", async () => {
    const p = startProcess(runDir, "killed", "/bin/sh", ["-c", "sleep 30"]);
    p.child.kill("SIGKILL");
    await p.exited;
    expect(exitedEarly(p)()).toMatch(/^exited with SIGKILL:/);
  });
});
