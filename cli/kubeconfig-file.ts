// A bootstrap kubeconfig file made self-contained, as `kubectl config view --minify --flatten` makes it:
// only the current context, and every file it names (CA, client certificate and key, token file) read
// in, because it is stored in a Secret and read in a pod where those paths mean nothing.
import { readFileSync } from "node:fs";
import { dirname, isAbsolute, join } from "node:path";
import { parse, stringify } from "yaml";

type Named<T> = { name: string } & T;
type Doc = {
  clusters?: Named<{ cluster: Record<string, unknown> }>[];
  users?: Named<{ user: Record<string, unknown> }>[];
  contexts?: Named<{ context: { cluster: string; user: string; namespace?: string } }>[];
  "current-context"?: string;
};

// what: which kubeconfig, for errors (the managed cluster's, in Hosted mode, is read the same way).
export function readBootstrapKubeconfig(file: string, what = "the bootstrap kubeconfig"): string {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    throw new Error(`cannot read ${what}: ${(err as Error).message}`);
  }
  return flattenKubeconfig(text, dirname(file), file);
}

export function flattenKubeconfig(text: string, baseDir: string, what = "the bootstrap kubeconfig"): string {
  let doc: Doc;
  try {
    doc = parse(text) as Doc;
  } catch (err) {
    throw new Error(`${what} is not YAML: ${(err as Error).message}`);
  }
  const contextName = doc?.["current-context"] ?? doc?.contexts?.[0]?.name;
  const context = doc?.contexts?.find((c) => c.name === contextName);
  if (!context) throw new Error(`${what} has no current context`);
  const cluster = doc.clusters?.find((c) => c.name === context.context.cluster);
  const user = doc.users?.find((u) => u.name === context.context.user);
  if (typeof cluster?.cluster.server !== "string") throw new Error(`${what}: the current context's cluster has no server`);
  if (!user) throw new Error(`${what}: the current context names no user`);
  if (user.user.exec || user.user["auth-provider"]) throw new Error(`${what}: credentials from an exec plugin or auth provider do not work in the agent's pod; use a token or a client certificate`);
  const read = (path: string) => readFileSync(isAbsolute(path) ? path : join(baseDir, path));
  const inline = (o: Record<string, unknown>, fileKey: string, dataKey: string, asText = false) => {
    const path = o[fileKey];
    if (typeof path !== "string") return;
    const content = read(path);
    o[dataKey] = asText ? content.toString().trim() : content.toString("base64");
    delete o[fileKey];
  };
  const c = { ...cluster.cluster };
  inline(c, "certificate-authority", "certificate-authority-data");
  const u = { ...user.user };
  inline(u, "client-certificate", "client-certificate-data");
  inline(u, "client-key", "client-key-data");
  inline(u, "tokenFile", "token", true);
  if (!u.token && !(u["client-certificate-data"] && u["client-key-data"])) throw new Error(`${what}: the current context's user has no token and no client certificate`);
  return stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: cluster.name, cluster: c }],
    users: [{ name: user.name, user: u }],
    contexts: [{ name: context.name, context: { cluster: cluster.name, user: user.name } }],
    "current-context": context.name,
  });
}
