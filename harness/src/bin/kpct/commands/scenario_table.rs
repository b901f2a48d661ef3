//! `kpct scenario-table`: the README's generated scenario table (and, with `--write`, its
//! scenario field reference).

use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    /// Rewrite the scenario table and the field reference between their markers in this file
    /// instead of printing the table.
    #[arg(long)]
    write: Option<std::path::PathBuf>,
}

pub fn run(Args { write }: Args) -> Result<()> {
    let table = kpct::operations::scenario_table::scenario_table(std::path::Path::new("."))?;
    match write {
        Some(path) => {
            let readme = std::fs::read_to_string(&path)?;
            std::fs::write(
                &path,
                kpct::operations::scenario_table::regenerate(&readme, std::path::Path::new("."))?,
            )?;
        }
        None => print!("{table}"),
    }
    Ok(())
}
