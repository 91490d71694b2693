// Every request a function makes through an Io, as the API server answered it: the same real clients,
// each wrapped so its one way out (KubeClient.request) notes the method and path. A write is any
// request other than a GET that the API server accepted; a DELETE answered 404 changed nothing.
import type { Io } from "../../shared/harness.ts";
import type { KubeClient } from "../../shared/kube/client.ts";

export type Recorded = { method: string; path: string; ok: boolean };
// When each request was sent and answered, as steps of one counter: a request sent before another was
// answered ran beside it.
export type Timed = Recorded & { sent: number; answered: number };

export function recordingRequests<C>(io: Io<C>): { io: Io<C>; requests: Recorded[]; timeline: Timed[]; writes(): string[] } {
  const requests: Recorded[] = [];
  const timeline: Timed[] = [];
  let step = 0;
  const wrapped = new Map<string, KubeClient>();
  const cluster = (name: string): KubeClient => {
    let client = wrapped.get(name);
    if (!client) {
      const real = io.cluster(name);
      const recording = Object.create(real) as KubeClient;
      recording.request = async function <T>(this: KubeClient, method: string, path: string, ...rest: [unknown?, string?]): Promise<T> {
        const sent = step++;
        const note = (ok: boolean) => {
          requests.push({ method, path, ok });
          timeline.push({ method, path, ok, sent, answered: step++ });
        };
        try {
          const answer = await real.request.call<KubeClient, [string, string, unknown?, string?], Promise<T>>(this, method, path, ...rest);
          note(true);
          return answer;
        } catch (err) {
          note(false);
          throw err;
        }
      };
      wrapped.set(name, (client = recording));
    }
    return client;
  };
  return { io: { ...io, cluster }, requests, timeline, writes: () => requests.filter((r) => r.ok && r.method !== "GET").map((r) => `${r.method} ${r.path}`) };
}
