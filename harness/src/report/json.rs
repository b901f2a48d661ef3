//! The JSON document of `kpct run --json FILE`: one object with the environment, a summary and
//! every run with its probes, verdicts and violations, for CI dashboards and scripts. Field names
//! are stable within a `format` version and documented in `json-format.md` beside this file;
//! each probe's `observation` is the probe as the snapshot documents hold it.

use super::results::{timestamp, Results};
use super::{dedup, probe_violations, shots, spelled};
use crate::document::NodeSummary;
use crate::document::ProbeObservation;
use crate::provenance::Environment;
use serde::Serialize;

/// The version of this document's shape; a change that removes or renames a field bumps it.
pub const FORMAT: &str = "kpct-results/2";

#[derive(Serialize)]
struct Document<'a> {
    format: &'static str,
    environment: &'a Environment,
    started: String,
    duration_seconds: f64,
    summary: Summary,
    runs: Vec<Run<'a>>,
}

#[derive(Serialize)]
struct Summary {
    result: Outcome,
    runs: usize,
    errored: usize,
    /// Runs this kernel cannot hold (`result: not-run`).
    not_run: usize,
    probes: usize,
    passed: usize,
    failed: usize,
    /// One per step of every run.
    convergence_checks: usize,
    not_converged: usize,
}

#[derive(Serialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
enum Outcome {
    Pass,
    Fail,
    Error,
    /// This kernel cannot hold the run (a run), or some run (the summary).
    NotRun,
}

#[derive(Serialize)]
struct Run<'a> {
    scenario: &'a str,
    proxier: &'a str,
    /// The scenario file, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    result: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    started: Option<String>,
    duration_seconds: f64,
    /// Why the run could not complete (`result: error`), or could not run here
    /// (`result: not-run`).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    violations: &'a [String],
    nodes: &'a [NodeSummary],
    probes: Vec<Probe<'a>>,
    /// Each step's convergence check.
    steps: Vec<Step<'a>>,
}

#[derive(Serialize)]
struct Step<'a> {
    name: &'a str,
    /// `pass` when every node holds what a fresh sync of the step's state holds.
    converged: Outcome,
    /// Per node, every way its state differs from a fresh node's.
    differences: &'a [String],
}

#[derive(Serialize)]
struct Probe<'a> {
    name: &'a str,
    result: Outcome,
    duration_seconds: f64,
    /// Distinct verdicts of its shots, as scenario files spell them.
    verdicts: Vec<String>,
    backends: Vec<String>,
    violations: Vec<&'a String>,
    /// The `kpct trace` command that fires it again (failing probes only).
    #[serde(skip_serializing_if = "Option::is_none")]
    trace: Option<String>,
    observation: &'a ProbeObservation,
}

/// The document, pretty-printed.
pub fn json(results: &Results) -> serde_json::Result<String> {
    let counts = results.counts();
    let file = |scenario: &str| results.files.get(scenario).map(|f| f.display().to_string());
    let mut runs: Vec<Run> = results
        .runs
        .iter()
        .map(|run| {
            let obs = &run.observation;
            let probes: Vec<Probe> = obs
                .all_probes()
                .enumerate()
                .map(|(i, p)| {
                    let violations = probe_violations(run, &p.probe);
                    let failed = !violations.is_empty();
                    Probe {
                        name: &p.probe,
                        result: if failed { Outcome::Fail } else { Outcome::Pass },
                        duration_seconds: run.timing.probes.get(i).map_or(0.0, |d| d.as_secs_f64()),
                        verdicts: dedup(shots(p).iter().map(|s| spelled(s.verdict))),
                        backends: dedup(p.backends.iter().cloned()),
                        violations,
                        trace: failed.then(|| results.trace_command(run, &p.probe)),
                        observation: p,
                    }
                })
                .collect();
            Run {
                scenario: &obs.scenario,
                proxier: &obs.proxier,
                file: file(&obs.scenario),
                result: if run.violations.is_empty() {
                    Outcome::Pass
                } else {
                    Outcome::Fail
                },
                started: Some(timestamp(run.timing.started)),
                duration_seconds: run.timing.total().as_secs_f64(),
                error: None,
                violations: &run.violations,
                nodes: &obs.nodes,
                probes,
                steps: obs
                    .steps
                    .iter()
                    .map(|step| Step {
                        name: &step.step,
                        converged: if super::not_converged(run, step) {
                            Outcome::Fail
                        } else {
                            Outcome::Pass
                        },
                        differences: &step.not_converged,
                    })
                    .collect(),
            }
        })
        .collect();
    // Runs that did not complete: no probes, no steps, only why.
    let unfinished = |scenario, proxier, result, seconds: f64, why| Run {
        scenario,
        proxier,
        file: file(scenario),
        result,
        started: None,
        duration_seconds: seconds,
        error: Some(why),
        violations: &[],
        nodes: &[],
        probes: Vec::new(),
        steps: Vec::new(),
    };
    runs.extend(results.errors.iter().map(|e| {
        unfinished(
            &e.scenario,
            &e.proxier,
            Outcome::Error,
            e.elapsed.as_secs_f64(),
            &e.message,
        )
    }));
    runs.extend(
        results
            .not_run
            .iter()
            .map(|n| unfinished(&n.scenario, &n.proxier, Outcome::NotRun, 0.0, &n.reason)),
    );
    let result = if counts.errored > 0 {
        Outcome::Error
    } else if counts.any_failure() {
        Outcome::Fail
    } else if counts.not_run > 0 {
        Outcome::NotRun
    } else {
        Outcome::Pass
    };
    let doc = Document {
        format: FORMAT,
        environment: &results.environment,
        started: timestamp(results.started),
        duration_seconds: results.elapsed.as_secs_f64(),
        summary: Summary {
            result,
            runs: results.runs.len() + results.errors.len() + results.not_run.len(),
            errored: counts.errored,
            not_run: counts.not_run,
            probes: counts.probes,
            passed: counts.probes - counts.failed,
            failed: counts.failed,
            convergence_checks: counts.convergence_checks,
            not_converged: counts.not_converged,
        },
        runs,
    };
    let mut text = serde_json::to_string_pretty(&doc)?;
    text.push('\n');
    Ok(text)
}
