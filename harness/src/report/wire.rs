//! Results carried from one kpct process to another: the runs a `kpct run` hands to a child
//! in a VM (those this kernel cannot hold) come back in this form and join the parent's, so one
//! table, report, JUnit file and exit status cover both.
//!
//! Every field travels, also those the snapshot documents and `--json` leave out (each shot's
//! source port, the observed source address, every shot of a random choice): the outputs
//! rendered from a run that came back are those of a run made here. Those fields are marked
//! `skip_serializing_if = "crate::document::omitted"`, which omits them unless this module
//! is serializing (`observe::with_every_field`).

use super::results::{NotRun, RunError};
use crate::run::ScenarioRun;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// The version of the form; a child of another kpct cannot be read.
const FORMAT: &str = "kpct-wire/1";

/// What a child run gives back.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Returned {
    format: String,
    pub runs: Vec<ScenarioRun>,
    pub errors: Vec<RunError>,
    pub not_run: Vec<NotRun>,
}

/// `runs`, `errors` and `not_run` in wire form.
pub fn write(runs: &[ScenarioRun], errors: &[RunError], not_run: &[NotRun]) -> Result<String> {
    crate::document::with_every_field(|| {
        serde_json::to_string(&Returned {
            format: FORMAT.into(),
            runs: runs.to_vec(),
            errors: errors.to_vec(),
            not_run: not_run.to_vec(),
        })
    })
    .context("writing the results in wire form")
}

/// Results in wire form, as [`write`] gave them.
pub fn read(text: &str) -> Result<Returned> {
    let returned: Returned = serde_json::from_str(text).context("reading results in wire form")?;
    if returned.format != FORMAT {
        bail!(
            "results in wire form {}, this kpct reads {FORMAT}: the child is another kpct",
            returned.format
        );
    }
    Ok(returned)
}
