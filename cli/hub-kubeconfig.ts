// Which kubeconfig names the hub (or the spoke a command acts on), chosen as kubectl chooses:
// --kubeconfig, else KUBECONFIG (a list joined by ":"; files that do not exist are skipped, the first
// that does is used), else the hub of a running `npm start` (.local/hub.kubeconfig in this checkout).
import { existsSync } from "node:fs";
import { delimiter, dirname, join } from "node:path";

// The `.local/` folder `npm start` writes, in the checkout this program lives in (cli/ when run from
// source, dist/cli/ when bundled): the nearest folder above it with a package.json.
export function localDir(from: string = import.meta.dirname): string | undefined {
  for (let dir = from; ; dir = dirname(dir)) {
    if (existsSync(join(dir, "package.json"))) return join(dir, ".local");
    if (dirname(dir) === dir) return undefined;
  }
}

export function hubKubeconfig(o: { flag?: string; env: NodeJS.ProcessEnv; local?: string; role?: "hub" | "spoke" }): string {
  if (o.flag) return o.flag;
  if (o.env.KUBECONFIG) {
    const files = o.env.KUBECONFIG.split(delimiter).filter(Boolean);
    const first = files.find((f) => existsSync(f));
    if (!first) throw new Error(`KUBECONFIG names no file that exists: ${o.env.KUBECONFIG}`);
    return first;
  }
  const local = o.local && join(o.local, "hub.kubeconfig");
  if (local && existsSync(local)) return local;
  if (o.role === "spoke") throw new Error("no spoke kubeconfig: pass --kubeconfig or set KUBECONFIG");
  throw new Error("no hub kubeconfig: pass --kubeconfig, set KUBECONFIG, or start the local hub with npm start");
}
