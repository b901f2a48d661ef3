#!/usr/bin/env bash
# Prints the newest installed kernel image whose modules include IP_VS (for the VM runner).
set -euo pipefail
for image in $(ls -1 /boot/vmlinuz-* 2>/dev/null | sort -rV); do
  version="${image#/boot/vmlinuz-}"
  if compgen -G "/lib/modules/$version/kernel/net/netfilter/ipvs/ip_vs.ko*" > /dev/null; then
    echo "$image"
    exit 0
  fi
done
