#!/usr/bin/env bash
# mmdebstrap's customize hook for the lab box (vagrant/box/build.sh): turns the installed root
# file system ($1) into a Vagrant box's, with Vagrant's insecure public key ($2).
# Usage: customize.sh ROOT KEY
set -euo pipefail
root="${1:?the root directory}"
key="${2:?the insecure public key of Vagrant}"
in_root() { chroot "$root" "$@"; }

echo kpct-lab > "$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tkpct-lab\n::1\tlocalhost ip6-localhost ip6-loopback\n' > "$root/etc/hosts"
# The image is the root file system itself (no partition table), as the box's cmd_line says.
printf 'LABEL=kpct-root\t/\text4\tdefaults\t0\t1\n' > "$root/etc/fstab"

# The NIC of vagrant-libvirt's management network, named eth0 by net.ifnames=0: DHCP.
mkdir -p "$root/etc/systemd/network"
printf '[Match]\nName=eth*\n\n[Network]\nDHCP=yes\n' > "$root/etc/systemd/network/80-kpct-lab.network"
in_root systemctl enable --quiet systemd-networkd.service

# The modules the suite needs natively, loaded at boot (kpct caps checks them).
printf '%s\n' ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh ip_vs_lc ip_vs_wlc dummy vxlan br_netfilter xt_ipvs sctp \
  > "$root/etc/modules-load.d/kpct-lab.conf"

# The vagrant user: the insecure key (Vagrant swaps in a key of its own at the first up) and
# passwordless sudo; no password at all.
in_root useradd --create-home --shell /bin/bash --uid 1000 --user-group vagrant
in_root usermod --password '*' vagrant
install -d -m 0700 -o 1000 -g 1000 "$root/home/vagrant/.ssh"
install -m 0600 -o 1000 -g 1000 "$key" "$root/home/vagrant/.ssh/authorized_keys"
printf 'vagrant ALL=(ALL) NOPASSWD: ALL\n' > "$root/etc/sudoers.d/vagrant"
chmod 0440 "$root/etc/sudoers.d/vagrant"
in_root usermod --password '*' root

# ssh host keys are a machine's own: made at first boot, never shipped in the box.
rm -f "$root"/etc/ssh/ssh_host_*
cat > "$root/etc/systemd/system/kpct-ssh-host-keys.service" << 'EOF'
[Unit]
Description=ssh host keys of this machine (the kpct lab box ships none)
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
RequiredBy=ssh.service
EOF
in_root systemctl enable --quiet kpct-ssh-host-keys.service
# The boot waits for no network beyond the link.
in_root systemctl mask --quiet systemd-networkd-wait-online.service

# What is a build's own rather than the packages': machine-id (systemd makes one at the first
# boot when the file is empty), logs, caches, apt's lists.
: > "$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id" "$root/var/cache/ldconfig/aux-cache"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
  "$root"/var/lib/dpkg/*-old "$root"/tmp/* "$root"/var/tmp/*
find "$root/var/log" -type f -delete
