//! `kpct cleanup`: namespaces left behind by crashed runs, any process still in one, and their
//! scratch directories.

use anyhow::{bail, Context, Result};
use kpct::netns;

#[derive(clap::Args)]
pub struct Args {
    /// Also remove namespaces of runs that are still alive.
    #[arg(long)]
    all: bool,
}

pub fn run(Args { all }: Args) -> Result<()> {
    let names = netns::leftovers(all)?;
    // A process inside a namespace keeps it, and its links, alive after its file is removed.
    let holders = netns::holders::holders(&names);
    let stubborn = netns::holders::kill(&holders);
    for h in holders.iter().filter(|h| !stubborn.contains(h)) {
        println!("killed {} `{}` in {}", h.pid, h.command, h.namespace);
    }
    netns::remove_leftovers(&names);
    for name in &names {
        println!("removed {name}");
    }
    for dir in kpct::netns::scratch::leftovers()? {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        println!("removed {}", dir.display());
    }
    println!(
        "{} namespace(s) removed, {} process(es) killed",
        names.len(),
        holders.len() - stubborn.len()
    );
    if !stubborn.is_empty() {
        let list: Vec<String> = stubborn
            .iter()
            .map(|h| format!("{} `{}` in {}", h.pid, h.command, h.namespace))
            .collect();
        bail!(
            "still running 5 s after SIGKILL (in an uninterruptible wait?): {}",
            list.join("; ")
        );
    }
    Ok(())
}
