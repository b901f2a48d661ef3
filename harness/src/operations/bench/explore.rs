//! `kpct bench explore`: how many generated cases an exploration runs a minute, a pair of
//! proxiers at a time (each case against both), on this machine.

use crate::operations::explore::generate::{Generator, Weights};
use crate::operations::explore::known::KnownDifferences;
use crate::operations::explore::run::{self, CaseVerdict, Cases, Plan};
use crate::run::NodeProgrammer;
use anyhow::Result;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// The cases run and what they took.
pub struct ExploreBench {
    pub cases: usize,
    pub wall: Duration,
    /// Wall time of each case's runs, sorted.
    pub per_case: Vec<f64>,
    /// Cases whose runs did not all complete (errors are counted, not hidden).
    pub failed: usize,
}

/// Runs cases 0..`cases` of `seed` against `proxiers` on `workers` workers.
pub fn explore(
    proxiers: &[&dyn NodeProgrammer],
    cases: u64,
    seed: u64,
    workers: usize,
    probe_timeout: Duration,
) -> Result<ExploreBench> {
    let plan = Plan {
        proxiers: proxiers.to_vec(),
        generator: Generator::new(Weights::default()),
        seed,
        cases: Cases::Generated { count: Some(cases) },
        budget: None,
        shard: None,
        workers,
        probe_timeout,
        known: KnownDifferences::default(),
    };
    let started = Instant::now();
    let results = run::explore(&plan, &mut |_, _| {})?;
    let wall = started.elapsed();
    let mut per_case: Vec<f64> = results.iter().map(|r| r.seconds).collect();
    per_case.sort_by(f64::total_cmp);
    Ok(ExploreBench {
        cases: results.len(),
        wall,
        per_case,
        failed: results
            .iter()
            .filter(|r| matches!(r.verdict, CaseVerdict::Failed { .. }))
            .count(),
    })
}

impl ExploreBench {
    /// One paragraph: the rate and the spread of a case's wall time.
    pub fn render(&self, labels: &[String], workers: usize) -> String {
        let minutes = self.wall.as_secs_f64() / 60.0;
        let q = |f: f64| {
            self.per_case
                .get(((self.per_case.len() as f64 - 1.0) * f).round() as usize)
                .copied()
                .unwrap_or_default()
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "explore {} (-j {workers}): {} cases in {:.1} s: {:.1} cases/min, {:.1} runs/min{}",
            labels.join(" vs "),
            self.cases,
            self.wall.as_secs_f64(),
            self.cases as f64 / minutes.max(1e-9),
            (self.cases * labels.len()) as f64 / minutes.max(1e-9),
            if self.failed > 0 {
                format!(" ({} case(s) failed)", self.failed)
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            out,
            "  a case's runs: median {:.1} s, p90 {:.1} s, max {:.1} s; 1,000 cases take ~{:.0} min",
            q(0.5),
            q(0.9),
            q(1.0),
            1000.0 * minutes / self.cases.max(1) as f64
        );
        out
    }
}
