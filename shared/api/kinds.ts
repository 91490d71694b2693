// Every kind this project addresses, found by apiVersion and kind (for applying manifest files).
import type { ApiResource } from "./meta.ts";
import * as kube from "./kube.ts";
import * as cluster from "./cluster.ts";
import * as addon from "./addon.ts";
import * as work from "./work.ts";
import * as agentConfig from "./agent-config.ts";
import * as inventory from "./inventory.ts";
import * as authentication from "./authentication.ts";

const all: ApiResource[] = [kube, cluster, addon, work, agentConfig, inventory, authentication].flatMap((m) =>
  Object.entries(m)
    .filter(([name]) => name.endsWith("Resource"))
    .map(([, r]) => r as ApiResource),
);

export function resourceOfKind(apiVersion: string, kind: string): ApiResource {
  const r = all.find((x) => (x.group ? `${x.group}/${x.version}` : x.version) === apiVersion && x.kind === kind);
  if (!r) throw new Error(`unknown kind ${kind} in ${apiVersion}`);
  return r;
}
