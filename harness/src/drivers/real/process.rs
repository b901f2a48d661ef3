//! A long-running proxier process in one node, confined to it, and everything it prints.
//!
//! The process runs confined to its node ([`crate::drivers::confinement`]).
//!
//! It dies with kpct, SIGKILL included: `unshare` gets a parent-death SIGKILL, its child (the
//! PID namespace's init, a shell that waits for the proxier) gets one from `unshare
//! --kill-child`, and when a PID namespace's init dies the kernel kills everything in it. The
//! proxier itself is not that init, so a SIGTERM reaches it as it would from a kubelet.
//!
//! A parent-death signal fires when the *thread* that spawned the child ends, so every
//! process is spawned by a keeper thread of its own that lives until the process exits.

use crate::netns::Netns;
use crate::process_groups::Group;
use anyhow::{anyhow, Context, Result};
use std::collections::VecDeque;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How many lines of its log the error for an exited process quotes.
const EXITED_LOG_LINES: usize = 20;

/// The last this many bytes of a process's output are kept (its log tail, for evidence).
const KEPT_OUTPUT: usize = 256 * 1024;

/// A confined proxier process; killed, with everything it started, when dropped.
pub struct ProxierProcess {
    /// What it is, for messages: `kube-proxy on node-a`.
    label: String,
    /// `unshare`'s pid: the leader of the process group every process of the proxier is in.
    leader: u32,
    group: Group,
    state: Arc<(Mutex<Shared>, Condvar)>,
    keeper: Option<std::thread::JoinHandle<()>>,
    readers: Vec<std::thread::JoinHandle<()>>,
    started: Instant,
}

/// What the keeper and output threads report.
#[derive(Default)]
struct Shared {
    exit: Option<ExitStatus>,
    output: VecDeque<u8>,
    /// Bytes of output dropped from the front to keep [`KEPT_OUTPUT`].
    dropped: usize,
    /// Output pipes read to their end.
    pipes_closed: usize,
}

/// How long an exited process's last output may take to be read: its pipes close when the
/// last process of its PID namespace is gone, which follows its exit at once.
const LAST_OUTPUT: Duration = Duration::from_secs(2);

impl ProxierProcess {
    /// Starts `program` with `args` confined to `netns`, `scratch` its writable directory
    /// (see the module's doc).
    pub fn start(
        netns: &Netns,
        label: &str,
        scratch: &std::path::Path,
        program: &std::path::Path,
        args: &[String],
        env: &[(&str, &str)],
    ) -> Result<ProxierProcess> {
        let mut cmd = crate::drivers::confinement::command(netns, scratch, program, args)?;
        cmd.envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        crate::process_groups::die_with_spawning_thread(&mut cmd);
        let state = Arc::new((Mutex::new(Shared::default()), Condvar::new()));
        let (spawned_tx, spawned_rx) = std::sync::mpsc::channel();
        let keeper_state = Arc::clone(&state);
        let keeper = std::thread::Builder::new()
            .name(format!("keeper {label}"))
            .spawn(move || {
                let mut child = match cmd.spawn() {
                    Ok(child) => child,
                    Err(e) => {
                        let _ = spawned_tx.send(Err(e));
                        return;
                    }
                };
                let pipes = (child.stdout.take(), child.stderr.take());
                let _ = spawned_tx.send(Ok((child.id(), pipes)));
                let status = child.wait();
                let (lock, woken) = &*keeper_state;
                let mut shared = lock.lock().unwrap_or_else(|p| p.into_inner());
                shared.exit = Some(status.unwrap_or_else(|_| ExitStatus::from_raw(-1)));
                woken.notify_all();
            })
            .context("starting a keeper thread")?;
        let (leader, (stdout, stderr)) = spawned_rx
            .recv()
            .map_err(|_| anyhow!("the keeper thread of {label} ended before spawning it"))?
            .with_context(|| {
                format!("starting {label} (unshare, in namespace {})", netns.name())
            })?;
        let group = Group::of_leader(leader);
        let readers = [
            stdout.map(|p| Box::new(p) as Box<dyn Read + Send>),
            stderr.map(|p| Box::new(p) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        .map(|pipe| {
            let state = Arc::clone(&state);
            std::thread::spawn(move || keep_output(pipe, &state))
        })
        .collect();
        Ok(ProxierProcess {
            label: label.to_string(),
            leader,
            group,
            state,
            keeper: Some(keeper),
            readers,
            started: Instant::now(),
        })
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    /// How it ended, if it has; once it has, everything it printed has been read (up to
    /// [`LAST_OUTPUT`]), so a message quoting its log quotes its last words: the exit is seen
    /// by one thread and the output read by others, and without this wait an error could quote
    /// a log without the line that explains it.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.wait_exit(Duration::ZERO)
    }

    /// How long since it was started.
    pub fn age(&self) -> Duration {
        self.started.elapsed()
    }

    /// The last `lines` lines it printed (stdout and stderr, as they came).
    pub fn log_tail(&self, lines: usize) -> String {
        let shared = self.shared();
        let bytes: Vec<u8> = shared.output.iter().copied().collect();
        let text = String::from_utf8_lossy(&bytes);
        let all: Vec<&str> = text.lines().collect();
        let from = all.len().saturating_sub(lines);
        all[from..].join("\n")
    }

    /// Asks the proxier to stop (SIGTERM, as a kubelet does) and waits up to `grace` for it
    /// to exit; kills everything left either way. `Ok` with its status if it exited in time;
    /// an error saying so if it had to be killed.
    pub fn stop(&mut self, grace: Duration) -> Result<ExitStatus> {
        if let Some(status) = self.exit_status() {
            return Ok(status);
        }
        if let Some(pid) = self.proxier_pid() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let exited = self.wait_exit(grace);
        self.group.kill();
        let status = self.wait_exit(Duration::from_secs(5));
        match (exited, status) {
            (Some(status), _) => Ok(status),
            (None, _) => Err(anyhow!(
                "{} did not exit within {} s of SIGTERM; killed",
                self.label,
                grace.as_secs_f32()
            )),
        }
    }

    /// Its exit status once it has exited, waiting at most `limit`; then, as
    /// [`ProxierProcess::exit_status`], with its output read.
    pub fn wait_exit(&self, limit: Duration) -> Option<ExitStatus> {
        let (lock, woken) = &*self.state;
        let shared = lock.lock().unwrap_or_else(|p| p.into_inner());
        let (shared, _) = woken
            .wait_timeout_while(shared, limit, |s| s.exit.is_none())
            .unwrap_or_else(|p| p.into_inner());
        shared.exit?;
        let pipes = self.readers.len();
        let (shared, _) = woken
            .wait_timeout_while(shared, LAST_OUTPUT, |s| s.pipes_closed < pipes)
            .unwrap_or_else(|p| p.into_inner());
        shared.exit
    }

    /// An error when it has exited, quoting the end of its log: what every wait for it checks.
    pub fn still_running(&self, waiting_for: &str) -> Result<()> {
        match self.exit_status() {
            None => Ok(()),
            Some(status) => Err(anyhow!(
                "{} exited ({status}) while kpct waited for {waiting_for}; its log ends:\n{}",
                self.label,
                self.log_tail(EXITED_LOG_LINES)
            )),
        }
    }

    /// Whether what it printed (as far as it is kept) holds `text`.
    pub fn printed_text(&self, text: &str) -> bool {
        let shared = self.shared();
        let (a, b) = shared.output.as_slices();
        let joined = [a, b].concat();
        String::from_utf8_lossy(&joined).contains(text)
    }

    /// How many bytes it has printed so far.
    pub fn printed(&self) -> usize {
        let shared = self.shared();
        shared.dropped + shared.output.len()
    }

    /// Waits until it prints more than `printed` bytes or exits, at most `limit`: a proxier
    /// logs what it does, so a new line is the moment to look again.
    pub fn wait_output(&self, printed: usize, limit: Duration) {
        let (lock, woken) = &*self.state;
        let shared = lock.lock().unwrap_or_else(|p| p.into_inner());
        let _ = woken.wait_timeout_while(shared, limit, |s| {
            s.exit.is_none() && s.dropped + s.output.len() <= printed
        });
    }

    /// The proxier's own pid (in kpct's PID namespace): the child of the PID namespace's init,
    /// which is `unshare`'s child.
    fn proxier_pid(&self) -> Option<u32> {
        let init = children(self.leader).into_iter().next()?;
        children(init).into_iter().next()
    }

    fn shared(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.state.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for ProxierProcess {
    fn drop(&mut self) {
        self.group.kill();
        if let Some(keeper) = self.keeper.take() {
            let _ = keeper.join();
        }
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
    }
}

/// The children of `pid` (Linux's `/proc/PID/task/PID/children`).
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Appends what `pipe` yields to the kept output until it closes, dropping the oldest bytes
/// beyond [`KEPT_OUTPUT`]: a proxier that prints without end costs a bounded amount of memory.
fn keep_output(mut pipe: Box<dyn Read + Send>, state: &(Mutex<Shared>, Condvar)) {
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) | Err(_) => {
                let mut shared = state.0.lock().unwrap_or_else(|p| p.into_inner());
                shared.pipes_closed += 1;
                state.1.notify_all();
                return;
            }
            Ok(n) => {
                let mut shared = state.0.lock().unwrap_or_else(|p| p.into_inner());
                shared.output.extend(&buf[..n]);
                let excess = shared.output.len().saturating_sub(KEPT_OUTPUT);
                if excess > 0 {
                    shared.output.drain(..excess);
                    shared.dropped += excess;
                }
                state.1.notify_all();
            }
        }
    }
}
