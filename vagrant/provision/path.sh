#!/usr/bin/env bash
# Which way the lab is provisioned, sourced by the other provisioning scripts (KPCT_REPO is the
# synced repository). lab_path is "offline" when the repository brings a built release kpct and
# every real proxier of the CI set, up to date (ci/real-proxiers.sh --check-only): the lab uses
# them as they are and downloads nothing. Otherwise "online": the toolchains and the build come
# from the network (apt, rustup, the Go module proxy).
repo="${KPCT_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
lab_kpct="$repo/target/release/kpct"
if [ -x "$lab_kpct" ] && bash "$repo/ci/real-proxiers.sh" --check-only > /dev/null 2>&1; then
  lab_path=offline
else
  lab_path=online
fi
