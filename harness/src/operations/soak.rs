//! Determinism soak: the same scenarios run many times, also concurrently and under a CPU
//! load if asked, must give byte-identical observations pass after pass.

use crate::operations::parallel::{self, After, Event, Job};
use crate::run::NodeProgrammer;
use crate::scenario::Scenario;
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

pub struct SoakReport {
    /// Per scenario, in the order given.
    pub scenarios: Vec<ScenarioSoak>,
    pub passes: usize,
    pub elapsed: Duration,
}

/// One scenario's passes.
pub struct ScenarioSoak {
    pub name: String,
    pub identical: usize,
    /// (pass number, unified diff against pass 1) for each pass that differed.
    pub divergences: Vec<(usize, String)>,
}

impl SoakReport {
    pub fn runs(&self) -> usize {
        self.passes * self.scenarios.len()
    }

    pub fn divergent(&self) -> usize {
        self.scenarios.iter().map(|s| s.divergences.len()).sum()
    }

    pub fn render(&self, proxier: &str, load: &str) -> String {
        let mut out = String::new();
        let which = match &self.scenarios[..] {
            [one] => one.name.clone(),
            many => format!("{} scenarios", many.len()),
        };
        let _ = writeln!(
            out,
            "soak {which} × {proxier}: {} pass(es), {} run(s){load}, {} identical to their first pass, {} divergent ({:.1}s)",
            self.passes,
            self.runs(),
            self.runs() - self.divergent(),
            self.divergent(),
            self.elapsed.as_secs_f64()
        );
        for s in &self.scenarios {
            for (pass, diff) in &s.divergences {
                let _ = writeln!(out, "{}:\n--- pass 1\n+++ pass {pass}\n{diff}", s.name);
            }
        }
        out
    }
}

/// Runs each of `scenarios` `passes` times (each in fresh namespaces, up to `workers` at once,
/// pass by pass) and compares every observation with its scenario's first pass. `progress`
/// hears each run as it ends (runs ended, of all).
pub fn soak(
    scenarios: &[Scenario],
    proxier: &dyn NodeProgrammer,
    passes: usize,
    workers: usize,
    timeout: Duration,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<SoakReport> {
    let started = Instant::now();
    let jobs: Vec<Job<'_>> = (0..passes)
        .flat_map(|_| scenarios.iter().map(|scenario| Job { scenario, proxier }))
        .collect();
    let total = jobs.len();
    let mut ended = 0;
    let finished = parallel::run_jobs(&jobs, workers, timeout, &mut |event| {
        if let Event::Finished(_) = event {
            ended += 1;
            progress(ended, total);
        }
        After::Continue
    })?;
    let mut first: Vec<Option<String>> = vec![None; scenarios.len()];
    let mut report: Vec<ScenarioSoak> = scenarios
        .iter()
        .map(|s| ScenarioSoak {
            name: s.name.clone(),
            identical: 0,
            divergences: Vec::new(),
        })
        .collect();
    for f in finished {
        let (pass, which) = (f.index / scenarios.len() + 1, f.index % scenarios.len());
        let yaml = f
            .outcome
            .with_context(|| format!("{} pass {pass}", scenarios[which].name))?
            .observation
            .to_yaml()?;
        let this = &mut report[which];
        match &first[which] {
            None => {
                first[which] = Some(yaml);
                this.identical += 1;
            }
            Some(reference) if *reference == yaml => this.identical += 1,
            Some(reference) => {
                let diff = similar::TextDiff::from_lines(reference, &yaml)
                    .unified_diff()
                    .context_radius(2)
                    .to_string();
                this.divergences.push((pass, diff));
            }
        }
    }
    Ok(SoakReport {
        scenarios: report,
        passes,
        elapsed: started.elapsed(),
    })
}
