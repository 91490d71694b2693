// The node's clean-up deletes its bridge and whatever is left on it (dev/control-plane/node-host.ts).
// The ports are listed, then deleted one by one; a port can vanish in between (a pod's network
// namespace closing, or a veth whose peer was deleted first), which once left the bridge behind.
// Real links on this machine, as the node uses them: needs root, as npm test does (README).
import { describe, it, expect, afterEach } from "vitest";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { deleteBridge } from "../dev/control-plane/node-host.ts";

const ip = (...args: string[]) => execFileSync("ip", args, { encoding: "utf8" });
const links = () => ip("-o", "link", "show");
const exists = (name: string) => links().includes(` ${name}:`) || links().includes(` ${name}@`);
const made: string[] = [];

afterEach(() => {
  // whatever a failing run left: this test changes nothing on the machine it does not undo
  for (const name of made.splice(0)) if (exists(name)) ip("link", "del", name);
});

describe("deleteBridge", () => {
  it("removes a bridge whose second listed port is gone before its turn (both ends of one veth on it: deleting the first takes the peer)", () => {
    const id = randomBytes(3).toString("hex");
    const [bridge, a, b] = [`ocmftbr${id}`, `ocmfta${id}`, `ocmftb${id}`];
    made.push(a, bridge);
    ip("link", "add", bridge, "type", "bridge");
    ip("link", "add", a, "type", "veth", "peer", "name", b);
    ip("link", "set", a, "master", bridge);
    ip("link", "set", b, "master", bridge);
    expect(ip("-o", "link", "show", "master", bridge).split("\n").filter(Boolean)).toHaveLength(2);

    deleteBridge(bridge);

    expect(exists(bridge)).toBe(false);
    expect(exists(a)).toBe(false);
    expect(exists(b)).toBe(false);
  });

  it("does nothing for a bridge that is not there", () => {
    const bridge = `ocmftbr${randomBytes(3).toString("hex")}`;
    expect(() => deleteBridge(bridge)).not.toThrow();
    expect(exists(bridge)).toBe(false);
  });
});
