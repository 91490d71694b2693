// A node's fixed names: the programs it runs, the images it imports instead of pulling, and the
// cluster's Service range with the addresses and names in it.
export const PAUSE_IMAGE = "dev.local/ocm-functions/pause:local";
// What a test names the image of binaries.probe when it imports it.
export const PROBE_IMAGE = "dev.local/ocm-functions/probe:local";
export const COREDNS_IMAGE = "dev.local/ocm-functions/coredns:local";

// The cluster's Service range (kube-apiserver's --service-cluster-ip-range in clusters.ts) and the
// fixed addresses in it: the API server gives the first to default/kubernetes, and cluster DNS gets
// the tenth, as kubeadm does.
export const SERVICE_CIDR = "10.0.0.0/24";
export const KUBERNETES_SERVICE_IP = "10.0.0.1";
export const CLUSTER_DNS_IP = "10.0.0.10";
export const CLUSTER_DOMAIN = "cluster.local";
// The names a pod reaches the API server by through the kubernetes Service: a cluster for a node with
// services adds them to the API server's certificate (StartOptions.servingHosts), with the node's address.
export const KUBERNETES_SERVICE_HOSTS = [KUBERNETES_SERVICE_IP, "kubernetes", "kubernetes.default", "kubernetes.default.svc", `kubernetes.default.svc.${CLUSTER_DOMAIN}`] as const;
// Controllers such a cluster runs besides the ServiceAccount ones: EndpointSlices for Services with
// selectors (kube-proxy and CoreDNS read only those), and CoreDNS's Deployment and its ReplicaSet.
export const SERVICE_CONTROLLERS = ["endpointslice-controller", "deployment-controller", "replicaset-controller"] as const;

export type NodeBinaries = { kubelet: string; scheduler: string; pause: string; probe: string; kubeProxy: string; coredns: string };
