// A function written with defineFunction (shared/sdk.ts), run locally as it runs deployed: its
// CloudEvents server (shared/cloudevents-server.ts, as its bundle runs it), and a relay whose sources are the definition's watches, on every cluster they
// name, delivering straight to it (so rechecks are honoured) with resync ticks at its period.
import { startRelay, type Relay } from "../../components/relay/relay.ts";
import type { RelayConfigInput } from "../../components/relay/config.ts";
import type { Clock } from "../../shared/clock.ts";
import { systemClock } from "../../shared/clock.ts";
import { jsonLog, type Io, type Log } from "../../shared/harness.ts";
import { clientsFromKubeconfigs } from "../../shared/kube/clients.ts";
import type { MultiClusterFunction } from "../../shared/sdk.ts";
import { startFunction, type FunctionServer } from "./functions.ts";

export type RunOptions<C> = {
  config: C;
  // the function's identity on each cluster it touches; the relay watches with the same one unless
  // `watchKubeconfigs` gives it its own
  kubeconfigs: Readonly<Record<string, string>>;
  watchKubeconfigs?: Readonly<Record<string, string>>;
  clock?: Clock;
  log?: Log;
};

export type RunningFunction = { server: FunctionServer; relay: Relay; io: Io<unknown>; stop(): Promise<void> };

// The relay's configuration a definition asks for: a source per watch, the function as the one sink.
export function relayConfigFor<C>(fn: MultiClusterFunction<C>, config: C, kubeconfigs: Readonly<Record<string, string>>, sinkUrl: string): RelayConfigInput {
  const watches = fn.definition.watches(config);
  const clusters = Object.fromEntries([...new Set(watches.map((w) => w.cluster))].map((c) => {
    const kubeconfig = kubeconfigs[c];
    if (!kubeconfig) throw new Error(`${fn.definition.name} watches cluster ${c}, and no kubeconfig is given for it`);
    return [c, { kubeconfig }];
  }));
  return {
    clusters,
    sources: watches.map((w) => ({
      cluster: w.cluster,
      resource: { ...w.resource },
      // "Either": the cheaper Reference mode, whose events carry no object
      mode: w.mode === "Either" ? "Reference" : (w.mode ?? "Resource"),
      ...(w.namespace ? { namespace: w.namespace } : {}),
      ...(w.labelSelector ? { labelSelector: w.labelSelector } : {}),
      ...(w.fieldSelector ? { fieldSelector: w.fieldSelector } : {}),
    })),
    // the subscriptions' filters too: the relay delivers only what a Broker's Triggers would
    // and the observed state the watches ask for (shared/observed.ts)
    sinks: [{ name: fn.definition.name, url: sinkUrl, filters: fn.subscriptions(config).map((s) => s.filters), state: fn.state(config) }],
    resync: { intervalMs: fn.ticks ? (fn.definition.resyncSeconds || 60) * 1000 : 0 },
  };
}

export async function runFunction<C>(fn: MultiClusterFunction<C>, o: RunOptions<C>): Promise<RunningFunction> {
  const log = o.log ?? jsonLog(fn.definition.name);
  const io: Io<C> = { clock: o.clock ?? systemClock, log, config: o.config, cluster: clientsFromKubeconfigs(o.kubeconfigs) };
  const server = await startFunction(fn.spec, io);
  const relay = startRelay({ ...relayConfigFor(fn, o.config, o.watchKubeconfigs ?? o.kubeconfigs, server.url), log: jsonLog(`${fn.definition.name}-relay`, "quiet") });
  const stop = async () => {
    await relay.stop();
    await server.close();
  };
  return { server, relay, io: io as Io<unknown>, stop };
}
