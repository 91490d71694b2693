// What a status step is given and returns. Its own module, so the steps, which reconcile.ts runs, do not
// import reconcile.ts back.
import type { ManagedCluster } from "../../shared/api/cluster.ts";
import type { Io } from "../../shared/harness.ts";
import type { KubeClient } from "../../shared/kube/client.ts";
import type { EventType } from "../../shared/kube/event-recorder.ts";
import type { Config } from "./config.ts";

export type Status = NonNullable<ManagedCluster["status"]>;
// An event for the hub, recorded in namespace <cluster> about the ManagedCluster once the status is settled.
export type Notice = { type: EventType; reason: string; message: string };
// spoke: the management cluster (the agent's records); managed: the cluster reported on (the same but Hosted).
export type StepContext = { now: Date; hub: KubeClient; spoke: KubeClient; managed: KubeClient; io: Io<Config>; notices: Notice[]; settings: StatusSettings; cluster: ManagedCluster };

// What this function runs with: the active agent settings over its install-time configuration.
// statusSyncIntervalMs absent: no recheck of its own, the resync ticks alone bring it back.
export type StatusSettings = { hash: string; maxCustomClusterClaims: number; statusSyncIntervalMs?: number };

// stopAndRecheckInMs ends the chain: the step could not decide yet and wants to be called again that
// soon. continueAndRecheckInMs lets the later steps run and asks the same: the step decided what it
// could, and what it waits for may come by then without an event of its own.
export type StepResult = "continue" | "stop" | { stopAndRecheckInMs: number } | { continueAndRecheckInMs: number };
export type Step = (draft: Status, ctx: StepContext) => StepResult | Promise<StepResult>;
