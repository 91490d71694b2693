// What a node runs inside its cluster: the forwarder that lets pods reach the API server, and with
// services kube-proxy on the host, the kubernetes EndpointSlice and cluster DNS (CoreDNS).
import { writeFileSync } from "node:fs";
import { connect, createServer, type Socket } from "node:net";
import { join } from "node:path";
import { freePort, type LocalCluster } from "./clusters.ts";
import { exitedEarly, logTail, startProcess, type Managed } from "./processes.ts";
import { writeStaticImages } from "../build/static-image.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { KubeError } from "../../shared/kube/errors.ts";
import { CLUSTER_DNS_IP, CLUSTER_DOMAIN, COREDNS_IMAGE, SERVICE_CIDR, SERVICE_CONTROLLERS, type NodeBinaries } from "./node-network.ts";
import { type NodeState, healthOk, poll, run, runOrExplain } from "./node-host.ts";
import { kubeProxyConfig } from "./node-config.ts";

// A TCP forwarder from <address>:443 to the API server's loopback port. It lives in this process, so
// it ends with it; the bridge address is local to this machine. close() also ends open connections: a
// pod killed with its network namespace never closes its end.
export type Proxy = { close(): void };
export function startApiserverProxy(address: string, apiserverPort: number): Promise<Proxy> {
  const open = new Set<Socket>();
  const server = createServer((downstream) => {
    const upstream = connect(apiserverPort, "127.0.0.1");
    downstream.pipe(upstream).pipe(downstream);
    open.add(downstream).add(upstream);
    const end = () => {
      downstream.destroy();
      upstream.destroy();
      open.delete(downstream);
      open.delete(upstream);
    };
    downstream.on("error", end).on("close", end);
    upstream.on("error", end).on("close", end);
  });
  const close = () => {
    server.close();
    for (const socket of open) socket.destroy();
  };
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(443, address, () => resolve({ close }));
  });
}

// Creates obj in collection, or replaces the one a node started before in this cluster left there.
async function createOrReplace(client: KubeClient, collection: string, obj: KubeObject & { metadata: { name: string } }): Promise<void> {
  try {
    await client.request("POST", collection, obj);
  } catch (err) {
    if (!(err instanceof KubeError && err.code === 409)) throw err;
    const path = `${collection}/${obj.metadata.name}`;
    const current = await client.request<KubeObject>("GET", path);
    await client.request("PUT", path, { ...obj, metadata: { ...obj.metadata, resourceVersion: current.metadata.resourceVersion } });
  }
}

// The kube-apiserver binds loopback only and reconciles no endpoints (--endpoint-reconciler-type=none),
// so default/kubernetes gets its one endpoint from us: the node's forwarder at <node address>:443,
// which pods reach and which passes TLS through to the API server. kube-proxy and CoreDNS read
// EndpointSlices only; no Endpoints object is written.
function kubernetesEndpointSlice(s: NodeState): KubeObject & { metadata: { name: string } } {
  return {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: { name: "kubernetes", namespace: "default", labels: { "kubernetes.io/service-name": "kubernetes", "endpointslice.kubernetes.io/managed-by": "ocm-functions-node" } },
    addressType: "IPv4",
    endpoints: [{ addresses: [s.address], conditions: { ready: true }, nodeName: s.name }],
    // Named as the Service's port, which is how kube-proxy pairs them.
    ports: [{ name: "https", port: 443, protocol: "TCP" }],
  };
}

// Names under cluster.local, and reverse names of cluster addresses, come from the API; anything else
// is answered with an error, since no forward plugin is built in (tools/coredns). Port 1053 so the
// server needs no privilege; the kube-dns Service maps 53 to it.
const COREFILE = `.:1053 {
    errors
    log
    health :8080
    ready :8181
    cache 5
    kubernetes ${CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {
        ttl 5
    }
}
`;

// CoreDNS's objects in kube-system, in the order they are created: its identity with no more rights
// than its kubernetes plugin uses (list and watch of Services, EndpointSlices and Namespaces), its
// Corefile, one replica pinned to this node (no scheduler needed) and the kube-dns Service at the
// address kubelet gives pods as their nameserver.
function coreDnsObjects(nodeName: string): [string, KubeObject & { metadata: { name: string } }][] {
  const ns = "/api/v1/namespaces/kube-system";
  const rbac = "/apis/rbac.authorization.k8s.io/v1";
  const labels = { "k8s-app": "kube-dns" };
  const role = "ocm-functions:coredns";
  return [
    [`${ns}/serviceaccounts`, { apiVersion: "v1", kind: "ServiceAccount", metadata: { name: "coredns", namespace: "kube-system" } }],
    [
      `${rbac}/clusterroles`,
      {
        apiVersion: "rbac.authorization.k8s.io/v1",
        kind: "ClusterRole",
        metadata: { name: role },
        rules: [
          { apiGroups: [""], resources: ["services", "namespaces"], verbs: ["list", "watch"] },
          { apiGroups: ["discovery.k8s.io"], resources: ["endpointslices"], verbs: ["list", "watch"] },
        ],
      },
    ],
    [
      `${rbac}/clusterrolebindings`,
      {
        apiVersion: "rbac.authorization.k8s.io/v1",
        kind: "ClusterRoleBinding",
        metadata: { name: role },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: role },
        subjects: [{ kind: "ServiceAccount", name: "coredns", namespace: "kube-system" }],
      },
    ],
    [`${ns}/configmaps`, { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "coredns", namespace: "kube-system" }, data: { Corefile: COREFILE } }],
    [
      "/apis/apps/v1/namespaces/kube-system/deployments",
      {
        apiVersion: "apps/v1",
        kind: "Deployment",
        metadata: { name: "coredns", namespace: "kube-system", labels },
        spec: {
          replicas: 1,
          selector: { matchLabels: labels },
          template: {
            metadata: { labels },
            spec: {
              nodeName,
              serviceAccountName: "coredns",
              dnsPolicy: "Default", // it is the cluster's DNS, so it must not ask itself
              tolerations: [{ key: "node.kubernetes.io/not-ready", operator: "Exists" }],
              containers: [
                {
                  name: "coredns",
                  image: COREDNS_IMAGE,
                  imagePullPolicy: "Never",
                  args: ["-conf", "/etc/coredns/Corefile"],
                  ports: [
                    { name: "dns", containerPort: 1053, protocol: "UDP" },
                    { name: "dns-tcp", containerPort: 1053, protocol: "TCP" },
                  ],
                  // Ready once the kubernetes plugin has listed the API; alive while health answers.
                  readinessProbe: { httpGet: { path: "/ready", port: 8181 }, periodSeconds: 1 },
                  livenessProbe: { httpGet: { path: "/health", port: 8080 }, periodSeconds: 10, failureThreshold: 5 },
                  securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ["ALL"] } },
                  volumeMounts: [{ name: "config", mountPath: "/etc/coredns", readOnly: true }],
                },
              ],
              volumes: [{ name: "config", configMap: { name: "coredns" } }],
            },
          },
        },
      },
    ],
    [
      `${ns}/services`,
      {
        apiVersion: "v1",
        kind: "Service",
        metadata: { name: "kube-dns", namespace: "kube-system", labels },
        spec: {
          clusterIP: CLUSTER_DNS_IP,
          selector: labels,
          ports: [
            { name: "dns", port: 53, targetPort: 1053, protocol: "UDP" },
            { name: "dns-tcp", port: 53, targetPort: 1053, protocol: "TCP" },
          ],
        },
      },
    ],
  ];
}

type EndpointSliceList = { items: { endpoints?: { addresses: string[]; conditions?: { ready?: boolean } }[] }[] };

// kube-proxy on the host, default/kubernetes routed to the node's forwarder, then CoreDNS; returns once
// kube-proxy's rules lead kube-dns to a Ready CoreDNS pod.
export async function startServices(cluster: LocalCluster, s: NodeState, o: { runDir: string; binaries: NodeBinaries; importImage: (archive: string) => void; started: (m: Managed) => void }): Promise<void> {
  // system:kube-proxy is the user the API server's default system:node-proxier binding names.
  writeFileSync(join(s.root, "kube-proxy.kubeconfig"), await cluster.kubeconfigFor({ user: "system:kube-proxy" }), { mode: 0o600 });
  const healthzPort = await freePort();
  const config = kubeProxyConfig(s, { kubeconfig: join(s.root, "kube-proxy.kubeconfig"), healthzPort, metricsPort: await freePort() });
  writeFileSync(join(s.root, "kube-proxy.yaml"), JSON.stringify(config, null, 2));
  runOrExplain("ip", ["route", "add", "unreachable", SERVICE_CIDR]);
  const kubeProxy = startProcess(o.runDir, `${s.name}-kube-proxy`, o.binaries.kubeProxy, [`--config=${join(s.root, "kube-proxy.yaml")}`, "--v=1"]);
  o.started(kubeProxy);
  // healthz answers 200 once the first full sync has written the rules.
  await poll(`kube-proxy of ${s.name}`, () => healthOk(`http://127.0.0.1:${healthzPort}/healthz`), 60_000, exitedEarly(kubeProxy));

  const archive = join(s.root, "coredns.tar");
  writeStaticImages(archive, [{ reference: COREDNS_IMAGE, binary: o.binaries.coredns, path: "/coredns" }]);
  o.importImage(archive);
  const client = KubeClient.fromKubeconfig(cluster.adminKubeconfig);
  try {
    await createOrReplace(client, "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", kubernetesEndpointSlice(s));
    for (const [collection, obj] of coreDnsObjects(s.name)) await createOrReplace(client, collection, obj);
    let last = "no EndpointSlice for kube-dns yet";
    await poll(
      `cluster DNS on ${s.name}`,
      async () => {
        const slices = await client.request<EndpointSliceList>("GET", "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dkube-dns");
        const ready = slices.items.flatMap((sl) => sl.endpoints ?? []).filter((e) => e.conditions?.ready).flatMap((e) => e.addresses);
        if (!ready.length) return false;
        last = `CoreDNS Ready at ${ready.join(", ")}, not yet in kube-proxy's rules`;
        const rules = run("nft", ["list", "table", "ip", "kube-proxy"]);
        return ready.some((a) => new RegExp(`${a.replace(/\./g, "\\.")}(?!\\d)`).test(rules));
      },
      90_000,
      exitedEarly(kubeProxy),
    ).catch((err: Error) => {
      throw new Error(`${err.message}; ${last} (the cluster needs ${SERVICE_CONTROLLERS.join(", ")})\nkube-proxy log:\n${logTail(kubeProxy, 20)}`);
    });
  } finally {
    client.close();
  }
}
