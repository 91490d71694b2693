// Recording what the relay sent: one JSON line per event and sink once its delivery is settled, in a
// shape tests can replay (the CloudEvent's attributes and data as they went out, plus the answer).
import { createWriteStream } from "node:fs";
import type { DeliveryRecord } from "./sinks.ts";

export type Recorder = { write(r: DeliveryRecord): void; close(): Promise<void> };

// A failed write is reported once through onError and ends the recording, not the relay.
export function openRecorder(path: string, onError: (err: Error) => void): Recorder {
  const out = createWriteStream(path, { flags: "a" });
  let failed: Error | undefined;
  out.on("error", (err) => {
    failed = err;
    onError(err);
  });
  return {
    write(r) {
      if (!failed) out.write(`${JSON.stringify(r)}\n`);
    },
    close: () =>
      new Promise<void>((resolve, reject) => {
        if (failed) return resolve();
        out.end((err?: Error | null) => (err ? reject(err) : resolve()));
      }),
  };
}
