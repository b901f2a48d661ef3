#!/usr/bin/env bash
# Lab provisioning, as root: the suite's own install script. Offline (the repository brings kpct
# and the real proxiers built, see path.sh), only its self-check of what running kpct needs: the
# lab box holds those packages. Online, the whole install with the toolchain's build
# prerequisites. The lab's kernel has IP_VS, so the VM runner's packages are left out either way.
set -euo pipefail
# Vagrant uploads this script to the guest and runs the copy: the synced repository is KPCT_REPO.
repo="${KPCT_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
source "$repo/vagrant/provision/path.sh"
if [ "$lab_path" = offline ]; then
  echo "==> offline path: the repository brings target/release/kpct and target/real-proxiers; checking the box's tools"
  bash "$repo/ci/install-deps.sh" --runtime --check-only
else
  echo "==> online path: no built kpct or real proxiers in the repository; installing the suite's dependencies and a toolchain"
  bash "$repo/ci/install-deps.sh" --toolchain
fi
