// The registrations an AddOnTemplate add-on has on a cluster, derived from the template alone: what the
// addon-manager writes into status.registrations and what the addon-csr-approver demands of a CSR's
// subject. The approver never trusts status.registrations, which the cluster's agent may patch.
import { KubeApiServerClientSigner, type AddOnTemplate, type ManagedClusterAddOnV1alpha1 } from "./api/addon.ts";
import { addonAgentUser, addonGroups, templateAgentName } from "./api/addon-strings.ts";

export type Registration = NonNullable<NonNullable<ManagedClusterAddOnV1alpha1["status"]>["registrations"]>[number];

// One registration per template registration, in the v1alpha1 shape (kubeClient ⇔ the
// kube-apiserver-client signer). A template agent is named <addon>-agent, so its default user is
// system:open-cluster-management:cluster:<c>:addon:<a>:agent:<a>-agent, and its groups are
// addon-framework's three defaults.
export function registrationsOf(template: AddOnTemplate, cluster: string, addon: string): Registration[] {
  const user = addonAgentUser(cluster, addon, templateAgentName(addon));
  const groups = addonGroups(cluster, addon);
  return (template.spec.registration ?? []).flatMap((r): Registration[] => {
    if (r.type === "KubeClient") return [{ signerName: KubeApiServerClientSigner, subject: { user, groups } }];
    if (r.type === "CustomSigner" && r.customSigner) {
      const custom = r.customSigner.subject;
      const subject = custom
        ? { ...(custom.user ? { user: custom.user } : {}), ...(custom.groups?.length ? { groups: custom.groups } : {}), ...(custom.organizationUnit?.length ? { organizationUnit: custom.organizationUnit } : {}) }
        : { user, groups };
      return [{ signerName: r.customSigner.signerName, subject }];
    }
    return [];
  });
}
