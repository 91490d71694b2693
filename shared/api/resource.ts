// The per-kind API coordinates, without any schema: what the relay and other long-lived code need of
// shared/api/meta.ts, which re-exports them, without loading zod.

// Where a kind is served; clients address objects with this.
export type ApiResource = {
  readonly group: string;
  readonly version: string;
  readonly kind: string;
  readonly plural: string;
  readonly namespaced: boolean;
};

// The API group of an apiVersion ("" for the core group's "v1").
export const groupOf = (apiVersion: string) => (apiVersion.includes("/") ? apiVersion.slice(0, apiVersion.lastIndexOf("/")) : "");
