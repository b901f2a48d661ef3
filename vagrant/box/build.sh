#!/usr/bin/env bash
# Builds the kpct lab's Vagrant box for the libvirt provider from Debian 12 packages alone: no
# box registry, no boot loader, no loop device. mmdebstrap installs the packages of
# vagrant/box/packages.txt and the `suite` apt rows of ci/deps.tsv (the tools kpct runs) into a
# directory; the vagrant user gets Vagrant's insecure key (from Debian's vagrant package, which
# replaces it at the first `vagrant up`) and passwordless sudo; `mkfs.ext4 -d` turns the
# directory into the root file system, and qemu-img into box.img. libvirt boots the box's kernel
# and initrd directly (the Vagrantfile packed beside them says how).
#
# Usage: vagrant/box/build.sh [--out DIR] [--mirror URL] [--security URL]   (as root)
#        vagrant/box/build.sh --list     the packages the box is built from, one per line
#   --out DIR     where the box goes (default target/vagrant-box)
#   --mirror URL  the Debian archive (default http://deb.debian.org/debian)
#   --security    the security archive (default http://deb.debian.org/debian-security)
# Writes DIR/kpct-debian12.box (metadata.json, box.img, vmlinuz, initrd.img, Vagrantfile) and
# DIR/kpct-debian12.packages (name, architecture and version of every package inside: with
# this script and its inputs, what the box is made of). Add it with
#   vagrant box add --name kpct/debian12 DIR/kpct-debian12.box
# (vagrant/Vagrantfile does this by itself when the file is there).
#
# Reproducible: the same inputs (these files and the same package versions) give the same bytes.
# Every time inside is SOURCE_DATE_EPOCH below, the file system's UUID and hash seed are fixed,
# the files whose content is a build's own (ssh host keys, machine-id, logs, caches) are left
# out or made at first boot, and the archive is written in a fixed order with fixed owners.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="$repo/target/vagrant-box"
mirror="http://deb.debian.org/debian"
security="http://deb.debian.org/debian-security"
list=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="${2:?--out needs a directory}"; shift ;;
    --mirror) mirror="${2:?--mirror needs a URL}"; shift ;;
    --security) security="${2:?--security needs a URL}"; shift ;;
    --list) list=1 ;;
    *) echo "box/build.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
  shift
done
packages=()
while read -r pkg _; do
  case "$pkg" in '' | '#'*) continue ;; esac
  packages+=("$pkg")
done < "$here/packages.txt"
# The tools kpct runs (not the tests' or the VM runner's): ci/deps.tsv's suite apt rows.
while IFS=$'\t' read -r group source pkg _; do
  [ "$group" = suite ] && [ "$source" = apt ] && packages+=("$pkg")
done < <(grep -v '^#' "$repo/ci/deps.tsv")

if [ "$list" = 1 ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "box/build.sh: run as root (mmdebstrap installs into a directory owned by root)" >&2
  exit 2
fi
for prog in mmdebstrap mkfs.ext4 debugfs qemu-img tar gzip; do
  command -v "$prog" > /dev/null \
    || { echo "box/build.sh: $prog is not on PATH: sudo ci/install-deps.sh --lab" >&2; exit 2; }
done
# Vagrant's insecure public key, as Debian's vagrant package ships it.
key="$(ls /usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub 2> /dev/null | head -n 1)"
[ -n "$key" ] || { echo "box/build.sh: no keys/vagrant.pub of Debian's vagrant package: sudo ci/install-deps.sh --lab" >&2; exit 2; }

# 2025-01-01T00:00:00Z: every time stamp inside the box.
export SOURCE_DATE_EPOCH=1735689600
export E2FSPROGS_FAKE_TIME="$SOURCE_DATE_EPOCH"
suite=bookworm
uuid=6b706374-6c61-4200-8000-000000000001
size_gb=20

mkdir -p "$out"
work="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
root="$work/root"
box="$work/box"
mkdir -p "$box"

start=$(date +%s)
echo "==> mmdebstrap: Debian 12 with ${#packages[@]} packages into $root"
mmdebstrap --mode=root --variant=apt --format=directory --quiet \
  --include="$(IFS=,; echo "${packages[*]}")" \
  --aptopt='Acquire::Languages "none"' \
  --customize-hook="bash '$here/customize.sh' \"\$1\" '$key'" "$suite" "$root" \
  "deb $mirror bookworm main" "deb $mirror bookworm-updates main" "deb $security bookworm-security main"

chroot "$root" dpkg-query -W -f='${Package}\t${Architecture}\t${Version}\n' | sort > "$work/packages"
kernel="$(ls "$root"/boot/vmlinuz-* | sort -V | tail -n 1)"
cp "$kernel" "$box/vmlinuz"
cp "$root/boot/initrd.img-${kernel##*/vmlinuz-}" "$box/initrd.img"

echo "==> mkfs.ext4 -d: a ${size_gb} GiB root file system (sparse)"
# Every inode gets the fixed time: mtime and atime here, ctime and crtime (which no tool sets on
# a live file) in the image below.
find "$root" -depth -exec touch --no-dereference --date="@$SOURCE_DATE_EPOCH" {} +
truncate -s "${size_gb}G" "$work/root.ext4"
mkfs.ext4 -q -F -L kpct-root -U "$uuid" -E "hash_seed=$uuid,lazy_itable_init=1" \
  -d "$root" "$work/root.ext4"
(cd "$root" && find . -mindepth 1) | sed 's|^\.||' \
  | awk -v t="@$SOURCE_DATE_EPOCH" '{ print "sif \"" $0 "\" ctime " t; print "sif \"" $0 "\" crtime " t }' \
  > "$work/times.debugfs"
printf 'sif / ctime @%s\nsif / crtime @%s\n' "$SOURCE_DATE_EPOCH" "$SOURCE_DATE_EPOCH" >> "$work/times.debugfs"
debugfs -w -f "$work/times.debugfs" "$work/root.ext4" > "$work/debugfs.log" 2>&1 \
  || { tail -n 5 "$work/debugfs.log" >&2; echo "box/build.sh: debugfs could not set the times" >&2; exit 1; }
if grep -q '^set_inode_field:' "$work/debugfs.log"; then
  grep -m 3 '^set_inode_field:' "$work/debugfs.log" >&2
  echo "box/build.sh: debugfs could not set some times ($work/debugfs.log)" >&2
  exit 1
fi
rm -rf "$root"

echo "==> qemu-img convert: box.img (qcow2)"
qemu-img convert -f raw -O qcow2 "$work/root.ext4" "$box/box.img"
rm -f "$work/root.ext4"
printf '{"provider":"libvirt","format":"qcow2","virtual_size":%d}\n' "$size_gb" > "$box/metadata.json"
cp "$here/Vagrantfile" "$box/Vagrantfile"
touch --date="@$SOURCE_DATE_EPOCH" "$box"/*
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner --format=gnu \
  -C "$box" -cf - metadata.json Vagrantfile box.img vmlinuz initrd.img | gzip -n -1 > "$work/kpct-debian12.box"
mv "$work/packages" "$out/kpct-debian12.packages"
mv "$work/kpct-debian12.box" "$out/kpct-debian12.box"
echo "==> $out/kpct-debian12.box ($(du -h "$out/kpct-debian12.box" | cut -f1), sha256 $(sha256sum "$out/kpct-debian12.box" | cut -c1-16)…) in $(($(date +%s) - start)) s"
