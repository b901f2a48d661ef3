#!/usr/bin/env bash
# Builds the real, unmodified proxiers kpct runs in its fake nodes (kube-proxy, kube-router) from
# the Go module proxy, with the machine's Go toolchain.
#
#   ci/real-proxiers.sh [--check-only] [--all | VERSION...]
#     VERSION       a directory under ci/real-proxiers/ (v1.37.2, kube-router-v2.10.0) or the
#                   binary's name (kube-proxy-v1.37.2); default: the CI set, kube-proxy v1.37.2
#                   (what CI's tests run; each cold build costs 5-7 min of CI's 40)
#     --all         every directory there: the newest patch of every minor the Go module proxy
#                   serves (v1.34.4, v1.35.4, v1.36.3, v1.37.2) and kube-router v2.10.0
#     --check-only  build nothing: exit 1 if a binary is missing or stale, naming it
#
# Each directory ci/real-proxiers/<version> (kube-proxy) or ci/real-proxiers/<program>-<version>
# is a Go module that requires one release, with its tidied go.sum, so a build needs nothing
# beyond the module downloads the go.sum pins (`-mod=readonly`):
#   go.mod    requires the release; for kube-proxy, k8s.io/kubernetes vX.Y.Z with one replace per
#             staging module (k8s.io/api => k8s.io/api v0.X.Y, ...: k8s.io/kubernetes's own go.mod
#             replace block, whose v0.0.0 requirements the proxy does not serve) and the go
#             directive of that minor
#   go.sum    from `go mod tidy`
#   tools.go  `//go:build tools`, importing the command (k8s.io/kubernetes/cmd/kube-proxy)
# To add a version: copy a directory of the same minor, change the versions, `go mod tidy` there.
#
# Each binary goes to target/real-proxiers/<program>-<version> (built under a temporary name and
# renamed, so never half-written), with <binary>.stamp (the hash of the directory's files and the
# build recipe; a binary whose stamp differs is stale and rebuilt) and <binary>.log (go's output).
# A built binary must answer --version with its version. Binaries are built one after the other:
# one `go build` keeps both cores of a 2-core machine busy, and the stdlib compiled for the first
# serves the others (GOCACHE). Cold (empty GOCACHE and GOMODCACHE) each costs 8-10 CPU-minutes
# and 50-70 MiB of module zips: 7-11 min on a busy 2-core machine, ~5 min on an idle one. With a
# warm GOCACHE a build is a link, 5-40 s; an up-to-date binary is reused in under a second.
#
# Go's caches are its usual ones (GOMODCACHE, GOCACHE; never inside the repository).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$repo/ci/real-proxiers"
out="$repo/target/real-proxiers"
# Part of every stamp: bump it when the build commands below change.
recipe="CGO_ENABLED=0 go build -mod=readonly -trimpath -buildvcs=false -ldflags=-s -w (recipe 1)"

check_only=0
all=0
# The CI set: what ci/install-deps.sh builds and checks, and what the real_* tests need.
ci_set=("v1.37.2")
wanted=()
for arg in "$@"; do
  case "$arg" in
    --check-only) check_only=1 ;;
    --all) all=1 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;
    -*) echo "real-proxiers: unknown argument $arg (see the header of $0)" >&2; exit 2 ;;
    *) wanted+=("$arg") ;;
  esac
done

# Everything kept under ci/real-proxiers/.
available=()
for dir in "$src"/*/; do
  [ -f "$dir/go.mod" ] && available+=("$(basename "$dir")")
done
if [ ${#available[@]} -eq 0 ]; then
  echo "real-proxiers: no module directories under ci/real-proxiers/" >&2
  exit 1
fi
if [ "$all" = 1 ]; then
  wanted=("${available[@]}")
elif [ ${#wanted[@]} -eq 0 ]; then
  wanted=("${ci_set[@]}")
fi

# binary DIR: the binary's name. v1.37.2 is kube-proxy's; kube-router-v2.10.0 names its program.
binary() {
  case "$1" in
    v[0-9]*) echo "kube-proxy-$1" ;;
    *) echo "$1" ;;
  esac
}

# Resolve the arguments to directories.
dirs=()
for w in "${wanted[@]}"; do
  found=""
  for d in "${available[@]}"; do
    if [ "$w" = "$d" ] || [ "$w" = "$(binary "$d")" ]; then found="$d"; fi
  done
  if [ -z "$found" ]; then
    echo "real-proxiers: no ci/real-proxiers/$w (kept: ${available[*]})" >&2
    exit 2
  fi
  dirs+=("$found")
done

# The package tools.go imports: what is built.
package_of() {
  sed -n 's/^import _ "\(.*\)"$/\1/p' "$src/$1/tools.go"
}

# ldflags DIR: -X flags that make the binary report its version. DATE is substituted at build
# time (kube-router's build date: the release's time in the module proxy).
ldflags_of() {
  local bin version
  bin="$(binary "$1")"
  version="${bin##*-}"
  case "${bin%-*}" in
    kube-proxy) echo "-s -w -X k8s.io/component-base/version.gitVersion=$version" ;;
    kube-router)
      echo "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$version" \
        "-X github.com/cloudnativelabs/kube-router/v2/pkg/version.BuildDate=DATE" ;;
    *) return 1 ;;
  esac
}

# stamp DIR: what the binary was built from.
stamp() {
  local d="$src/$1"
  { cat "$d/go.mod" "$d/go.sum" "$d/tools.go"; echo "$recipe"; ldflags_of "$1"; } \
    | sha256sum | cut -d' ' -f1
}

fmt_time() {
  local s="$1"
  if [ "$s" -ge 60 ]; then printf '%dm%02ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi
}

# version_ok BINARY VERSION: the binary's --version names VERSION as a word of its own (not
# inside the binary's path, which kube-router echoes: "Running PATH version v2.10.0, built …").
version_ok() {
  local said
  said="$(timeout 20 "$1" --version 2>&1 | head -n 3)" || true
  [[ " $said " =~ [[:space:]]${2//./\\.}[^0-9A-Za-z.] ]] && return 0
  echo "${said:-nothing}" | head -n 1
  return 1
}

# state DIR: missing, stale or current.
state() {
  local bin="$out/$(binary "$1")"
  if [ ! -x "$bin" ]; then echo missing
  elif [ ! -f "$bin.stamp" ] || [ "$(head -n 1 "$bin.stamp")" != "$(stamp "$1")" ]; then echo stale
  else echo current
  fi
}

for d in "${dirs[@]}"; do
  [ -f "$src/$d/go.sum" ] && [ -f "$src/$d/tools.go" ] \
    || { echo "real-proxiers: ci/real-proxiers/$d needs go.mod, go.sum and tools.go" >&2; exit 1; }
  [ -n "$(package_of "$d")" ] \
    || { echo "real-proxiers: ci/real-proxiers/$d/tools.go imports no command (import _ \"…/cmd/…\")" >&2; exit 1; }
  ldflags_of "$d" > /dev/null \
    || { echo "real-proxiers: ci/real-proxiers/$d: do not know how to stamp the version of $(binary "$d") (ldflags_of in $0)" >&2; exit 1; }
done

if [ "$check_only" = 1 ]; then
  bad=0
  for d in "${dirs[@]}"; do
    bin="$(binary "$d")"
    case "$(state "$d")" in
      missing)
        echo "real-proxiers: MISSING target/real-proxiers/$bin: run ci/real-proxiers.sh $d" >&2
        bad=$((bad + 1)) ;;
      stale)
        echo "real-proxiers: STALE target/real-proxiers/$bin (ci/real-proxiers/$d or the build recipe changed since it was built): run ci/real-proxiers.sh $d" >&2
        bad=$((bad + 1)) ;;
      current)
        if said="$(version_ok "$out/$bin" "${bin##*-}")"; then
          echo "real-proxiers: $bin up to date"
        else
          echo "real-proxiers: BROKEN target/real-proxiers/$bin: --version said \"$said\": run ci/real-proxiers.sh $d" >&2
          bad=$((bad + 1))
        fi ;;
    esac
  done
  if [ "$bad" -gt 0 ]; then
    echo "real-proxiers: $bad of ${#dirs[@]} binaries missing, stale or broken" >&2
    exit 1
  fi
  exit 0
fi

# ---- build ------------------------------------------------------------------------------
mkdir -p "$out"

# build DIR, in a subshell: `die` ends the build of this binary only. Called as `build || …`,
# where bash ignores `set -e`: every step that can fail is checked.
build() (
  local d="$1" bin version target start log pkg needs have fetched flags module date said size
  die() { echo "real-proxiers: $*" >&2; exit 1; }
  tmp=""
  trap 'if [ -n "$tmp" ]; then rm -f "$tmp"; fi' EXIT
  trap 'exit 130' INT TERM
  bin="$(binary "$d")"
  version="${bin##*-}"
  target="$out/$bin"
  log="$out/$bin.log"
  start=$SECONDS
  # One build per binary at a time (a second run in this checkout waits, then finds it current).
  exec 9> "$out/.$bin.lock" || die "cannot write target/real-proxiers/.$bin.lock"
  flock 9 || die "cannot lock target/real-proxiers/.$bin.lock"
  if [ "$(state "$d")" = current ] && version_ok "$target" "$version" > /dev/null; then
    echo "real-proxiers: $bin up to date ($(fmt_time $((SECONDS - start))))"
    return 0
  fi
  needs="$(awk '$1 == "go" { print $2; exit }' "$src/$d/go.mod")"
  command -v go > /dev/null \
    || die "cannot build $bin: no \`go\` on PATH (the machine's Go toolchain, ci/deps.tsv source \`go\`; ci/real-proxiers/$d/go.mod needs go $needs or newer: https://go.dev/dl)"
  # Go's caches must not land in the repository.
  local var dir
  for var in GOMODCACHE GOCACHE; do
    dir="$(go env "$var")"
    case "$(realpath -m "$dir")/" in
      "$repo"/*) die "cannot build $bin: $var ($dir) lies inside the repository: point it elsewhere" ;;
    esac
  done
  have="$(go env GOVERSION)"
  have="${have#go}"
  if [ "$(go env GOTOOLCHAIN)" = local ] \
    && [ "$(printf '%s\n%s\n' "$needs" "$have" | sort -V | head -n 1)" != "$needs" ]; then
    die "cannot build $bin: ci/real-proxiers/$d/go.mod needs go $needs, this machine's go is $have (GOTOOLCHAIN=local)"
  fi
  pkg="$(package_of "$d")"
  echo "real-proxiers: building $bin ($pkg, go $have) ..."
  # 1. The modules the command needs (only those: not every test dependency go.mod lists).
  if ! (cd "$src/$d" && GOWORK=off go list -mod=readonly -deps "$pkg" > /dev/null) > "$log" 2>&1; then
    grep -v '^go: downloading' "$log" | tail -n 5 | sed 's/^/    | /' >&2
    if grep -q 'missing go.sum entry' "$log"; then
      die "$bin: ci/real-proxiers/$d/go.sum is incomplete: run \`go mod tidy\` there and commit it (log: target/real-proxiers/$bin.log)"
    fi
    die "$bin: module download failed (GOPROXY=$(go env GOPROXY); log: target/real-proxiers/$bin.log)"
  fi
  fetched=$SECONDS
  flags="$(ldflags_of "$d")"
  if [[ "$flags" == *DATE* ]]; then
    module="$(cd "$src/$d" && GOWORK=off go list -mod=readonly -f '{{.Module.Path}}' "$pkg")"
    date="$(cd "$src/$d" && GOWORK=off go list -mod=readonly -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' "$module" 2>> "$log")" || date=""
    flags="${flags//DATE/${date:-unknown}}"
  fi
  # 2. Build under a temporary name beside the binary; renamed only once it answers --version.
  tmp="$out/.$bin.tmp.$$"
  if ! (cd "$src/$d" && GOWORK=off CGO_ENABLED=0 go build -mod=readonly -trimpath -buildvcs=false \
    -ldflags "$flags" -o "$tmp" "$pkg") >> "$log" 2>&1; then
    grep -v '^go: downloading' "$log" | tail -n 10 | sed 's/^/    | /' >&2
    if grep -qE 'reading https?://|dial tcp|no such host|403 Forbidden|404 Not Found' "$log"; then
      die "$bin: module download failed during the build (GOPROXY=$(go env GOPROXY); log: target/real-proxiers/$bin.log)"
    fi
    die "$bin: go build failed (log: target/real-proxiers/$bin.log)"
  fi
  said="$(version_ok "$tmp" "$version")" \
    || die "$bin: the built binary's --version said \"$said\", not $version (log: target/real-proxiers/$bin.log)"
  rm -f "$target.stamp" && mv -f "$tmp" "$target" || die "$bin: cannot move the binary into place"
  tmp=""
  { stamp "$d" && echo "# built by ci/real-proxiers.sh with go $have from ci/real-proxiers/$d"; } > "$target.stamp.tmp" \
    && mv -f "$target.stamp.tmp" "$target.stamp" || die "$bin: cannot write its stamp"
  size=$(($(stat -c %s "$target") / 1048576))
  echo "real-proxiers: $bin built in $(fmt_time $((SECONDS - start))) (modules $(fmt_time $((fetched - start))), build $(fmt_time $((SECONDS - fetched))); $size MiB)"
)

# One after the other: a single `go build` already keeps both cores busy (and the three share
# the standard library's compiled packages through GOCACHE), so concurrent builds gain nothing.
trap 'exit 130' INT TERM
failed=()
for d in "${dirs[@]}"; do
  build "$d" || failed+=("$(binary "$d")")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "real-proxiers: FAILED to build ${failed[*]} (see above)" >&2
  exit 1
fi
