//! `kpct input`: the document an `exec:` proxier gets on stdin, without running anything.

use crate::stdout::emit;
use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    /// The scenario file.
    scenario: std::path::PathBuf,
    /// The node whose document to print.
    #[arg(long)]
    node: String,
    /// The step after which the node re-syncs (by name); without it, the first sync.
    #[arg(long)]
    step: Option<String>,
}

pub fn run(args: Args) -> Result<()> {
    let scenario = super::load(&args.scenario)?;
    let input = kpct::drivers::exec::input_at(&scenario, &args.node, args.step.as_deref())?;
    emit(&format!("{}\n", kpct::drivers::exec::input_text(&input)?))?;
    Ok(())
}
