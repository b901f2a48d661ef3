#!/usr/bin/env bash
# The kpct gate of a proxier's repository, step by step: what its CI workflow runs
# (ci/examples/proxier-gate.yml), and the same on a developer's machine. Run as root from the
# proxier repository's root; kpct is the checkout this script is in.
#   PROXIER    the --proxier spec (required), e.g. `mine=exec:./bin/my-proxier`
#   BASELINE   the accepted run's JSON the repository keeps (default kpct-baseline.json); when
#              it does not exist yet, this run is written there, to review and commit
#   OUT        where kpct.json, junit.xml and report.html go (default target/kpct)
#   KPCT_ARGS  more `kpct run` arguments, split at spaces (e.g. `--exclude-tag ipv6`)
#   KPCT_BIN   a kpct binary to use instead of building this checkout's release one
# Exit status: kpct run's (0 nothing regressed, 1 a regression or, without a baseline, a
# failure, 3 some runs need what this kernel lacks).
set -euo pipefail
kpct_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
: "${PROXIER:?set PROXIER to the proxier, e.g. PROXIER=mine=exec:./bin/my-proxier}"
baseline="${BASELINE:-kpct-baseline.json}"
out="${OUT:-target/kpct}"
mkdir -p "$out"

echo "==> 1/3 what kpct needs: its self-check, and the install only if that fails"
bash "$kpct_dir/ci/ensure-deps.sh"

echo "==> 2/3 kpct ${KPCT_BIN:-built from $kpct_dir} (ci/kpct.sh builds it)"
args=(--proxier "$PROXIER" --json "$out/kpct.json" --junit "$out/junit.xml"
  --report "$out/report.html")
judged="no baseline yet"
if [ -f "$baseline" ]; then
  args+=(--baseline "$baseline")
  judged="judged by $baseline"
fi
extra=()
[ -z "${KPCT_ARGS:-}" ] || read -ra extra <<< "$KPCT_ARGS"

echo "==> 3/3 the library against $PROXIER, $judged"
rc=0
bash "$kpct_dir/ci/kpct.sh" run "${args[@]}" "${extra[@]}" || rc=$?
if [ ! -f "$baseline" ] && [ -f "$out/kpct.json" ]; then
  cp "$out/kpct.json" "$baseline"
  echo "kpct gate: no baseline yet: this run is now $baseline; review it and commit it" >&2
fi
exit "$rc"
