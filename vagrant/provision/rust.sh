#!/usr/bin/env bash
# Lab provisioning, as the login user. Online path only (see path.sh): a Rust toolchain through
# rustup (skipped where cargo exists) with sudo's PATH made to find it (ci/*.sh run under sudo
# call cargo), and a Go toolchain from the Go module proxy (golang.org/toolchain, the version
# ci/real-proxiers.sh needs) for the real proxiers.
set -euo pipefail
repo="${KPCT_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
source "$repo/vagrant/provision/path.sh"
if [ "$lab_path" = offline ]; then
  echo "==> offline path: kpct and the real proxiers are built; no toolchain needed"
  exit 0
fi
echo "==> online path: rustup and Go"
if ! command -v cargo > /dev/null && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
fi
go_version="${KPCT_LAB_GO:-1.26.0}"
if [ ! -x "$HOME/go-toolchain/bin/go" ]; then
  zip="$(mktemp)"
  curl -sSfL -o "$zip" "${GOPROXY_URL:-https://proxy.golang.org}/golang.org/toolchain/@v/v0.0.1-go${go_version}.linux-amd64.zip"
  dir="$(mktemp -d)"
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$zip" "$dir"
  mv "$dir/golang.org/toolchain@v0.0.1-go${go_version}.linux-amd64" "$HOME/go-toolchain"
  chmod +x "$HOME"/go-toolchain/bin/* "$HOME"/go-toolchain/pkg/tool/*/*
  rm -rf "$zip" "$dir"
fi
if [ -d /etc/sudoers.d ]; then
  line="Defaults secure_path=\"$HOME/.cargo/bin:$HOME/go-toolchain/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\""
  if [ "$(id -u)" = 0 ]; then
    echo "$line" > /etc/sudoers.d/kpct-cargo
  else
    echo "$line" | sudo tee /etc/sudoers.d/kpct-cargo > /dev/null
  fi
fi
