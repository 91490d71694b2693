// What a cluster's credentials give a source: the client in use now, word when it changes, and what
// the relay reports about them. Its own module, so sources and credentials do not import each other.
import type { KubeClient } from "../../shared/kube/client.ts";

export type Connection = { client: KubeClient; origin: string; user: string };
export type CredentialStatus = { origin?: string; user?: string; problems: string[] };

export type CredentialProvider = {
  current(): Connection | undefined;
  subscribe(listener: () => void): () => void;
  status(): CredentialStatus;
  stop(): Promise<void>;
};
