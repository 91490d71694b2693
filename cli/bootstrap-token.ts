// The credentials a cluster joins with, as `clusteradm init` makes them: a bootstrap token (a Secret
// bootstrap-token-<id> in kube-system, id [a-z0-9]{6}, secret [a-z0-9]{16}, usage authentication only,
// extra group system:bootstrappers:managedcluster, which manifests/hub/bootstrap-rbac.yaml binds), and
// the bootstrap kubeconfig built from it with the hub's URL and CA.
import { randomInt } from "node:crypto";
import { SecretResource } from "../shared/api/kube.ts";
import { rfc3339 } from "../shared/clock.ts";
import type { KubeClient } from "../shared/kube/client.ts";
import { buildKubeconfig } from "../shared/kube/kubeconfig.ts";
import { PartOf, PartOfLabel } from "./render/objects.ts";

export const BootstrapGroup = "system:bootstrappers:managedcluster";

// What a spoke needs to reach the hub: its URL and the CA its serving certificate is signed by.
export type HubEndpoint = { server: string; caPem: string };

const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
const randomToken = (n: number) => Array.from({ length: n }, () => alphabet[randomInt(alphabet.length)]).join("");

// The hub as the admin's kubeconfig names it; the CA must be there, since the join command carries it.
export function hubEndpointOf(hub: KubeClient): HubEndpoint {
  const caPem = hub.cluster.caPem;
  if (!caPem) throw new Error(`the hub kubeconfig names no certificate authority for ${hub.server} (certificate-authority-data or certificate-authority): a joining cluster needs it to trust the hub`);
  return { server: hub.server, caPem };
}

export async function createBootstrapToken(hub: KubeClient, o: { now: Date; ttlMs?: number }): Promise<{ id: string; token: string; expires?: Date }> {
  const id = randomToken(6);
  const secret = randomToken(16);
  const expires = o.ttlMs ? new Date(o.now.getTime() + o.ttlMs) : undefined;
  await hub.create(SecretResource, {
    // app=cluster-manager is how `clusteradm get token --use-bootstrap-token` finds the hub's token
    metadata: { name: `bootstrap-token-${id}`, namespace: "kube-system", labels: { [PartOfLabel]: PartOf, app: "cluster-manager" } },
    type: "bootstrap.kubernetes.io/token",
    stringData: {
      "token-id": id,
      "token-secret": secret,
      description: "ocmf install hub: joins clusters to this hub (ocmf join)",
      "usage-bootstrap-authentication": "true",
      "auth-extra-groups": BootstrapGroup,
      ...(expires ? { expiration: rfc3339(expires) } : {}),
    },
  });
  return { id, token: `${id}.${secret}`, expires };
}

// One shape for both ways of joining (--hub-token or the file install writes), so that switching between
// them never changes the hub's cluster entry, which the agent compares to its hub kubeconfig.
export function bootstrapKubeconfig(hub: HubEndpoint, token: string): string {
  return buildKubeconfig({ server: hub.server, caPem: hub.caPem, clusterName: "hub", userName: "bootstrap", contextName: "bootstrap", credentials: { kind: "token", token } });
}
