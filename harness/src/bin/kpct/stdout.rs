//! Writing to stdout as a Unix filter does.

use anyhow::Result;

/// Writes to stdout; a reader that went away (`| head`) ends the command quietly, as with any
/// Unix filter, instead of a panic.
pub fn emit(text: &str) -> Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => Ok(other?),
    }
}
