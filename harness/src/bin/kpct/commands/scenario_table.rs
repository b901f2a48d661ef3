//! `kpct scenario-table`: the README's generated scenario table.

use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    /// Rewrite the table between the markers in this file instead of printing it.
    #[arg(long)]
    write: Option<std::path::PathBuf>,
}

pub fn run(Args { write }: Args) -> Result<()> {
    let table = kpct::docs::scenario_table(std::path::Path::new("."))?;
    match write {
        Some(path) => {
            let readme = std::fs::read_to_string(&path)?;
            std::fs::write(&path, kpct::docs::splice(&readme, &table)?)?;
        }
        None => print!("{table}"),
    }
    Ok(())
}
