#!/usr/bin/env bash
# Lab provisioning, as the login user: a Rust toolchain through rustup (skipped where cargo
# exists), and sudo's PATH made to find it (ci/*.sh run under sudo call cargo).
set -euo pipefail
if ! command -v cargo > /dev/null && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
fi
if [ -d /etc/sudoers.d ]; then
  line="Defaults secure_path=\"$HOME/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\""
  if [ "$(id -u)" = 0 ]; then
    echo "$line" > /etc/sudoers.d/kpct-cargo
  else
    echo "$line" | sudo tee /etc/sudoers.d/kpct-cargo > /dev/null
  fi
fi
