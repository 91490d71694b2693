// Pushes images to any registry that speaks the OCI distribution API: HEAD skips blobs the repository
// has, a cross-repository mount reuses blobs pushed to another repository in this run, the rest go up
// monolithically (POST, then PUT ?digest=), and the manifest last under its tag. Plain HTTP for
// loopback hosts, HTTPS otherwise; Basic, or Bearer tokens from the registry's realm, when challenged.
import type { Blob, Image } from "./oci.ts";

export type Credentials = { username: string; password: string };
export type PushResult = { reference: string; digest: string; uploaded: number; mounted: number; skipped: number };

// "127.0.0.1:5000/ocm-functions" → origin http://127.0.0.1:5000, path ocm-functions. An explicit
// http:// or https:// wins over the loopback rule.
export function parseRegistry(target: string): { origin: string; host: string; path: string } {
  const scheme = /^(https?):\/\//.exec(target)?.[1];
  const rest = target.replace(/^https?:\/\//, "").replace(/\/+$/, "");
  const slash = rest.indexOf("/");
  const host = slash < 0 ? rest : rest.slice(0, slash);
  const path = slash < 0 ? "" : rest.slice(slash + 1);
  const hostname = host.startsWith("[") ? host.slice(0, host.indexOf("]") + 1) : host.split(":")[0]!;
  const loopback = hostname === "localhost" || hostname === "[::1]" || /^127\./.test(hostname);
  return { origin: `${scheme ?? (loopback ? "http" : "https")}://${host}`, host, path };
}

// "Bearer realm="https://auth.example/token",service="registry",scope="repository:a:pull,push""
function challengeParams(header: string): Record<string, string> {
  const params: Record<string, string> = {};
  for (const m of header.matchAll(/(\w+)="([^"]*)"/g)) params[m[1]!] = m[2]!;
  return params;
}

async function failure(what: string, res: Response): Promise<Error> {
  const body = await res.text().catch(() => "");
  return new Error(`${what}: ${res.status} ${res.statusText} ${body.slice(0, 500)}`.trim());
}

export class Registry {
  readonly origin: string;
  readonly host: string;
  readonly path: string;
  private readonly credentials: Credentials | undefined;
  // Authorization per repository, from its last challenge; a mount may need a wider token.
  private readonly authorization = new Map<string, string>();
  // Which repository already holds a blob, so the next repository mounts it instead of uploading.
  private readonly holder = new Map<string, string>();

  constructor(target: string, credentials?: Credentials) {
    ({ origin: this.origin, host: this.host, path: this.path } = parseRegistry(target));
    this.credentials = credentials;
  }

  repository(name: string): string {
    return this.path ? `${this.path}/${name}` : name;
  }

  async push(name: string, tag: string, image: Image): Promise<PushResult> {
    const repo = this.repository(name);
    const counts = { uploaded: 0, mounted: 0, skipped: 0 };
    for (const b of [...image.layers, image.config]) counts[await this.pushBlob(repo, b)]++;
    const res = await this.request(repo, "PUT", `/v2/${repo}/manifests/${tag}`, { "content-type": image.manifest.mediaType }, image.manifest.data);
    if (res.status !== 201) throw await failure(`PUT manifest ${repo}:${tag}`, res);
    await res.body?.cancel();
    const digest = res.headers.get("docker-content-digest");
    if (digest && digest !== image.manifest.digest) throw new Error(`${repo}:${tag}: the registry stored ${digest}, we sent ${image.manifest.digest}`);
    return { reference: `${this.host}/${repo}@${image.manifest.digest}`, digest: image.manifest.digest, ...counts };
  }

  private async pushBlob(repo: string, b: Blob): Promise<"uploaded" | "mounted" | "skipped"> {
    const head = await this.request(repo, "HEAD", `/v2/${repo}/blobs/${b.digest}`);
    await head.body?.cancel();
    if (head.ok) return this.held(repo, b, "skipped");
    if (head.status !== 404) throw await failure(`HEAD ${repo}@${b.digest}`, head);
    const from = this.holder.get(b.digest);
    const query = from && from !== repo ? `?mount=${b.digest}&from=${encodeURIComponent(from)}` : "";
    const start = await this.request(repo, "POST", `/v2/${repo}/blobs/uploads/${query}`);
    await start.body?.cancel();
    if (start.status === 201) return this.held(repo, b, "mounted");
    const location = start.headers.get("location");
    if (start.status !== 202 || !location) throw await failure(`POST upload ${repo}`, start);
    const url = new URL(location, this.origin);
    url.searchParams.set("digest", b.digest);
    const put = await this.request(repo, "PUT", url.pathname + url.search, { "content-type": "application/octet-stream" }, b.data);
    if (put.status !== 201) throw await failure(`PUT ${repo}@${b.digest}`, put);
    await put.body?.cancel();
    return this.held(repo, b, "uploaded");
  }

  private held<T>(repo: string, b: Blob, outcome: T): T {
    this.holder.set(b.digest, repo);
    return outcome;
  }

  // One request, answered once more with credentials when the registry challenges it.
  private async request(repo: string, method: string, path: string, headers: Record<string, string> = {}, body?: Buffer): Promise<Response> {
    const send = () => {
      const auth = this.authorization.get(repo);
      return fetch(new URL(path, this.origin), { method, headers: auth ? { ...headers, authorization: auth } : headers, ...(body ? { body } : {}) });
    };
    const res = await send();
    const challenge = res.headers.get("www-authenticate");
    if (res.status !== 401 || !challenge) return res;
    await res.body?.cancel();
    this.authorization.set(repo, await this.answer(challenge));
    return send();
  }

  private async answer(challenge: string): Promise<string> {
    const basic = this.credentials && `Basic ${Buffer.from(`${this.credentials.username}:${this.credentials.password}`).toString("base64")}`;
    if (/^basic\b/i.test(challenge)) {
      if (!basic) throw new Error(`${this.host} asks for a user name and password (Basic)`);
      return basic;
    }
    if (!/^bearer\b/i.test(challenge)) throw new Error(`${this.host}: unsupported challenge ${challenge}`);
    const { realm, service, scope } = challengeParams(challenge);
    if (!realm) throw new Error(`${this.host}: Bearer challenge without realm: ${challenge}`);
    const url = new URL(realm);
    if (service) url.searchParams.set("service", service);
    // distribution names several scopes in one attribute, separated by spaces.
    for (const s of scope?.split(" ") ?? []) url.searchParams.append("scope", s);
    const res = await fetch(url, { headers: basic ? { authorization: basic } : {} });
    if (!res.ok) throw await failure(`token from ${url.origin}${url.pathname}`, res);
    const { token, access_token } = (await res.json()) as { token?: string; access_token?: string };
    if (!token && !access_token) throw new Error(`${url.origin}${url.pathname} answered without a token`);
    return `Bearer ${token ?? access_token}`;
  }
}
