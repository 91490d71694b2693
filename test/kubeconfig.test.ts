// Our kubeconfig reader and the credentials it puts on requests, against a real API server: client
// certificates (data and files, relative to the kubeconfig), tokens and token files (re-read), basic
// auth, impersonation, exec plugins, the CA (data, file, none with insecure-skip-tls-verify),
// tls-server-name, the in-cluster service account, and proxy-url through HTTP CONNECT and SOCKS5
// proxies. What it does not support it refuses by name.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { createServer as createHttpServer } from "node:http";
import { connect, createServer as createTcpServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { stringify } from "yaml";
import { startClusters, type LocalCluster, type LocalClusters } from "../dev/control-plane/clusters.ts";
import { KubeClient } from "../shared/kube/client.ts";
import { clientsFromEnv } from "../shared/kube/clients.ts";
import { KubeError } from "../shared/kube/errors.ts";
import { inClusterKubeconfig, parseKubeconfig, readKubeconfigFile } from "../shared/kube/kubeconfig.ts";
import { issueCertificate } from "../shared/pki.ts";
import { proxyConnector } from "../shared/kube/proxy.ts";

let local: LocalClusters;
let hub: LocalCluster;
let admin: KubeClient;
let dir: string;
const clients: KubeClient[] = [];

beforeAll(async () => {
  local = await startClusters({ names: ["hub"], crds: false, controllers: false, log: () => {} });
  hub = local.get("hub");
  admin = KubeClient.fromKubeconfig(hub.adminKubeconfig);
  dir = mkdtempSync(join(tmpdir(), "kubeconfig-test-"));
});
afterEach(() => {
  vi.useRealTimers();
  for (const c of clients.splice(0)) c.close();
});
afterAll(async () => {
  admin?.close();
  await local?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const b64 = (s: string) => Buffer.from(s).toString("base64");

// A kubeconfig of one context; cluster fields default to the hub with its CA.
function kubeconfig(user: Record<string, unknown>, cluster: Record<string, unknown> = {}): string {
  return stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "hub", cluster: { server: hub.url, "certificate-authority-data": b64(hub.caPem), ...cluster } }],
    users: [{ name: "someone", user }],
    contexts: [{ name: "ctx", context: { cluster: "hub", user: "someone" } }],
    "current-context": "ctx",
  });
}

function client(text: string): KubeClient {
  const c = KubeClient.fromKubeconfig(text);
  clients.push(c);
  return c;
}

type UserInfo = { username: string; groups?: string[] };
async function whoAmI(c: KubeClient): Promise<UserInfo> {
  const review = await c.request<{ status: { userInfo: UserInfo } }>("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", { apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" });
  return review.status.userInfo;
}

const certificateFor = (user: string, groups: string[] = []) => issueCertificate(hub.clientCa, { subject: { commonName: user, organizations: groups }, usage: "client" });

function write(name: string, text: string): string {
  const path = join(dir, name);
  mkdirSync(join(path, ".."), { recursive: true });
  writeFileSync(path, text, { mode: 0o600 });
  return path;
}

describe("reading a kubeconfig", () => {
  const refusals: { name: string; text: () => string; says: string }[] = [
    { name: "no current-context", text: () => kubeconfig({ token: "t" }).replace(/current-context: ctx\n/, ""), says: "kubeconfig: current-context is not set" },
    { name: "a current-context that names nothing", text: () => kubeconfig({ token: "t" }).replace("current-context: ctx", "current-context: other"), says: 'kubeconfig: current-context "other" names no context' },
    { name: "a context whose user is not defined", text: () => kubeconfig({ token: "t" }).replace("user: someone", "user: nobody"), says: 'kubeconfig: context "ctx" names user "nobody", which is not defined' },
    { name: "an unknown user field", text: () => kubeconfig({ "token-file": "/t" }), says: 'kubeconfig: user "someone": unknown or unsupported field "token-file"' },
    { name: "an unknown cluster field", text: () => kubeconfig({}, { "proxy-uri": "http://p:3128" }), says: 'kubeconfig: cluster "hub": unknown or unsupported field "proxy-uri"' },
    { name: "an auth provider", text: () => kubeconfig({ "auth-provider": { name: "oidc", config: {} } }), says: 'kubeconfig: user "someone": auth-provider is not supported: use an exec plugin, a token or a client certificate' },
    { name: "a client certificate without its key", text: () => kubeconfig({ "client-certificate-data": b64("x") }), says: 'kubeconfig: user "someone": a client certificate needs its key, and a key its certificate' },
    { name: "a token and a token file", text: () => kubeconfig({ token: "t", tokenFile: "/t" }), says: 'kubeconfig: user "someone": token and tokenFile are both set' },
    { name: "basic auth and a token", text: () => kubeconfig({ token: "t", username: "u", password: "p" }), says: 'kubeconfig: user "someone": basic auth (username/password) and a bearer token are both set' },
    { name: "groups to impersonate without a user", text: () => kubeconfig({ token: "t", "as-groups": ["g"] }), says: 'kubeconfig: user "someone": as-uid, as-groups or as-user-extra without as' },
    { name: "an exec plugin beside a token", text: () => kubeconfig({ token: "t", exec: { apiVersion: "client.authentication.k8s.io/v1", command: "x" } }), says: 'kubeconfig: user "someone": exec together with a client certificate, token or username' },
    { name: "an exec plugin that needs a terminal", text: () => kubeconfig({ exec: { apiVersion: "client.authentication.k8s.io/v1", command: "x", interactiveMode: "Always" } }), says: 'kubeconfig: user "someone": exec: interactiveMode Always needs a terminal, which this client never has' },
    { name: "an exec plugin of an unknown version", text: () => kubeconfig({ exec: { apiVersion: "client.authentication.k8s.io/v1alpha1", command: "x" } }), says: 'kubeconfig: user "someone": exec: apiVersion "client.authentication.k8s.io/v1alpha1": one of client.authentication.k8s.io/v1, client.authentication.k8s.io/v1beta1 is needed' },
    { name: "insecure with a CA", text: () => kubeconfig({}, { "insecure-skip-tls-verify": true }), says: 'kubeconfig: cluster "hub": insecure-skip-tls-verify together with a certificate authority' },
    { name: "a SOCKS4 proxy", text: () => kubeconfig({}, { "proxy-url": "socks4://p:1080" }), says: 'kubeconfig: cluster "hub": proxy-url socks4://p:1080: the scheme must be http, https, socks5 or socks5h' },
    // issue 23: a proxy URL is usable as a whole when read, credentials decoded, or refused then
    { name: "a proxy URL whose user name does not decode (http://%zz@…)", text: () => kubeconfig({}, { "proxy-url": "http://%zz@127.0.0.1:9" }), says: 'kubeconfig: cluster "hub": proxy-url http://127.0.0.1:9: the user name is not valid percent-encoded UTF-8' },
    { name: "a proxy URL whose password is not UTF-8 once decoded", text: () => kubeconfig({}, { "proxy-url": "http://u:%ff@127.0.0.1:9" }), says: 'kubeconfig: cluster "hub": proxy-url http://127.0.0.1:9: the password is not valid percent-encoded UTF-8' },
    { name: "a SOCKS5 user name longer than RFC 1929's 255 bytes", text: () => kubeconfig({}, { "proxy-url": `socks5://${"u".repeat(256)}@127.0.0.1:1080` }), says: 'kubeconfig: cluster "hub": proxy-url socks5://127.0.0.1:1080: a SOCKS5 user name and password are at most 255 bytes each' },
    { name: "a plain http server", text: () => kubeconfig({}, { server: "http://127.0.0.1:8080" }), says: 'kubeconfig: cluster "hub": server http://127.0.0.1:8080: only https is supported' },
    { name: "a -data field that is not base64", text: () => kubeconfig({ "client-certificate-data": "-----BEGIN CERTIFICATE-----", "client-key-data": b64("k") }), says: 'kubeconfig: user "someone": client-certificate-data is not base64' },
  ];
  it.each(refusals)("refuses $name", ({ text, says }) => {
    expect(() => parseKubeconfig(text())).toThrow(new Error(says));
  });

  it("resolves relative file names against the kubeconfig's directory when read from a file, and leaves them as written in text", async () => {
    const cert = await certificateFor("relative-files");
    write("relative/certs/tls.crt", cert.certPem);
    write("relative/certs/tls.key", cert.keyPem);
    write("relative/ca.crt", hub.caPem);
    const user = { "client-certificate": "certs/tls.crt", "client-key": "certs/tls.key" };
    const text = kubeconfig(user, { "certificate-authority": "ca.crt", "certificate-authority-data": undefined });
    const file = write("relative/config", text);
    const fromFile = readKubeconfigFile(file);
    expect(fromFile.user).toEqual({ name: "someone", certFile: join(dir, "relative/certs/tls.crt"), keyFile: join(dir, "relative/certs/tls.key") });
    expect(fromFile.cluster.caPem).toBe(hub.caPem);
    const c = KubeClient.fromKubeconfigFile(file);
    clients.push(c);
    expect((await whoAmI(c)).username).toBe("relative-files");
    // from text: relative to the working directory, which has no ca.crt
    expect(() => parseKubeconfig(text)).toThrow(/^kubeconfig: cluster "hub": certificate-authority: ENOENT.*'ca\.crt'/);
    expect(parseKubeconfig(kubeconfig(user)).user).toEqual({ name: "someone", certFile: "certs/tls.crt", keyFile: "certs/tls.key" });
  });

  it("in a pod: the service account's token and CA, and the API server of KUBERNETES_SERVICE_HOST/PORT", async () => {
    expect(() => inClusterKubeconfig({}, dir)).toThrow("not in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set");
    const sa = await admin.create({ group: "", version: "v1", kind: "ServiceAccount", plural: "serviceaccounts", namespaced: true }, { metadata: { name: "in-cluster", namespace: "default" } });
    const token = await admin.request<{ status: { token: string } }>("POST", "/api/v1/namespaces/default/serviceaccounts/in-cluster/token", { apiVersion: "authentication.k8s.io/v1", kind: "TokenRequest", spec: { expirationSeconds: 3600 } });
    const saDir = join(dir, "serviceaccount");
    write("serviceaccount/token", token.status.token);
    write("serviceaccount/ca.crt", hub.caPem);
    const url = new URL(hub.url);
    const config = inClusterKubeconfig({ KUBERNETES_SERVICE_HOST: url.hostname, KUBERNETES_SERVICE_PORT: url.port }, saDir);
    expect(config.cluster).toEqual({ name: "in-cluster", server: hub.url, caPem: hub.caPem, insecureSkipTLSVerify: false });
    const c = new KubeClient(config);
    clients.push(c);
    expect((await whoAmI(c)).username).toBe(`system:serviceaccount:default:${sa.metadata.name}`);
  });
});

describe("requests with each kind of credentials", () => {
  it("a client certificate and key as data", async () => {
    const cert = await certificateFor("alice", ["team-a"]);
    const me = await whoAmI(client(kubeconfig({ "client-certificate-data": b64(cert.certPem), "client-key-data": b64(cert.keyPem) })));
    expect(me).toMatchObject({ username: "alice", groups: ["team-a", "system:authenticated"] });
  });

  it("a client certificate and key as files, re-read once a minute", async () => {
    const [first, second] = [await certificateFor("first-cert"), await certificateFor("second-cert")];
    const certFile = write("files/tls.crt", first.certPem);
    const keyFile = write("files/tls.key", first.keyPem);
    const c = client(kubeconfig({ "client-certificate": certFile, "client-key": keyFile }));
    expect((await whoAmI(c)).username).toBe("first-cert");
    write("files/tls.crt", second.certPem);
    write("files/tls.key", second.keyPem);
    vi.useFakeTimers({ toFake: ["Date"] });
    expect((await whoAmI(c)).username).toBe("first-cert"); // within the minute
    vi.setSystemTime(Date.now() + 61_000);
    expect((await whoAmI(c)).username).toBe("second-cert");
  });

  it("a bearer token", async () => {
    const { token, user } = await hub.createBootstrapToken();
    expect((await whoAmI(client(kubeconfig({ token })))).username).toBe(user);
  });

  it("a token file: re-read once a minute, and at once after the server refused it", async () => {
    const [a, b] = [await hub.createBootstrapToken(), await hub.createBootstrapToken()];
    const tokenFile = write("token", `${a.token}\n`);
    const c = client(kubeconfig({ tokenFile }));
    expect((await whoAmI(c)).username).toBe(a.user);
    write("token", b.token);
    vi.useFakeTimers({ toFake: ["Date"] });
    expect((await whoAmI(c)).username).toBe(a.user);
    vi.setSystemTime(Date.now() + 61_000);
    expect((await whoAmI(c)).username).toBe(b.user);

    write("token", "abcdef.0123456789abcdef");
    vi.setSystemTime(Date.now() + 61_000);
    await expect(whoAmI(c)).rejects.toMatchObject({ code: 401 });
    write("token", a.token);
    expect((await whoAmI(c)).username).toBe(a.user); // no minute's wait after a 401
  });

  it("basic auth: sent as an Authorization header, which kube-apiserver (no basic auth since 1.19) passes over", async () => {
    const c = client(kubeconfig({ username: "ann", password: "secret" }));
    expect((await c.requestOptions("GET", "/version")).headers).toMatchObject({ Authorization: `Basic ${b64("ann:secret")}` });
    await expect(whoAmI(c)).rejects.toThrow(/403 Forbidden: .*"system:anonymous" cannot create resource "selfsubjectreviews"/);
  });

  it("impersonation: as, as-uid, as-groups and as-user-extra on top of the admin's certificate", async () => {
    const adminUser = parseKubeconfig(hub.adminKubeconfig).user;
    const me = await whoAmI(
      client(kubeconfig({ "client-certificate-data": b64(adminUser.certPem!), "client-key-data": b64(adminUser.keyPem!), as: "carol", "as-uid": "u-1", "as-groups": ["g1", "g2"], "as-user-extra": { "example.com/team": ["blue"] } })),
    );
    expect(me).toEqual({ username: "carol", uid: "u-1", groups: ["g1", "g2", "system:authenticated"], extra: { "example.com/team": ["blue"] } });
  });

  describe("an exec plugin", () => {
    // Records each run (its KUBERNETES_EXEC_INFO) and prints what its env says.
    const plugin = () =>
      write(
        "plugin.mjs",
        `import { appendFileSync } from "node:fs";
appendFileSync(process.env.RUNS, process.env.KUBERNETES_EXEC_INFO + "\\n");
if (process.env.FAIL) { process.stderr.write(process.env.FAIL); process.exit(1); }
const status = process.env.TOKEN ? { token: process.env.TOKEN } : { clientCertificateData: process.env.CERT, clientKeyData: process.env.KEY };
if (process.env.EXPIRES) status.expirationTimestamp = process.env.EXPIRES;
process.stdout.write(JSON.stringify({ apiVersion: "client.authentication.k8s.io/v1", kind: "ExecCredential", status }));
`,
      );
    const exec = (runs: string, env: Record<string, string>, more: Record<string, unknown> = {}) => ({
      exec: { apiVersion: "client.authentication.k8s.io/v1", command: process.execPath, args: [plugin()], env: Object.entries({ RUNS: runs, ...env }).map(([name, value]) => ({ name, value })), interactiveMode: "Never", ...more },
    });
    const runs = (file: string) => readFileSync(file, "utf8").trim().split("\n").map((l) => JSON.parse(l) as { spec: { interactive: boolean; cluster?: Record<string, unknown> } });

    it("gives a token, kept until it expires, and is asked once by requests that come together", async () => {
      const { token, user } = await hub.createBootstrapToken();
      const log = write("exec/runs-token", "");
      const c = client(kubeconfig(exec(log, { TOKEN: token, EXPIRES: new Date(Date.now() + 3_600_000).toISOString() }, { provideClusterInfo: true })));
      const answers = await Promise.all([whoAmI(c), whoAmI(c), whoAmI(c)]);
      expect(answers.map((a) => a.username)).toEqual([user, user, user]);
      expect((await whoAmI(c)).username).toBe(user);
      const [run, ...more] = runs(log);
      expect(more).toEqual([]);
      expect(run).toEqual({ apiVersion: "client.authentication.k8s.io/v1", kind: "ExecCredential", spec: { interactive: false, cluster: { server: hub.url, "insecure-skip-tls-verify": false, "certificate-authority-data": b64(hub.caPem) } } });
      vi.useFakeTimers({ toFake: ["Date"] });
      vi.setSystemTime(Date.now() + 3_601_000);
      expect((await whoAmI(c)).username).toBe(user);
      expect(runs(log)).toHaveLength(2);
    });

    it("gives a client certificate", async () => {
      const cert = await certificateFor("exec-cert");
      const log = write("exec/runs-cert", "");
      expect((await whoAmI(client(kubeconfig(exec(log, { CERT: cert.certPem, KEY: cert.keyPem }))))).username).toBe("exec-cert");
      expect(runs(log)[0]!.spec).toEqual({ interactive: false }); // no provideClusterInfo
    });

    it("that fails fails the request with what it said", async () => {
      const log = write("exec/runs-fail", "");
      await expect(whoAmI(client(kubeconfig(exec(log, { FAIL: "no credentials for you" }))))).rejects.toThrow(`exec plugin ${process.execPath} failed: no credentials for you`);
    });
  });
});

describe("the cluster's TLS", () => {
  const tokenUser = async () => ({ token: (await hub.createBootstrapToken()).token });

  it("a CA file", async () => {
    const ca = write("tls/ca.crt", hub.caPem);
    await expect(whoAmI(client(kubeconfig(await tokenUser(), { "certificate-authority": ca, "certificate-authority-data": undefined })))).resolves.toMatchObject({ groups: expect.arrayContaining(["system:bootstrappers"]) });
  });

  it("no CA: the system's roots do not trust the hub, unless insecure-skip-tls-verify", async () => {
    const user = await tokenUser();
    await expect(whoAmI(client(kubeconfig(user, { "certificate-authority-data": undefined })))).rejects.toThrow(/self-signed certificate|unable to (get|verify)/);
    await expect(whoAmI(client(kubeconfig(user, { "certificate-authority-data": undefined, "insecure-skip-tls-verify": true })))).resolves.toMatchObject({ groups: expect.arrayContaining(["system:bootstrappers"]) });
  });

  it("tls-server-name: the name the serving certificate is checked against", async () => {
    const user = await tokenUser();
    await expect(whoAmI(client(kubeconfig(user, { "tls-server-name": "localhost" })))).resolves.toMatchObject({ groups: expect.arrayContaining(["system:bootstrappers"]) });
    await expect(whoAmI(client(kubeconfig(user, { "tls-server-name": "elsewhere.invalid" })))).rejects.toThrow(/Hostname\/IP does not match certificate's altnames/);
  });
});

describe("proxy-url", () => {
  it("an HTTP proxy: a CONNECT tunnel per request, with the proxy's credentials from the URL", async () => {
    const proxy = await startConnectProxy();
    try {
      const { token, user } = await hub.createBootstrapToken();
      const c = client(kubeconfig({ token }, { "proxy-url": `http://ops:p%40ss@127.0.0.1:${proxy.port}` }));
      expect(c.cluster.proxyUrl).toBe(`http://ops:p%40ss@127.0.0.1:${proxy.port}`);
      expect((await whoAmI(c)).username).toBe(user);
      expect((await whoAmI(c)).username).toBe(user);
      const target = new URL(hub.url).host;
      expect(proxy.tunnels).toEqual([target, target].map((t) => ({ target: t, auth: `Basic ${b64("ops:p@ss")}` })));
      // a watch goes through it too
      const w = c.watch({ group: "", version: "v1", kind: "Namespace", plural: "namespaces", namespaced: false }, { resourceVersion: "0", timeoutSeconds: 1 }, () => {});
      await w.done.catch(() => undefined); // a bootstrap token may not watch namespaces: 403, through the proxy
      expect(proxy.tunnels).toHaveLength(3);
    } finally {
      await proxy.close();
    }
  });

  it("a proxy URL whose credentials do not decode is refused by the connector itself, before any socket exists (issue 23)", () => {
    expect(() => proxyConnector("http://%zz@127.0.0.1:9")).toThrow(new Error("proxy URL http://127.0.0.1:9: the user name is not valid percent-encoded UTF-8"));
  });

  it("a proxy that hangs up during the handshake is the request's ordinary error, not an unhandled one", async () => {
    const server: Server = createTcpServer((socket) => socket.destroy());
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as { port: number };
    try {
      const err = await whoAmI(client(kubeconfig({ token: "x" }, { "proxy-url": `http://127.0.0.1:${port}` }))).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(KubeError);
      expect((err as KubeError).message).toMatch(new RegExp(`proxy http://127.0.0.1:${port} closed the connection|ECONNRESET`));
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  it("an HTTP proxy that refuses the tunnel, and one nobody listens on", async () => {
    const proxy = await startConnectProxy({ refuse: true });
    try {
      const { token } = await hub.createBootstrapToken();
      await expect(whoAmI(client(kubeconfig({ token }, { "proxy-url": `http://127.0.0.1:${proxy.port}` })))).rejects.toThrow(`proxy refused the tunnel to ${new URL(hub.url).host}: HTTP/1.1 403 Forbidden`);
    } finally {
      await proxy.close();
    }
    const err = await whoAmI(client(kubeconfig({ token: "x" }, { "proxy-url": `http://127.0.0.1:${proxy.port}` }))).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(KubeError);
    expect((err as KubeError).message).toMatch(/ECONNREFUSED/);
  });

  it.each([
    { name: "without authentication", auth: undefined },
    { name: "with a username and password", auth: { user: "ops", password: "pw" } },
  ])("a SOCKS5 proxy $name", async ({ auth }) => {
    const proxy = await startSocks5Proxy(auth);
    try {
      const { token, user } = await hub.createBootstrapToken();
      const creds = auth ? `${auth.user}:${auth.password}@` : "";
      expect((await whoAmI(client(kubeconfig({ token }, { "proxy-url": `socks5://${creds}127.0.0.1:${proxy.port}` })))).username).toBe(user);
      expect(proxy.targets).toEqual([new URL(hub.url).host]);
      if (auth) await expect(whoAmI(client(kubeconfig({ token }, { "proxy-url": `socks5://ops:wrong@127.0.0.1:${proxy.port}` })))).rejects.toThrow("SOCKS5 proxy refused the username and password");
    } finally {
      await proxy.close();
    }
  });
});

// Proxies in the test process that record where their tunnels lead.
function closable(server: Server, sockets: Set<Socket>): () => Promise<void> {
  return () =>
    new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      server.close(() => resolve());
    });
}

function pipeBoth(a: Socket, b: Socket, sockets: Set<Socket>): void {
  for (const s of [a, b]) {
    sockets.add(s);
    s.on("error", () => s.destroy());
    s.on("close", () => {
      sockets.delete(s);
      a.destroy();
      b.destroy();
    });
  }
  a.pipe(b).pipe(a);
}

async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return (server.address() as { port: number }).port;
}

async function startConnectProxy(o: { refuse?: boolean } = {}) {
  const tunnels: { target: string; auth?: string }[] = [];
  const sockets = new Set<Socket>();
  const server = createHttpServer((_req, res) => res.writeHead(405).end());
  server.on("connect", (req: { url?: string; headers: Record<string, string | undefined> }, socket: Socket, head: Buffer) => {
    const target = req.url ?? "";
    tunnels.push({ target, ...(req.headers["proxy-authorization"] ? { auth: req.headers["proxy-authorization"] } : {}) });
    if (o.refuse) return void socket.end("HTTP/1.1 403 Forbidden\r\n\r\n");
    const i = target.lastIndexOf(":");
    const upstream = connect(Number(target.slice(i + 1)), target.slice(0, i), () => {
      socket.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      upstream.write(head);
      pipeBoth(socket, upstream, sockets);
    });
    upstream.on("error", () => socket.destroy());
  });
  const port = await listen(server as unknown as Server);
  return { port, tunnels, close: closable(server as unknown as Server, sockets) };
}

// RFC 1928 CONNECT and RFC 1929 username/password, as much as the client above uses.
async function startSocks5Proxy(auth?: { user: string; password: string }) {
  const targets: string[] = [];
  const sockets = new Set<Socket>();
  const server = createTcpServer((client) => {
    let buffered = Buffer.alloc(0);
    let stage: "greeting" | "auth" | "request" = "greeting";
    const onData = (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      if (stage === "greeting" && buffered.length >= 2 && buffered.length >= 2 + buffered[1]!) {
        const methods = [...buffered.subarray(2, 2 + buffered[1]!)];
        buffered = buffered.subarray(2 + buffered[1]!);
        const method = auth ? (methods.includes(2) ? 2 : 0xff) : methods.includes(0) ? 0 : 0xff;
        client.write(Buffer.from([5, method]));
        if (method === 0xff) return void client.end();
        stage = auth ? "auth" : "request";
      }
      if (stage === "auth" && buffered.length >= 2) {
        const ulen = buffered[1]!;
        if (buffered.length < 3 + ulen || buffered.length < 3 + ulen + buffered[2 + ulen]!) return;
        const plen = buffered[2 + ulen]!;
        const ok = buffered.subarray(2, 2 + ulen).toString() === auth!.user && buffered.subarray(3 + ulen, 3 + ulen + plen).toString() === auth!.password;
        buffered = buffered.subarray(3 + ulen + plen);
        client.write(Buffer.from([1, ok ? 0 : 1]));
        if (!ok) return void client.end();
        stage = "request";
      }
      if (stage === "request" && buffered.length >= 5) {
        const type = buffered[3];
        const length = type === 1 ? 4 : type === 4 ? 16 : 1 + buffered[4]!;
        if (buffered.length < 6 + length) return;
        const host = type === 1 ? [...buffered.subarray(4, 8)].join(".") : type === 3 ? buffered.subarray(5, 5 + buffered[4]!).toString() : "";
        const port = buffered.readUInt16BE(4 + length);
        targets.push(`${host}:${port}`);
        client.off("data", onData);
        const upstream = connect(port, host, () => {
          client.write(Buffer.from([5, 0, 0, 1, 0, 0, 0, 0, 0, 0]));
          pipeBoth(client, upstream, sockets);
        });
        upstream.on("error", () => client.end(Buffer.from([5, 5, 0, 1, 0, 0, 0, 0, 0, 0])));
      }
    };
    client.on("data", onData);
    client.on("error", () => client.destroy());
  });
  const port = await listen(server);
  return { port, targets, close: closable(server, sockets) };
}

describe("clients of a function process (shared/kube/clients.ts)", () => {
  it("reads a cluster's kubeconfig file once, and again once the file changes (a rotated mounted Secret)", async () => {
    const folder = join(dir, `clients-${Math.random().toString(36).slice(2, 7)}`);
    mkdirSync(folder);
    const file = join(folder, "managed.kubeconfig");
    writeFileSync(file, hub.adminKubeconfig);
    const clientsOf = clientsFromEnv({ OCM_KUBECONFIG_DIR: folder, OCM_CLUSTER_NAME: "spoke" });
    const first = clientsOf("managed");
    expect(clientsOf("managed")).toBe(first);
    expect((await first.request<{ gitVersion: string }>("GET", "/version")).gitVersion).toMatch(/^v1\./);
    const renamed = hub.adminKubeconfig.replace(/server: https:\/\/127\.0\.0\.1:/, "server: https://localhost:");
    expect(renamed).not.toBe(hub.adminKubeconfig);
    writeFileSync(file, renamed);
    utimesSync(file, new Date(), new Date(Date.now() + 5_000)); // a later mtime, whatever the clock's grain
    const second = clientsOf("managed");
    expect(second).not.toBe(first);
    expect(second.server).toContain("https://localhost:");
    expect(() => clientsOf("elsewhere")).toThrow("no credentials for cluster elsewhere");
  });
});
