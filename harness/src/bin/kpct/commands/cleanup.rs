//! `kpct cleanup`: namespaces left behind by crashed runs.

use anyhow::Result;
use kpct::netns;

#[derive(clap::Args)]
pub struct Args {
    /// Also remove namespaces of runs that are still alive.
    #[arg(long)]
    all: bool,
}

pub fn run(Args { all }: Args) -> Result<()> {
    let names = netns::leftovers(all)?;
    netns::remove_leftovers(&names);
    for name in &names {
        println!("removed {name}");
    }
    println!("{} namespace(s) removed", names.len());
    Ok(())
}
