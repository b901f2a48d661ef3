//! Which scenario files a command works on.

use anyhow::{anyhow, Result};
use std::path::PathBuf;

/// Where the bundled scenarios are, relative to the repository root.
pub const BUNDLED: &str = "scenarios/*.yaml";

/// The files `patterns` (paths or globs) match, sorted and deduplicated; no pattern means the
/// bundled scenarios. A pattern matching nothing is an error: a typo must not run nothing.
pub fn files(patterns: &[String]) -> Result<Vec<PathBuf>> {
    let default = [BUNDLED.to_string()];
    let patterns = if patterns.is_empty() {
        &default[..]
    } else {
        patterns
    };
    let mut files = Vec::new();
    for pattern in patterns {
        let matched: Vec<PathBuf> = glob::glob(pattern)
            .map_err(|e| anyhow!("bad scenario pattern `{pattern}`: {e}"))?
            .collect::<std::result::Result<_, _>>()?;
        if matched.is_empty() {
            anyhow::bail!("no scenario file matches `{pattern}` (run from the repository root?)");
        }
        files.extend(matched);
    }
    files.sort();
    files.dedup();
    Ok(files)
}
