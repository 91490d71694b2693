// RegistrationApplied and what it stands for (addon-framework registration controller running ocm's
// template agent): status.supportedConfigs, status.registrations from the AddOnTemplate, status.namespace,
// and the template's hub permissions as RoleBindings bound to the agent's registration subject.
import { setCondition, type NewCondition } from "../../../shared/conditions.ts";
import { createOrUpdate } from "../../../shared/apply.ts";
import { mcaOwnerReference } from "../../../shared/addon-owners.ts";
import { RoleBindingResource } from "../../../shared/api/kube.ts";
import type { OwnerReference } from "../../../shared/api/meta.ts";
import type { KubeClient, KubeObject } from "../../../shared/kube/client.ts";
import {
  AddOnConditionType,
  AddOnLabel,
  AddOnReason,
  DefaultAddOnInstallNamespace,
  KubeApiServerClientSigner,
  type AddOnDeploymentConfig,
  type AddOnTemplate,
  type ManagedClusterAddOnV1alpha1,
} from "../../../shared/api/addon.ts";
import {
  AddOnMessage,
  AddonTemplateLabel,
  AuthenticatedGroup,
  BuiltInAddOnConfigs,
  hubPermissionBindingName,
} from "../../../shared/api/addon-strings.ts";
import { registrationsOf, type Registration } from "../../../shared/addon-registrations.ts";
import type { AddOnStatus, Scene } from "../scene.ts";

type RoleRef = { apiGroup: string; kind: string; name: string };
type RoleBinding = KubeObject & { roleRef: RoleRef; subjects?: { kind: string; apiGroup?: string; name: string; namespace?: string }[] };

const RbacGroup = "rbac.authorization.k8s.io";

export async function registration(s: Scene, status: AddOnStatus): Promise<void> {
  const cluster = s.mca.metadata.namespace!;
  const addon = s.mca.metadata.name;
  status.supportedConfigs = BuiltInAddOnConfigs.map((c) => ({ group: c.group, resource: c.resource }));
  const set = (c: NewCondition) => (status.conditions = setCondition(status.conditions, c, s.now));
  const failed = (err: string) => set({ type: AddOnConditionType.RegistrationApplied, status: "False", reason: AddOnReason.SetPermissionFailed, message: AddOnMessage.setPermissionFailed(err) });

  const { template, problem } = s.configs;
  if (!template) {
    // OCM retries this as an error; here the template's or the config's own event wakes the add-on
    failed(`PermissionConfig failed to get addon template for addon ${cluster}/${addon}: ${problem ?? "no template"}`);
    return;
  }
  status.registrations = registrationsOf(template, cluster, addon);
  status.namespace = installNamespaceOf(template, s.configs.adc, s.mca);
  try {
    await grantHubPermissions(s.hub, template, { cluster, addon, owner: mcaOwnerReference(s.mca), registrations: status.registrations });
  } catch (err) {
    failed(err instanceof Error ? err.message : String(err));
    s.errors.push(err);
    return;
  }
  set({ type: AddOnConditionType.RegistrationApplied, status: "True", reason: AddOnReason.SetPermissionApplied, message: AddOnMessage.RegistrationApplied });
}

// OCM's order for a template add-on: the AddOnDeploymentConfig's agentInstallNamespace, else the
// namespace of the template's first Deployment, else of its first DaemonSet. A template with neither
// takes the add-on's own spec.installNamespace (what clusteradm sets; OCM goes to the default).
export function installNamespaceOf(template: AddOnTemplate, adc: AddOnDeploymentConfig | undefined, mca: ManagedClusterAddOnV1alpha1): string {
  if (adc?.spec.agentInstallNamespace) return adc.spec.agentInstallNamespace;
  const manifests = (template.spec.agentSpec.workload?.manifests ?? []) as KubeObject[];
  const first = (kind: string) => manifests.find((m) => m.kind === kind && (m.apiVersion ?? "").startsWith("apps/"))?.metadata?.namespace || undefined;
  return first("Deployment") ?? first("DaemonSet") ?? (mca.spec.installNamespace || DefaultAddOnInstallNamespace);
}

type Grant = { cluster: string; addon: string; owner: OwnerReference; registrations: readonly Registration[] };

// Hub permissions become RoleBindings named open-cluster-management:<a>:<role kind>:agent whose
// subjects are the kubeClient registration's user and groups: CurrentCluster binds a ClusterRole in
// the cluster namespace (owned by the add-on), SingleNamespace a role in the named namespace.
async function grantHubPermissions(hub: KubeClient, template: AddOnTemplate, g: Grant): Promise<void> {
  const kubeClient = g.registrations.find((r) => r.signerName === KubeApiServerClientSigner)?.subject;
  const subjects = [
    ...(kubeClient?.user ? [{ kind: "User", apiGroup: RbacGroup, name: kubeClient.user }] : []),
    ...(kubeClient?.groups ?? []).filter((x) => x !== AuthenticatedGroup).map((name) => ({ kind: "Group", apiGroup: RbacGroup, name })),
  ];
  for (const r of template.spec.registration ?? []) {
    if (r.type !== "KubeClient") continue;
    for (const p of r.kubeClient?.hubPermissions ?? []) {
      if (p.type === "CurrentCluster") {
        if (!p.currentCluster) throw new Error("current cluster is required when the HubPermission type is CurrentCluster");
        await applyBinding(hub, { namespace: g.cluster, roleRef: { apiGroup: RbacGroup, kind: "ClusterRole", name: p.currentCluster.clusterRoleName }, owner: g.owner, addon: g.addon, subjects });
      } else if (p.type === "SingleNamespace") {
        if (!p.singleNamespace) throw new Error("single namespace is required when the HubPermission type is SingleNamespace");
        // no owner: a namespace other than the add-on's cannot hold a reference to it
        await applyBinding(hub, { namespace: p.singleNamespace.namespace, roleRef: p.singleNamespace.roleRef, addon: g.addon, subjects });
      }
    }
  }
}

async function applyBinding(hub: KubeClient, b: { namespace: string; roleRef: RoleRef; owner?: OwnerReference; addon: string; subjects: RoleBinding["subjects"] }): Promise<void> {
  const desired: RoleBinding = {
    metadata: {
      name: hubPermissionBindingName(b.addon, b.roleRef.kind),
      namespace: b.namespace,
      labels: { [AddOnLabel.AddonName]: b.addon, [AddonTemplateLabel]: "" },
      ...(b.owner ? { ownerReferences: [b.owner] } : {}),
    },
    roleRef: b.roleRef,
    subjects: b.subjects,
  };
  const existing = await hub.get<RoleBinding>(RoleBindingResource, desired.metadata.name!, b.namespace);
  // roleRef cannot change in place: replace the binding, as library-go's ApplyRoleBinding does
  if (existing && !sameRoleRef(existing.roleRef, b.roleRef)) await hub.delete(RoleBindingResource, existing.metadata.name!, b.namespace, { uid: existing.metadata.uid });
  await createOrUpdate(hub, RoleBindingResource, desired, ["subjects"]);
}

const sameRoleRef = (a: RoleRef, b: RoleRef) => a.apiGroup === b.apiGroup && a.kind === b.kind && a.name === b.name;
