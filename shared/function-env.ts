// What a deployed function runs with, read once from its environment (func.yaml run.envs) when its
// module loads: its settings, checked there so that a misconfigured pod fails at start instead of
// answering every event with 500; clients from OCM_KUBECONFIG_DIR or the pod's identity; the system
// clock; JSON logs on stderr.
import { statSync } from "node:fs";
import { z } from "zod";
import { systemClock } from "./clock.ts";
import { jsonLog, type Io } from "./harness.ts";
import { clientsFromEnv } from "./kube/clients.ts";

// The variable behind each setting that a value can make invalid, so a bad one is reported under the
// name the operator set. Settings read with a fallback (OCM_CLUSTER_NAME || "hub") cannot be.
const variableOf: Readonly<Record<string, string>> = {
  autoApprovalUsers: "OCM_CLUSTER_AUTO_APPROVAL_USERS",
  clusterName: "SPOKE_CLUSTER_NAME",
  leaseGraceMultiplier: "OCM_LEASE_GRACE_MULTIPLIER",
  externalServerUrls: "SPOKE_EXTERNAL_SERVER_URLS",
  clusterAnnotations: "CLUSTER_ANNOTATIONS",
  clientCertExpirationSeconds: "CLIENT_CERT_EXPIRATION_SECONDS",
  leaseDurationSeconds: "ADDON_LEASE_DURATION_SECONDS",
  manifestLimitBytes: "WORK_MANIFEST_LIMIT_BYTES",
  maxJsonRawLength: "MAX_JSON_RAW_LENGTH",
  statusSyncIntervalMs: "STATUS_SYNC_INTERVAL_SECONDS",
  maxCustomClusterClaims: "MAX_CUSTOM_CLUSTER_CLAIMS",
  allow: "OCM_AGENT_CONFIG_ALLOW",
  defaultTrialSeconds: "OCM_AGENT_CONFIG_TRIAL_SECONDS",
  installTime: "OCM_AGENT_CONFIG_INSTALL_TIME",
  // where one field name means different variables in different functions: <function>.<field>
  "spoke-registration.leaseDurationSeconds": "CLUSTER_LEASE_DURATION_SECONDS",
};

// A setting the process cannot run with; the message is one line that names the variable.
export class ConfigError extends Error {
  override name = "ConfigError";
}

export function configError(fn: string, variable: string, value: string | undefined, problem: string): ConfigError {
  return new ConfigError(`${fn}: invalid configuration: ${variable}${value === undefined ? " (unset)" : `=${JSON.stringify(value)}`}: ${problem}`);
}

export function ioFromEnv<C>(fn: string, configFromEnv: (env: NodeJS.ProcessEnv) => C, env: NodeJS.ProcessEnv = process.env): Io<C> {
  let config: C;
  try {
    config = configFromEnv(env);
  } catch (err) {
    if (!(err instanceof z.ZodError)) throw err;
    const [first, ...more] = err.issues;
    const variableFor = (field: string) => variableOf[`${fn}.${field}`] ?? variableOf[field];
    const field = String(first?.path[0] ?? "");
    const variable = variableFor(field) ?? field;
    const also = more.length ? ` (and ${more.length} more: ${more.map((i) => variableFor(String(i.path[0])) ?? i.path.join(".")).join(", ")})` : "";
    throw configError(fn, variable, env[variable], `${oneLine(first?.message ?? err.message)}${also}`);
  }
  const dir = env.OCM_KUBECONFIG_DIR;
  if (dir && !statSync(dir, { throwIfNoEntry: false })?.isDirectory()) throw configError(fn, "OCM_KUBECONFIG_DIR", dir, "not a directory");
  return { clock: systemClock, log: jsonLog(fn), cluster: clientsFromEnv(env), config };
}

const oneLine = (s: string) => s.replace(/\s+/g, " ").trim();
