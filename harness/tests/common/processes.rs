//! The processes a test started and whether they end: for the checks that nothing a proxier
//! starts outlives kpct.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// Every descendant of `pid`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut queue = vec![pid];
    while let Some(p) = queue.pop() {
        let children: Vec<u32> = std::fs::read_dir(format!("/proc/{p}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|t| {
                std::fs::read_to_string(t.path().join("children"))
                    .unwrap_or_default()
                    .split_whitespace()
                    .filter_map(|c| c.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .collect();
        out.extend(&children);
        queue.extend(children);
    }
    out
}

/// The descendants of `pid` whose command line starts with `prefix` (words joined by spaces).
pub fn descendants_running(pid: u32, prefix: &str) -> Vec<u32> {
    descendants(pid)
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| {
                String::from_utf8_lossy(&c)
                    .replace('\0', " ")
                    .starts_with(prefix)
            })
        })
        .collect()
}

/// The descendants of `pid` running `prefix`, once there are `count` of them: a process forks
/// before it execs, so a script's `sleep &` shows as the script for a moment. Panics after 10 s.
pub fn wait_for_descendants(pid: u32, prefix: &str, count: usize) -> Vec<u32> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let found = descendants_running(pid, prefix);
        if found.len() >= count {
            return found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {count} `{prefix}` processes under {pid} after 10 s",
            found.len()
        );
        // /proc has no event for an exec: polled.
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Handles on processes, taken before something is expected to end them.
pub struct Watched(Vec<(u32, OwnedFd)>);

impl Watched {
    /// Those of `pids` still running (one that has gone since it was listed is not watched).
    pub fn new(pids: &[u32]) -> Watched {
        Watched(
            pids.iter()
                .filter_map(|pid| {
                    // SAFETY: pidfd_open takes a pid and flags.
                    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, *pid as libc::pid_t, 0) };
                    // SAFETY: a descriptor just opened, owned by nothing else.
                    (fd >= 0).then(|| (*pid, unsafe { OwnedFd::from_raw_fd(fd as i32) }))
                })
                .collect(),
        )
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Panics unless every process has ended within `wait`, naming one that has not.
    pub fn assert_all_end_within(&self, wait: Duration, what: &str) {
        for (pid, fd) in &self.0 {
            let mut poll = [libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(poll.as_mut_ptr(), 1, wait.as_millis() as i32) };
            assert_eq!(
                ready, 1,
                "process {pid} of {what} outlived kpct by {wait:?}"
            );
        }
    }
}

/// The environment variable that makes a holder test (`holder_of_…`) hold: its value names the
/// test that started it.
pub const HOLDER_VARIABLE: &str = "KPCT_TEST_HOLDER";

/// Runs the test `holder` of this test binary in a process of its own (the stand-in for kpct,
/// to be SIGKILLed) and returns once it has printed `ready`, with the marker it was given.
pub fn start_holder(holder: &str) -> (std::process::Child, String) {
    use std::io::BufRead;
    let marker = format!("{}", std::process::id());
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", holder, "--nocapture", "--test-threads=1"])
        .env(HOLDER_VARIABLE, &marker)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    for line in out.lines() {
        if line.unwrap().contains("ready") {
            break;
        }
    }
    (child, marker)
}
