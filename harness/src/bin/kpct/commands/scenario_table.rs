//! `kpct scenario-table`: the generated parts of the documentation: the library's scenario
//! table and the scenario field reference (docs/scenarios.md), the table of known differences
//! (docs/proxiers.md, from known-differences.yaml).

use anyhow::{Context, Result};

#[derive(clap::Args)]
pub struct Args {
    /// Rewrite every generated part in place (run from the repository's root) instead of
    /// printing the scenario table.
    #[arg(long)]
    write: bool,
}

pub fn run(Args { write }: Args) -> Result<()> {
    let repo = std::path::Path::new(".");
    if !write {
        print!(
            "{}",
            kpct::operations::scenario_table::scenario_table(repo)?
        );
        return Ok(());
    }
    for (path, text) in kpct::operations::scenario_table::regenerate(repo)? {
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
