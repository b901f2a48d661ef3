//! The processes still inside namespaces of a dead run: a proxier whose kpct was SIGKILLed
//! before it could end them (an older kpct, or one started without a parent-death signal)
//! keeps its node's namespace, and every link in it, alive after the namespace's file is gone.
//! `kpct cleanup` ends them before it removes the files.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// A process inside one of the namespaces being removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    /// Its command line, for the report (`sleep 3600`), cut after [`COMMAND_SHOWN`] characters.
    pub command: String,
    /// The namespace it is in.
    pub namespace: String,
}

/// How many characters of a holder's command line are shown (a confined proxier's starts with
/// a long `unshare … sh -c SCRIPT`).
const COMMAND_SHOWN: usize = 100;

/// Every process whose network namespace is one of `names` (under [`super::NETNS_DIR`]).
pub fn holders(names: &[String]) -> Vec<Holder> {
    let inodes: BTreeMap<u64, &String> = names
        .iter()
        .filter_map(|name| {
            let meta = std::fs::metadata(Path::new(super::NETNS_DIR).join(name)).ok()?;
            Some((meta.ino(), name))
        })
        .collect();
    if inodes.is_empty() {
        return Vec::new();
    }
    let Ok(proc_dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out: Vec<Holder> = proc_dir
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let link = std::fs::read_link(entry.path().join("ns/net")).ok()?;
            let inode = namespace_inode(link.to_str()?)?;
            let namespace = inodes.get(&inode)?;
            let command = std::fs::read(entry.path().join("cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .split('\0')
                        .filter(|w| !w.is_empty())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default();
            let command = match command.char_indices().nth(COMMAND_SHOWN) {
                Some((cut, _)) => format!("{}…", &command[..cut]),
                None => command,
            };
            Some(Holder {
                pid,
                command,
                namespace: namespace.to_string(),
            })
        })
        .collect();
    out.sort_by_key(|h| h.pid);
    out
}

/// `net:[4026532581]` → 4026532581.
fn namespace_inode(link: &str) -> Option<u64> {
    link.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
}

/// How long killed holders may take to be gone.
const GONE_WITHIN: Duration = Duration::from_secs(5);

/// SIGKILLs every holder and waits until each has ended (or [`GONE_WITHIN`] has passed);
/// returns those still there.
pub fn kill(holders: &[Holder]) -> Vec<Holder> {
    let deadline = Instant::now() + GONE_WITHIN;
    // Each through a pidfd, so a pid reused since the scan is never signalled, and its end is
    // awaited rather than polled for.
    holders
        .iter()
        .filter(|h| {
            let Some(fd) = pidfd(h.pid) else {
                return false; // already gone
            };
            // SAFETY: a valid pidfd, no siginfo, no flags.
            unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd.as_raw_fd(),
                    libc::SIGKILL,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                )
            };
            let left = deadline.saturating_duration_since(Instant::now());
            let mut poll = [libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(poll.as_mut_ptr(), 1, ms) };
            ready != 1
        })
        .cloned()
        .collect()
}

/// A pidfd for `pid` (`None`: it has gone).
fn pidfd(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: a descriptor just opened and owned by no one else.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_links_give_their_inode() {
        assert_eq!(namespace_inode("net:[4026532581]"), Some(4026532581));
        assert_eq!(namespace_inode("mnt:[4026532581]"), None);
        assert_eq!(namespace_inode("net:[x]"), None);
    }
}
