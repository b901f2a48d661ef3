#!/usr/bin/env bash
# The lab's host side on a machine whose networking must stay as it is (CI machines, this
# project's own): a libvirt of the lab's own, confined to a network namespace. libvirtd's
# networks (vagrant-libvirt's management bridge, its NAT rules, dnsmasq) and the VM's NIC live in
# that namespace, and so does vagrant, which reaches the VM over ssh there. The root namespace
# gets no bridge, route, address or rule. On a workstation with a libvirt of its own, run
# vagrant in vagrant/ directly instead.
#
# Usage (as root):
#   vagrant/host.sh up              start virtlogd and libvirtd in the namespace (created)
#   vagrant/host.sh vagrant ARGS…   run vagrant ARGS in vagrant/, in the namespace, provider libvirt
#   vagrant/host.sh down            vagrant destroy, then remove the box's volume, the storage pool,
#                                   the networks, the daemons and the namespace; then check that
#                                   nothing of the lab is left, and fail naming what is
#   vagrant/host.sh leftovers       print what of the lab is left (nothing: exit 0)
# Environment: KPCT_LAB_DRIVER (kvm|qemu, see the Vagrantfile), KPCT_LAB_NETNS (the namespace's
# name, default vagrant-kpct-lab: outside kpct's own kpct- names, which `kpct cleanup` removes),
# KPCT_LAB_VAGRANT_HOME (Vagrant's boxes and state, default /var/lib/kpct-vagrant-lab).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ns="${KPCT_LAB_NETNS:-vagrant-kpct-lab}"
run_dir="/run/kpct-vagrant-lab"
# Vagrant's boxes and keys: the box's kernel and initrd are read by QEMU, which libvirt runs as
# its own user, so not under root's home (mode 700); `down` removes it all.
export VAGRANT_HOME="${KPCT_LAB_VAGRANT_HOME:-/var/lib/kpct-vagrant-lab}"
export VAGRANT_DEFAULT_PROVIDER=libvirt VAGRANT_CHECKPOINT_DISABLE=1
# libvirt's files the lab creates: the domain, the management network, the pool and its volumes.
domain_glob=/etc/libvirt/qemu/vagrant_*.xml
network_xml=/etc/libvirt/qemu/networks/vagrant-libvirt.xml
pool_xml=/etc/libvirt/storage/default.xml
images=/var/lib/libvirt/images

die() { echo "vagrant/host.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (libvirtd and the namespace need it)"
in_ns() { ip netns exec "$ns" "$@"; }
daemon_pid() { [ -f "$run_dir/$1.pid" ] && kill -0 "$(cat "$run_dir/$1.pid")" 2> /dev/null && cat "$run_dir/$1.pid"; }

up() {
  for prog in libvirtd virtlogd virsh vagrant dnsmasq qemu-system-x86_64; do
    command -v "$prog" > /dev/null || die "$prog is not on PATH: sudo ci/install-deps.sh --lab"
  done
  if [ -z "$(daemon_pid libvirtd || true)" ] && [ -S /run/libvirt/libvirt-sock ] \
    && virsh -c qemu:///system version > /dev/null 2>&1; then
    die "a libvirtd of the host already serves qemu:///system: use vagrant in $here directly"
  fi
  mkdir -p "$run_dir" "$VAGRANT_HOME"
  chmod 755 "$VAGRANT_HOME"
  ip netns list | grep -qx "$ns\( .*\)\?" || ip netns add "$ns"
  ip -n "$ns" link set lo up
  if [ -z "$(daemon_pid virtlogd || true)" ]; then
    in_ns virtlogd --daemon --pid-file "$run_dir/virtlogd.pid"
  fi
  if [ -z "$(daemon_pid libvirtd || true)" ]; then
    in_ns libvirtd --daemon --pid-file "$run_dir/libvirtd.pid"
    # Serving once its socket answers.
    for _ in $(seq 1 100); do
      virsh -c qemu:///system version > /dev/null 2>&1 && break
      sleep 0.1
    done
    virsh -c qemu:///system version > /dev/null 2>&1 || die "libvirtd did not come up (see /var/log/libvirt/libvirtd.log)"
  fi
  echo "==> libvirtd $(cat "$run_dir/libvirtd.pid") serves qemu:///system, confined to network namespace $ns"
}

lab_vagrant() {
  [ -n "$(daemon_pid libvirtd || true)" ] || die "no lab libvirtd: run vagrant/host.sh up first"
  cd "$here"
  in_ns vagrant "$@"
}

leftovers() {
  local left=()
  compgen -G "$domain_glob" > /dev/null && left+=("domain definitions: $(echo $domain_glob)")
  [ -e "$network_xml" ] && left+=("network definition: $network_xml")
  [ -e "$pool_xml" ] && left+=("storage pool definition: $pool_xml")
  compgen -G "$images/kpct*" > /dev/null && left+=("volumes: $(echo "$images"/kpct*)")
  compgen -G "$images/vagrant_*" > /dev/null && left+=("volumes: $(echo "$images"/vagrant_*)")
  ip netns list | grep -q "^$ns\b" && left+=("network namespace $ns")
  [ -e "$VAGRANT_HOME" ] && left+=("Vagrant's boxes and state: $VAGRANT_HOME")
  # (`vagrant validate` leaves an empty .vagrant; a machine leaves its id there.)
  compgen -G "$here/.vagrant/machines/*/*/id" > /dev/null && left+=("a machine's state: $here/.vagrant/machines")
  for d in libvirtd virtlogd; do
    pid="$(daemon_pid "$d" || true)"
    [ -n "$pid" ] && left+=("$d (pid $pid)")
  done
  pgrep -f "qemu-system.*vagrant_" > /dev/null && left+=("qemu processes: $(pgrep -f "qemu-system.*vagrant_" | tr '\n' ' ')")
  if [ ${#left[@]} -gt 0 ]; then
    printf 'left of the lab: %s\n' "${left[@]}"
    return 1
  fi
  echo "nothing of the lab is left"
}

down() {
  if [ -n "$(daemon_pid libvirtd || true)" ]; then
    (cd "$here" && in_ns vagrant destroy -f) || echo "vagrant/host.sh: vagrant destroy failed; removing what libvirt holds" >&2
    local virsh=(virsh -c qemu:///system -q)
    for dom in $("${virsh[@]}" list --all --name | grep '^vagrant_' || true); do
      "${virsh[@]}" destroy "$dom" > /dev/null 2>&1 || true
      "${virsh[@]}" undefine "$dom" --remove-all-storage > /dev/null 2>&1 || true
    done
    # vagrant-libvirt keeps the box's image in the pool for the next up: the lab takes it away.
    if "${virsh[@]}" pool-info default > /dev/null 2>&1; then
      for vol in $("${virsh[@]}" vol-list default | awk '{print $1}'); do
        "${virsh[@]}" vol-delete --pool default "$vol" > /dev/null
      done
      "${virsh[@]}" pool-destroy default > /dev/null 2>&1 || true
      "${virsh[@]}" pool-undefine default > /dev/null
    fi
    if "${virsh[@]}" net-info vagrant-libvirt > /dev/null 2>&1; then
      "${virsh[@]}" net-destroy vagrant-libvirt > /dev/null 2>&1 || true
      "${virsh[@]}" net-undefine vagrant-libvirt > /dev/null
    fi
  fi
  for d in libvirtd virtlogd; do
    pid="$(daemon_pid "$d" || true)"
    [ -n "$pid" ] || continue
    kill "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2> /dev/null && kill -9 "$pid"
    rm -f "$run_dir/$d.pid"
  done
  # Whatever still runs in the namespace (dnsmasq) ends with it.
  if ip netns list | grep -q "^$ns\b"; then
    pids="$(ip netns pids "$ns" || true)"
    [ -z "$pids" ] || kill $pids 2> /dev/null || true
    ip netns delete "$ns"
  fi
  rmdir "$run_dir" 2> /dev/null || true
  # The box added from target/vagrant-box (its copy, kernel and initrd) and the machine's state.
  rm -rf "$VAGRANT_HOME" "$here/.vagrant"
  leftovers
}

case "${1:-}" in
  up) up ;;
  vagrant) shift; lab_vagrant "$@" ;;
  down) down ;;
  leftovers) leftovers ;;
  *) die "usage: vagrant/host.sh up | vagrant ARGS... | down | leftovers" ;;
esac
