// What a failed Kubernetes call means: the only code that reads API status codes. classifyError names
// the failure; decisionOf is the one rule that turns it into what the runtime does (shared/harness.ts)
// and the CLI's retry (cli/transient.ts) reads the same classes.

export type ErrorClass =
  | "not-found"
  | "conflict" // 409 on a write with a stale resourceVersion
  | "already-exists"
  | "forbidden" // 403 from the authorizer (RBAC): the identity lacks a permission
  | "denied" // 403 from admission: a ValidatingAdmissionPolicy, a webhook, a namespace being terminated
  | "unauthorized"
  | "invalid" // 400/422: our request is wrong, retrying will not help
  | "transient" // 429, 5xx, timeouts, connection failures: the source should retry
  | "unknown";

export type StatusCause = { reason?: string; message?: string; field?: string };

export class KubeError extends Error {
  readonly code: number; // HTTP status, 0 for network failures
  readonly reason: string; // Kubernetes Status reason (NotFound, Conflict, AlreadyExists, ...)
  readonly causes: readonly StatusCause[]; // the Status's details.causes (NamespaceTerminating, field errors)

  constructor(code: number, reason: string, message: string, causes: readonly StatusCause[] = []) {
    super(message);
    this.name = "KubeError";
    this.code = code;
    this.reason = reason;
    this.causes = causes;
  }

  static fromResponse(code: number, body: string, what: string): KubeError {
    let reason = "";
    let message = body.slice(0, 500);
    let causes: StatusCause[] = [];
    try {
      const status = JSON.parse(body) as { reason?: string; message?: string; details?: { causes?: unknown } };
      reason = status.reason ?? "";
      message = status.message ?? message;
      if (Array.isArray(status.details?.causes)) causes = status.details.causes.filter((c): c is StatusCause => typeof c === "object" && c !== null);
    } catch {
      // not a Status object (a proxy, an HTML page): keep the raw text
    }
    return new KubeError(code, reason, `${what}: ${code} ${reason}: ${message}`, causes);
  }

  static fromNetwork(err: Error, what: string): KubeError {
    return new KubeError(0, "NetworkError", `${what}: ${err.message}`);
  }
}

// The conflict of a reconcile judged from handed state that the API server no longer holds
// (shared/observed.ts): not a write's stale resourceVersion but a stale judgement, so only a new
// judgement may follow, never the same write made again. `kinds` names what was found changed or
// written to, as "<cluster>|<group>|<kind>"; `answered`, what the API server answered the confirming
// reads (null: absent), by kind as `kinds` names them and then by object, less the kinds written to.
export class StaleStateError extends KubeError {
  readonly kinds: readonly string[];
  readonly answered: ReadonlyMap<string, unknown>;
  constructor(message: string, kinds: readonly string[], answered: ReadonlyMap<string, unknown> = new Map()) {
    super(409, "Conflict", message);
    this.name = "StaleStateError";
    this.kinds = kinds;
    this.answered = answered;
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
      return isAdmissionDenial(err) ? "denied" : "forbidden";
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

// Admission answers 403 Forbidden as the authorizer does; what tells them apart is the Status: a
// namespace being deleted names the cause NamespaceTerminating, a ValidatingAdmissionPolicy and a
// webhook say they denied the request. Anything else refused is the authorizer's.
const ADMISSION_DENIAL = /ValidatingAdmissionPolicy '[^']*' with binding '[^']*' denied request|admission webhook "[^"]*" denied the request|because it is being terminated/;
function isAdmissionDenial(err: unknown): boolean {
  if (!(err instanceof KubeError)) return false;
  return err.causes.some((c) => c.reason === "NamespaceTerminating") || ADMISSION_DENIAL.test(err.message);
}

// What the runtime does about a failure, decided once from its class:
// - retry: 429/5xx, unreachable, a conflict, something that vanished or appeared mid-reconcile, a
//   credential being rotated (401): the same event later may well succeed;
// - permission: the authorizer refused (RBAC); named with verb and resource, and retried by the source,
//   since a grant may still arrive;
// - terminal: 400/422 or an admission denial: the same request will be refused again, so no source
//   should send the event again;
// - error: anything the classifier does not know (a bug, most likely), answered as a failure.
export type Decision = "retry" | "permission" | "terminal" | "error";

export function decisionOf(err: unknown): Decision {
  switch (classifyError(err)) {
    case "forbidden":
      return "permission";
    case "denied":
    case "invalid":
      return "terminal";
    case "unknown":
      return "error";
    default:
      return "retry";
  }
}

// The user and what it may not do, as the authorizer's message names them; {} when it does not.
export type MissingPermission = { user?: string; verb?: string; resource?: string; group?: string; namespace?: string };
export function missingPermission(err: unknown): MissingPermission {
  const message = err instanceof Error ? err.message : String(err);
  const m = /User "([^"]*)" cannot (\S+) resource "([^"]*)" in API group "([^"]*)"(?: in the namespace "([^"]*)")?/.exec(message);
  return m ? { user: m[1], verb: m[2], resource: m[3], group: m[4], ...(m[5] ? { namespace: m[5] } : {}) } : {};
}

export const isNotFound = (err: unknown) => classifyError(err) === "not-found";
export const isConflict = (err: unknown) => classifyError(err) === "conflict";
export const isAlreadyExists = (err: unknown) => classifyError(err) === "already-exists";
