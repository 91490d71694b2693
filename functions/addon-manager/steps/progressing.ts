// Progressing and lastAppliedConfig (OCM addon-progressing controller): configs the add-on does not
// support stop it; until ManifestApplied exists it waits; it completes, copying each desired config to
// lastAppliedConfig, once every deploy work carries the desired config hashes and is Applied and
// Available for its current generation.
import { findCondition, setCondition } from "../../../shared/conditions.ts";
import { labelsQuery } from "../../../shared/selector-query.ts";
import { ManifestWorkResource, WorkAnnotation, WorkConditionType, type ManifestWork } from "../../../shared/api/work.ts";
import { AddOnConditionType, AddOnLabel, AddOnReason } from "../../../shared/api/addon.ts";
import { AddOnMessage, ProgressingReason, preDeleteHookWorkName } from "../../../shared/api/addon-strings.ts";
import { configSpecHashes } from "../works.ts";
import type { AddOnStatus, Scene } from "../scene.ts";

export async function progressing(s: Scene, status: AddOnStatus): Promise<void> {
  const set = (st: "True" | "False", reason: string, message: string) =>
    (status.conditions = setCondition(status.conditions, { type: AddOnConditionType.Progressing, status: st, reason, message }, s.now));
  const supported = new Set((status.supportedConfigs ?? []).map((c) => `${c.group ?? ""}/${c.resource}`));
  const unsupported = (s.mca.spec.configs ?? []).find((c) => !supported.has(`${c.group ?? ""}/${c.resource}`));
  if (unsupported) return void set("False", ProgressingReason.ConfigurationUnsupported, AddOnMessage.configurationUnsupported(unsupported.group ?? "", unsupported.resource));
  if (!findCondition(status.conditions, AddOnConditionType.ManifestApplied)) return void set("False", ProgressingReason.WaitingForManifestApplied, AddOnMessage.WaitingForManifestApplied);

  const addon = s.mca.metadata.name;
  const { items } = await s.hub.list<ManifestWork>(ManifestWorkResource, { namespace: s.mca.metadata.namespace, labelSelector: labelsQuery({ [AddOnLabel.AddonName]: addon }, { absent: [AddOnLabel.AddonNamespace] }) });
  const verdict = judgeWorks(items.filter((w) => !w.metadata.name.startsWith(preDeleteHookWorkName(addon))), status);
  if (verdict !== "completed") return void set("True", AddOnReason.Progressing, AddOnMessage.progressing(verdict));
  status.configReferences = (status.configReferences ?? []).map((r) => (r.desiredConfig ? { ...r, lastAppliedConfig: structuredClone(r.desiredConfig) } : r));
  set("False", AddOnReason.Completed, AddOnMessage.Completed);
}

export function judgeWorks(works: readonly ManifestWork[], status: AddOnStatus): "completed" | "no addon works" | "mca and work configs mismatch" | "work is not ready" {
  if (!works.length) return "no addon works";
  for (const w of works) {
    if (!configsMatch(w, status)) return "mca and work configs mismatch";
    if (!isReady(w)) return "work is not ready";
  }
  return "completed";
}

// The work's config-spec-hash annotation equals the add-on's desired hashes, none of them empty.
function configsMatch(w: ManifestWork, status: AddOnStatus): boolean {
  const refs = status.configReferences ?? [];
  const text = w.metadata.annotations?.[WorkAnnotation.ConfigSpecHash];
  if (text === undefined) return refs.length === 0;
  let onWork: Record<string, string>;
  try {
    onWork = JSON.parse(text) as Record<string, string>;
  } catch {
    return false;
  }
  if (Object.values(onWork).some((v) => !v)) return false;
  if (refs.some((r) => !r.desiredConfig?.specHash)) return false;
  const wanted = configSpecHashes(refs);
  const keys = new Set([...Object.keys(onWork), ...Object.keys(wanted)]);
  return [...keys].every((k) => onWork[k] === wanted[k]);
}

// Applied and Available, both observed at the work's current generation.
function isReady(w: ManifestWork): boolean {
  return [WorkConditionType.Available, WorkConditionType.Applied].every((type) => {
    const c = findCondition(w.status?.conditions, type);
    return c?.status === "True" && c.observedGeneration === w.metadata.generation;
  });
}
