#!/usr/bin/env bash
# The one entry point behind every npm script: makes sure Node 24, the npm dependencies and the
# test-time binaries are there, then runs the command with Node 24 first on PATH.
#
#   scripts/run.sh test           type check, then every test (vitest)
#   scripts/run.sh tsc            type check
#   scripts/run.sh node FILE ...  any Node 24 program of ours
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${OCM_FUNCTIONS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ocm-functions}
say() { printf '[setup] %s\n' "$*" >&2; }

# Node 24: the machines ship Node 20, which client-node 2.x, vitest 5 and type stripping need past.
node_major() { "${1:-node}" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }
if [ "$(node_major)" -lt 24 ]; then
  node24="$cache/node24"
  if [ "$(node_major "$node24/bin/node")" -lt 24 ]; then
    say "installing Node 24 from the npm registry into $node24"
    npm install --global --prefix "$node24" --no-fund --no-audit node@24 >&2
    [ "$(node_major "$node24/bin/node")" -ge 24 ] || { say "Node 24 install failed"; exit 1; }
  fi
  export PATH="$node24/bin:$PATH"
fi

# npm dependencies: install when the lock file changed since the last install.
stamp="$root/node_modules/.installed-lock"
if ! cmp -s "$root/package-lock.json" "$stamp" 2>/dev/null; then
  say "installing npm dependencies"
  (cd "$root" && npm ci --no-fund --no-audit >&2)
  cp "$root/package-lock.json" "$stamp"
fi

# etcd, kube-apiserver, kube-controller-manager (KUBEBUILDER_ASSETS, when set, wins, as in envtest).
# The tests also drive functions from Knative's own ApiServerSource adapter, built the same way.
if [ -z "${KUBEBUILDER_ASSETS:-}" ]; then
  OCM_FUNCTIONS_BIN=$("$root/scripts/build-tools.sh" | tail -n 1)
  export OCM_FUNCTIONS_BIN
fi
if [ "${1:-}" = test ]; then
  OCM_FUNCTIONS_APISERVERSOURCE=$("$root/scripts/build-tools.sh" knative | tail -n 1)
  export OCM_FUNCTIONS_APISERVERSOURCE
  # Knative Serving's and Eventing's webhooks judge the rendered manifests (test/knative-webhooks.test.ts).
  webhooks=$("$root/scripts/build-tools.sh" knative-webhooks | tail -n 2)
  OCM_FUNCTIONS_KNATIVE_SERVING_WEBHOOK=$(head -n 1 <<<"$webhooks")
  OCM_FUNCTIONS_KNATIVE_EVENTING_WEBHOOK=$(tail -n 1 <<<"$webhooks")
  export OCM_FUNCTIONS_KNATIVE_SERVING_WEBHOOK OCM_FUNCTIONS_KNATIVE_EVENTING_WEBHOOK
  # OCM's own CLI against our hub (test/clusteradm.test.ts).
  OCM_FUNCTIONS_CLUSTERADM=$("$root/scripts/build-tools.sh" clusteradm | tail -n 1)
  export OCM_FUNCTIONS_CLUSTERADM
  # A consumer of the cluster inventory built from cluster-inventory-api (test/inventory-consumer.test.ts).
  OCM_FUNCTIONS_INVENTORY_CONSUMER=$("$root/scripts/build-tools.sh" inventory-consumer | tail -n 1)
  export OCM_FUNCTIONS_INVENTORY_CONSUMER
  # A real node (test/node.test.ts): Debian's containerd, runc, CNI plugins and nft, then kubelet,
  # kube-scheduler, kube-proxy, CoreDNS and our pause programs, built here so no test waits on a build.
  "$root/scripts/setup-node.sh"
  "$root/scripts/build-tools.sh" node >/dev/null
  # Knative Eventing in pods on that node (test/eventing-node.test.ts).
  "$root/scripts/build-tools.sh" eventing >/dev/null
  # Knative Serving and Traefik beside it (test/serving-node.test.ts): cold, about 4 and 12 minutes.
  "$root/scripts/build-tools.sh" serving >/dev/null
  # OCM v1.2.0's own programs, one variable each (test/placement-conformance.test.ts runs its placement
  # controller beside our placement-scheduler, test/addon-health-conformance.test.ts its add-on manager
  # beside our addon-manager).
  ocm=$("$root/scripts/build-tools.sh" ocm | tail -n 4)
  OCM_FUNCTIONS_OCM_REGISTRATION=$(awk '$1 == "registration" {print $2}' <<<"$ocm")
  OCM_FUNCTIONS_OCM_WORK=$(awk '$1 == "work" {print $2}' <<<"$ocm")
  OCM_FUNCTIONS_OCM_ADDON=$(awk '$1 == "addon" {print $2}' <<<"$ocm")
  OCM_FUNCTIONS_OCM_PLACEMENT=$(awk '$1 == "placement" {print $2}' <<<"$ocm")
  export OCM_FUNCTIONS_OCM_REGISTRATION OCM_FUNCTIONS_OCM_WORK OCM_FUNCTIONS_OCM_ADDON OCM_FUNCTIONS_OCM_PLACEMENT
fi

cd "$root"
cmd=${1:?usage: scripts/run.sh test|tsc|node FILE...}; shift
case "$cmd" in
  test)
    node node_modules/typescript/bin/tsc -p .
    if [ $# -gt 0 ]; then exec node node_modules/vitest/vitest.mjs run "$@"; fi
    # Every test: one vitest run of vitest.config.ts's two projects, the files that share the machine
    # first, then the node's files one at a time (as a second vitest beside the first they saved about
    # two minutes and made both flaky on CI's two cores). The output is kept, so that a failed run's
    # failures are printed again at the end, where a CI log's tail is read.
    logs=$(mktemp -d)
    trap 'rm -rf "$logs"' EXIT
    rc=0
    node node_modules/vitest/vitest.mjs run 2>&1 | tee "$logs/run" || rc=${PIPESTATUS[0]}
    if [ "$rc" -ne 0 ]; then
      say "the tests failed (exit $rc); what vitest printed from its failures on:"
      awk '/Failed Tests|Failed Suites|Unhandled Error/ { on = 1 } on && n++ < 200' "$logs/run" >"$logs/recap"
      if [ -s "$logs/recap" ]; then cat "$logs/recap"; else tail -n 80 "$logs/run"; fi
    fi
    exit "$rc" ;;
  tsc) exec node node_modules/typescript/bin/tsc -p . "$@" ;;
  node) exec node "$@" ;;
  *) say "unknown command $cmd"; exit 2 ;;
esac
