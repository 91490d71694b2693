// The Kubernetes client every function and the relay use: REST calls addressed by ApiResource,
// authenticated from a kubeconfig (./kubeconfig.ts reads it, ./credentials.ts signs each request),
// errors as KubeError.
import { Agent, request, type RequestOptions } from "node:https";
import type { ApiResource } from "../api/meta.ts";
import { inClusterKubeconfig, parseKubeconfig, readKubeconfigFile, type KubeCluster, type Kubeconfig, type KubeUser } from "./kubeconfig.ts";
import { UserCredentials } from "./credentials.ts";
import { proxyConnector } from "./proxy.ts";
import { KubeError } from "./errors.ts";
import type { LabelQuery } from "../selector-query.ts";
import { metrics } from "../metrics.ts";

// client-go's request counter (k8s.io/client-go/tools/metrics, as component-base registers it): one per
// HTTP exchange with an API server, by status code ("<error>" when none came), method and host.
export const restClientRequests = metrics.counter("rest_client_requests_total", "Number of HTTP requests, partitioned by status code, method, and host.", ["code", "method", "host"]);
export const countRequest = (code: number | undefined, method: string, host: string): void => restClientRequests.inc([code ? String(code) : "<error>", method, host]);

export type KubeObject = {
  apiVersion?: string;
  kind?: string;
  metadata: { name?: string; namespace?: string; resourceVersion?: string; uid?: string; [k: string]: unknown };
  [k: string]: unknown;
};

// Selectors are sent URL-encoded as they are: a value taken from data must already be escaped
// (fieldSelectorOf, shared/selector-query.ts) or, for labels, checked (labelsQuery).
export type ListOptions = { namespace?: string; labelSelector?: string; fieldSelector?: string };
export type PatchType = "merge" | "json" | "apply";
export type WatchEvent = { type: "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK" | "ERROR"; object: KubeObject };

const CONTENT_TYPES: Record<PatchType, string> = {
  merge: "application/merge-patch+json",
  json: "application/json-patch+json",
  apply: "application/apply-patch+yaml",
};

// apimachinery's IsValidPathSegmentName, the rule for every name in a URL path: a name of "." or ".."
// would resolve to the collection (a GET lists, a DELETE deletes the collection), "/" and "%" to
// another path.
export function pathSegmentProblem(s: string): string | undefined {
  if (s === "") return "may not be empty";
  if (s === "." || s === "..") return `may not be '${s}'`;
  if (s.includes("/")) return "may not contain '/'";
  if (s.includes("%")) return "may not contain '%'";
  return undefined;
}

// name undefined addresses the collection; a namespace of "" or undefined, no namespace (cluster-scoped
// objects, and lists, watches and creates across namespaces).
export function resourcePath(r: ApiResource, o: { namespace?: string; name?: string; subresource?: string } = {}): string {
  const segment = (what: string, s: string) => {
    const problem = pathSegmentProblem(s);
    if (problem) throw new Error(`refusing a request for ${r.plural}: ${what} ${JSON.stringify(s)} ${problem}`);
    return `/${encodeURIComponent(s)}`;
  };
  const base = r.group === "" ? `/api/${r.version}` : `/apis/${r.group}/${r.version}`;
  const ns = r.namespaced && o.namespace ? `/namespaces${segment("namespace", o.namespace)}` : "";
  const name = o.name === undefined ? "" : segment("name", o.name);
  const sub = o.subresource ? `/${o.subresource}` : "";
  return `${base}${ns}/${r.plural}${name}${sub}`;
}

function query(params: Record<string, string | number | boolean | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== "") q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : "";
}

export class KubeClient {
  readonly server: string; // cluster.server without a trailing slash
  readonly host: string; // the server's host:port, as the request metric names it
  readonly cluster: KubeCluster;
  readonly user: KubeUser;
  private readonly credentials: UserCredentials;
  // Kept alive, so a call is not a new TLS handshake. Requests through a proxy open a tunnel each.
  private readonly agent = new Agent({ keepAlive: true, maxSockets: 16 });
  private readonly viaProxy?: RequestOptions["createConnection"];

  constructor(config: Kubeconfig) {
    this.cluster = config.cluster;
    this.user = config.user;
    this.server = config.cluster.server.replace(/\/$/, "");
    this.host = URL.canParse(this.server) ? new URL(this.server).host : this.server; // a bad URL fails at the first request, as before
    this.credentials = new UserCredentials(config.cluster, config.user);
    if (config.cluster.proxyUrl) this.viaProxy = proxyConnector(config.cluster.proxyUrl);
  }

  // Relative file names in the text are relative to the working directory; fromKubeconfigFile's to the file.
  static fromKubeconfig(yamlText: string): KubeClient {
    return new KubeClient(parseKubeconfig(yamlText));
  }

  static fromKubeconfigFile(file: string): KubeClient {
    return new KubeClient(readKubeconfigFile(file));
  }

  // The pod's service account.
  static inCluster(): KubeClient {
    return new KubeClient(inClusterKubeconfig());
  }

  close(): void {
    this.agent.destroy();
  }

  // One HTTP exchange; the body is parsed as JSON when it is JSON. Non-2xx answers throw KubeError.
  async request<T = unknown>(method: string, path: string, body?: unknown, contentType = "application/json"): Promise<T> {
    const opts = await this.requestOptions(method, path, body === undefined ? undefined : contentType);
    const payload = body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body);
    // Node neither chunks nor measures a DELETE body: without a length, on a kept-alive connection
    // the body would be read as the start of the next request.
    if (payload !== undefined) opts.headers = { ...opts.headers, "Content-Length": Buffer.byteLength(payload) };
    return new Promise<T>((resolve, reject) => {
      let answered = false;
      const req = request(opts, (res) => {
        answered = true;
        countRequest(res.statusCode, method, this.host);
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString();
          const status = res.statusCode ?? 0;
          if (status >= 200 && status < 300) {
            try {
              resolve((res.headers["content-type"]?.includes("json") ? JSON.parse(text) : text) as T);
            } catch {
              reject(new KubeError(0, "BadResponse", `${method} ${path}: the answer is not JSON: ${text.slice(0, 200)}`));
            }
          } else {
            if (status === 401) this.credentials.forget();
            reject(KubeError.fromResponse(status, text, `${method} ${path}`));
          }
        });
        res.on("error", reject);
      });
      req.on("error", (err) => {
        // no answer (an answer that broke off mid-body was counted with its status)
        if (!answered) countRequest(undefined, method, this.host);
        reject(KubeError.fromNetwork(err, `${method} ${path}`));
      });
      req.setTimeout(30_000, () => req.destroy(new Error("request timed out after 30 s")));
      if (payload !== undefined) req.write(payload);
      req.end();
    });
  }

  // One request's options: where, TLS trust, credentials, and the keep-alive agent or the proxy tunnel.
  async requestOptions(method: string, path: string, contentType?: string): Promise<RequestOptions> {
    const url = new URL(this.server + path);
    const { cert, key, headers } = await this.credentials.current();
    const opts: RequestOptions = {
      method,
      protocol: url.protocol,
      hostname: url.hostname,
      port: url.port,
      path: url.pathname + url.search,
      headers: { Accept: "application/json", ...(contentType ? { "Content-Type": contentType } : {}), ...headers },
    };
    if (this.cluster.caPem !== undefined) opts.ca = this.cluster.caPem;
    if (this.cluster.insecureSkipTLSVerify) opts.rejectUnauthorized = false;
    if (this.cluster.tlsServerName) opts.servername = this.cluster.tlsServerName;
    if (cert !== undefined) [opts.cert, opts.key] = [cert, key];
    if (this.viaProxy) opts.createConnection = this.viaProxy;
    else opts.agent = this.agent;
    return opts;
  }

  // undefined when the object does not exist: a missing object is a state to reconcile, not an error.
  async get<T extends KubeObject>(r: ApiResource, name: string, namespace?: string): Promise<T | undefined> {
    try {
      return await this.request<T>("GET", resourcePath(r, { name, namespace }));
    } catch (err) {
      if (err instanceof KubeError && err.code === 404) return undefined;
      throw err;
    }
  }

  // A LabelQuery that selects nothing is not sent: the answer is an empty list (with no resourceVersion
  // to watch from).
  async list<T extends KubeObject>(r: ApiResource, o: Omit<ListOptions, "labelSelector"> & { labelSelector?: string | LabelQuery } = {}): Promise<{ items: T[]; resourceVersion: string }> {
    const ls = o.labelSelector;
    if (typeof ls === "object" && ls.selects === "nothing") return { items: [], resourceVersion: "" };
    const labelSelector = typeof ls === "object" ? ls.labelSelector : ls;
    const list = await this.request<{ items: T[]; metadata: { resourceVersion: string } }>(
      "GET",
      resourcePath(r, { namespace: o.namespace }) + query({ labelSelector, fieldSelector: o.fieldSelector }),
    );
    return { items: list.items ?? [], resourceVersion: list.metadata.resourceVersion };
  }

  create<T extends KubeObject>(r: ApiResource, body: T): Promise<T> {
    return this.request<T>("POST", resourcePath(r, { namespace: body.metadata.namespace }), withType(r, body));
  }

  // PUT: carries metadata.resourceVersion, so a concurrent change answers 409.
  update<T extends KubeObject>(r: ApiResource, body: T, subresource?: "status" | "approval"): Promise<T> {
    const path = resourcePath(r, { name: body.metadata.name ?? "", namespace: body.metadata.namespace, subresource });
    return this.request<T>("PUT", path, withType(r, body));
  }

  patch<T extends KubeObject>(r: ApiResource, name: string, patch: unknown, o: { namespace?: string; subresource?: string; type?: PatchType; fieldManager?: string } = {}): Promise<T> {
    const path = resourcePath(r, { name, namespace: o.namespace, subresource: o.subresource }) + query({ fieldManager: o.fieldManager });
    return this.request<T>("PATCH", path, patch, CONTENT_TYPES[o.type ?? "merge"]);
  }

  // false when it was already gone. `uid` and `resourceVersion` are preconditions: another object of the
  // name, or a change since the one judged, answers 409.
  async delete(r: ApiResource, name: string, namespace?: string, o: { propagationPolicy?: "Foreground" | "Background" | "Orphan"; uid?: string; resourceVersion?: string } = {}): Promise<boolean> {
    const preconditions = { ...(o.uid ? { uid: o.uid } : {}), ...(o.resourceVersion ? { resourceVersion: o.resourceVersion } : {}) };
    const body = { kind: "DeleteOptions", apiVersion: "v1", propagationPolicy: o.propagationPolicy, ...(Object.keys(preconditions).length > 0 ? { preconditions } : {}) };
    try {
      await this.request("DELETE", resourcePath(r, { name, namespace }), body);
      return true;
    } catch (err) {
      if (err instanceof KubeError && err.code === 404) return false;
      throw err;
    }
  }

  // A streaming watch from resourceVersion. Resolves when the server ends the stream (timeoutSeconds)
  // or stop() is called; rejects on a connection error. 410 Gone arrives as an ERROR event.
  watch(r: ApiResource, o: ListOptions & { resourceVersion: string; timeoutSeconds?: number }, onEvent: (e: WatchEvent) => void): { stop(): void; done: Promise<void> } {
    let stopRequest = () => {};
    let stopped = false;
    const done = (async () => {
      const path =
        resourcePath(r, { namespace: o.namespace }) +
        query({ watch: true, allowWatchBookmarks: true, resourceVersion: o.resourceVersion, labelSelector: o.labelSelector, fieldSelector: o.fieldSelector, timeoutSeconds: o.timeoutSeconds ?? 300 });
      const opts = await this.requestOptions("GET", path);
      if (!this.viaProxy) opts.agent = undefined; // a long-lived stream gets a connection of its own, outside the pool
      if (stopped) return;
      await new Promise<void>((resolve, reject) => {
        let answered = false;
        const req = request(opts, (res) => {
          answered = true;
          countRequest(res.statusCode, "GET", this.host);
          if (res.statusCode !== 200) {
            if (res.statusCode === 401) this.credentials.forget();
            const chunks: Buffer[] = [];
            res.on("data", (c: Buffer) => chunks.push(c));
            res.on("end", () => reject(KubeError.fromResponse(res.statusCode ?? 0, Buffer.concat(chunks).toString(), `WATCH ${path}`)));
            return;
          }
          let buffered = "";
          res.setEncoding("utf8");
          res.on("data", (chunk: string) => {
            buffered += chunk;
            let nl: number;
            while ((nl = buffered.indexOf("\n")) >= 0) {
              const line = buffered.slice(0, nl).trim();
              buffered = buffered.slice(nl + 1);
              if (!line) continue;
              try {
                onEvent(JSON.parse(line) as WatchEvent);
              } catch (err) {
                // A broken line or a failing handler ends this watch (the caller resumes), not the process.
                req.destroy();
                reject(err instanceof KubeError ? err : KubeError.fromNetwork(err as Error, `WATCH ${path}`));
                return;
              }
            }
          });
          res.on("end", () => resolve());
          res.on("error", (err) => reject(KubeError.fromNetwork(err, `WATCH ${path}`)));
          res.on("aborted", () => resolve());
        });
        stopRequest = () => {
          req.destroy();
          resolve();
        };
        req.on("error", (err) => {
          if (!answered) countRequest(undefined, "GET", this.host);
          reject(KubeError.fromNetwork(err, `WATCH ${path}`));
        });
        req.end();
      });
    })();
    const stop = () => {
      stopped = true;
      stopRequest();
    };
    return { stop, done };
  }
}

function withType<T extends KubeObject>(r: ApiResource, body: T): T {
  return { apiVersion: r.group ? `${r.group}/${r.version}` : r.version, kind: r.kind, ...body };
}
