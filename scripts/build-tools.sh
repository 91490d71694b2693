#!/usr/bin/env bash
# Builds the test-time binaries (etcd, kube-apiserver, kube-controller-manager, and on request
# Knative's ApiServerSource adapter) from their Go modules into a cache outside the repository.
# Each binary is built once per version; a second run only checks that it is there.
#
#   scripts/build-tools.sh            # control plane: etcd, kube-apiserver, kube-controller-manager
#   scripts/build-tools.sh knative    # also the ApiServerSource receive adapter; prints its path last
#   scripts/build-tools.sh registry   # also distribution's OCI registry (npm run images -- --push); prints its path last
#   scripts/build-tools.sh knative-webhooks  # also Knative Serving's and Eventing's webhooks; prints their paths last
#   scripts/build-tools.sh eventing   # also Knative Eventing's programs that run as pods on a node
#                                     # (dev/control-plane/eventing.ts); prints one `<cmd> <path>` line each
#   scripts/build-tools.sh serving    # also Knative Serving's programs (tools/serving) and Traefik with its Knative provider
#                                     # (tools/traefik), which run as pods on a node beside Eventing
#                                     # (dev/control-plane/serving.ts); prints one `<cmd> <path>` line each, traefik last
#   scripts/build-tools.sh clusteradm # also OCM's own CLI, clusteradm (test/clusteradm.test.ts); prints its path last
#   scripts/build-tools.sh inventory-consumer # also our Go consumer of the cluster inventory (tools/inventory-consumer,
#                                     # test/inventory-consumer.test.ts); prints its path last
#   scripts/build-tools.sh node       # also a node: kube-scheduler, our pause and probe programs, kube-proxy, CoreDNS
#                                     # and kubelet; prints their paths last, in that order (kubelet last)
#   scripts/build-tools.sh ocm        # also OCM v1.2.0's registration, work, add-on manager and placement
#                                     # programs (tools/ocm); prints one `<cmd> <path>` line each, placement last
#   scripts/build-tools.sh --print-dir  # where the control-plane binaries go
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cache=${OCM_FUNCTIONS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ocm-functions}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

version_of() { # module path, tools dir → version required in that go.mod
  awk -v m="$1" '$1==m && $2 ~ /^v/ {print $2; exit} $1=="require" && $2==m {print $3; exit}' "$2/go.mod"
}

kube_version=$(version_of k8s.io/kubernetes "$here/tools/kube")
etcd_version=$(version_of go.etcd.io/etcd/server/v3 "$here/tools/etcd")
knative_version=$(version_of knative.dev/eventing "$here/tools/knative" 2>/dev/null || true)
registry_version=$(version_of github.com/distribution/distribution/v3 "$here/tools/registry" 2>/dev/null || true)
bin="$cache/bin/kube-$kube_version-etcd-$etcd_version"

if [ "${1:-}" = "--print-dir" ]; then echo "$bin"; exit 0; fi
mkdir -p "$bin"

step() { printf '[build-tools] %s\n' "$*" >&2; }

build() { # tools dir, output name, package, ldflags
  local dir=$1 out=$2 pkg=$3 ldflags=$4
  if [ -x "$bin/$out" ]; then return; fi
  step "$out: building $pkg (first run only; several minutes on 2 cores)"
  local start=$SECONDS try
  # A module download can stall without an error (seen once: a proxy fetch that never finished, which
  # held a cold CI run until its limit). Fetch what the package needs first, under a time limit, and
  # try again; the build itself then reads only the module cache.
  for try in 1 2 3; do
    if (cd "$here/tools/$dir" && timeout 600 go list -deps "$pkg" >/dev/null); then break; fi
    if [ "$try" = 3 ]; then step "$out: fetching its modules failed three times"; exit 1; fi
    step "$out: fetching its modules stalled or failed (try $try); trying again"
  done
  (cd "$here/tools/$dir" && go build -trimpath -ldflags "$ldflags" -o "$bin/$out.tmp" "$pkg")
  mv "$bin/$out.tmp" "$bin/$out"
  step "$out: built in $((SECONDS - start)) s"
}

etcd_ldflags="-s -w"
build etcd etcd go.etcd.io/etcd/server/v3 "$etcd_ldflags"

# Stamp the version as Kubernetes' own build does, so the server reports v1.35.x and not v0.0.0-master.
minor=$(echo "$kube_version" | cut -d. -f2)
kube_ldflags="-s -w"
for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  kube_ldflags="$kube_ldflags -X $p.gitVersion=$kube_version -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done
build kube kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kube_ldflags"
build kube kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$kube_ldflags"

echo "$bin"
if [ "${1:-}" = "knative" ]; then
  # Versioned by name, so a bump in tools/knative/go.mod builds anew.
  build knative "knative-eventing-apiserver_receive_adapter-$knative_version" knative.dev/eventing/cmd/apiserver_receive_adapter "-s -w"
  echo "$bin/knative-eventing-apiserver_receive_adapter-$knative_version"
fi
if [ "${1:-}" = "registry" ]; then
  # Stamped as distribution's Makefile does, so `registry --version` names the module version.
  build registry "registry-$registry_version" github.com/distribution/distribution/v3/cmd/registry \
    "-s -w -X github.com/distribution/distribution/v3/version.version=$registry_version"
  echo "$bin/registry-$registry_version"
fi
if [ "${1:-}" = "knative-webhooks" ]; then
  # Two binaries from one wrapper module (neither Knative module builds the other's webhook), each
  # versioned by name; printed serving first, eventing last.
  serving_version=$(version_of knative.dev/serving "$here/tools/knative-webhooks")
  eventing_version=$(version_of knative.dev/eventing "$here/tools/knative-webhooks")
  build knative-webhooks "knative-serving-webhook-$serving_version" knative.dev/serving/cmd/webhook "-s -w"
  build knative-webhooks "knative-eventing-webhook-$eventing_version" knative.dev/eventing/cmd/webhook "-s -w"
  echo "$bin/knative-serving-webhook-$serving_version"
  echo "$bin/knative-eventing-webhook-$eventing_version"
fi
if [ "${1:-}" = "eventing" ]; then
  # Knative Eventing's controllers, webhook, Broker and channel data plane and source adapters, from
  # tools/knative, each versioned by name. Printed as `<package below cmd/> <path>`.
  for cmd in controller webhook mtchannel_broker broker/filter broker/ingress in_memory/channel_controller \
    in_memory/channel_dispatcher mtping apiserver_receive_adapter; do
    out="knative-eventing-${cmd//\//-}-$knative_version"
    build knative "$out" "knative.dev/eventing/cmd/$cmd" "-s -w"
    echo "$cmd $bin/$out"
  done
fi
if [ "${1:-}" = "serving" ]; then
  # Knative Serving's five programs from tools/serving (the queue-proxy is cmd/queue), and Traefik from
  # tools/traefik, which carries Traefik's own replace and exclude lines. Each named by its version and a
  # hash of its module's files, so a bump builds anew; Traefik stamped as its Makefile does, so its
  # version endpoint and logs name the release. Printed as `<cmd> <path>`, traefik last.
  serving_version=$(version_of knative.dev/serving "$here/tools/serving")
  serving_hash=$(cat "$here"/tools/serving/go.mod "$here"/tools/serving/go.sum | sha256sum | cut -c1-12)
  for cmd in controller activator autoscaler webhook queue; do
    build serving "knative-serving-$cmd-$serving_version-$serving_hash" "knative.dev/serving/cmd/$cmd" "-s -w"
    echo "$cmd $bin/knative-serving-$cmd-$serving_version-$serving_hash"
  done
  traefik_version=$(version_of github.com/traefik/traefik/v3 "$here/tools/traefik")
  traefik_hash=$(cat "$here"/tools/traefik/go.mod "$here"/tools/traefik/go.sum | sha256sum | cut -c1-12)
  build traefik "traefik-$traefik_version-$traefik_hash" github.com/traefik/traefik/v3/cmd/traefik \
    "-s -w -X github.com/traefik/traefik/v3/pkg/version.Version=$traefik_version -X github.com/traefik/traefik/v3/pkg/version.Codename=ocm-functions"
  echo "traefik $bin/traefik-$traefik_version-$traefik_hash"
fi
if [ "${1:-}" = "clusteradm" ]; then
  # From tools/clusteradm, which stands ocm v1.2.0 in for the v1.3.1 the proxy refuses (a replace). Named
  # by its version and a hash of the module files, so a bump or another replace builds anew. Stamped as
  # clusteradm's Makefile does, so `clusteradm version` names the release. The checksum database does not
  # know OCM's modules; go.sum holds their sums, and GONOSUMDB keeps a bump from asking it.
  clusteradm_version=$(version_of open-cluster-management.io/clusteradm "$here/tools/clusteradm")
  clusteradm_hash=$(cat "$here"/tools/clusteradm/go.mod "$here"/tools/clusteradm/go.sum | sha256sum | cut -c1-12)
  clusteradm_out="clusteradm-$clusteradm_version-$clusteradm_hash"
  GONOSUMDB=open-cluster-management.io build clusteradm "$clusteradm_out" open-cluster-management.io/clusteradm/cmd/clusteradm \
    "-s -w -X open-cluster-management.io/clusteradm/pkg/version.versionFromGit=$clusteradm_version -X open-cluster-management.io/clusteradm/pkg/version.gitTreeState=clean"
  echo "$bin/$clusteradm_out"
fi
if [ "${1:-}" = "inventory-consumer" ]; then
  # tools/inventory-consumer, our own test program built on SIG-Multicluster's cluster-inventory-api; named
  # by a hash of its module files and source, so an edit builds anew
  consumer_hash=$(cat "$here"/tools/inventory-consumer/go.mod "$here"/tools/inventory-consumer/go.sum "$here"/tools/inventory-consumer/main.go | sha256sum | cut -c1-12)
  build inventory-consumer "inventory-consumer-$consumer_hash" . "-s -w"
  echo "$bin/inventory-consumer-$consumer_hash"
fi
if [ "${1:-}" = "node" ]; then
  # Our own pause program (tools/pause), the sandbox image's only file, the probe a test pod runs,
  # and kubelet and kube-scheduler from the same module and stamps as kube-apiserver so the node
  # reports the cluster's version. Neither is a `tool` in tools/kube/go.mod; -mod=mod resolves them
  # from the same pinned requirements (adding the two sums kubelet needs beyond kube-apiserver's to go.sum).
  # Named by a hash of their sources, so an edit builds anew while a rerun does nothing.
  pause_hash=$(cat "$here"/tools/pause/go.mod "$here"/tools/pause/*.go "$here"/tools/pause/probe/*.go | sha256sum | cut -c1-12)
  build pause "pause-$pause_hash" ocm-functions.invalid/tools/pause "-s -w"
  build pause "probe-$pause_hash" ocm-functions.invalid/tools/pause/probe "-s -w"
  build kube kubelet k8s.io/kubernetes/cmd/kubelet "$kube_ldflags"
  build kube kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$kube_ldflags"
  build kube kube-proxy k8s.io/kubernetes/cmd/kube-proxy "$kube_ldflags"
  # CoreDNS from its own wrapper module (tools/coredns: its version and our choice of plugins), named
  # by both so a bump or an edit of main.go builds anew.
  coredns_version=$(version_of github.com/coredns/coredns "$here/tools/coredns")
  coredns_hash=$(cat "$here"/tools/coredns/go.mod "$here"/tools/coredns/*.go | sha256sum | cut -c1-12)
  build coredns "coredns-$coredns_version-$coredns_hash" ocm-functions.invalid/tools/coredns "-s -w"
  echo "$bin/kube-scheduler"
  echo "$bin/pause-$pause_hash"
  echo "$bin/probe-$pause_hash"
  echo "$bin/kube-proxy"
  echo "$bin/coredns-$coredns_version-$coredns_hash"
  echo "$bin/kubelet"
fi
if [ "${1:-}" = "ocm" ]; then
  # OCM's own programs from tools/ocm (open-cluster-management.io/ocm v1.2.0, the newest release the Go
  # proxy here serves): registration (hub controller, spoke agent), work (hub manager, spoke agent), addon
  # (the hub's add-on manager, run beside our addon-manager by test/addon-health-conformance.test.ts) and
  # placement (the hub's placement controller, run beside our placement-scheduler by
  # test/placement-conformance.test.ts). Named by the version and a hash of the module files, so a bump
  # builds anew; stamped as OCM's Makefile does, so `--version` names the release. The checksum database
  # knows neither OCM's modules nor the sigs.k8s.io/about-api pseudo-version OCM requires; go.sum holds
  # their sums (about-api's is the one in OCM's own go.sum) and GONOSUMDB keeps a bump from asking for them.
  # Printed as `<cmd> <path>`, placement last.
  ocm_version=$(version_of open-cluster-management.io/ocm "$here/tools/ocm")
  ocm_hash=$(cat "$here"/tools/ocm/go.mod "$here"/tools/ocm/go.sum | sha256sum | cut -c1-12)
  for cmd in registration work addon placement; do
    GONOSUMDB=open-cluster-management.io,sigs.k8s.io/about-api build ocm "ocm-$cmd-$ocm_version-$ocm_hash" "open-cluster-management.io/ocm/cmd/$cmd" \
      "-s -w -X open-cluster-management.io/ocm/pkg/version.versionFromGit=$ocm_version"
    echo "$cmd $bin/ocm-$cmd-$ocm_version-$ocm_hash"
  done
fi
