// Time for reconciles and the sidecar: always injected, so tests move it instead of waiting.
export type Clock = { now(): Date };

export const systemClock: Clock = { now: () => new Date() };

// A clock tests set and advance; it starts at the real time so objects look fresh to real servers.
export function manualClock(start = new Date()): Clock & { advance(ms: number): void; set(t: Date): void } {
  let t = start.getTime();
  return {
    now: () => new Date(t),
    advance: (ms) => {
      t += ms;
    },
    set: (d) => {
      t = d.getTime();
    },
  };
}

// metav1.Time: RFC 3339 in whole seconds, as the API server writes it.
export const rfc3339 = (d: Date) => d.toISOString().replace(/\.\d+Z$/, "Z");
// metav1.MicroTime (Lease renewTime/acquireTime): exactly six fractional digits, or the server answers 400.
export const microTime = (d: Date) => d.toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
