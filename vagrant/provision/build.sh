#!/usr/bin/env bash
# Lab provisioning, as the login user: builds kpct and checks that the lab's kernel has what the
# suite needs natively (IP_VS, dummy, br_netfilter).
set -euo pipefail
# Vagrant uploads this script to the guest and runs the copy: the synced repository is KPCT_REPO.
repo="${KPCT_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
cd "$repo"
cargo="$(command -v cargo || echo "$HOME/.cargo/bin/cargo")"
"$cargo" build --release -p kpct
as_root=()
[ "$(id -u)" = 0 ] || as_root=(sudo)
for m in ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh ip_vs_lc ip_vs_wlc dummy vxlan br_netfilter xt_ipvs; do
  "${as_root[@]}" modprobe "$m" || true
done
"${as_root[@]}" "${CARGO_TARGET_DIR:-$repo/target}/release/kpct" caps --require ip_vs,dummy,br_netfilter
