#!/usr/bin/env bash
# Runs every test binary listed in OUT/tests.tsv, natively or inside the VM (the same script
# either way), logging each to OUT/logs and appending one line per binary to OUT/summary.LABEL
# (a file per label, which ci/summarize.sh adds up).
#   run-binaries.sh OUT LABEL [--skip PATTERNS | --only PATTERNS] -- [TEST-ARGS...]
# PATTERNS is a comma-separated list of test-name substrings (libtest ORs filters and skips).
# LABEL tells the halves of a split run apart (e.g. host, vm).
set -uo pipefail
out="$1"; label="$2"; shift 2
select=()
case "${1:-}" in
  --skip) IFS=, read -ra patterns <<< "$2"; for p in "${patterns[@]}"; do select+=(--skip "$p"); done; shift 2 ;;
  --only) IFS=, read -ra select <<< "$2"; shift 2 ;;
esac
[ "${1:-}" = -- ] && shift
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The VM does not inherit the caller's environment: set what the tests rely on here.
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
export RUST_BACKTRACE=1 INSTA_WORKSPACE_ROOT="$repo"
[ -f "$out/env.sh" ] && . "$out/env.sh"

mkdir -p "$out/logs"
# Tests mostly wait (a dropped probe is 2 s of silence), each in its own namespaces: run four
# per core (at most 16), as `kpct run -j` does. KPCT_TEST_THREADS overrides it.
threads="${KPCT_TEST_THREADS:-$(( $(nproc) * 4 > 16 ? 16 : $(nproc) * 4 ))}"
export RUST_TEST_THREADS="$threads"
echo "==> [$label] kernel $(uname -r), $(nproc) CPUs, $threads test threads per binary"
while IFS=$'\t' read -r name dir exe; do
  log="$out/logs/$label-${name//[:\/]/_}.log"
  started=$(date +%s)
  (cd "$dir" && CARGO_MANIFEST_DIR="$dir" "$exe" "${select[@]}" "$@") > "$log" 2>&1
  rc=$?
  result=$(grep -E '^test result:' "$log" | tail -1)
  echo "--> [$label] $name ($(( $(date +%s) - started ))s)"
  grep -E '^test .* \.\.\. (FAILED|ignored)|^test result:' "$log" | sed 's/^/    /'
  if [ $rc -ne 0 ]; then
    echo "    ---- $name failed (exit $rc); its log follows"
    sed -n '/^failures:/,$p' "$log" | head -200 | sed 's/^/    | /'
  fi
  printf '%s\t%s\t%s\n' "$label:$name" "$rc" "$result" >> "$out/summary.$label"
done < "$out/tests.tsv"
