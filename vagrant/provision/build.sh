#!/usr/bin/env bash
# Lab provisioning, as the login user: offline, the synced release kpct as it is; online, a
# build of kpct and of the real proxiers. Then a check that the lab's kernel has what the suite
# needs natively (IP_VS, dummy, br_netfilter, SCTP).
set -euo pipefail
# Vagrant uploads this script to the guest and runs the copy: the synced repository is KPCT_REPO.
repo="${KPCT_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
source "$repo/vagrant/provision/path.sh"
cd "$repo"
as_root=()
[ "$(id -u)" = 0 ] || as_root=(sudo)
if [ "$lab_path" = offline ]; then
  echo "==> offline path: using the synced $lab_kpct and target/real-proxiers"
  kpct="$lab_kpct"
else
  echo "==> online path: building kpct and the real proxiers"
  export PATH="$HOME/.cargo/bin:$HOME/go-toolchain/bin:$PATH"
  cargo build --release -p kpct
  "${as_root[@]}" env PATH="$PATH" bash ci/real-proxiers.sh
  kpct="${CARGO_TARGET_DIR:-$repo/target}/release/kpct"
fi
for m in ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh ip_vs_lc ip_vs_wlc dummy vxlan br_netfilter xt_ipvs sctp; do
  "${as_root[@]}" modprobe "$m" || true
done
"${as_root[@]}" "$kpct" caps --require ip_vs,dummy,br_netfilter,sctp
