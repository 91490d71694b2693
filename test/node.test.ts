// A real node (Debian's containerd and runc, our kubelet v1.35.4) joins a local cluster, runs pods
// from images we built ourselves (our pause program and a probe, each one static binary on an empty
// base, imported into containerd; nothing is pulled), and, stopped, leaves nothing on the machine:
// no process, mount, cgroup, bridge, iptables rule, sysctl change or directory of its own.
//
// Needs root (containerd, cgroups, a bridge). The node's API identity is system:node:<name> in
// system:nodes, authorized by the API server's Node authorizer (added to its RBAC one) and held to its
// own Node and pods by the NodeRestriction admission plugin.
//
// Pods get service-account tokens as on any cluster: the ServiceAccount admission plugin adds the
// kube-api-access projected volume, kubelet asks the TokenRequest API for the token, and the controller
// manager makes each namespace's default ServiceAccount and kube-root-ca.crt. The node forwards
// <node address>:443 to the API server (whose certificate names that address), which a pod may be told
// in its env; and, started with services, it routes Services (kube-proxy in nftables mode, the
// kubernetes Service's endpoint being that forwarder) and runs cluster DNS (CoreDNS at 10.0.0.10), so
// pods reach the API server and each other by Service names. These tests share one node, so the stop
// test's comparison of the host before and after covers kube-proxy's tables and route too.
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { startClusters, type LocalClusters, type LocalCluster } from "../dev/control-plane/clusters.ts";
import {
  startNode,
  startScheduler,
  freeNodeSubnet,
  nodeProcesses,
  nodeCgroups,
  mountsUnder,
  HOST_PATHS,
  PAUSE_IMAGE,
  PROBE_IMAGE,
  COREDNS_IMAGE,
  KUBERNETES_SERVICE_HOSTS,
  KUBERNETES_SERVICE_IP,
  SERVICE_CIDR,
  SERVICE_CONTROLLERS,
  type LocalNode,
} from "../dev/control-plane/node.ts";
import { writeStaticImages } from "../dev/build/static-image.ts";
import { KubeClient, type KubeObject } from "../shared/kube/client.ts";
import { NodeResource, PodResource } from "../shared/api/kube.ts";
import type { ApiResource } from "../shared/api/meta.ts";
import { eventually } from "./support/eventually.ts";

const ServiceAccountResource = { group: "", version: "v1", kind: "ServiceAccount", plural: "serviceaccounts", namespaced: true } as const satisfies ApiResource;

type ContainerState = { running?: object; waiting?: { reason?: string; message?: string }; terminated?: { exitCode: number; reason?: string; message?: string } };
type Pod = KubeObject & {
  spec?: object;
  status?: {
    phase?: string;
    podIP?: string;
    conditions?: { type: string; status: string }[];
    containerStatuses?: { name: string; ready: boolean; state?: ContainerState; containerID?: string }[];
  };
};
type Node = KubeObject & { status?: { conditions?: { type: string; status: string }[]; nodeInfo?: { kubeletVersion: string; containerRuntimeVersion: string } } };

const text = (cmd: string, args: string[]) => execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
const SYSCTLS = ["net/ipv4/ip_forward", "vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops"];

// What a node could leave behind on the host, comparable before and after. Packet counters and the
// dump's date comments change by themselves and are left out.
function hostState() {
  const rules = (save: string) => {
    try {
      return text(save, []).split("\n").filter((l) => !l.startsWith("#")).map((l) => l.replace(/\[\d+:\d+\]/g, "")).join("\n");
    } catch (err) {
      return `${save} failed: ${(err as Error).message}`;
    }
  };
  return {
    iptables: rules("iptables-save"),
    ip6tables: rules("ip6tables-save"),
    iptablesLegacy: rules("iptables-legacy-save"),
    // kube-proxy's nftables mode keeps its rules in tables of its own; the node's Service range route.
    nftTables: text("nft", ["list", "tables"]),
    serviceRoute: text("ip", ["-4", "route", "show", SERVICE_CIDR]),
    // Node bridges and pod veths only: other tests on this machine add and remove bridges of their own.
    links: text("ip", ["-o", "link", "show"]).split("\n").map((l) => /^\d+:\s+([^:@]+)/.exec(l)?.[1] ?? "").filter((l) => /^(ocmf-[0-9a-f]{6}|veth)/.test(l)).sort(),
    sysctls: Object.fromEntries(SYSCTLS.map((k) => [k, readFileSync(`/proc/sys/${k}`, "utf8").trim()])),
    hostPaths: HOST_PATHS.filter((p) => existsSync(p)),
    nodeRoots: readdirSync("/var/lib").filter((d) => d.startsWith("ocm-functions-node-")),
    mounts: readFileSync("/proc/self/mounts", "utf8").split("\n").filter((l) => l.includes("ocm-functions-node-")),
  };
}

// Deletes a pod and waits until the kubelet has torn it down and the API server forgotten it.
async function deletePod(client: KubeClient, name: string): Promise<void> {
  await client.request("DELETE", `/api/v1/namespaces/default/pods/${name}`);
  await eventually(
    async () => {
      if (await client.get<Pod>(PodResource, name, "default")) throw new Error(`${name} still there`);
    },
    { timeoutMs: 60_000, intervalMs: 250 },
  );
}

// Waits until the pod's containers have run to their end, and returns it.
async function finished(client: KubeClient, name: string): Promise<Pod> {
  return eventually(
    async () => {
      const p = await client.get<Pod>(PodResource, name, "default");
      if (p?.status?.phase !== "Succeeded" && p?.status?.phase !== "Failed") throw new Error(`${name}: ${JSON.stringify(p?.status)}`);
      return p;
    },
    { timeoutMs: 90_000, intervalMs: 250 },
  );
}

// node undefined: kube-scheduler picks one.
function podOn(node: string | undefined, name: string, containers: object[], extra: object = {}): Pod {
  return { apiVersion: "v1", kind: "Pod", metadata: { name, namespace: "default" }, spec: { ...(node ? { nodeName: node } : {}), containers, ...extra } } as Pod;
}

describe("a real node running pods from local images", () => {
  let clusters: LocalClusters | undefined;
  let hub: LocalCluster;
  let node: LocalNode | undefined;
  let client: KubeClient;
  let subnet: number;
  let scheduler: { stop(): Promise<void> } | undefined;
  const before = hostState();

  // Long enough for a first build of the node's binaries when this file runs alone (npm test builds
  // them before any test starts).
  beforeAll(async () => {
    expect(process.getuid?.(), "a node needs root").toBe(0);
    subnet = freeNodeSubnet();
    clusters = await startClusters({
      names: ["hub"],
      crds: false,
      // Each namespace's default ServiceAccount and kube-root-ca.crt (the token volume's CA); and the
      // node lifecycle controller, which lifts the not-ready taint kubelet registers the node with.
      // With services: EndpointSlices for Services, and CoreDNS's Deployment.
      controllers: ["serviceaccount-controller", "root-ca-certificate-publisher-controller", "node-lifecycle-controller", ...SERVICE_CONTROLLERS],
      serviceAccountAdmission: true,
      // The node's address, where its pods reach the API server, and the kubernetes Service's names.
      servingHosts: [`10.78.${subnet}.1`, ...KUBERNETES_SERVICE_HOSTS],
      // Appended to the harness's --authorization-mode=RBAC (a list flag): RBAC,Node.
      apiserverFlags: ["--authorization-mode=Node", "--enable-admission-plugins=NodeRestriction"],
    });
    hub = clusters.get("hub");
    client = KubeClient.fromKubeconfig(hub.adminKubeconfig);
    scheduler = await startScheduler(hub);
    // ServiceAccount admission refuses pods until their namespace's default ServiceAccount exists.
    await eventually(
      async () => {
        if (!(await client.get(ServiceAccountResource, "default", "default"))) throw new Error("no default ServiceAccount yet");
      },
      { timeoutMs: 30_000 },
    );
  }, 900_000);

  afterAll(async () => {
    client?.close();
    await scheduler?.stop();
    await node?.stop();
    await clusters?.stop();
  });

  it("joins the cluster as a Ready node with containerd as its runtime", async () => {
    node = await startNode(hub, { name: "node-a", subnet, apiserverProxy: true, services: true });
    const got = await client.get<Node>(NodeResource, "node-a");
    expect(got?.status?.conditions?.find((c) => c.type === "Ready")?.status).toBe("True");
    expect(got?.status?.nodeInfo?.kubeletVersion).toBe("v1.35.4");
    expect(got?.status?.nodeInfo?.containerRuntimeVersion).toMatch(/^containerd:\/\/1\./);
    // Schedulable once the node lifecycle controller has seen it Ready.
    await eventually(
      async () => {
        const taints = (await client.get<Node & { spec?: { taints?: object[] } }>(NodeResource, "node-a"))?.spec?.taints ?? [];
        if (taints.length) throw new Error(`node-a still tainted: ${JSON.stringify(taints)}`);
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    );
    // The probe: a second image of our own, built now and imported as any test's image would be.
    const archive = join(node.root, "probe.tar");
    writeStaticImages(archive, [{ reference: PROBE_IMAGE, binary: node.binaries.probe, path: "/probe" }]);
    node.importImage(archive);
    expect(node.images()).toEqual(expect.arrayContaining([PAUSE_IMAGE, PROBE_IMAGE, COREDNS_IMAGE]));
    // CoreDNS's pod already runs, so its shim is there too.
    const kinds = new Set(nodeProcesses({ root: node.root, socket: join(node.root, "containerd.sock") }).map((p) => p.kind));
    expect([...kinds].sort()).toEqual(["containerd", "kube-proxy", "kubelet", "shim"]);
    // kube-proxy's rules are in its own nftables table, and the iptables dumps show none of them.
    expect(text("nft", ["list", "table", "ip", "kube-proxy"])).toContain(KUBERNETES_SERVICE_IP);
    expect(text("iptables-save", [])).not.toContain("KUBE-");
  }, 240_000);

  it("runs a pod from our pause image until it is deleted", async () => {
    const n = node!;
    await client.request("POST", "/api/v1/namespaces/default/pods", podOn(n.name, "sleeper", [{ name: "pause", image: PAUSE_IMAGE, imagePullPolicy: "Never" }]));
    const pod = await eventually(
      async () => {
        const p = await client.get<Pod>(PodResource, "sleeper", "default");
        const ready = p?.status?.conditions?.find((c) => c.type === "Ready")?.status;
        if (p?.status?.phase !== "Running" || ready !== "True") throw new Error(`sleeper: ${JSON.stringify(p?.status)}`);
        return p;
      },
      { timeoutMs: 90_000, intervalMs: 250 },
    );
    // Its address is on the node's bridge, and the container is a real process in the node's cgroups.
    expect(pod.status!.podIP).toMatch(new RegExp(`^${n.subnet.replace(/\.0\/24$/, "").replace(/\./g, "\\.")}\\.\\d+$`));
    const procs = nodeCgroups(n.cgroup).flatMap((d) => (existsSync(join(d, "cgroup.procs")) ? readFileSync(join(d, "cgroup.procs"), "utf8").split("\n").filter(Boolean) : []));
    const commands = new Set(procs.map((pid) => (existsSync(`/proc/${pid}/comm`) ? readFileSync(`/proc/${pid}/comm`, "utf8").trim() : "")));
    expect([...commands]).toContain("pause");
    const shims = nodeProcesses({ root: n.root, socket: join(n.root, "containerd.sock") }).filter((p) => p.kind === "shim");
    expect(shims.length).toBeGreaterThan(0);

    await deletePod(client, "sleeper");
  }, 180_000);

  it("runs our probe image to completion and reports its output in the pod's status and log", async () => {
    const n = node!;
    await client.request("POST", "/api/v1/namespaces/default/pods", podOn(n.name, "probe", [{ name: "probe", image: PROBE_IMAGE, imagePullPolicy: "Never" }], { restartPolicy: "Never", automountServiceAccountToken: false }));
    const pod = await finished(client, "probe");
    const terminated = pod.status!.containerStatuses![0]!.state!.terminated!;
    expect(pod.status!.phase, JSON.stringify(terminated)).toBe("Succeeded");
    expect(terminated.exitCode).toBe(0);
    expect(terminated.message).toContain("probe: ran as uid 65535");
    // The container's stdout, as kubelet keeps it: <podLogsDir>/<ns>_<pod>_<uid>/<container>/0.log.
    const dir = join(n.podLogsDir, `default_probe_${pod.metadata.uid}`, "probe");
    expect(readFileSync(join(dir, "0.log"), "utf8")).toMatch(/stdout F probe: ran as uid 65535/);

    await deletePod(client, "probe");
  }, 180_000);

  it("schedules a pod onto the node and gives it a service-account token with which it lists namespaces through the node's address", async () => {
    const n = node!;
    const rbac = "/apis/rbac.authorization.k8s.io/v1";
    await client.request("POST", `${rbac}/clusterroles`, {
      metadata: { name: "node-test-list-namespaces" },
      rules: [{ apiGroups: [""], resources: ["namespaces"], verbs: ["list"] }],
    });
    await client.request("POST", `${rbac}/clusterrolebindings`, {
      metadata: { name: "node-test-list-namespaces" },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "node-test-list-namespaces" },
      subjects: [{ kind: "ServiceAccount", name: "default", namespace: "default" }],
    });
    const env = [
      { name: "KUBERNETES_SERVICE_HOST", value: n.apiserver!.host },
      { name: "KUBERNETES_SERVICE_PORT", value: String(n.apiserver!.port) },
    ];
    await client.request("POST", "/api/v1/namespaces/default/pods", podOn(undefined, "lister", [{ name: "probe", image: PROBE_IMAGE, imagePullPolicy: "Never", env }], { restartPolicy: "Never" }));
    const pod = await finished(client, "lister");
    // kube-scheduler chose the node; the admission plugin mounted the token volume; the probe listed
    // what only the API knows.
    const spec = pod.spec as { nodeName?: string; volumes?: { name: string; projected?: object }[] };
    expect(spec.nodeName).toBe(n.name);
    expect(spec.volumes?.some((v) => v.name.startsWith("kube-api-access-") && v.projected)).toBe(true);
    const terminated = pod.status!.containerStatuses![0]!.state!.terminated!;
    expect(terminated.message, JSON.stringify(terminated)).toContain("probe: namespaces default,kube-node-lease,kube-public,kube-system");
    expect(terminated.exitCode).toBe(0);
    await deletePod(client, "lister");
  }, 180_000);

  it("resolves the kubernetes Service through cluster DNS and lists namespaces through its ClusterIP", async () => {
    const n = node!;
    // No env of ours: the name comes from CoreDNS, the address is the ClusterIP, kube-proxy's rules lead
    // it to the node's forwarder. The ClusterRole of the test above lets the token list namespaces.
    const name = "kubernetes.default.svc.cluster.local";
    await client.request("POST", "/api/v1/namespaces/default/pods", podOn(n.name, "dns-lister", [{ name: "probe", image: PROBE_IMAGE, imagePullPolicy: "Never", args: ["api", name] }], { restartPolicy: "Never" }));
    const pod = await finished(client, "dns-lister");
    const terminated = pod.status!.containerStatuses![0]!.state!.terminated!;
    expect(terminated.message, JSON.stringify(terminated)).toContain(`probe: ${name} is ${KUBERNETES_SERVICE_IP}\n`);
    expect(terminated.message).toContain("probe: namespaces default,kube-node-lease,kube-public,kube-system");
    expect(terminated.exitCode).toBe(0);
    await deletePod(client, "dns-lister");
  }, 180_000);

  it("lets a pod reach another pod through its Service's DNS name", async () => {
    const n = node!;
    const labels = { app: "echo" };
    const server = podOn(n.name, "echo-server", [
      {
        name: "probe",
        image: PROBE_IMAGE,
        imagePullPolicy: "Never",
        args: ["serve", "8080"],
        ports: [{ containerPort: 8080 }],
        // Only a Ready pod is an endpoint of the Service.
        readinessProbe: { httpGet: { path: "/", port: 8080 }, periodSeconds: 1 },
      },
    ], { automountServiceAccountToken: false });
    await client.request("POST", "/api/v1/namespaces/default/pods", { ...server, metadata: { ...server.metadata, labels } });
    await client.request("POST", "/api/v1/namespaces/default/services", {
      metadata: { name: "echo", namespace: "default" },
      spec: { selector: labels, ports: [{ port: 80, targetPort: 8080, protocol: "TCP" }] },
    });
    const url = "http://echo.default.svc.cluster.local/";
    await client.request("POST", "/api/v1/namespaces/default/pods", podOn(n.name, "echo-client", [{ name: "probe", image: PROBE_IMAGE, imagePullPolicy: "Never", args: ["get", url] }], { restartPolicy: "Never", automountServiceAccountToken: false }));
    const pod = await finished(client, "echo-client");
    const terminated = pod.status!.containerStatuses![0]!.state!.terminated!;
    expect(terminated.message, JSON.stringify(terminated)).toMatch(new RegExp(`probe: GET ${url} \\(try \\d+\\): probe: hello from echo-server\n`));
    expect(terminated.exitCode).toBe(0);
    await client.request("DELETE", "/api/v1/namespaces/default/services/echo");
    await deletePod(client, "echo-client");
    await deletePod(client, "echo-server");
  }, 180_000);

  it("stops and leaves nothing of its own on the machine", async () => {
    const n = node!;
    await n.stop();
    node = undefined;
    expect(nodeProcesses({ root: n.root, socket: join(n.root, "containerd.sock") })).toEqual([]);
    expect(mountsUnder(n.root)).toEqual([]);
    expect(nodeCgroups(n.cgroup)).toEqual([]);
    expect(existsSync(n.root)).toBe(false);
    // Nothing whose command line names the node's root: its guard notices the root is gone within 1 s.
    await eventually(
      () => {
        const naming = readdirSync("/proc").filter((p) => {
          try {
            return /^\d+$/.test(p) && readFileSync(`/proc/${p}/cmdline`, "utf8").includes(n.root);
          } catch {
            return false;
          }
        });
        expect(naming).toEqual([]);
      },
      { timeoutMs: 5_000, intervalMs: 200 },
    );
    // Not even the kernel's record of the pods' connections (Service ones included) is left.
    expect(text("conntrack", ["-L", "-s", n.subnet]) + text("conntrack", ["-L", "-d", n.subnet])).toBe("");
    const after = hostState();
    expect(after.links).not.toContain(n.bridge);
    expect(after).toEqual(before);
  }, 120_000);
});
