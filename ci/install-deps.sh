#!/usr/bin/env bash
# Installs everything the suite runs on a fresh Debian 12 (or Ubuntu) machine, then checks each
# piece the way the suite uses it. Run as root (`sudo` if you are not). Idempotent.
#
#   ci/install-deps.sh [--vm | --no-vm] [--toolchain] [--runtime] [--lab] [--check-only]
#     --vm / --no-vm  install the VM runner's packages (qemu, a kernel with IP_VS, virtme-ng,
#                     busybox-static) or leave them out; default: only when the running kernel
#                     has no IP_VS (the Vagrant lab and most CI VMs have it and run natively)
#     --toolchain     also what building the Rust toolchain's crates needs (a C compiler, curl
#                     for rustup): for the Vagrant lab, whose box has no toolchain
#     --runtime       only what running a built kpct needs (the `suite` group without the Rust
#                     and Go toolchains, and no build of the real proxiers: they are checked):
#                     ci/kpct.sh with a prebuilt kpct, the offline Vagrant lab
#     --lab           also what builds the lab's box and runs it on this machine (vagrant/box,
#                     vagrant/host.sh)
#     --check-only    install nothing; run the self-check
#
# What is installed, and why, is ci/deps.tsv (a test keeps it complete). After the packages it
# builds the real proxiers (ci/real-proxiers.sh: kube-proxy and kube-router from the Go module
# proxy with the machine's Go; 5-11 min per binary on 2 cores when nothing is cached, a second
# when the binaries are up to date). The self-check ends with one line per missing or
# broken piece, naming the package to install, and exits 1 if any.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deps="$repo/ci/deps.tsv"
export DEBIAN_FRONTEND=noninteractive

vm=auto
install=1
toolchain=0
runtime=0
lab=0
for arg in "$@"; do
  case "$arg" in
    --vm) vm=1 ;;
    --no-vm) vm=0 ;;
    --toolchain) toolchain=1 ;;
    --runtime) runtime=1 ;;
    --lab) lab=1 ;;
    --check-only) install=0 ;;
    *) echo "install-deps: unknown argument $arg (see the header of $0)" >&2; exit 2 ;;
  esac
done
if [ "$(id -u)" != 0 ]; then
  echo "install-deps: run as root (sudo ci/install-deps.sh if you are not root)" >&2
  exit 2
fi

# A module the running kernel can use: loaded, built in, or shipped for it.
kernel_has() {
  local release; release="$(uname -r)"
  [ -d "/sys/module/$1" ] && return 0
  grep -qs "/$1.ko" "/lib/modules/$release/modules.builtin" && return 0
  compgen -G "/lib/modules/$release/kernel/net/netfilter/ipvs/$1.ko*" > /dev/null
}
if [ "$vm" = auto ]; then
  if kernel_has ip_vs; then vm=0; else vm=1; fi
fi
groups="suite"
[ "$runtime" = 1 ] || groups="$groups tests"
[ "$toolchain" = 1 ] && groups="toolchain $groups"
[ "$vm" = 1 ] && groups="$groups vm"
[ "$lab" = 1 ] && groups="$groups lab"

# rows GROUP SOURCE: the package column of the matching rows of deps.tsv.
rows() { awk -F'\t' -v g="$1" -v s="$2" '$0 !~ /^#/ && NF >= 4 && $1 == g && $2 == s { print $3 }' "$deps"; }

if [ "$install" = 1 ]; then
  need_apt=()
  for group in $groups; do
    for pkg in $(rows "$group" apt); do
      dpkg-query -W -f='${Status}' "$pkg" 2> /dev/null | grep -q "install ok installed" || need_apt+=("$pkg")
    done
  done
  if [ ${#need_apt[@]} -gt 0 ]; then
    echo "==> apt-get install ${need_apt[*]}"
    apt-get update -qq
    # No package's daemon starts as it is installed (libvirtd would bring up its networks in the
    # host's namespace): the lab starts libvirtd in a namespace of its own (vagrant/host.sh).
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
      chmod 755 /usr/sbin/policy-rc.d
      policy_guard=/usr/sbin/policy-rc.d
      trap 'rm -f "$policy_guard"' EXIT
    fi
    qemu=() rest=()
    for pkg in "${need_apt[@]}"; do
      if [ "$pkg" = qemu-system-x86 ]; then qemu=("$pkg"); else rest+=("$pkg"); fi
    done
    [ ${#rest[@]} -gt 0 ] && apt-get install -y -qq --no-install-recommends "${rest[@]}" > /dev/null
    if [ ${#qemu[@]} -gt 0 ]; then
      # qemu-system must match an installed qemu-utils (some images carry a backported one,
      # which Breaks the release's qemu-system-common): take it from the same suite.
      utils="$(dpkg-query -W -f='${Version}' qemu-utils 2> /dev/null || true)"
      if [[ "$utils" == *~bpo12* ]]; then
        echo "==> qemu-utils $utils is a backport: qemu-system-x86 from bookworm-backports"
        uri="$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2> /dev/null || true)"
        [ -n "$uri" ] || uri="$(awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }' /etc/apt/sources.list 2> /dev/null || true)"
        [ -n "$uri" ] || { echo "install-deps: no Debian archive in the apt sources to add bookworm-backports from" >&2; exit 1; }
        echo "deb $uri bookworm-backports main" > /etc/apt/sources.list.d/kpct-bookworm-backports.list
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends -t bookworm-backports qemu-system-x86 > /dev/null
      else
        apt-get install -y -qq --no-install-recommends qemu-system-x86 > /dev/null
      fi
    fi
  fi
  for group in $groups; do
    for pkg in $(rows "$group" pip); do
      prog="$(awk -F'\t' -v p="$pkg" '$3 == p { print $4 }' "$deps")"
      command -v "$prog" > /dev/null && continue
      echo "==> pip install $pkg"
      # Debian 12's pip refuses to touch the system Python without --break-system-packages.
      python3 -m pip install --quiet --root-user-action=ignore "$pkg" 2> /dev/null \
        || python3 -m pip install --quiet --root-user-action=ignore --break-system-packages "$pkg"
      hash -r
    done
    for crate in $(rows "$group" cargo); do
      prog="$(awk -F'\t' -v p="$crate" '$3 == p { print $4 }' "$deps")"
      command -v "$prog" > /dev/null && continue
      # Into /usr/local (on PATH, also under sudo), not ~/.cargo/bin, which a machine may mount
      # read-only with its toolchain (the fresh-machine check does).
      echo "==> cargo install --locked --root /usr/local $crate"
      cargo install --quiet --locked --root /usr/local "$crate"
      hash -r
    done
  done
  # The real proxiers kpct runs in its nodes, built with the machine's Go (source `go`); with
  # --runtime they are only checked (the lab brings them built).
  [ "$runtime" = 1 ] || echo "==> ci/real-proxiers.sh (kube-proxy v1.37.2; \`ci/real-proxiers.sh --all\` adds v1.34.4, v1.35.4, v1.36.3 and kube-router)"
  [ "$runtime" = 1 ] || bash "$repo/ci/real-proxiers.sh" \
    || echo "install-deps: building the real proxiers failed (see above); the self-check names what is missing" >&2
fi

# ---- self-check: every piece exercised the way the suite uses it ---------------------------
failures=0
checks=0
fail() { echo "install-deps: FAILED: $1" >&2; failures=$((failures + 1)); }
# check PACKAGE WHAT COMMAND...: runs COMMAND; on failure names the package and the first line
# of what the command said.
check() {
  local pkg="$1" what="$2" out; shift 2
  checks=$((checks + 1))
  if ! out="$("$@" 2>&1)"; then
    fail "$what ($(head -n 1 <<< "$out" | cut -c1-160)): install the $pkg package"
    return 1
  fi
}

for group in $groups; do
  while IFS=$'\t' read -r g source pkg programs _why; do
    [ "$g" = "$group" ] && [ "$programs" != - ] || continue
    # A prebuilt kpct and prebuilt proxiers need no toolchain.
    [ "$runtime" = 1 ] && { [ "$source" = rustup ] || [ "$source" = go ]; } && continue
    for prog in $programs; do
      checks=$((checks + 1))
      command -v "$prog" > /dev/null && continue
      case "$source" in
        rustup) fail "$prog is not on PATH: install a Rust toolchain (rustup, https://rustup.rs)" ;;
        go) fail "$prog is not on PATH: install a Go toolchain (https://go.dev/dl), at least the go version of ci/real-proxiers/*/go.mod" ;;
        *) fail "$prog is not on PATH: install the $pkg package" ;;
      esac
    done
  done < <(grep -v '^#' "$deps")
done

ns="kpct-selfcheck-$$"
trap 'ip netns delete "$ns" 2> /dev/null || true; rm -rf "${tmp:-}" ${policy_guard:+"$policy_guard"}' EXIT
tmp="$(mktemp -d)"
in_ns() { ip netns exec "$ns" "$@"; }
if check iproute2 "ip netns add" ip netns add "$ns"; then
  check iproute2 "ip link in a namespace" ip -n "$ns" link set lo up
  rules=$'*filter\n:KPCT-CHECK - [0:0]\n-A KPCT-CHECK -j RETURN\nCOMMIT\n'
  check iptables "iptables-restore (nf_tables) in a namespace" in_ns iptables-restore -w <<< "$rules" \
    && check iptables "iptables-save reads it back" bash -c "ip netns exec $ns iptables-save -t filter | grep -q KPCT-CHECK"
  check nftables "nft lists the iptables-nft table" in_ns nft list table ip filter
  check iptables "iptables-legacy-restore in a namespace" in_ns iptables-legacy-restore -w <<< "$rules" \
    && check iptables "iptables-legacy-save reads it back" bash -c "ip netns exec $ns iptables-legacy-save -t filter | grep -q KPCT-CHECK"
  check iptables "xtables-monitor" in_ns xtables-monitor --version
  check ipset "ipset hash:ip,port,ip in a namespace" in_ns ipset create kpct-check hash:ip,port,ip \
    && check ipset "ipset save" bash -c "ip netns exec $ns ipset save | grep -q kpct-check"
  check conntrack "conntrack -L in a namespace" in_ns conntrack -L
  if kernel_has ip_vs; then
    modprobe -q ip_vs || true
    check ipvsadm "ipvsadm -Ln in a namespace" in_ns ipvsadm -Ln
  else
    # Without IP_VS ipvsadm can only say so; that it runs is what is checked here (the VM uses it).
    check ipvsadm "ipvsadm runs" bash -c "ipvsadm --version 2>&1 | grep -qi ipvs"
  fi
fi
if [ "$runtime" = 0 ]; then
cat > "$tmp/check.xsd" << 'EOF'
<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema"><xs:element name="ok"/></xs:schema>
EOF
echo '<ok/>' > "$tmp/check.xml"
check libxml2-utils "xmllint --schema" xmllint --noout --schema "$tmp/check.xsd" "$tmp/check.xml"
check python3 "python3" python3 -c 'import json, os, sys'
echo '<svg xmlns="http://www.w3.org/2000/svg" width="9" height="9"><rect width="9" height="9" fill="#d00000"/></svg>' > "$tmp/check.svg"
check chromium "chromium --headless --screenshot" bash -c "cd '$tmp' && HOME='$tmp' chromium --headless --no-sandbox --disable-gpu --window-size=20,20 --screenshot='$tmp/check.png' 'file://$tmp/check.svg' > '$tmp/chromium.log' 2>&1; test -s '$tmp/check.png' || { tail -n 3 '$tmp/chromium.log'; exit 1; }"
check vagrant-libvirt "vagrant validate of vagrant/Vagrantfile (needs a provider)" \
  bash -c "cd '$repo/vagrant' && vagrant validate"
fi
if [ "$lab" = 1 ]; then
  check mmdebstrap "mmdebstrap --version" mmdebstrap --version
  check qemu-utils "qemu-img --version" qemu-img --version
  check libvirt-daemon-system "libvirtd --version" libvirtd --version
  check vagrant-libvirt "vagrant's libvirt provider" bash -c "vagrant plugin list 2>&1 | grep -q vagrant-libvirt"
fi
# The real proxiers: every binary of the CI set (ci/real-proxiers.sh) is there, up to date, and
# answers --version with its version.
checks=$((checks + 1))
if ! out="$(bash "$repo/ci/real-proxiers.sh" --check-only 2>&1)"; then
  while read -r line; do
    case "$line" in
      *MISSING*|*STALE*|*BROKEN*) fail "${line#real-proxiers: } (needs Go: https://go.dev/dl, and the Go module proxy)" ;;
    esac
  done <<< "$out"
  grep -qE 'MISSING|STALE|BROKEN' <<< "$out" || fail "ci/real-proxiers.sh --check-only: $(head -n 1 <<< "$out" | cut -c1-160)"
fi
if [ "$vm" = 1 ]; then
  kernel="$(bash "$repo/ci/find-ipvs-kernel.sh" || true)"
  checks=$((checks + 1))
  if [ -z "$kernel" ]; then
    fail "no /boot/vmlinuz-* with IP_VS modules for the VM: install the linux-image-amd64 package"
  else
    check qemu-system-x86 "qemu-system-x86_64" qemu-system-x86_64 --version
    # --dry-run builds the initramfs (busybox) and the QEMU command line without booting.
    checks=$((checks + 1))
    if out="$(cd "$tmp" && vng --dry-run --disable-kvm --run "$kernel" --exec true 2>&1)"; then rc=0; else rc=$?; fi
    # virtme-ng runs `file` on the kernel and on busybox (a missing one ends in a traceback).
    if grep -qi "file. is not installed" <<< "$out"; then
      fail "virtme-ng needs the file command (it said: $(grep -i -m1 'is not installed' <<< "$out" | cut -c1-120)): install the file package"
    elif grep -qi "busybox" <<< "$out"; then
      fail "virtme-ng cannot build an initramfs ($(grep -i -m1 busybox <<< "$out" | cut -c1-120)): install the busybox-static package"
    elif [ "$rc" != 0 ]; then
      fail "vng --dry-run for $kernel exited $rc ($(grep -m1 . <<< "$out" | cut -c1-160)): install the virtme-ng pip package"
    fi
  fi
fi

if [ "$failures" -gt 0 ]; then
  echo "install-deps: $failures of $checks checks failed" >&2
  exit 1
fi
echo "==> dependencies ready: $checks checks passed ($groups)"
