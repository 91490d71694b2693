// When an install is ready (`--wait`): the criteria per level, the judgement of one object, and the
// wait itself with a progress line whenever the count changes.
//   none  return once everything is applied
//   crds  CRDs are Established and served before the rest is applied (the least a later apply needs)
//   all   crds, then every Knative object Ready and every Deployment Available, as their controllers
//         report in status (observedGeneration caught up): what a cluster running Knative reaches
import type { Manifest } from "./render/index.ts";
import type { KubeClient, KubeObject } from "../shared/kube/client.ts";
import { Discovery, typeName } from "./discovery.ts";
import { rankOf } from "./apply.ts";
import { again } from "./transient.ts";
import { sleep } from "../shared/timers.ts";

export type WaitLevel = "none" | "crds" | "all";

// The condition each kind's controller sets when the object works, by API group and kind.
const readyCondition: Readonly<Record<string, string>> = {
  "serving.knative.dev Service": "Ready",
  "eventing.knative.dev Broker": "Ready",
  "eventing.knative.dev Trigger": "Ready",
  "sources.knative.dev ApiServerSource": "Ready",
  "sources.knative.dev PingSource": "Ready",
  "sources.knative.dev ContainerSource": "Ready",
  "apps Deployment": "Available",
};
const groupOf = (apiVersion: string) => (apiVersion.includes("/") ? apiVersion.split("/")[0]! : "");
export const conditionFor = (o: { apiVersion: string; kind: string }) => readyCondition[`${groupOf(o.apiVersion)} ${o.kind}`];

type Condition = { type: string; status: string; reason?: string; message?: string };
type Observed = KubeObject & { metadata: { generation?: number }; status?: { observedGeneration?: number; conditions?: Condition[] } };

// undefined when the object is ready, else why not, in a few words.
export function notReadyBecause(obj: Observed | undefined, condition: string): string | undefined {
  if (!obj) return "not found";
  if (!obj.status || Object.keys(obj.status).length === 0) return "no status yet (is its controller running?)";
  if ((obj.status.observedGeneration ?? 0) < (obj.metadata.generation ?? 0)) return "its controller has not seen the latest generation yet";
  const c = obj.status.conditions?.find((x) => x.type === condition);
  if (!c) return `no ${condition} condition yet`;
  if (c.status === "True") return undefined;
  return `${condition}=${c.status}${c.reason ? ` ${c.reason}` : ""}${c.message ? `: ${c.message}` : ""}`;
}

export async function waitUntilReady(client: KubeClient, objects: readonly Manifest[], o: { deadline: number; timeoutText: string; print: (line: string) => void }): Promise<void> {
  const watched = objects.filter((x) => conditionFor(x)).sort((a, b) => rankOf(a) - rankOf(b));
  if (!watched.length) return;
  const discovery = new Discovery(client);
  const kinds = [...new Set(watched.map((x) => x.kind))];
  let last = "";
  for (let delay = 500; ; delay = Math.min(delay * 1.5, 3_000)) {
    const judged = await Promise.all(
      watched.map(async (x) => {
        const r = await discovery.resourceOf(x);
        const got = await again(() => client.get<Observed>(r, x.metadata.name, x.metadata.namespace));
        return { x, why: notReadyBecause(got, conditionFor(x)!) };
      }),
    );
    const pending = judged.filter((j) => j.why !== undefined);
    const line = `waiting (--wait all): ${kinds
      .map((k) => {
        const all = judged.filter((j) => j.x.kind === k);
        return `${k} ${all.length - all.filter((j) => j.why).length}/${all.length} ${conditionFor(all[0]!.x)}`;
      })
      .join(", ")}`;
    if (line !== last) o.print(line);
    last = line;
    if (!pending.length) return;
    if (Date.now() > o.deadline) {
      const named = pending.slice(0, 3).map(({ x, why }) => `${typeName(x)} ${x.metadata.namespace ? `${x.metadata.namespace}/` : ""}${x.metadata.name} (${why})`);
      throw new Error(`not ready after ${o.timeoutText}: ${named.join("; ")}${pending.length > 3 ? ` and ${pending.length - 3} more` : ""}`);
    }
    await sleep(delay);
  }
}
