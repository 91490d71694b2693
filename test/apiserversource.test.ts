// The real Knative ApiServerSource receive adapter, run standalone against a local hub, drives the
// cluster-acceptor function over HTTP: the events our parser and reconcile see are Knative's own.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { freePort, type LocalCluster } from "../dev/control-plane/clusters.ts";
import { logTail, startProcess, stopProcess, type Managed } from "../dev/control-plane/processes.ts";
import { KubeClient } from "../shared/kube/client.ts";
import { ManagedClusterConditionType, ManagedClusterResource, type ManagedCluster } from "../shared/api/cluster.ts";
import { findCondition } from "../shared/conditions.ts";
import { serve, type Io } from "../shared/harness.ts";
import fn, { type Config } from "../functions/cluster-acceptor/reconcile.ts";
import { startFunctionServer } from "./support/functions.ts";
import { eventually } from "./support/eventually.ts";
import { functionIo, startHub, type Hub } from "./support/fixtures.ts";

const HUB = "hub";
const ADAPTER = "apiserver_receive_adapter";
const repoRoot = join(import.meta.dirname, "..");
const suffix = () => Math.random().toString(36).slice(2, 7);

// scripts/run.sh builds the adapter before the tests and names it in OCM_FUNCTIONS_APISERVERSOURCE;
// run on its own, this file asks the build script (which builds it once, then answers at once).
function adapterBinary(): string {
  const binary =
    process.env.OCM_FUNCTIONS_APISERVERSOURCE ??
    execFileSync(join(repoRoot, "scripts", "build-tools.sh"), ["knative"], { stdio: ["ignore", "pipe", "inherit"] }).toString().trim().split("\n").pop()!;
  if (!existsSync(binary)) throw new Error(`${binary} is missing after scripts/build-tools.sh knative`);
  return binary;
}

type Received = { type: string; name: string; cluster: string; source: string };

let plane: Hub;
let hub: LocalCluster;
let admin: KubeClient;
let io: Io<Config>;
let binary: string;

beforeAll(async () => {
  binary = adapterBinary();
  plane = await startHub(HUB);
  ({ cluster: hub, admin } = plane);
  // The function runs under its own identity; only the adapter uses the admin kubeconfig.
  io = await functionIo(hub, fn.spec.name, { hubCluster: HUB, autoApprovalUsers: [] }, [ManagedClusterResource]);
}, 300_000);

afterAll(() => plane?.stop());

// The adapter as Knative's controller would run it, minus the Deployment. Its health probes are
// hard-coded to :8080 (a second adapter on the machine only loses its probes, which we do not use),
// so the function listens on a free port instead; pprof gets a free port too.
async function startAdapter(o: { mode: "Resource" | "Reference"; sink: string }): Promise<Managed> {
  const runDir = dirname(hub.dir); // the control plane's run directory: its guard reaps this process too
  const kubeconfig = join(hub.dir, "admin.kubeconfig"); // written by startClusters
  const sourceConfig = {
    namespaces: [],
    // ManagedClusters are cluster-scoped: the adapter watches them once, whatever allNamespaces says
    // (pkg/adapter/apiserver/adapter.go collectResourceMatches).
    allNamespaces: false,
    resources: [{ gvr: { Group: ManagedClusterResource.group, Version: ManagedClusterResource.version, Resource: ManagedClusterResource.plural } }],
    mode: o.mode,
  };
  const env = {
    K_SINK: o.sink,
    K_SOURCE_CONFIG: JSON.stringify(sourceConfig),
    K_CE_OVERRIDES: JSON.stringify({ extensions: { cluster: HUB } }),
    NAME: `acceptor-${o.mode.toLowerCase()}`,
    NAMESPACE: "default",
    SYSTEM_NAMESPACE: "knative-eventing",
    PROFILING_PORT: String(await freePort()),
  };
  return startProcess(runDir, `${ADAPTER}-${o.mode.toLowerCase()}`, binary, [`--kubeconfig=${kubeconfig}`, "--disable-ha"], env);
}

// The function server, noting what arrives before the function handles it.
async function startRecordingFunction(received: Received[]) {
  const handle = serve(fn.spec, () => io);
  return startFunctionServer(async (context, event) => {
    const e = event as Record<string, unknown>;
    received.push({ type: String(e.type), name: String(e.name), cluster: String(e.cluster), source: String(e.source) });
    return handle(context, event);
  });
}

const accepted = (mc: ManagedCluster | undefined) => findCondition(mc?.status?.conditions, ManagedClusterConditionType.HubAccepted);

describe("Knative's ApiServerSource adapter driving the cluster-acceptor", () => {
  it.each([{ mode: "Resource" as const }, { mode: "Reference" as const }])(
    "accepts a cluster created with hubAcceptsClient=true from the adapter's $mode-mode events alone",
    async ({ mode }) => {
      const received: Received[] = [];
      const server = await startRecordingFunction(received);
      const adapter = await startAdapter({ mode, sink: server.url });
      const eventType = `dev.knative.apiserver.${mode === "Resource" ? "resource" : "ref"}`;
      try {
        // The adapter sends nothing for what its first LIST returns: touch a canary until its
        // event arrives, so the watch is known to be open before the cluster under test exists.
        const canary = `canary-${suffix()}`;
        await admin.create(ManagedClusterResource, { metadata: { name: canary }, spec: { hubAcceptsClient: false } });
        await eventually(
          async () => {
            if (adapter.child.exitCode !== null) throw new Error(`adapter exited with ${adapter.child.exitCode}:\n${logTail(adapter)}`);
            await admin.patch(ManagedClusterResource, canary, { metadata: { labels: { touched: String(Date.now()) } } });
            expect(received.some((e) => e.name === canary)).toBe(true);
          },
          { timeoutMs: 30_000, intervalMs: 200 },
        );

        const name = `c${suffix()}`;
        await admin.create(ManagedClusterResource, { metadata: { name }, spec: { hubAcceptsClient: true } });
        const mc = await eventually(async () => {
          const got = await admin.get<ManagedCluster>(ManagedClusterResource, name);
          expect(accepted(got)?.status, `adapter log:\n${logTail(adapter)}`).toBe("True");
          return got!;
        }, { timeoutMs: 20_000 });
        expect(accepted(mc)?.reason).toBe("HubClusterAdminAccepted");
        expect(received).toContainEqual({ type: `${eventType}.add`, name, cluster: HUB, source: hub.url });
      } finally {
        await stopProcess(adapter);
        await server.close();
      }
    },
  );
});
