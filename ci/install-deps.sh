#!/usr/bin/env bash
# Installs what the suite needs on a fresh Debian/Ubuntu machine (run as root). Idempotent.
#  - the tools the suite drives inside namespaces: iproute2, iptables, ipset, ipvsadm, conntrack
#  - vagrant, whose `vagrant validate` checks the lab Vagrantfile in the tests
#  - xmllint (libxml2-utils): the JUnit output is validated against the JUnit XSD in the tests
#  - for kernels without IP_VS: qemu + a distribution kernel with IPVS modules + virtme-ng, so
#    ci/test.sh can run the IPVS tests in a VM
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
need_apt=()
for pkg in iproute2 iptables ipset ipvsadm conntrack kmod libxml2-utils qemu-system-x86 linux-image-amd64 python3-pip vagrant; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "==> apt-get install ${need_apt[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" > /dev/null
fi
if ! command -v vng > /dev/null; then
  echo "==> pip install virtme-ng"
  python3 -m pip install --quiet virtme-ng 2> >(grep -v "WARNING: Running pip as the 'root'" >&2) \
    || python3 -m pip install --quiet --break-system-packages virtme-ng
  hash -r
fi
command -v vng > /dev/null || { echo "install-deps: vng not on PATH after installing virtme-ng" >&2; exit 1; }
echo "==> dependencies ready (vng: $(command -v vng))"
