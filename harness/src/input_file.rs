//! Reading the files a user hands kpct (scenarios, replay captures) without letting a file
//! hang or exhaust it: a FIFO would block forever, a link to `/dev/zero` never ends, a huge file
//! would be held in memory twice over. Only regular files, up to a size that no real input
//! comes near.

use std::io::Read;
use std::path::Path;

/// Scenario files: the library's largest is a few KiB.
pub const SCENARIO_LIMIT: u64 = 1 << 20;
/// Replay captures: `iptables-save` of 1,000 services × 10 endpoints is ~5 MiB.
pub const CAPTURE_LIMIT: u64 = 64 << 20;

/// Why an input file was not read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("is not a regular file but {0}: kpct reads only regular files")]
    NotRegular(&'static str),
    #[error("is {size} bytes, more than the {limit} bytes a {what} may have")]
    TooLarge {
        size: u64,
        limit: u64,
        what: &'static str,
    },
    #[error("is not UTF-8 text")]
    NotText,
}

impl InputError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, InputError::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

/// The text of `path` (links followed), a regular file of at most `limit` bytes; `what` names
/// the kind of file in the error.
pub fn read_text(path: &Path, limit: u64, what: &'static str) -> Result<String, InputError> {
    let kind = std::fs::metadata(path)?.file_type();
    if !kind.is_file() {
        return Err(InputError::NotRegular(describe(&kind)));
    }
    let mut bytes = Vec::new();
    // Read one byte past the limit: a file that grows while it is read is caught too.
    std::fs::File::open(path)?
        .take(limit + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        let size = std::fs::metadata(path).map_or(bytes.len() as u64, |m| m.len());
        return Err(InputError::TooLarge { size, limit, what });
    }
    String::from_utf8(bytes).map_err(|_| InputError::NotText)
}

fn describe(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_within_the_limit_are_read() {
        let dir = std::env::temp_dir().join(format!("kpct-input-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let small = dir.join("small.yaml");
        std::fs::write(&small, "name: x\n").unwrap();
        assert_eq!(read_text(&small, 100, "scenario").unwrap(), "name: x\n");
        let e = read_text(&small, 4, "scenario").unwrap_err();
        assert_eq!(
            e.to_string(),
            "is 8 bytes, more than the 4 bytes a scenario may have"
        );
        let fifo = dir.join("fifo.yaml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(read_text(&fifo, 100, "scenario")
            .unwrap_err()
            .to_string()
            .contains("a FIFO"));
        let zero = dir.join("zero.yaml");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert!(read_text(&zero, 100, "scenario")
            .unwrap_err()
            .to_string()
            .contains("a character device"));
        assert!(read_text(&dir, 100, "scenario")
            .unwrap_err()
            .to_string()
            .contains("a directory"));
        assert!(read_text(&dir.join("missing"), 100, "scenario")
            .unwrap_err()
            .is_not_found());
        std::fs::write(&small, [0xff, 0xfe]).unwrap();
        assert!(matches!(
            read_text(&small, 100, "scenario"),
            Err(InputError::NotText)
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
