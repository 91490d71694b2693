// Every function's definition (shared/sdk.ts), by name: what cli/render and local mode derive each
// function's subscriptions, event sources and watch RBAC from.
import type { MultiClusterFunction } from "../../shared/sdk.ts";
import { fn as addonClusterLabel } from "../../functions/addon-cluster-label/reconcile.ts";
import { fn as addonCsrApprover } from "../../functions/addon-csr-approver/reconcile.ts";
import { fn as addonHealth } from "../../functions/addon-health/reconcile.ts";
import { fn as addonInstaller } from "../../functions/addon-installer/reconcile.ts";
import { fn as addonManager } from "../../functions/addon-manager/reconcile.ts";
import { fn as addonRegistration } from "../../functions/addon-registration/reconcile.ts";
import { fn as agentConfig } from "../../functions/agent-config/reconcile.ts";
import { fn as agentConfigRollout } from "../../functions/agent-config-rollout/reconcile.ts";
import { fn as clusterAcceptor } from "../../functions/cluster-acceptor/reconcile.ts";
import { fn as clusterLeaseMonitor } from "../../functions/cluster-lease-monitor/reconcile.ts";
import { fn as clusterSets } from "../../functions/cluster-sets/reconcile.ts";
import { fn as clusterTaints } from "../../functions/cluster-taints/reconcile.ts";
import { fn as csrApprover } from "../../functions/csr-approver/reconcile.ts";
import { fn as placementScheduler } from "../../functions/placement-scheduler/reconcile.ts";
import { fn as spokeClusterStatus } from "../../functions/spoke-cluster-status/reconcile.ts";
import { fn as spokeRegistration } from "../../functions/spoke-registration/reconcile.ts";
import { fn as workApplier } from "../../functions/work-applier/reconcile.ts";

// Each definition has a config type of its own; callers get the config from its configFromEnv.
type AnyFunction = MultiClusterFunction<any>;

const all: readonly AnyFunction[] = [
  addonClusterLabel,
  addonCsrApprover,
  addonHealth,
  addonInstaller,
  addonManager,
  addonRegistration,
  agentConfig,
  agentConfigRollout,
  clusterAcceptor,
  clusterLeaseMonitor,
  clusterSets,
  clusterTaints,
  csrApprover,
  placementScheduler,
  spokeClusterStatus,
  spokeRegistration,
  workApplier,
];
export const definitions: ReadonlyMap<string, AnyFunction> = new Map(all.map((f) => [f.definition.name, f]));

export function definitionOf(name: string): AnyFunction {
  const fn = definitions.get(name);
  if (!fn) throw new Error(`functions/${name} has no definition in cli/render/definitions.ts`);
  return fn;
}

// A function's watches with its settings as a deployment gives them (its container's env).
export function watchesOf(name: string, env: readonly { name: string; value: string }[]) {
  const fn = definitionOf(name);
  const config = fn.configFromEnv(Object.fromEntries(env.map((e) => [e.name, e.value])));
  return { fn, config, watches: fn.definition.watches(config) };
}
