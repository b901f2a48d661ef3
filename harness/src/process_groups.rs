//! The process groups of the programs kpct runs in its namespaces for a while (`exec:`
//! proxiers, trace monitors), so that a timeout, a signal to kpct or kpct's exit ends every
//! process they started, not only the first: a shell script's `sleep` would otherwise hold the
//! output pipe (and the node's namespace) open after the script was killed. A SIGKILL of kpct
//! runs no handler: for that, each gets a parent-death signal ([`die_with_spawning_thread`],
//! [`spawn_tied`]).

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::collections::BTreeSet;
use std::sync::Mutex;

static RUNNING: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn running() -> std::sync::MutexGuard<'static, BTreeSet<i32>> {
    RUNNING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A process group led by a child spawned with `process_group(0)`; killed (SIGKILL) when
/// dropped, so nothing of the proxier outlives its run for a node.
pub struct Group(i32);

impl Group {
    /// The group of the child `pid` (which leads it).
    pub fn of_leader(pid: u32) -> Group {
        let id = pid as i32;
        running().insert(id);
        Group(id)
    }

    /// Sends SIGKILL to every process of the group (none left: nothing happens).
    pub fn kill(&self) {
        let _ = killpg(Pid::from_raw(self.0), Signal::SIGKILL);
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
        running().remove(&self.0);
    }
}

/// Kills every proxier process group still running: the signal handler's first step, before it
/// removes the namespaces those processes hold.
pub fn kill_all() {
    for id in running().iter() {
        let _ = killpg(Pid::from_raw(*id), Signal::SIGKILL);
    }
}

/// Makes the process `cmd` starts get SIGKILL when the thread that spawns it ends (kpct's
/// SIGKILL included), so a proxier never outlives kpct: the spawning thread must live until the
/// process exits.
pub fn die_with_spawning_thread(cmd: &mut std::process::Command) {
    // SAFETY: prctl(2) is async-signal-safe and touches no memory of the parent.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A process started by [`spawn_tied`]: its group is killed, and its keeper thread ends, when
/// this is dropped.
pub struct Tied {
    group: Group,
    /// Dropping it ends the keeper thread.
    _keeper: std::sync::mpsc::Sender<()>,
}

impl Tied {
    /// Sends SIGKILL to every process of its group.
    pub fn kill(&self) {
        self.group.kill();
    }
}

/// Spawns `cmd` in a process group of its own (killed by kpct's signal handler) with a
/// parent-death signal tied to a keeper thread that lives until the returned [`Tied`] is
/// dropped: for a process that outlives the call that starts it, on a thread that may end
/// before it (a parent-death signal follows the spawning thread, not the process).
pub fn spawn_tied(mut cmd: std::process::Command) -> std::io::Result<(std::process::Child, Tied)> {
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    die_with_spawning_thread(&mut cmd);
    let (spawned_tx, spawned_rx) = std::sync::mpsc::channel();
    let (keeper, until_dropped) = std::sync::mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("kpct-keeper".into())
        .spawn(move || {
            let spawned = cmd.spawn();
            let ok = spawned.is_ok();
            if spawned_tx.send(spawned).is_ok() && ok {
                // Returns when the sender is dropped.
                let _ = until_dropped.recv();
            }
        })?;
    let child = spawned_rx.recv().map_err(|_| {
        std::io::Error::other("the keeper thread ended before spawning the process")
    })??;
    let group = Group::of_leader(child.id());
    Ok((
        child,
        Tied {
            group,
            _keeper: keeper,
        },
    ))
}
