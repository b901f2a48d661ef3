#!/usr/bin/env bash
# Runs the kpct CLI where the kernel can run it: natively when this kernel has what the command
# needs (for `run`, what its selected scenarios and proxiers need: `kpct run --kernel-needs`;
# otherwise IP_VS, dummy and SCTP), otherwise inside a VM (ci/vm.sh). The VM sees this
# machine's files read-only except the repository and the directories of the outputs asked for
# (--junit, --report, --observations, --write), which are made writable in it, so every output
# comes back.
# Usage: ci/kpct.sh COMMAND [ARGS...]   (as root; `sudo ci/kpct.sh …` if you are not)
# Environment: KPCT_VM=1 always uses the VM; KPCT_BIN runs that kpct binary instead of building
# the release one; KPCT_VM_DRY_RUN=1 prints the VM command instead of running it (tests).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# What kpct needs, installed if the self-check fails (once per change of ci/deps.tsv).
bash "$repo/ci/ensure-deps.sh"
bin="${KPCT_BIN:-}"
if [ -z "$bin" ]; then
  cargo build --release -p kpct --quiet --manifest-path "$repo/Cargo.toml"
  bin="${CARGO_TARGET_DIR:-$repo/target}/release/kpct"
fi
if [ "${KPCT_VM:-0}" != 1 ]; then
  # A run goes to the VM only if this kernel lacks what its selection needs (an IPv4 `exec:`
  # proxier over the iptables scenarios needs no IP_VS); bad arguments are told natively.
  needs=ip_vs,dummy,sctp
  if [ "${1:-}" = run ]; then
    needs="$("$bin" "$@" --kernel-needs 2>/dev/null)" || exec "$bin" "$@"
  fi
  if "$bin" caps --quiet --require "br_netfilter${needs:+,$needs}"; then
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
