#!/usr/bin/env bash
# Lab provisioning, as root: the suite's own install script (the same as on any machine), with
# the toolchain's build prerequisites. The lab's kernel has IP_VS, so the VM runner's packages
# are left out and the suite runs natively.
set -euo pipefail
# Vagrant uploads this script to the guest and runs the copy: the synced repository is KPCT_REPO.
repo="${KPCT_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
bash "$repo/ci/install-deps.sh" --toolchain
