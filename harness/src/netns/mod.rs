//! Named network namespaces, iproute2-compatible (`/run/netns/NAME`), so that `ip netns exec`
//! reaches what the suite builds while a lab is up.
//!
//! `setns(CLONE_NEWNET)` is per thread, so all work "inside" a namespace runs on a short-lived
//! thread that entered it. Sockets (netlink, packet, TCP) stay bound to the namespace they were
//! created in, so a thread only has to live long enough to open them.
//!
//! Every namespace this process creates is recorded in a process-wide registry; a signal handler
//! (see [`install_signal_cleanup`]) and [`Netns`]'s `Drop` both remove them, so a panic or Ctrl-C
//! never leaves one behind. `kpct cleanup` removes those of crashed runs by name prefix, and
//! their scratch directories ([`scratch`], named like the namespaces and removed with them).

pub mod holders;
mod link;
pub use link::has_link;
pub mod naming;
pub mod scratch;

use anyhow::{bail, Context, Result};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{setns, unshare, CloneFlags};
use std::collections::BTreeSet;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// A command run inside a namespace could not be started or exited non-zero.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{command}` in namespace {namespace} {outcome}: {stderr}")]
pub struct CommandError {
    /// Program and arguments.
    pub command: String,
    pub namespace: String,
    /// `failed (exit status: 2)`, `could not be started`, …
    pub outcome: String,
    /// Trimmed stderr (or the reason it could not start).
    pub stderr: String,
}

/// Where iproute2 keeps named namespaces.
pub const NETNS_DIR: &str = "/run/netns";

pub use naming::{LAB_PREFIX, SUITE_PREFIX};

/// The namespaces this process owns, and whether it is shutting down. Creation holds the lock
/// from before the name exists in /run/netns until the namespace is mounted there, and the
/// signal handler takes it for good: so a namespace is either made before the handler cleans
/// up (and removed by it) or never made at all.
struct Registry {
    live: BTreeSet<String>,
    closing: bool,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    live: BTreeSet::new(),
    closing: false,
});

/// The registry, even if a thread panicked while holding it (its set is still right: every
/// change is a single insert or remove).
fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A named network namespace owned by this process; removed on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
    path: PathBuf,
    /// Held open so the namespace can be entered even if the bind mount is removed underneath.
    file: File,
    /// Set by [`Netns::persist`]: dropping then leaves the namespace in place.
    keep: bool,
    /// A directory of its own for the proxier confined to it ([`Netns::scratch_dir`]).
    scratch: std::sync::OnceLock<scratch::ScratchDir>,
}

impl Netns {
    /// Creates `/run/netns/NAME` bound to a fresh network namespace with `lo` down (as
    /// `ip netns add` does).
    /// Installs the signal cleanup first (see [`install_signal_cleanup`]): whatever makes the
    /// first namespace, a signal after it removes it.
    pub fn create(name: &str) -> Result<Netns> {
        validate_name(name)?;
        install_signal_cleanup();
        std::fs::create_dir_all(NETNS_DIR).with_context(|| format!("creating {NETNS_DIR}"))?;
        let path = Path::new(NETNS_DIR).join(name);
        let mut registry = registry();
        if registry.closing {
            bail!("not creating namespace {name}: kpct is shutting down");
        }
        // Registered before the file exists: a cleanup that wins the lock next removes it,
        // however far creation got.
        registry.live.insert(name.to_string());
        match bind_new_namespace(&path) {
            Ok(file) => Ok(Netns {
                name: name.to_string(),
                path,
                file,
                keep: false,
                scratch: std::sync::OnceLock::new(),
            }),
            Err(e) => {
                unmount_and_unlink(&path);
                registry.live.remove(name);
                Err(e)
            }
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A directory of this namespace's own, made at the first call and removed with the
    /// namespace: the one place a proxier confined to it may write, kept across its syncs.
    /// With [`scratch::KEEP_VARIABLE`] set to a directory it is that directory's
    /// `NAMESPACE/`, and stays after the run: to read what a proxier wrote.
    pub fn scratch_dir(&self) -> Result<&Path> {
        if self.scratch.get().is_none() {
            let dir = match std::env::var_os(scratch::KEEP_VARIABLE) {
                Some(keep) => scratch::ScratchDir::kept(&Path::new(&keep).join(&self.name))?,
                None => scratch::ScratchDir::new("node")?,
            };
            // Another thread may have set it meanwhile: its directory is as good, ours goes.
            let _ = self.scratch.set(dir);
        }
        self.scratch
            .get()
            .map(scratch::ScratchDir::path)
            .context("a scratch directory that was just made")
    }

    /// Runs `f` on a thread that has entered this namespace and returns its result.
    pub fn run<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        std::thread::scope(|scope| {
            scope
                .spawn(|| -> Result<T> {
                    setns(self.file.as_fd(), CloneFlags::CLONE_NEWNET)
                        .with_context(|| format!("entering network namespace {}", self.name))?;
                    Ok(f())
                })
                .join()
                .map_err(|panic| {
                    let msg = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    anyhow::anyhow!("code running in namespace {} panicked: {msg}", self.name)
                })?
        })
    }

    /// A command that runs inside this namespace (like `ip netns exec NAME …`, without the
    /// mount-namespace and /sys remount that `ip netns exec` adds, which our tools don't need).
    pub fn command(&self, program: &str) -> Result<Command> {
        let mut cmd = Command::new(program);
        // Opened before fork: the child may only make async-signal-safe calls, so it must not
        // allocate (a path -> CString conversion would) between fork and exec.
        let ns = self
            .file
            .try_clone()
            .with_context(|| format!("duplicating the handle of namespace {}", self.name))?;
        // SAFETY: the closure only calls setns(2) on an already-open descriptor.
        unsafe {
            cmd.pre_exec(move || {
                setns(ns.as_fd(), CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)
            });
        }
        Ok(cmd)
    }

    /// Runs a command inside the namespace, failing with its stderr if it exits non-zero.
    pub fn exec(&self, program: &str, args: &[&str]) -> Result<String> {
        Ok(self.output_of(program, args, None)?)
    }

    /// Like [`Netns::exec`], feeding `stdin` to the command.
    pub fn exec_with_stdin(
        &self,
        program: &str,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<String> {
        Ok(self.output_of(program, args, stdin)?)
    }

    /// Runs `program args` inside the namespace, feeding `stdin`; returns stdout, or a
    /// [`CommandError`] carrying the trimmed stderr (which restore tools blame lines in).
    pub fn output_of(
        &self,
        program: &str,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<String, CommandError> {
        use std::io::Write;
        use std::process::Stdio;
        let command = std::iter::once(program)
            .chain(args.iter().copied())
            .collect::<Vec<_>>()
            .join(" ");
        let failed = |outcome: String, stderr: String| CommandError {
            command: command.clone(),
            namespace: self.name.clone(),
            outcome,
            stderr,
        };
        let mut cmd = self
            .command(program)
            .map_err(|e| failed("could not be prepared".into(), format!("{e:#}")))?;
        cmd.args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // This thread waits for it below: a tool never outlives a killed kpct.
        crate::process_groups::die_with_spawning_thread(&mut cmd);
        let mut child = cmd.spawn().map_err(|e| {
            failed(
                "could not be started".into(),
                format!("{e} (is it installed?)"),
            )
        })?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            // A tool that fails early closes its stdin; its exit status and stderr say why.
            let _ = pipe.write_all(input.as_bytes());
        }
        let out = child
            .wait_with_output()
            .map_err(|e| failed("could not be waited for".into(), e.to_string()))?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
            return Err(failed(format!("failed ({})", out.status), stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Writes a sysctl of this namespace (`net.ipv4.ip_forward` style name). Only `net.*` keys
    /// are per-namespace; anything else would change the host and is refused.
    pub fn set_sysctl(&self, key: &str, value: &str) -> Result<()> {
        if !key.starts_with("net.") {
            bail!("refusing to set `{key}`: only net.* sysctls are namespaced");
        }
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let value = value.to_string();
        self.run(|| std::fs::write(&path, &value))?
            .with_context(|| format!("setting sysctl {key} in namespace {}", self.name))
    }

    pub fn get_sysctl(&self, key: &str) -> Result<String> {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let value = self
            .run(|| std::fs::read_to_string(&path))?
            .with_context(|| format!("reading sysctl {key} in namespace {}", self.name))?;
        Ok(value.trim().to_string())
    }
}

impl Netns {
    /// Keeps the namespace after this value (and the process) is gone: for `kpct lab up`, whose
    /// namespaces outlive the command until `kpct lab down`. Returns its name.
    pub fn persist(mut self) -> String {
        unregister(&self.name);
        self.keep = true;
        self.name.clone()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // A persisted namespace lives on through its bind mount; only the handle is closed.
        if !self.keep {
            remove_named(&self.name);
        }
    }
}

fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        && !name.starts_with('.');
    if !ok {
        bail!("invalid namespace name `{name}`");
    }
    Ok(())
}

/// Creates `path` (never reusing one: an existing file is another run's) and binds a fresh
/// network namespace on it; returns a handle on the namespace.
fn bind_new_namespace(path: &Path) -> Result<File> {
    File::options()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| {
            format!(
                "creating {} (does a namespace of that name exist?)",
                path.display()
            )
        })?;
    let bind_target = path.to_path_buf();
    std::thread::spawn(move || -> Result<()> {
        unshare(CloneFlags::CLONE_NEWNET).context("unshare(CLONE_NEWNET)")?;
        mount(
            Some("/proc/thread-self/ns/net"),
            &bind_target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .with_context(|| {
            format!(
                "bind-mounting the new namespace on {}",
                bind_target.display()
            )
        })
    })
    .join()
    .map_err(|_| anyhow::anyhow!("namespace creation thread panicked"))??;
    File::open(path).with_context(|| format!("opening {}", path.display()))
}

fn unregister(name: &str) {
    registry().live.remove(name);
}

/// Unmounts and unlinks a namespace file (either may already be gone). The kernel frees the
/// namespace, and every link in it, once nothing references it any more.
fn unmount_and_unlink(path: &Path) {
    let _ = umount2(path, MntFlags::MNT_DETACH);
    let _ = std::fs::remove_file(path);
}

/// Unmounts and unlinks `/run/netns/NAME` and forgets it.
fn remove_named(name: &str) {
    let mut registry = registry();
    unmount_and_unlink(&Path::new(NETNS_DIR).join(name));
    registry.live.remove(name);
}

/// Removes every namespace this process still owns and refuses to create any more: what the
/// signal handler does before exiting (`Drop` will not run then). Returns the registry still
/// locked, so that no other thread can create a namespace until the process is gone, and how
/// many namespaces it removed.
fn close_registry() -> (std::sync::MutexGuard<'static, Registry>, usize) {
    let mut registry = registry();
    registry.closing = true;
    let live = std::mem::take(&mut registry.live);
    let removed = live.len();
    for name in live {
        unmount_and_unlink(&Path::new(NETNS_DIR).join(name));
    }
    (registry, removed)
}

/// What the signal handler says it did: a persisted lab's namespaces are not this run's to
/// remove, and the message must not claim they were.
fn interrupted_message(removed: usize) -> String {
    if removed == 0 {
        "kpct: interrupted; no network namespace of this run was left to remove".to_string()
    } else {
        format!("kpct: interrupted; removed this run's {removed} network namespace(s)")
    }
}

/// What else the signal handler removes, after the processes and before the namespaces: each
/// room that holds a run's resources of its own (the scratch directories) adds its remover.
static ON_SIGNAL: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

fn lock_hooks() -> std::sync::MutexGuard<'static, Vec<fn()>> {
    ON_SIGNAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Has the signal handler call `remover` too (ask once per remover), and installs the handler.
pub(crate) fn also_on_signal(remover: fn()) {
    lock_hooks().push(remover);
    install_signal_cleanup();
}

/// Installs a SIGINT/SIGTERM/SIGHUP handler that removes this process's namespaces and exits
/// with 130. Idempotent; safe to call from every test.
pub fn install_signal_cleanup() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            // Proxier processes first: they may hold a namespace open and could create more.
            crate::process_groups::kill_all();
            for also in lock_hooks().iter() {
                also();
            }
            let (_held_until_exit, removed) = close_registry();
            eprintln!("{}", interrupted_message(removed));
            std::process::exit(130);
        });
    });
}

/// Suite namespaces in /run/netns whose owning process (the pid in the name) is gone, or all
/// suite namespaces with `include_live`.
pub fn leftovers(include_live: bool) -> Result<Vec<String>> {
    let dir = match std::fs::read_dir(NETNS_DIR) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("listing {NETNS_DIR}")),
    };
    let mut out = Vec::new();
    for entry in dir {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(SUITE_PREFIX) else {
            continue;
        };
        // Labs outlive their process on purpose; `kpct lab down` removes them.
        if rest.starts_with(LAB_PREFIX) && !include_live {
            continue;
        }
        let owner_alive = rest.split('-').next().is_some_and(owner_is_alive);
        if include_live || !owner_alive {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

/// Whether the process named by `pid_start` (`<pid>_<start>`, see
/// [`crate::netns::naming::owner_prefix`]) still runs: that pid exists *and* started at that
/// time, so a later process that reuses the pid is not taken for the owner. A name of an older
/// kpct without the start time falls back to the pid alone.
pub(crate) fn owner_is_alive(pid_start: &str) -> bool {
    use crate::netns::naming::process_start;
    let (pid, start) = match pid_start.split_once('_') {
        Some((pid, start)) => (pid, start.parse::<u64>().ok()),
        None => (pid_start, None),
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    match (process_start(pid), start) {
        (None, _) => false,
        (Some(now), Some(recorded)) => now == recorded,
        (Some(_), None) => true,
    }
}

/// Removes the given suite namespaces (see [`leftovers`]).
pub fn remove_leftovers(names: &[String]) {
    for name in names {
        remove_named(name);
    }
}
