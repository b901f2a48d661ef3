//! Output paths (`--junit`, `--report`, `--observations`) checked before anything runs: a path
//! that cannot be written fails at once with the flag and the reason, not after the whole run.

use std::path::Path;

/// What a flag writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputKind {
    /// One file, created or replaced at the end of the run.
    File,
    /// A directory the run writes files into (created if missing).
    Directory,
}

/// One output a command was asked to write.
#[derive(Debug, Clone, Copy)]
pub struct Output<'a> {
    pub flag: &'a str,
    pub path: &'a Path,
    pub kind: OutputKind,
}

/// Checks every output, reporting all that cannot be written in one error (one line each).
pub fn ensure_writable(outputs: &[Output<'_>]) -> anyhow::Result<()> {
    let problems: Vec<String> = outputs
        .iter()
        .filter_map(|o| {
            check(o)
                .err()
                .map(|why| format!("{} {}: {why}", o.flag, o.path.display()))
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "cannot write the outputs asked for:\n  {}",
            problems.join("\n  ")
        )
    }
}

fn check(o: &Output<'_>) -> Result<(), String> {
    match o.kind {
        OutputKind::File => {
            if o.path.is_dir() {
                return Err("is a directory; a file name is needed".into());
            }
            let parent = match o.path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            if !parent.is_dir() {
                return Err(format!("directory {} does not exist", parent.display()));
            }
            let existed = o.path.exists();
            // Opened for appending, so an existing file is left as it is until the run ends.
            std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(o.path)
                .map_err(|e| e.to_string())?;
            if !existed {
                std::fs::remove_file(o.path).map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        OutputKind::Directory => {
            if o.path.exists() && !o.path.is_dir() {
                return Err("exists and is not a directory".into());
            }
            std::fs::create_dir_all(o.path).map_err(|e| e.to_string())?;
            let probe = o
                .path
                .join(format!(".kpct-write-check-{}", std::process::id()));
            std::fs::write(&probe, b"").map_err(|e| e.to_string())?;
            std::fs::remove_file(&probe).map_err(|e| e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unwritable_output_is_reported_at_once_and_nothing_is_left() {
        let dir = std::env::temp_dir().join(format!("kpct-output-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("r.html");
        let obs = dir.join("obs");
        let err = ensure_writable(&[
            Output {
                flag: "--report",
                path: Path::new("/nonexistent/r.html"),
                kind: OutputKind::File,
            },
            Output {
                flag: "--junit",
                path: &dir,
                kind: OutputKind::File,
            },
            Output {
                flag: "--report",
                path: &good,
                kind: OutputKind::File,
            },
            Output {
                flag: "--observations",
                path: &obs,
                kind: OutputKind::Directory,
            },
        ])
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            format!(
                "cannot write the outputs asked for:\n  --report /nonexistent/r.html: directory /nonexistent does not exist\n  --junit {}: is a directory; a file name is needed",
                dir.display()
            )
        );
        assert!(!good.exists(), "the check leaves no empty file behind");
        assert_eq!(std::fs::read_dir(&obs).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
