#!/usr/bin/env bash
# Makes sure this machine has what the suite needs, so that `ci/test.sh` and `ci/kpct.sh` work
# on a machine nobody prepared: the self-check first (ci/install-deps.sh --check-only), the
# install only when it fails. A passed check is remembered in target/deps-checked, keyed by the
# dependency scripts' contents, and not run again until they change (delete the file to force
# it). Usage: ci/ensure-deps.sh [--runtime] (as root; --runtime: only what running a prebuilt
# kpct needs, see ci/install-deps.sh, remembered in target/deps-checked-runtime; a passed whole
# check counts for it too).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
whole="${CARGO_TARGET_DIR:-$repo/target}/deps-checked"
stamp="$whole"
[ "${1:-}" = --runtime ] && stamp="$whole-runtime"
key="$(cat "$repo/ci/deps.tsv" "$repo/ci/install-deps.sh" "$repo/ci/real-proxiers.sh" | sha1sum)"
for passed in "$whole" "$stamp"; do
  if [ -f "$passed" ] && [ "$(cat "$passed")" = "$key" ]; then
    exit 0
  fi
done
mkdir -p "$(dirname "$stamp")"
if ! bash "$repo/ci/install-deps.sh" --check-only "$@" > "$stamp.log" 2>&1; then
  echo "==> the dependency self-check failed ($stamp.log): installing what is missing" >&2
  bash "$repo/ci/install-deps.sh" "$@" >&2
fi
echo "$key" > "$stamp"
