#!/usr/bin/env bash
# Runs the kpct CLI where the kernel can run it. `run` runs natively, and hands the runs this
# kernel cannot hold (IP_VS, SCTP) to a kpct in a VM (ci/vm.sh, as KPCT_VM_RUNNER) at the same
# time, into one table and exit status. Another command runs natively when this kernel has
# IP_VS, dummy and SCTP, otherwise inside the VM. The VM sees this
# machine's files read-only except the repository and the directories of the outputs asked for
# (--junit, --report, --observations, --write), which are made writable in it, so every output
# comes back.
# Usage: ci/kpct.sh COMMAND [ARGS...]   (as root; `sudo ci/kpct.sh …` if you are not)
# Environment: KPCT_VM=1 always runs the whole command in the VM; KPCT_BIN runs that kpct binary
# instead of building the release one; KPCT_VM_RUNNER replaces ci/vm.sh for the runs `run`
# hands over (tests); KPCT_VM_DRY_RUN=1 prints the VM command instead of running it (tests).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${KPCT_BIN:-}"
prebuilt="${CARGO_TARGET_DIR:-$repo/target}/release/kpct"
if [ -z "$bin" ] && ! command -v cargo > /dev/null && [ -x "$prebuilt" ]; then
  # No toolchain, a kpct built elsewhere (the offline Vagrant lab): run it as it is.
  echo "==> no cargo here: running the prebuilt $prebuilt" >&2
  bin="$prebuilt"
fi
# What kpct needs, installed if the self-check fails (once per change of ci/deps.tsv): with a
# prebuilt kpct, only what running it needs.
if [ -n "$bin" ]; then
  bash "$repo/ci/ensure-deps.sh" --runtime
else
  bash "$repo/ci/ensure-deps.sh"
  cargo build --release -p kpct --quiet --manifest-path "$repo/Cargo.toml"
  bin="$prebuilt"
fi
if [ "${KPCT_VM:-0}" != 1 ]; then
  if [ "${1:-}" = run ]; then
    # Bad arguments are told natively.
    "$bin" "$@" --kernel-needs > /dev/null 2>&1 || exec "$bin" "$@"
    if "$bin" caps --quiet --require br_netfilter; then
      # The runs this kernel cannot hold (IP_VS, SCTP) go to the VM through this runner, the
      # rest run here at the same time, into one table, report and exit status; a run that
      # needs nothing missing boots no VM.
      export KPCT_VM_RUNNER="${KPCT_VM_RUNNER:-$repo/ci/vm.sh}"
      exec "$bin" "$@"
    fi
  elif "$bin" caps --quiet --require br_netfilter,ip_vs,dummy,sctp; then
    exec "$bin" "$@"
  fi
fi

# The directory each output lands in, made writable in the VM (created first, so it can be).
rwdirs=("$repo")
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  arg="${args[$i]}" path="" kind=""
  case "$arg" in
    --junit | --json | --report | --write) kind=file path="${args[$((i + 1))]:-}" ;;
    --observations) kind=dir path="${args[$((i + 1))]:-}" ;;
    --junit=* | --json=* | --report=* | --write=*) kind=file path="${arg#*=}" ;;
    --observations=*) kind=dir path="${arg#*=}" ;;
  esac
  [ -n "$path" ] || continue
  if [ "$kind" = dir ]; then
    mkdir -p "$path" || { echo "ci/kpct.sh: ${arg%%=*} $path: cannot create the directory" >&2; exit 2; }
    dir="$(realpath "$path")"
  else
    parent="$(dirname "$path")"
    [ -d "$parent" ] || { echo "ci/kpct.sh: ${arg%%=*} $path: directory $parent does not exist" >&2; exit 2; }
    dir="$(realpath "$parent")"
  fi
  case "$dir/" in
    "$repo"/*) ;;
    /run/* | /run/ | /dev/* | /proc/* | /sys/*)
      # The VM mounts its own /run, /dev, /proc, /sys: an output there would stay in the VM.
      echo "ci/kpct.sh: ${arg%%=*} $path: the VM has its own $(cut -d/ -f2 <<< "$dir"), so the output would not come back; pick a path elsewhere" >&2
      exit 2 ;;
    *) rwdirs+=("$dir") ;;
  esac
done
vm_args=()
for d in "${rwdirs[@]}"; do vm_args+=(--rwdir "$d"); done
if [ "${KPCT_VM_DRY_RUN:-0}" = 1 ]; then
  printf '%q ' bash "$repo/ci/vm.sh" "${vm_args[@]}" -- "$bin" "$@"
  echo
  exit 0
fi
exec bash "$repo/ci/vm.sh" "${vm_args[@]}" -- "$bin" "$@"
