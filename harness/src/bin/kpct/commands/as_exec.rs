//! `kpct as-exec BUILTIN`: a built-in acting as an `exec:` proxier. It reads the document an
//! `exec:` proxier gets on stdin and prints what the built-in programs for it (its first sync)
//! in the text format: a reference to check an `exec:` harness with, and the base of a planted
//! bug (a script that changes the document, or the output, in one narrow case).

use anyhow::{Context, Result};
use kpct::ProxierSpec;
use std::io::Read;

#[derive(clap::Args)]
pub struct Args {
    /// The built-in (at the newest release: the document carries the newest release's view of
    /// the cluster only).
    builtin: ProxierSpec,
}

pub fn run(args: Args) -> Result<()> {
    let proxier = args.builtin.builtin().with_context(|| {
        format!(
            "`{}` is not a built-in ({})",
            args.builtin,
            kpct::proxier::BUILTIN.join(", ")
        )
    })?;
    if proxier.release() != kpct::release::Release::NEWEST {
        anyhow::bail!(
            "`{}`: an exec: document holds the newest release's view of the cluster; give the \
             built-in without a release",
            args.builtin
        );
    }
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .context("reading the exec: document on stdin")?;
    let input: kpct::scenario::cluster::ProxierInput =
        serde_json::from_str(&text).context("stdin is not an exec: document")?;
    let programming =
        kpct::proxier::families::program_node(proxier.as_ref(), &input.cluster, &input.node)?;
    crate::stdout::emit(&kpct::programming::render_text(&programming))
}
