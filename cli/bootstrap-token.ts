// The credentials a cluster joins with, as `clusteradm init` makes them: a bootstrap token (a Secret
// bootstrap-token-<id> in kube-system, id [a-z0-9]{6}, secret [a-z0-9]{16}, usage authentication only,
// extra group system:bootstrappers:managedcluster, which manifests/hub/bootstrap-rbac.yaml binds), and
// the bootstrap kubeconfig built from it with the hub's URL and CA.
import { randomInt } from "node:crypto";
import { accessSync, constants } from "node:fs";
import { dirname } from "node:path";
import { SecretResource } from "../shared/api/kube.ts";
import { rfc3339 } from "../shared/clock.ts";
import type { KubeClient } from "../shared/kube/client.ts";
import { buildKubeconfig } from "../shared/kube/kubeconfig.ts";
import { PartOf, PartOfLabel } from "./render/objects.ts";
import { writeSecretFile } from "./secret-file.ts";

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

// kubeadm's default: a join token that leaks is good for a day, not for ever. "never" only when asked.
export const DefaultTokenTtlMs = 24 * 3_600_000;
export type TokenTtl = number | "never";

export async function createBootstrapToken(hub: KubeClient, o: { now: Date; ttlMs?: TokenTtl }): Promise<{ id: string; token: string; expires?: Date }> {
  const id = randomToken(6);
  const secret = randomToken(16);
  const ttlMs = o.ttlMs ?? DefaultTokenTtlMs;
  // The API server refuses a token past its expiration (RFC 3339, UTC) whether or not anything deletes it.
  const expires = ttlMs === "never" ? undefined : new Date(o.now.getTime() + ttlMs);
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

// The folder a bootstrap kubeconfig goes to must take a new file: checked before anything is made, so a
// typo costs nothing on the hub.
export function checkWritableFolder(file: string): void {
  try {
    accessSync(dirname(file), constants.W_OK | constants.X_OK);
  } catch (err) {
    throw new Error(`cannot write ${file}: ${(err as Error).message}`);
  }
}

// A new join token, printed with the `ocmf join` command that uses it (and written as a bootstrap
// kubeconfig when asked): what `ocmf install hub` ends with, and all `ocmf token create` does.
export async function issueJoinToken(hub: KubeClient, o: { ttlMs?: TokenTtl; bootstrapKubeconfigFile?: string }, print: (line: string) => void): Promise<void> {
  const endpoint = hubEndpointOf(hub);
  if (o.bootstrapKubeconfigFile) checkWritableFolder(o.bootstrapKubeconfigFile);
  const token = await createBootstrapToken(hub, { now: new Date(), ttlMs: o.ttlMs });
  if (o.bootstrapKubeconfigFile) {
    try {
      writeSecretFile(o.bootstrapKubeconfigFile, bootstrapKubeconfig(endpoint, token.token));
    } catch (err) {
      // a token nobody was given is only a risk: take it back, and say so if that fails too
      const secretName = `kube-system/bootstrap-token-${token.id}`;
      await hub.delete(SecretResource, `bootstrap-token-${token.id}`, "kube-system").catch((deleting: unknown) => {
        throw new Error(`${(err as Error).message}; and the token it was for is still there: deleting ${secretName} failed: ${(deleting as Error).message}`);
      });
      throw err;
    }
  }
  print(`Bootstrap token ${token.id} (kube-system/bootstrap-token-${token.id}) ${token.expires ? `expires ${rfc3339(token.expires)}` : "does not expire"}.`);
  if (token.expires) print("A cluster joining after that needs a new one: ocmf token create (--ttl to choose its lifetime).");
  print("");
  print("To join a cluster, run this with the cluster's kubeconfig (--kubeconfig or KUBECONFIG):");
  print("");
  const ca = Buffer.from(endpoint.caPem).toString("base64");
  print(`    ocmf join --hub-token ${token.token} --hub-apiserver ${endpoint.server} --hub-ca-data ${ca} --cluster-name <cluster_name>`);
  if (o.bootstrapKubeconfigFile) {
    print("");
    print(`or, with the bootstrap kubeconfig written to ${o.bootstrapKubeconfigFile}:`);
    print("");
    print(`    ocmf join --hub-kubeconfig ${o.bootstrapKubeconfigFile} --cluster-name <cluster_name>`);
  }
  print("");
  print("Replace <cluster_name> with the cluster's name, e.g. cluster1; then accept it here: ocmf accept --clusters <cluster_name>");
  print("Every cluster joins with this one token, so accept refuses when two requests for a cluster pass its checks; --csr names the one the cluster's agent made.");
}
