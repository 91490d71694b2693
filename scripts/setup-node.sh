#!/usr/bin/env bash
# Installs what a real Kubernetes node on this machine needs from Debian: containerd and runc run the
# containers, containernetworking-plugins gives the bridge/host-local/loopback CNI plugins, kubelet
# wants iptables and conntrack on its PATH, and kube-proxy (nftables mode) and the node's cleanup use
# nft. Needs root. Installs only what is missing, and refreshes the package lists only when a package
# is not known to apt yet (a fresh image has none).
#
#   scripts/setup-node.sh          # install what is missing; prints nothing else when all is there
set -euo pipefail
packages=(containerd runc containernetworking-plugins iptables conntrack nftables)

missing=()
for p in "${packages[@]}"; do
  # "install ok installed" is dpkg's status of a package that is fully there.
  if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" != "install ok installed" ]; then missing+=("$p"); fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ]; then
  echo "setup-node: needs root to install ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
for p in "${missing[@]}"; do
  # apt-cache policy names a candidate only for packages in the local lists.
  if ! apt-cache policy "$p" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    echo "[setup-node] apt-get update (no candidate for $p yet)" >&2
    apt-get update -qq
    break
  fi
done
echo "[setup-node] installing ${missing[*]}" >&2
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
