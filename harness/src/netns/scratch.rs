//! Directories of files a run writes for the processes it starts (a real proxier's
//! configuration, kubeconfig and log), named like the run's namespaces
//! (`kpct-<pid>_<start>-<what>-<n>` under the temp directory), so that nothing is left behind
//! however the run ends: removed when dropped, by the signal handler on SIGINT/SIGTERM, and by
//! `kpct cleanup` once the process that made them is gone (SIGKILL).

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A directory of this run's files, removed when dropped (unless [`ScratchDir::kept`]).
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
    kept: bool,
}

/// Set to a directory, the scratch directory of each node's proxier is made there (one per
/// namespace, by its name) and left after the run, to read what the proxier wrote.
pub const KEEP_VARIABLE: &str = "KPCT_KEEP_SCRATCH";

static NEXT: AtomicU64 = AtomicU64::new(0);

/// The directories this process has and has not removed yet: the signal handler's to remove.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

impl ScratchDir {
    /// A new, empty directory; `what` says whose files it holds.
    pub fn new(what: &str) -> Result<ScratchDir> {
        let path = std::env::temp_dir().join(format!(
            "{}{what}-{}",
            crate::netns::naming::owner_prefix(std::process::id()),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        static ON_SIGNAL: std::sync::Once = std::sync::Once::new();
        ON_SIGNAL.call_once(|| crate::netns::also_on_signal(remove_live));
        live().push(path.clone());
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(ScratchDir { path, kept: false })
    }

    /// `path`, made if missing, and left in place when dropped: one the user asked to keep
    /// ([`KEEP_VARIABLE`]).
    pub fn kept(path: &Path) -> Result<ScratchDir> {
        std::fs::create_dir_all(path).with_context(|| format!("creating {}", path.display()))?;
        Ok(ScratchDir {
            path: path.to_path_buf(),
            kept: true,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if !self.kept {
            let _ = std::fs::remove_dir_all(&self.path);
            live().retain(|p| p != &self.path);
        }
    }
}

/// Removes every directory of this process not dropped yet (the signal handler's part).
fn remove_live() {
    for path in std::mem::take(&mut *live()) {
        let _ = std::fs::remove_dir_all(path);
    }
}

/// The scratch directories under the temp directory whose process is gone.
pub fn leftovers() -> Result<Vec<PathBuf>> {
    let dir = std::env::temp_dir();
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(owner) = name
            .strip_prefix(crate::netns::SUITE_PREFIX)
            .and_then(|rest| rest.split_once('-'))
            .map(|(owner, _)| owner)
        else {
            continue;
        };
        // Only names of the form above: `<pid>_<start>`, both numbers.
        let ours = owner.split_once('_').is_some_and(|(pid, start)| {
            [pid, start]
                .iter()
                .all(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        });
        if ours && entry.file_type()?.is_dir() && !crate::netns::owner_is_alive(owner) {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_processs_directory_is_a_leftover_and_a_live_ones_is_not() {
        let mine = ScratchDir::new("unit").unwrap();
        assert!(mine.path().is_dir());
        assert!(!leftovers().unwrap().contains(&mine.path().to_path_buf()));
        // pid 1 with a start time it never had: a process that is gone.
        let dead = std::env::temp_dir().join(format!("{}1_1-unit-0", crate::netns::SUITE_PREFIX));
        std::fs::create_dir_all(&dead).unwrap();
        assert!(leftovers().unwrap().contains(&dead));
        std::fs::remove_dir_all(&dead).unwrap();
        let path = mine.path().to_path_buf();
        drop(mine);
        assert!(!path.exists());
    }
}
