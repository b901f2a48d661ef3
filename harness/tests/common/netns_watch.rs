//! Waiting for a process to have made a number of network namespaces: inotify on /run/netns,
//! so that a test can act at a point of a build instead of after a guessed delay.

/// Namespace creations in /run/netns, as inotify reports them.
pub struct NetnsWatch(nix::sys::inotify::Inotify);

impl NetnsWatch {
    pub fn start() -> NetnsWatch {
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        std::fs::create_dir_all("/run/netns").unwrap();
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).unwrap();
        inotify
            .add_watch("/run/netns", AddWatchFlags::IN_CREATE)
            .unwrap();
        NetnsWatch(inotify)
    }

    /// Returns once `count` namespaces named `prefix…` exist. Panics if the process ends first:
    /// it would have built nothing for the signal to interrupt.
    pub fn until_made(&self, prefix: &str, count: usize, child: &mut std::process::Child) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        loop {
            // Drain first, then count, so that no creation falls between the two.
            let _ = self.0.read_events();
            let made = std::fs::read_dir("/run/netns")
                .unwrap()
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                .count();
            if made >= count {
                return;
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!("kpct ended ({status}) after {made} of {count} namespaces");
            }
            // The timeout only notices a child that ended without making more namespaces.
            let mut fds = [PollFd::new(self.0.as_fd(), PollFlags::POLLIN)];
            poll(&mut fds, PollTimeout::from(100u16)).unwrap();
        }
    }
}
