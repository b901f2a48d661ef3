//! Which scenario files a command works on.

use anyhow::{anyhow, Result};
use std::path::PathBuf;

/// Where the bundled scenarios are, relative to the repository root.
pub const BUNDLED: &str = "scenarios/*.yaml";

/// The library's pattern, wherever kpct runs from: `$KPCT_SCENARIOS/*.yaml` when that is set,
/// [`BUNDLED`] in a directory that has `scenarios/` (the repository root, as outputs name the
/// files there), else the library of the checkout this kpct was built from, by its absolute
/// path (a proxier's repository that builds kpct at a tag runs it from its own root).
pub fn library() -> Result<String> {
    if let Some(dir) = std::env::var_os("KPCT_SCENARIOS") {
        let dir = PathBuf::from(dir);
        if !dir.is_dir() {
            anyhow::bail!("KPCT_SCENARIOS={}: not a directory", dir.display());
        }
        return Ok(format!("{}/*.yaml", dir.display()));
    }
    if std::path::Path::new("scenarios").is_dir() {
        return Ok(BUNDLED.to_string());
    }
    let built_from = crate::repository::root_or_built().join("scenarios");
    match built_from.canonicalize() {
        Ok(dir) if dir.is_dir() => Ok(format!("{}/*.yaml", dir.display())),
        _ => anyhow::bail!(
            "no scenario library: no `scenarios/` here, and {} (where this kpct was built) is \
             gone; name the files, or set KPCT_SCENARIOS to the library's directory",
            built_from.display()
        ),
    }
}

/// The files `patterns` (paths or globs) match, sorted and deduplicated; no pattern means the
/// library ([`library`]). A pattern matching nothing is an error: a typo must not run nothing.
pub fn files(patterns: &[String]) -> Result<Vec<PathBuf>> {
    let default = [library()?];
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
            anyhow::bail!("no scenario file matches `{pattern}`");
        }
        files.extend(matched);
    }
    files.sort();
    files.dedup();
    Ok(files)
}
