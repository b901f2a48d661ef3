#!/usr/bin/env bash
# Runs every test binary listed in OUT/tests.tsv, natively or inside the VM (the same script
# either way), logging each to OUT/logs and writing OUT/summary. Usage:
#   run-binaries.sh OUT [--skip PATTERN] -- [TEST-ARGS...]
set -uo pipefail
out="$1"; shift
skip=()
if [ "${1:-}" = --skip ]; then skip=(--skip "$2"); shift 2; fi
[ "${1:-}" = -- ] && shift
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The VM does not inherit the caller's environment: set what the tests rely on here.
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
export RUST_BACKTRACE=1 INSTA_WORKSPACE_ROOT="$repo"
[ -f "$out/env.sh" ] && . "$out/env.sh"

mkdir -p "$out/logs"
: > "$out/summary"
echo "    kernel $(uname -r), $(nproc) CPUs"
while IFS=$'\t' read -r name dir exe; do
  log="$out/logs/${name//[:\/]/_}.log"
  echo "--> $name"
  (cd "$dir" && CARGO_MANIFEST_DIR="$dir" "$exe" "${skip[@]}" "$@") > "$log" 2>&1
  rc=$?
  grep -E '^test .* \.\.\. (FAILED|ignored)|^test result:' "$log" | sed 's/^/    /'
  if [ $rc -ne 0 ]; then
    echo "    ---- $name failed (exit $rc); its log follows"
    sed -n '/^failures:/,$p' "$log" | head -200 | sed 's/^/    | /'
  fi
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(grep -E '^test result:' "$log" | tail -1)" >> "$out/summary"
done < "$out/tests.tsv"
