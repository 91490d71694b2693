// The configuration files a node's programs start with: containerd's, the CNI network's, kubelet's
// and kube-proxy's, each rendered from the node's recorded state.
import { join } from "node:path";
import { CLUSTER_DNS_IP, CLUSTER_DOMAIN, PAUSE_IMAGE, SERVICE_CIDR } from "./node-network.ts";
import type { NodeState } from "./node-host.ts";

const CNI_BIN = "/usr/lib/cni"; // containernetworking-plugins' directory on Debian

export function containerdConfig(s: NodeState, streamPort: number): string {
  const q = JSON.stringify; // TOML basic strings read JSON's escapes
  return `# containerd for node ${s.name}: its own root, state and socket, so it shares nothing with a
# containerd the host may run.
version = 2
root = ${q(join(s.root, "containerd"))}
state = ${q(join(s.root, "state"))}

[grpc]
  address = ${q(s.socket)}

[plugins."io.containerd.internal.v1.opt"]
  path = ${q(join(s.root, "opt"))}

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = ${q(PAUSE_IMAGE)}
  # root here lacks CAP_SYS_RESOURCE: runc fails to create the sandbox ("can't get final child's PID
  # from pipe: EOF") unless oom_score_adj is kept at or above containerd's own.
  restrict_oom_score_adj = true
  # pod network namespaces under our state dir, not /run/netns
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = ${q(String(streamPort))}
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = ${q(join(s.root, "state", "runc"))}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = ${q(CNI_BIN)}
    conf_dir = ${q(join(s.root, "cni", "net.d"))}
    max_conf_num = 1
`;
}

// A bridge with the node's address as gateway; no default route in pods (isDefaultGateway false) and
// no masquerading, so a pod reaches this machine's bridge address and other pods, nothing beyond. With
// services, pods also route the Service range to the gateway, where kube-proxy's rules turn it into
// pod addresses (or the unreachable route refuses it), and a pod may reach itself through its Service
// (hairpin).
export function cniConfig(s: NodeState): object {
  return {
    cniVersion: "1.0.0",
    name: s.network,
    plugins: [
      {
        type: "bridge",
        bridge: s.bridge,
        isGateway: true,
        isDefaultGateway: false,
        ipMasq: false,
        hairpinMode: !!s.services,
        ipam: {
          type: "host-local",
          ranges: [[{ subnet: s.subnet, gateway: s.address }]],
          // A route without gw goes through the range's gateway.
          routes: s.services ? [{ dst: SERVICE_CIDR }] : [],
          dataDir: join(s.root, "cni", "ipam"),
        },
      },
    ],
  };
}

export function kubeletConfig(s: NodeState, o: { clientCaFile: string; port: number; healthzPort: number; podLogsDir: string }): object {
  return {
    apiVersion: "kubelet.config.k8s.io/v1beta1",
    kind: "KubeletConfiguration",
    // cgroups are v1 on these hosts, and kubelet 1.35 refuses v1 unless told not to.
    failCgroupV1: false,
    cgroupDriver: "cgroupfs",
    cgroupRoot: `/${s.cgroup}`,
    failSwapOn: false,
    containerRuntimeEndpoint: `unix://${s.socket}`,
    address: s.address,
    port: o.port,
    readOnlyPort: 0,
    healthzBindAddress: "127.0.0.1",
    healthzPort: o.healthzPort,
    // Only holders of a client certificate from the cluster's CA may call the kubelet API.
    authentication: { anonymous: { enabled: false }, webhook: { enabled: false }, x509: { clientCAFile: o.clientCaFile } },
    authorization: { mode: "AlwaysAllow" },
    // No KUBE-FIREWALL/KUBE-KUBELET-CANARY chains: the host's iptables stay as they were.
    makeIPTablesUtilChains: false,
    podLogsDir: o.podLogsDir,
    volumePluginDir: join(s.root, "kubelet-plugins"),
    // A test node on a shared disk should not start evicting at the default 10-15 % free.
    evictionHard: { "memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%" },
    imageGCHighThresholdPercent: 100,
    imageGCLowThresholdPercent: 99,
    registerNode: true,
    // Pods resolve through cluster DNS; the host's resolver (which points off this machine) is never
    // copied into a pod, so a dnsPolicy: Default pod (CoreDNS itself) gets no nameserver at all.
    ...(s.services ? { clusterDNS: [CLUSTER_DNS_IP], clusterDomain: CLUSTER_DOMAIN, resolvConf: "" } : {}),
  };
}

// kube-proxy in nftables mode: all its rules in its own kube-proxy tables, which removeServiceRouting
// deletes whole. Every Service connection is masqueraded to the node's address, because pods share one
// bridge: without it a pod's reply to another pod would go straight back over the bridge, past the
// conntrack entry that must turn its source back into the Service address.
export function kubeProxyConfig(s: NodeState, o: { kubeconfig: string; healthzPort: number; metricsPort: number }): object {
  return {
    apiVersion: "kubeproxy.config.k8s.io/v1alpha1",
    kind: "KubeProxyConfiguration",
    mode: "nftables",
    clientConnection: { kubeconfig: o.kubeconfig },
    hostnameOverride: s.name,
    healthzBindAddress: `127.0.0.1:${o.healthzPort}`,
    metricsBindAddress: `127.0.0.1:${o.metricsPort}`,
    nftables: { masqueradeAll: true, syncPeriod: "30s", minSyncPeriod: "0s" },
    clusterCIDR: s.subnet,
    detectLocalMode: "ClusterCIDR",
    // NodePorts only on the node's own address, never on the machine's other interfaces.
    nodePortAddresses: [`${s.address}/32`],
    // 0 leaves each conntrack sysctl as it is (they are the machine's, not the node's).
    conntrack: { maxPerCore: 0, min: 0, tcpEstablishedTimeout: "0s", tcpCloseWaitTimeout: "0s" },
  };
}
