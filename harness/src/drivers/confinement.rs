//! The one confinement every proxier kpct starts runs in, `exec:` programs, real kube-proxy
//! and `api:` proxiers alike: each is untrusted code (a gate runs the proxier of a pull
//! request).
//!
//! The process runs inside its node's network namespace, in a mount namespace and a PID
//! namespace of its own (util-linux `unshare`), with:
//! - every host mount read-only, but for a scratch directory of its own (`$KPCT_SCRATCH`, also
//!   its `TMPDIR`), the only place it can write a file;
//! - a private `/run` (no `/run/netns` to reach another node through, a private
//!   `xtables.lock`) and a sysfs of its own node's namespace, read-only (no host device
//!   reachable through `/sys`);
//! - `/proc/sys` read-only except `/proc/sys/net`, its node's own sysctls;
//! - its own `/proc`, where only the processes of its PID namespace are seen (no other
//!   process's `/proc/PID/ns` to enter); when the namespace's init ends, everything in it ends;
//! - no-new-privs, and only NET_ADMIN, NET_RAW and NET_BIND_SERVICE among capabilities: no
//!   SYS_ADMIN (no remount, no setns, no mount), no SYS_MODULE, no SYS_PTRACE.
//!
//! The proxier is the child of the namespace's init (a shell that waits for it), not the init
//! itself, so a SIGTERM reaches it as it would from a kubelet; the shell exits with its status.

use crate::netns::Netns;
use anyhow::Result;
use std::path::Path;
use std::process::Command;

/// The environment variable that names the proxier's scratch directory.
pub const SCRATCH_VARIABLE: &str = "KPCT_SCRATCH";

/// Run by the PID namespace's init (`sh -c SCRIPT kpct-confined PROGRAM ARGS…`): the mounts
/// of the module's doc (every writable mount made read-only; those already read-only, as a
/// VM's shared root is, are left as they are, and so are those a later mount hides, as a VM's
/// `/usr` hides its `/usr/lib`; the scratch directory, bound onto itself first, stays
/// writable), then the proxier as its child with the capabilities above, reading the shell's
/// stdin (a command started with `&` reads /dev/null unless told otherwise: an `exec:`
/// proxier reads its input there). Every mount must succeed: a proxier is never started less
/// confined.
const SCRIPT: &str = r#"set -e
mount --bind "$KPCT_SCRATCH" "$KPCT_SCRATCH"
mount -t tmpfs -o size=1m,mode=0755,nosuid,nodev kpct-run /run
mount -t sysfs -o ro,nosuid,nodev,noexec kpct-sys /sys
mount --bind /proc/sys/net /proc/sys/net
mount --rbind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
awk '{ mp[NR] = $5; rw[NR] = ($6 !~ /^ro(,|$)/) }
  END { for (i = 1; i <= NR; i++) {
    hidden = 0
    for (j = i + 1; j <= NR; j++)
      if (mp[j] == mp[i] || index(mp[i], mp[j] (mp[j] == "/" ? "" : "/")) == 1) hidden = 1
    if (rw[i] && !hidden) print mp[i] } }' /proc/self/mountinfo | while read -r m; do
  case "$m" in
    /run|/run/*|/proc|/proc/*|/sys|/sys/*|"$KPCT_SCRATCH") ;;
    *) mount -o remount,bind,ro "$m" ;;
  esac
done
exec 3<&0
setpriv --no-new-privs --bounding-set=-all,+net_admin,+net_raw,+net_bind_service \
  --inh-caps=-all --ambient-caps=-all -- "$@" <&3 3<&- &
proxier=$!
wait "$proxier"
"#;

/// A command that runs `program` with `args` confined to `netns` (see the module's doc), with
/// `scratch` (an existing directory, by its absolute path) as the one place it may write.
/// The caller adds its environment and pipes, and spawns it.
pub fn command(netns: &Netns, scratch: &Path, program: &Path, args: &[String]) -> Result<Command> {
    // As /proc/self/mountinfo names it, which the script compares it with.
    let scratch = std::fs::canonicalize(scratch)?;
    let mut cmd = netns.command("unshare")?;
    cmd.args([
        "--mount",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        SCRIPT,
        "kpct-confined",
    ])
    .arg(program)
    .args(args)
    .env(SCRATCH_VARIABLE, &scratch)
    .env("TMPDIR", &scratch);
    Ok(cmd)
}
