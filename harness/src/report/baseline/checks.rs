//! The checks of one `kpct run`, read from its results document (`--json`, format
//! `kpct-results/2`): every probe, every step's convergence check and every run that could not
//! complete, each with its result and what it observed.

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::collections::BTreeMap;

/// What is checked: one probe, one step's convergence, or a whole run (when it errored).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Check {
    Probe(String),
    Converged(String),
    Run,
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Check::Probe(name) => write!(f, "probe `{name}`"),
            Check::Converged(step) => write!(f, "step `{step}` converged"),
            Check::Run => write!(f, "the run"),
        }
    }
}

/// Where a check belongs: its scenario and proxier (the proxier's label: name a proxier with
/// `NAME=SPEC` so that a new build keeps it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CheckKey {
    pub scenario: String,
    pub proxier: String,
    pub check: Check,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Pass,
    Fail,
    Error,
    /// The kernel could not hold the run: nothing was checked (left out, so a run that passed
    /// in the baseline and cannot run here is `gone`, never a pass).
    NotRun,
}

/// A check's result and what it observed (a probe's distinct verdicts and backends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    pub outcome: Outcome,
    pub observed: String,
}

/// Every check of one run's results document.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Checks(pub BTreeMap<CheckKey, CheckResult>);

#[derive(Deserialize)]
struct Document {
    format: String,
    runs: Vec<Run>,
}

#[derive(Deserialize)]
struct Run {
    scenario: String,
    proxier: String,
    result: Outcome,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    probes: Vec<Probe>,
    #[serde(default)]
    steps: Vec<Step>,
}

#[derive(Deserialize)]
struct Probe {
    name: String,
    result: Outcome,
    #[serde(default)]
    verdicts: Vec<String>,
    #[serde(default)]
    backends: Vec<String>,
}

#[derive(Deserialize)]
struct Step {
    name: String,
    converged: Outcome,
    #[serde(default)]
    differences: Vec<String>,
}

/// The format this reads; an older document lacks the steps.
const FORMAT: &str = crate::report::json::FORMAT;

impl Checks {
    /// The checks of the results document `text`, read from `origin` (for messages).
    pub fn from_json(text: &str, origin: &str) -> Result<Checks> {
        let doc: Document = serde_json::from_str(text).with_context(|| {
            format!("{origin}: not a kpct results document (`kpct run --json FILE` writes one)")
        })?;
        if doc.format != FORMAT {
            bail!(
                "{origin}: format `{}`, expected `{FORMAT}`: run the baseline again with this kpct",
                doc.format
            );
        }
        let mut checks = BTreeMap::new();
        for run in doc.runs {
            let key = |check: Check| CheckKey {
                scenario: run.scenario.clone(),
                proxier: run.proxier.clone(),
                check,
            };
            if run.result == Outcome::NotRun {
                continue;
            }
            if run.result == Outcome::Error {
                checks.insert(
                    key(Check::Run),
                    CheckResult {
                        outcome: Outcome::Error,
                        observed: run.error.clone().unwrap_or_default(),
                    },
                );
                continue;
            }
            for probe in &run.probes {
                checks.insert(
                    key(Check::Probe(probe.name.clone())),
                    CheckResult {
                        outcome: probe.result,
                        observed: format!(
                            "{} → {}",
                            probe.verdicts.join(", "),
                            if probe.backends.is_empty() {
                                "no backend".to_string()
                            } else {
                                probe.backends.join(", ")
                            }
                        ),
                    },
                );
            }
            for step in &run.steps {
                checks.insert(
                    key(Check::Converged(step.name.clone())),
                    CheckResult {
                        outcome: step.converged,
                        observed: step.differences.join("; "),
                    },
                );
            }
        }
        Ok(Checks(checks))
    }

    /// The checks of a results document on disk.
    pub fn read(path: &std::path::Path) -> Result<Checks> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the results document {}", path.display()))?;
        Checks::from_json(&text, &path.display().to_string())
    }
}
