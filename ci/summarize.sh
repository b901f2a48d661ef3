#!/usr/bin/env bash
# Adds up OUT/summary.* (one line per test binary: the host's half, the VM's, the doc tests)
# into the closing line; fails if any binary failed or if no test ran at all.
set -euo pipefail
out="$1"
# In the order the halves are reported.
summaries=()
for label in host vm doctests; do
  [ -f "$out/summary.$label" ] && summaries+=("$out/summary.$label")
done
cat "${summaries[@]}" > "$out/summary"
passed=0; failed=0; ignored=0; broken=0
while IFS=$'\t' read -r name rc result; do
  p=$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<< "$result"); p=${p:-0}
  f=$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<< "$result"); f=${f:-0}
  i=$(sed -nE 's/.* ([0-9]+) ignored.*/\1/p' <<< "$result"); i=${i:-0}
  passed=$((passed + p)); failed=$((failed + f)); ignored=$((ignored + i))
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
    echo "kpct: $name exited $rc without reporting a failed test (crash or timeout?)" >&2
    broken=$((broken + 1))
  fi
done < "$out/summary"
echo
echo "==> per binary: $(awk -F'\t' '{printf "%s=%s ", $1, ($2==0?"ok":"FAIL")}' "$out/summary")"
[ "$ignored" -gt 0 ] && echo "    ($ignored test(s) marked #[ignore] were not run)"
echo "kpct: $passed passed, $((failed + broken)) failed"
if [ "$passed" -eq 0 ]; then
  echo "kpct: no test ran" >&2
  exit 1
fi
[ $((failed + broken)) -eq 0 ]
