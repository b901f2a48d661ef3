//! Determinism soak: the same scenario run many times, also concurrently, must give
//! byte-identical observations.

use crate::operations::parallel::{self, After, Job};
use crate::run::NodeProgrammer;
use crate::scenario::Scenario;
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

pub struct SoakReport {
    pub runs: usize,
    pub identical: usize,
    /// (run number, unified diff against run 1) for each divergent run.
    pub divergences: Vec<(usize, String)>,
    pub elapsed: Duration,
}

impl SoakReport {
    pub fn render(&self, scenario: &str, proxier: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "soak {scenario} × {proxier}: {} run(s), {} identical to run 1, {} divergent ({:.1}s)",
            self.runs,
            self.identical,
            self.divergences.len(),
            self.elapsed.as_secs_f64()
        );
        for (run, diff) in &self.divergences {
            let _ = writeln!(out, "--- run 1\n+++ run {run}\n{diff}");
        }
        out
    }
}

/// Runs `scenario` `runs` times (each in fresh namespaces, up to `workers` at once) and compares
/// every observation with the first run's.
pub fn soak(
    scenario: &Scenario,
    proxier: &dyn NodeProgrammer,
    runs: usize,
    workers: usize,
    timeout: Duration,
) -> Result<SoakReport> {
    let started = Instant::now();
    let jobs = vec![Job { scenario, proxier }; runs];
    let finished = parallel::run_jobs(&jobs, workers, timeout, &mut |_| After::Continue)?;
    let mut first: Option<String> = None;
    let mut identical = 0;
    let mut divergences = Vec::new();
    for f in finished {
        let n = f.index + 1;
        let yaml = f
            .outcome
            .with_context(|| format!("soak run {n}"))?
            .observation
            .to_yaml()?;
        match &first {
            None => {
                first = Some(yaml);
                identical += 1;
            }
            Some(reference) if *reference == yaml => identical += 1,
            Some(reference) => {
                let diff = similar::TextDiff::from_lines(reference, &yaml)
                    .unified_diff()
                    .context_radius(2)
                    .to_string();
                divergences.push((n, diff));
            }
        }
    }
    Ok(SoakReport {
        runs,
        identical,
        divergences,
        elapsed: started.elapsed(),
    })
}
