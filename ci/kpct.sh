#!/usr/bin/env bash
# Runs the kpct CLI where the kernel can run it: natively when this kernel has IP_VS and dummy,
# otherwise inside a VM (ci/vm.sh) with the repository writable, so reports, JUnit files and
# pending snapshots written under it come back. Usage: sudo ci/kpct.sh COMMAND [ARGS...]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
cargo build --release -p kpct --quiet
bin="${CARGO_TARGET_DIR:-$repo/target}/release/kpct"
if "$bin" caps --quiet --require ip_vs,dummy,br_netfilter; then
  exec "$bin" "$@"
fi
exec bash "$repo/ci/vm.sh" --rwdir "$repo" -- "$bin" "$@"
