// Kubeconfig documents: building them from credentials and turning them into clients.
import { KubeConfig } from "@kubernetes/client-node";
import { stringify } from "yaml";

export type Credentials =
  | { kind: "certificate"; certPem: string; keyPem: string }
  | { kind: "certificate-files"; certFile: string; keyFile: string } // OCM's hub kubeconfig points at tls.crt/tls.key
  | { kind: "token"; token: string };

export type KubeconfigSpec = {
  server: string;
  caPem: string;
  credentials: Credentials;
  clusterName?: string;
  userName?: string;
  contextName?: string;
  proxyUrl?: string;
};

const b64 = (text: string) => Buffer.from(text).toString("base64");

function userEntry(c: Credentials): Record<string, string> {
  switch (c.kind) {
    case "certificate":
      return { "client-certificate-data": b64(c.certPem), "client-key-data": b64(c.keyPem) };
    case "certificate-files":
      return { "client-certificate": c.certFile, "client-key": c.keyFile };
    case "token":
      return { token: c.token };
  }
}

export function buildKubeconfig(spec: KubeconfigSpec): string {
  const cluster = spec.clusterName ?? "cluster";
  const user = spec.userName ?? "user";
  const context = spec.contextName ?? cluster;
  return stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [
      {
        name: cluster,
        cluster: {
          server: spec.server,
          "certificate-authority-data": b64(spec.caPem),
          ...(spec.proxyUrl ? { "proxy-url": spec.proxyUrl } : {}),
        },
      },
    ],
    users: [{ name: user, user: userEntry(spec.credentials) }],
    contexts: [{ name: context, context: { cluster, user } }],
    "current-context": context,
  });
}

export function kubeConfigFrom(yamlText: string): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromString(yamlText);
  return kc;
}
