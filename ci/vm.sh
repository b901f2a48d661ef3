#!/usr/bin/env bash
# Runs a command inside a virtme-ng VM that boots an installed kernel with IP_VS, sharing this
# machine's filesystem read-only; WRITABLE-DIRs (absolute) are written back. Exit status is the
# command's. Used when this kernel lacks IP_VS (KVM guests hang on some hosts, so TCG is used).
# The VM is throwaway, so it loads br_netfilter (which a Kubernetes node has) before the command.
# Usage: ci/vm.sh [--rwdir DIR]... -- COMMAND [ARGS...]
# Environment: KPCT_VM_KERNEL=/boot/vmlinuz-X, KPCT_VM_TIMEOUT (s, default 1500),
#              KPCT_VM_MEMORY (default 3G)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rw=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rwdir) mkdir -p "$2"; rw+=(--rwdir "$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "ci/vm.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "ci/vm.sh: no command given" >&2; exit 2; }

kernel="${KPCT_VM_KERNEL:-$(bash "$repo/ci/find-ipvs-kernel.sh")}"
if [ -z "$kernel" ]; then
  echo "ci/vm.sh: no installed kernel with IP_VS modules found; run ci/install-deps.sh" >&2
  exit 2
fi
vng="$(command -v vng || true)"
if [ -z "$vng" ]; then
  echo "ci/vm.sh: virtme-ng (vng) is not installed; run ci/install-deps.sh" >&2
  exit 2
fi
echo "==> $(uname -r) lacks IP_VS: running in a VM with $(basename "$kernel") (TCG; boot takes ~40 s)" >&2
# Both streams through a pipe (a FIFO, so that its reader can be awaited): the VM launcher
# reopens its output by path, which on a regular file truncates it (seen: a CI log whose first
# half became NUL bytes).
# `timeout` without --foreground leads a process group of its own and at the deadline signals
# all of it: vng starts QEMU through a shell, and with --foreground only vng was signalled while
# QEMU ran on past the deadline (seen: a VM half 26 minutes into its 25). Being in its own
# group, it no longer gets the terminal's Ctrl-C, so a signal to this script is passed on.
set +e
pipe_dir="$(mktemp -d "${TMPDIR:-/tmp}/vm-console-XXXXXX")"
trap 'rm -rf "$pipe_dir"' EXIT
mkfifo "$pipe_dir/out"
cat "$pipe_dir/out" &
reader=$!
# The command goes to the guest as a script file (the guest sees this machine's files), not on
# the kernel command line that carries --exec: that line holds 2048 bytes, and a longer command
# (a test filter with many --skip) was cut off, leaving the VM idle until the timeout.
printf 'modprobe -a br_netfilter ip_vs dummy xt_ipvs 2>/dev/null\ncd %q && exec %s\n' \
  "$PWD" "$(printf '%q ' "$@")" > "$pipe_dir/command.sh"
timeout --kill-after=30 "${KPCT_VM_TIMEOUT:-1500}" "$vng" --disable-kvm --run "$kernel" \
  --memory "${KPCT_VM_MEMORY:-3G}" --cpus "$(nproc)" "${rw[@]}" \
  --exec "bash $(printf '%q' "$pipe_dir/command.sh")" \
  </dev/null >"$pipe_dir/out" 2>&1 &
vm=$!
trap 'kill -TERM -- "-$vm" 2>/dev/null' INT TERM HUP
while :; do
  wait "$vm"
  rc=$?
  # A trapped signal ends `wait` early; wait again for the group to go.
  kill -0 "$vm" 2>/dev/null || break
done
wait "$reader"
exit "$rc"
