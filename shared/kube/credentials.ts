// The credentials each request carries, from a kubeconfig's user: a client certificate, a bearer
// token, basic auth, impersonation headers, or what an exec plugin hands out. Files are re-read once a
// minute, as client-go re-reads a projected service account token (the kubelet rotates it); an exec
// credential is kept until its expirationTimestamp. A 401 forgets both, so the next request reloads.
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import type { ExecConfig, KubeCluster, KubeUser } from "./kubeconfig.ts";

export type RequestCredentials = { cert?: string; key?: string; headers: Record<string, string | string[]> };

const FILE_REREAD_MS = 60_000;

type ExecCredential = { token?: string; cert?: string; key?: string; expires?: number };

export class UserCredentials {
  private readonly files = new Map<string, { text: string; readAt: number }>();
  private exec?: ExecCredential;
  private execRunning?: Promise<ExecCredential>;
  private readonly fixed: Record<string, string | string[]> = {};
  private readonly cluster: KubeCluster;
  private readonly user: KubeUser;

  constructor(cluster: KubeCluster, user: KubeUser) {
    this.cluster = cluster;
    this.user = user;
    if (user.username) this.fixed.Authorization = `Basic ${Buffer.from(`${user.username}:${user.password ?? ""}`).toString("base64")}`;
    const as = user.impersonate;
    if (as?.user) this.fixed["Impersonate-User"] = as.user;
    if (as?.uid) this.fixed["Impersonate-Uid"] = as.uid;
    if (as?.groups?.length) this.fixed["Impersonate-Group"] = as.groups;
    for (const [k, v] of Object.entries(as?.extra ?? {})) this.fixed[`Impersonate-Extra-${encodeURIComponent(k)}`] = v;
  }

  async current(): Promise<RequestCredentials> {
    const u = this.user;
    let cert = u.certPem ?? (u.certFile === undefined ? undefined : this.file(u.certFile, "client certificate"));
    let key = u.keyPem ?? (u.keyFile === undefined ? undefined : this.file(u.keyFile, "client key"));
    let token = u.token ?? (u.tokenFile === undefined ? undefined : this.file(u.tokenFile, "token file").trim());
    if (u.exec) ({ token, cert, key } = await this.execCredential(u.exec));
    const headers = token ? { ...this.fixed, Authorization: `Bearer ${token}` } : this.fixed;
    return { cert, key, headers };
  }

  // The server refused what was sent: reload files and ask the plugin again on the next request.
  forget(): void {
    this.files.clear();
    this.exec = undefined;
  }

  // A file that cannot be read any more keeps its last content (client-go does the same for tokens):
  // a rotation replaces the file, and for a moment it may be missing.
  private file(path: string, what: string): string {
    const now = Date.now();
    const cached = this.files.get(path);
    if (cached && now - cached.readAt < FILE_REREAD_MS) return cached.text;
    try {
      const text = readFileSync(path, "utf8");
      this.files.set(path, { text, readAt: now });
      return text;
    } catch (err) {
      if (cached) return cached.text;
      throw new Error(`cannot read the ${what} ${path}: ${(err as Error).message}`);
    }
  }

  private async execCredential(exec: ExecConfig): Promise<ExecCredential> {
    if (this.exec && (this.exec.expires === undefined || this.exec.expires > Date.now())) return this.exec;
    // Requests that arrive together share one run of the plugin.
    this.execRunning ??= runExecPlugin(exec, this.cluster).finally(() => (this.execRunning = undefined));
    this.exec = await this.execRunning;
    return this.exec;
  }
}

type ExecCredentialObject = {
  apiVersion?: string;
  kind?: string;
  status?: { token?: string; clientCertificateData?: string; clientKeyData?: string; expirationTimestamp?: string };
};

// The client.authentication.k8s.io protocol: the request in KUBERNETES_EXEC_INFO, never interactive
// (no stdin), an ExecCredential of the same apiVersion on stdout.
function runExecPlugin(exec: ExecConfig, cluster: KubeCluster): Promise<ExecCredential> {
  const spec: Record<string, unknown> = { interactive: false };
  if (exec.provideClusterInfo) {
    spec.cluster = {
      server: cluster.server,
      "tls-server-name": cluster.tlsServerName,
      "insecure-skip-tls-verify": cluster.insecureSkipTLSVerify,
      "certificate-authority-data": cluster.caPem === undefined ? undefined : Buffer.from(cluster.caPem).toString("base64"),
      "proxy-url": cluster.proxyUrl,
      config: exec.clusterConfig,
    };
  }
  const env = { ...process.env, ...Object.fromEntries(exec.env.map((e) => [e.name, e.value])), KUBERNETES_EXEC_INFO: JSON.stringify({ apiVersion: exec.apiVersion, kind: "ExecCredential", spec }) };
  const what = `exec plugin ${exec.command}`;
  return new Promise((resolve, reject) => {
    const child = execFile(exec.command, exec.args, { env, maxBuffer: 1 << 20 }, (err, stdout, stderr) => {
      if (err) {
        const hint = (err as NodeJS.ErrnoException).code === "ENOENT" && exec.installHint ? `: ${exec.installHint}` : "";
        return reject(new Error(`${what} failed: ${stderr.trim() || err.message}${hint}`));
      }
      let out: ExecCredentialObject;
      try {
        out = JSON.parse(stdout) as ExecCredentialObject;
      } catch {
        return reject(new Error(`${what} printed no JSON: ${stdout.slice(0, 200)}`));
      }
      if (out?.kind !== "ExecCredential" || out.apiVersion !== exec.apiVersion) return reject(new Error(`${what} printed ${out?.apiVersion}/${out?.kind}, not an ExecCredential of ${exec.apiVersion}`));
      const s = out.status ?? {};
      if (!s.token && !(s.clientCertificateData && s.clientKeyData)) return reject(new Error(`${what} gave neither a token nor a client certificate and key`));
      const expires = s.expirationTimestamp ? Date.parse(s.expirationTimestamp) : undefined;
      if (expires !== undefined && Number.isNaN(expires)) return reject(new Error(`${what}: expirationTimestamp ${s.expirationTimestamp} is not a time`));
      resolve({ token: s.token, cert: s.clientCertificateData, key: s.clientKeyData, expires });
    });
    child.stdin?.end();
  });
}
