// Kubeconfig documents: building them from credentials, and reading one into what a client needs
// (our own reader, so that nothing that ships loads @kubernetes/client-node).
import { readFileSync } from "node:fs";
import { isIPv6 } from "node:net";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { parse, stringify } from "yaml";
import { parseProxyURL } from "./proxy.ts";

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

// What a request needs from a kubeconfig: its current context's cluster and user, checked and with
// file paths resolved. client-go's rules where they matter: no current-context is an error, a context
// must name a cluster with a server and a user that exists, and a field we do not act on is refused,
// never ignored (an auth field skipped would send requests as someone else, or as nobody).
export type KubeCluster = {
  name: string;
  server: string; // as written (OCM hashes it for AppliedManifestWork names)
  caPem?: string; // read once, as client-go does; undefined trusts the system's roots
  insecureSkipTLSVerify: boolean;
  tlsServerName?: string;
  proxyUrl?: string;
};

// client.authentication.k8s.io ExecCredential plugin; clusterConfig is the cluster's
// client.authentication.k8s.io/exec extension, passed on when provideClusterInfo is set.
export type ExecConfig = {
  apiVersion: string;
  command: string;
  args: string[];
  env: { name: string; value: string }[];
  provideClusterInfo: boolean;
  installHint?: string;
  clusterConfig?: unknown;
};

// PEM fields hold the decoded text of the -data fields; *File fields are re-read while the client lives.
export type KubeUser = {
  name: string;
  certPem?: string;
  certFile?: string;
  keyPem?: string;
  keyFile?: string;
  token?: string;
  tokenFile?: string;
  username?: string;
  password?: string;
  impersonate?: { user?: string; uid?: string; groups?: string[]; extra?: Record<string, string[]> };
  exec?: ExecConfig;
};

export type Kubeconfig = { cluster: KubeCluster; user: KubeUser };

type Entry = Record<string, unknown>;
type Named = { name?: unknown } & Entry;

// extensions are notes for other tools; disable-compression holds anyway (we never ask for gzip).
const CLUSTER_FIELDS = ["server", "certificate-authority", "certificate-authority-data", "insecure-skip-tls-verify", "tls-server-name", "proxy-url", "disable-compression", "extensions"];
const USER_FIELDS = ["client-certificate", "client-certificate-data", "client-key", "client-key-data", "token", "tokenFile", "username", "password", "as", "as-uid", "as-groups", "as-user-extra", "exec", "extensions"];
const EXEC_FIELDS = ["apiVersion", "command", "args", "env", "provideClusterInfo", "installHint", "interactiveMode"];
const EXEC_VERSIONS = ["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"];

// A kubeconfig's text. dir: the directory relative file names resolve against (the file's own, as
// kubectl and client-node do); without it they stay relative to the working directory.
export function parseKubeconfig(text: string, o: { dir?: string; what?: string } = {}): Kubeconfig {
  const what = o.what ?? "kubeconfig";
  const fail = (message: string): never => {
    throw new Error(`${what}: ${message}`);
  };
  let doc: Entry;
  try {
    doc = (parse(text) ?? {}) as Entry;
  } catch (err) {
    return fail(`not YAML: ${(err as Error).message}`);
  }
  if (typeof doc !== "object" || Array.isArray(doc)) return fail("not a kubeconfig document");
  const current = doc["current-context"];
  if (typeof current !== "string" || current === "") return fail("current-context is not set");
  const find = (list: string, name: string) => (Array.isArray(doc[list]) ? (doc[list] as Named[]) : []).find((e) => e?.name === name);
  const context = find("contexts", current)?.context as Entry | undefined;
  if (!context) return fail(`current-context ${JSON.stringify(current)} names no context`);
  // a context's namespace is for kubectl: every request of ours names its namespace
  unknownFields(context, ["cluster", "user", "namespace", "extensions"], (m) => fail(`context ${JSON.stringify(current)}: ${m}`));
  const clusterName = String(context.cluster ?? "");
  const cluster = find("clusters", clusterName)?.cluster as Entry | undefined;
  if (!cluster) return fail(`context ${JSON.stringify(current)} names cluster ${JSON.stringify(clusterName)}, which is not defined`);
  const userName = String(context.user ?? "");
  // A context without a user is anonymous; one naming a user that is not there is a mistake.
  const user = userName === "" ? {} : (find("users", userName)?.user as Entry | undefined);
  if (!user) return fail(`context ${JSON.stringify(current)} names user ${JSON.stringify(userName)}, which is not defined`);
  const path = (p: string | undefined) => (p === undefined || o.dir === undefined || isAbsolute(p) ? p : join(o.dir, p));
  const c = readCluster(clusterName, cluster, path, (m) => fail(`cluster ${JSON.stringify(clusterName)}: ${m}`));
  const u = readUser(userName, user, cluster, path, (m) => fail(`user ${JSON.stringify(userName)}: ${m}`));
  return { cluster: c, user: u };
}

// A kubeconfig file: its relative paths mean files beside it.
export function readKubeconfigFile(file: string): Kubeconfig {
  return parseKubeconfig(readFileSync(file, "utf8"), { dir: dirname(resolve(file)), what: file });
}

export const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

// The pod's own identity, as client-go's InClusterConfig: the API server's service address, the
// service account's CA, and its token file, which the kubelet rotates (so it is re-read, not copied).
export function inClusterKubeconfig(env: NodeJS.ProcessEnv = process.env, dir = ServiceAccountDir): Kubeconfig {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  if (!host || !port) throw new Error("not in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set");
  const caPem = readFileSync(join(dir, "ca.crt"), "utf8");
  const server = `https://${isIPv6(host) ? `[${host}]` : host}:${port}`;
  return { cluster: { name: "in-cluster", server, caPem, insecureSkipTLSVerify: false }, user: { name: "in-cluster", tokenFile: join(dir, "token") } };
}

type Fail = (message: string) => never;

function unknownFields(o: Entry, known: readonly string[], fail: Fail): void {
  for (const k of Object.keys(o)) if (!known.includes(k)) fail(`unknown or unsupported field ${JSON.stringify(k)}`);
}

function field(o: Entry, key: string, type: "string", fail: Fail): string | undefined;
function field(o: Entry, key: string, type: "boolean", fail: Fail): boolean | undefined;
function field(o: Entry, key: string, type: "string" | "boolean", fail: Fail): string | boolean | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== type) fail(`${key} must be a ${type}`);
  return v as string | boolean;
}

function strings(o: Entry, key: string, fail: Fail): string[] | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v) || v.some((s) => typeof s !== "string")) return fail(`${key} must be a list of strings`);
  return v as string[];
}

// The -data fields are base64; Buffer.from skips what is not, so a pasted PEM would become garbage.
function base64Text(o: Entry, key: string, fail: Fail): string | undefined {
  const v = field(o, key, "string", fail);
  if (v === undefined) return undefined;
  if (!/^[A-Za-z0-9+/=\s]*$/.test(v)) fail(`${key} is not base64`);
  return Buffer.from(v, "base64").toString();
}

function readCluster(name: string, c: Entry, path: (p: string | undefined) => string | undefined, fail: Fail): KubeCluster {
  unknownFields(c, CLUSTER_FIELDS, fail);
  const server = field(c, "server", "string", fail);
  if (!server) return fail("no server");
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    return fail(`server ${JSON.stringify(server)} is not a URL`);
  }
  if (url.protocol !== "https:") fail(`server ${server}: only https is supported`);
  const insecure = field(c, "insecure-skip-tls-verify", "boolean", fail) ?? false;
  const caFile = path(field(c, "certificate-authority", "string", fail));
  let caPem = base64Text(c, "certificate-authority-data", fail);
  if (caPem === undefined && caFile !== undefined) {
    try {
      caPem = readFileSync(caFile, "utf8");
    } catch (err) {
      fail(`certificate-authority: ${(err as Error).message}`);
    }
  }
  // client-go's rule: trusting a CA and trusting anything contradict each other.
  if (insecure && caPem !== undefined) fail("insecure-skip-tls-verify together with a certificate authority");
  const proxyUrl = field(c, "proxy-url", "string", fail) || undefined;
  if (proxyUrl !== undefined) {
    // All of it checked here, credentials decoded included, not first when a request opens a socket.
    try {
      parseProxyURL(proxyUrl, "proxy-url");
    } catch (err) {
      fail((err as Error).message);
    }
  }
  const tlsServerName = field(c, "tls-server-name", "string", fail) || undefined;
  return { name, server, ...(caPem !== undefined ? { caPem } : {}), insecureSkipTLSVerify: insecure, ...(tlsServerName ? { tlsServerName } : {}), ...(proxyUrl ? { proxyUrl } : {}) };
}

function readUser(name: string, u: Entry, cluster: Entry, path: (p: string | undefined) => string | undefined, fail: Fail): KubeUser {
  if (u["auth-provider"] !== undefined) fail("auth-provider is not supported: use an exec plugin, a token or a client certificate");
  unknownFields(u, USER_FIELDS, fail);
  const user: KubeUser = { name };
  const set = <K extends keyof KubeUser>(k: K, v: KubeUser[K] | undefined) => {
    if (v !== undefined && v !== "") user[k] = v;
  };
  set("certPem", base64Text(u, "client-certificate-data", fail));
  set("certFile", path(field(u, "client-certificate", "string", fail)));
  set("keyPem", base64Text(u, "client-key-data", fail));
  set("keyFile", path(field(u, "client-key", "string", fail)));
  set("token", field(u, "token", "string", fail));
  set("tokenFile", path(field(u, "tokenFile", "string", fail)));
  set("username", field(u, "username", "string", fail));
  set("password", field(u, "password", "string", fail));
  if (user.certPem && user.certFile) fail("client-certificate and client-certificate-data are both set");
  if (user.keyPem && user.keyFile) fail("client-key and client-key-data are both set");
  if (!!(user.certPem || user.certFile) !== !!(user.keyPem || user.keyFile)) fail("a client certificate needs its key, and a key its certificate");
  if (user.token && user.tokenFile) fail("token and tokenFile are both set");
  if ((user.username || user.password) && (user.token || user.tokenFile)) fail("basic auth (username/password) and a bearer token are both set");
  if (user.password && !user.username) fail("a password without a username");
  const impersonate = {
    user: field(u, "as", "string", fail) || undefined,
    uid: field(u, "as-uid", "string", fail) || undefined,
    groups: strings(u, "as-groups", fail),
    extra: userExtra(u["as-user-extra"], fail),
  };
  if (Object.values(impersonate).some((v) => v !== undefined)) {
    if (!impersonate.user && (impersonate.uid || impersonate.groups || impersonate.extra)) fail("as-uid, as-groups or as-user-extra without as");
    user.impersonate = Object.fromEntries(Object.entries(impersonate).filter(([, v]) => v !== undefined));
  }
  if (u.exec !== undefined) {
    // What the plugin hands out replaces these, so one beside it would be ignored.
    if (user.certPem || user.certFile || user.token || user.tokenFile || user.username) fail("exec together with a client certificate, token or username");
    user.exec = readExec(u.exec as Entry, cluster, path, (m) => fail(`exec: ${m}`));
  }
  return user;
}

function userExtra(v: unknown, fail: Fail): Record<string, string[]> | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "object" || Array.isArray(v)) return fail("as-user-extra must map keys to lists of strings");
  for (const [k, values] of Object.entries(v)) if (!Array.isArray(values) || values.some((s) => typeof s !== "string")) fail(`as-user-extra ${k} must be a list of strings`);
  return v as Record<string, string[]>;
}

function readExec(e: Entry, cluster: Entry, path: (p: string | undefined) => string | undefined, fail: Fail): ExecConfig {
  if (typeof e !== "object" || e === null || Array.isArray(e)) return fail("must be a mapping");
  unknownFields(e, EXEC_FIELDS, fail);
  const apiVersion = field(e, "apiVersion", "string", fail) ?? "";
  if (!EXEC_VERSIONS.includes(apiVersion)) fail(`apiVersion ${JSON.stringify(apiVersion)}: one of ${EXEC_VERSIONS.join(", ")} is needed`);
  let command = field(e, "command", "string", fail);
  if (!command) return fail("no command");
  // A bare name is looked up on PATH; a path with a directory is relative to the kubeconfig (client-go).
  if (command.includes("/")) command = path(command)!;
  // Nothing here can prompt anyone: a plugin that must have a terminal cannot work.
  if (field(e, "interactiveMode", "string", fail) === "Always") fail("interactiveMode Always needs a terminal, which this client never has");
  const env = e.env === undefined || e.env === null ? [] : e.env;
  if (!Array.isArray(env) || env.some((v: Entry) => typeof v?.name !== "string" || typeof v?.value !== "string")) return fail("env must be a list of {name, value}");
  const installHint = field(e, "installHint", "string", fail);
  const extensions = Array.isArray(cluster.extensions) ? (cluster.extensions as Named[]) : [];
  const clusterConfig = extensions.find((x) => x?.name === "client.authentication.k8s.io/exec")?.extension;
  return {
    apiVersion,
    command,
    args: strings(e, "args", fail) ?? [],
    env: env as { name: string; value: string }[],
    provideClusterInfo: field(e, "provideClusterInfo", "boolean", fail) ?? false,
    ...(installHint ? { installHint } : {}),
    ...(clusterConfig !== undefined ? { clusterConfig } : {}),
  };
}
