// What a failed Kubernetes call means for a reconcile: the only code that reads API status codes.

export type ErrorClass =
  | "not-found"
  | "conflict" // 409 on a write with a stale resourceVersion
  | "already-exists"
  | "forbidden"
  | "unauthorized"
  | "invalid" // 400/422: our request is wrong, retrying will not help
  | "transient" // 429, 5xx, timeouts, connection failures: the source should retry
  | "unknown";

export class KubeError extends Error {
  readonly code: number; // HTTP status, 0 for network failures
  readonly reason: string; // Kubernetes Status reason (NotFound, Conflict, AlreadyExists, ...)

  constructor(code: number, reason: string, message: string) {
    super(message);
    this.name = "KubeError";
    this.code = code;
    this.reason = reason;
  }

  static fromResponse(code: number, body: string, what: string): KubeError {
    let reason = "";
    let message = body.slice(0, 500);
    try {
      const status = JSON.parse(body) as { reason?: string; message?: string };
      reason = status.reason ?? "";
      message = status.message ?? message;
    } catch {
      // not a Status object (a proxy, an HTML page): keep the raw text
    }
    return new KubeError(code, reason, `${what}: ${code} ${reason}: ${message}`);
  }

  static fromNetwork(err: Error, what: string): KubeError {
    return new KubeError(0, "NetworkError", `${what}: ${err.message}`);
  }
}

export function statusCodeOf(err: unknown): number | undefined {
  if (err instanceof KubeError) return err.code;
  return undefined;
}

export function classifyError(err: unknown): ErrorClass {
  const code = statusCodeOf(err);
  if (code === undefined) {
    const net = err as { code?: unknown };
    // System errors (ECONNREFUSED, ECONNRESET, ETIMEDOUT...) and undici's; not Node's ERR_* usage errors.
    return typeof net?.code === "string" && /^(E[A-Z]+$|UND_ERR_)/.test(net.code) ? "transient" : "unknown";
  }
  if (err instanceof KubeError && err.reason === "AlreadyExists") return "already-exists";
  switch (code) {
    case 0:
      return "transient";
    case 401:
      return "unauthorized";
    case 403:
      return "forbidden";
    case 404:
      return "not-found";
    case 409:
      return "conflict";
    case 400:
    case 422:
      return "invalid";
    default:
      return code === 429 || code >= 500 ? "transient" : "unknown";
  }
}

export const isNotFound = (err: unknown) => classifyError(err) === "not-found";
export const isConflict = (err: unknown) => classifyError(err) === "conflict";
export const isAlreadyExists = (err: unknown) => classifyError(err) === "already-exists";
