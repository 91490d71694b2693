// Asks the API server's authorizer whether an identity may make a call (a SubjectAccessReview): the
// same answer, from the same RBAC cache, that a request of that identity would get now.
import { SubjectAccessReviewResource } from "../api/kube.ts";
import { resourcePath, type KubeClient } from "./client.ts";

export type ResourceAttributes = { group: string; resource: string; verb: string; subresource?: string; namespace?: string; name?: string };
export type AccessReviewSpec = { user?: string; uid?: string; groups?: readonly string[]; extra?: Record<string, readonly string[]>; resourceAttributes: ResourceAttributes };

export async function mayAccess(client: KubeClient, spec: AccessReviewSpec): Promise<boolean> {
  const review = await client.request<{ status?: { allowed?: boolean } }>("POST", resourcePath(SubjectAccessReviewResource), {
    apiVersion: `${SubjectAccessReviewResource.group}/${SubjectAccessReviewResource.version}`,
    kind: SubjectAccessReviewResource.kind,
    spec,
  });
  return review.status?.allowed === true;
}
