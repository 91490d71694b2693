// The agent's settings as the spoke's agent-config function leaves them, made by hand in a test: the
// checkpoint ConfigMap with these settings active, none at all, and a component's health record.
import type { AgentSettings } from "../../shared/api/agent-config.ts";
import { AgentHealthConfigMapName, checkpointData, CheckpointConfigMapName, installTimeConfig, parseHealthRecords, settingsHash, type HealthKey } from "../../shared/agent-config.ts";
import { ConfigMapResource } from "../../shared/api/kube.ts";
import { AgentNamespaceDefault } from "../../shared/api/registration.ts";
import { createOrUpdate } from "../../shared/apply.ts";
import type { KubeClient, KubeObject } from "../../shared/kube/client.ts";

type ConfigMap = KubeObject & { data?: Record<string, string> };

// These settings active, the install-time ones last known good. Returns their hash.
export async function activate(spokeAdmin: KubeClient, settings: AgentSettings): Promise<string> {
  const hash = settingsHash(settings);
  const data = checkpointData({ active: { hash, settings }, lastKnownGood: installTimeConfig() });
  await createOrUpdate<ConfigMap>(spokeAdmin, ConfigMapResource, { metadata: { name: CheckpointConfigMapName, namespace: AgentNamespaceDefault }, data }, ["data"]);
  return hash;
}

// No checkpoint and no health records.
export async function withoutAgentConfig(spokeAdmin: KubeClient): Promise<void> {
  for (const name of [CheckpointConfigMapName, AgentHealthConfigMapName]) await spokeAdmin.delete(ConfigMapResource, name, AgentNamespaceDefault);
}

// One component's health record, with the resourceVersion of the ConfigMap it was read from.
export async function healthRecord(spokeAdmin: KubeClient, key: HealthKey) {
  const cm = await spokeAdmin.get<ConfigMap>(ConfigMapResource, AgentHealthConfigMapName, AgentNamespaceDefault);
  return { record: parseHealthRecords(cm?.data)[key], resourceVersion: cm?.metadata.resourceVersion };
}
