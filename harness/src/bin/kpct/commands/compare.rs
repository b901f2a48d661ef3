//! `kpct compare OLD.json NEW.json`: two runs' results side by side.

use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The earlier run's results (`kpct run --json FILE`).
    old: PathBuf,
    /// The later run's results.
    new: PathBuf,
}

/// Prints, scenario by scenario, every check that regressed, was fixed, still fails, is new,
/// is gone or observed something else; exits 1 when something regressed or a new check fails.
pub fn run(args: Args) -> Result<()> {
    let old = kpct::report::baseline::Checks::read(&args.old)?;
    let new = kpct::report::baseline::Checks::read(&args.new)?;
    let comparison = kpct::report::baseline::compare(&old, &new);
    print!("{}", comparison.render());
    if comparison.fails() {
        std::process::exit(1);
    }
    Ok(())
}
