//! Results of `kpct run`: the table it prints ([`table`]), the JUnit XML of `--junit`
//! ([`junit`]), the Markdown/HTML document of `--report` ([`document`]) and the JSON of `--json`
//! ([`json`]), all read from one [`Results`].

pub mod baseline;
mod differences;
pub mod document;
pub mod json;
pub mod junit;
pub mod markup;
pub mod picture;
pub mod results;
pub mod table;
pub mod traced;
pub mod wire;

pub use junit::junit;
pub use results::{NotRun, Results, RunError, NOT_RUN_EXIT};
pub use table::{table, Style};

use crate::document::{ProbeObservation, ShotObservation};
use crate::run::ScenarioRun;

/// The violated-expectation lines of `run` that concern probe `probe`.
pub fn probe_violations<'a>(run: &'a ScenarioRun, probe: &str) -> Vec<&'a String> {
    let tag = format!("probe `{probe}`");
    run.violations.iter().filter(|v| v.contains(&tag)).collect()
}

/// The violated-expectation lines of `run` that concern the convergence check after step
/// `step` (its testcase `STEP/converged`).
pub fn convergence_violations<'a>(run: &'a ScenarioRun, step: &str) -> Vec<&'a String> {
    let tag = format!("after step `{step}` {}", crate::run::NOT_CONVERGED);
    run.violations.iter().filter(|v| v.contains(&tag)).collect()
}

/// Whether `step` of `run` failed its convergence check: a node differed from a fresh one.
pub fn not_converged(run: &ScenarioRun, step: &crate::document::StepObservation) -> bool {
    !step.converged || !convergence_violations(run, &step.step).is_empty()
}

/// The violated-expectation lines of `run` that no probe and no convergence check owns: none
/// are written today, but one would fail the run, so every output shows them as the run's.
pub fn run_violations(run: &ScenarioRun) -> Vec<&String> {
    let obs = &run.observation;
    run.violations
        .iter()
        .filter(|v| {
            !obs.all_probes()
                .any(|p| v.contains(&format!("probe `{}`", p.probe)))
                && !obs.steps.iter().any(|s| {
                    v.contains(&format!(
                        "after step `{}` {}",
                        s.step,
                        crate::run::NOT_CONVERGED
                    ))
                })
        })
        .collect()
}

/// A probe of `run` as `kpct trace` takes it: its name and the number (from 1) of the step it
/// belongs to. A step's probe is observed as `STEP/PROBE`.
pub fn probe_at<'a>(run: &ScenarioRun, probe: &'a str) -> (&'a str, Option<usize>) {
    probe
        .split_once('/')
        .and_then(|(step, name)| {
            let index = run.observation.steps.iter().position(|s| s.step == step)?;
            Some((name, Some(index + 1)))
        })
        .unwrap_or((probe, None))
}

/// The name of the convergence check after `step`, as JUnit and the table name it.
pub fn converged_name(step: &str) -> String {
    format!("{step}/converged")
}

/// A probe's shots: each one, or (for a random choice) each distinct outcome.
pub fn shots(p: &ProbeObservation) -> &[ShotObservation] {
    if p.shots.is_empty() {
        p.outcomes.as_deref().unwrap_or_default()
    } else {
        &p.shots
    }
}

pub use crate::observe::spelled;

/// `delivered → web-1, web-2`: a probe's distinct verdicts and the backends it reached.
pub fn outcome_summary(p: &ProbeObservation) -> String {
    let mut s = dedup(shots(p).iter().map(|s| spelled(s.verdict))).join(", ");
    if !p.backends.is_empty() {
        s.push_str(&format!(
            " → {}",
            dedup(p.backends.iter().cloned()).join(", ")
        ));
    }
    s
}

/// `items` without repeats, in first-seen order.
pub fn dedup(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}
