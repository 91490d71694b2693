// One more try after an answer that says "later" (429, or a 5xx such as a CRD's storage still
// initializing), as kubectl's client retries; no answer at all is reported at once, since it names a
// wrong or unreachable server far more often than a blip. The classes are shared/kube/errors.ts's, the
// functions' runtime's too; only "an answer came" is the CLI's own condition.
import { classifyError, statusCodeOf } from "../shared/kube/errors.ts";
import { sleep } from "../shared/timers.ts";

const isTransient = (err: unknown) => classifyError(err) === "transient" && (statusCodeOf(err) ?? 0) > 0;

export async function again<T>(call: () => Promise<T>, attempts = 8): Promise<T> {
  for (let attempt = 1, delay = 200; ; attempt++, delay = Math.min(delay * 2, 3_000)) {
    try {
      return await call();
    } catch (err) {
      if (!isTransient(err) || attempt >= attempts) throw err;
    }
    await sleep(delay);
  }
}
