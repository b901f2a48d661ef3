//! The subcommands, one module each: its clap arguments (`Args`) and its `run`.

pub mod as_exec;
pub mod bench;
pub mod caps;
pub mod cleanup;
pub mod compare;
pub mod diff_programming;
pub mod explore;
pub mod input;
pub mod lab;
pub mod program;
pub mod record;
pub mod run;
pub mod scenario_table;
pub mod soak;
pub mod trace;
pub mod validate;

/// Loads one scenario file, its problems as the error.
pub fn load(path: &std::path::Path) -> anyhow::Result<kpct::Scenario> {
    kpct::load(path).map_err(|e| anyhow::anyhow!("{e}"))
}

/// `-j N` as given (at least 1), or the default for this machine.
pub fn jobs(asked: Option<usize>) -> anyhow::Result<usize> {
    match asked {
        Some(0) => anyhow::bail!("-j 0: at least one run must go at a time"),
        Some(n) => Ok(n),
        None => Ok(kpct::operations::parallel::default_workers()),
    }
}
