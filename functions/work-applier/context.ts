// What one reconcile of a work carries through its steps.
import type { Io } from "../../shared/harness.ts";
import type { KubeClient, KubeObject } from "../../shared/kube/client.ts";
import type { AppliedManifestWork, ManifestWork } from "../../shared/api/work.ts";
import type { Config } from "./config.ts";

export type Work = ManifestWork & KubeObject;
export type Applied = AppliedManifestWork & KubeObject;
export type Ctx = { io: Io<Config>; hub: KubeClient; spoke: KubeClient; now: Date; hubHash: string };
