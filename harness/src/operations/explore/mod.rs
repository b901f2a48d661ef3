//! `kpct explore`: kpct writes the cases itself. Generated scenarios ([`generate`]) run
//! against two proxiers and compared ([`compare`]: McKeeman's differential testing), or against
//! one and checked against what any conformant proxier does ([`invariants`]); every difference
//! not explained by the known-differences file ([`known`]) is a finding, shrunk to a minimal
//! scenario in the library's format ([`shrink`]). The exploration's record ([`Exploration`])
//! is JSON, and reads as Markdown or HTML ([`summary`]); shards of one exploration merge.

pub mod compare;
pub mod generate;
pub mod invariants;
pub mod known;
pub mod library_yaml;
pub mod run;
pub mod shrink;
pub mod summary;

use anyhow::{Context, Result};
use run::{CaseResult, CaseVerdict, Plan};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Instant;

/// One distinct finding: the first case that showed it, the others that did, and its
/// shrunk scenario.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Finding {
    /// `F1`, `F2`, … in the order first found.
    pub id: String,
    /// What it is, in terms every case that showed it shares ([`CaseResult::finding_key`]).
    pub key: String,
    /// The first case that showed it.
    pub first: CaseResult,
    /// Every other case that showed it.
    pub also: Vec<u64>,
    /// The first case, shrunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shrunk: Option<ShrunkFinding>,
}

/// A finding's minimal scenario, ready for the library.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShrunkFinding {
    /// In the library's format, with the command that reproduces it in its header.
    pub scenario: String,
    /// Each proxier's observation of it (one or two).
    pub observations: Vec<String>,
    /// Candidates run to get there, and what each step taken removed.
    pub runs: usize,
    pub log: Vec<String>,
    pub bounded: bool,
    pub reproduce: String,
}

/// An exploration's record: what ran, what it found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Exploration {
    /// The proxiers, by label (one: invariants; two: compared).
    pub proxiers: Vec<String>,
    /// Their specs, to run again.
    pub specs: Vec<String>,
    pub seed: u64,
    /// The weights changed from the defaults.
    pub weights: Vec<String>,
    /// `K/N` when this is one shard's record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    /// Cases run, and runs (cases × proxiers).
    pub cases: u64,
    pub runs: u64,
    pub alike: u64,
    /// Differences the known-differences file explains, by its id.
    pub explained: BTreeMap<String, u64>,
    /// Cases every run of failed (an error, not a behaviour), with their first error.
    pub failed: Vec<(u64, String)>,
    /// Cases a proxier could not take.
    pub refused: u64,
    pub findings: Vec<Finding>,
    pub seconds: f64,
    /// The machine, as `kpct bench` prints it.
    pub machine: String,
}

impl Exploration {
    /// Cases with an unexplained difference or a broken invariant.
    pub fn cases_with_findings(&self) -> u64 {
        self.findings.iter().map(|f| 1 + f.also.len() as u64).sum()
    }
}

/// Options of the shrinking that follows the exploration.
#[derive(Debug, Clone, Copy)]
pub struct Shrinking {
    /// Shrink findings at all.
    pub enabled: bool,
    /// At most this many candidates per finding.
    pub max_runs: usize,
}

/// Runs `plan`, groups what it found, shrinks each finding; `say` hears progress.
pub fn explore(
    plan: &Plan<'_>,
    specs: &[String],
    shrinking: Shrinking,
    say: &mut dyn FnMut(&str),
) -> Result<Exploration> {
    let started = Instant::now();
    let total = match &plan.cases {
        run::Cases::Generated { count: Some(n) } => Some(*n),
        run::Cases::Generated { count: None } => None,
        run::Cases::Listed(c) => Some(c.len() as u64),
        run::Cases::Files(f) => Some(f.len() as u64),
    };
    let results = run::explore(plan, &mut |r, done| {
        let of = total.map(|t| format!("/{t}")).unwrap_or_default();
        let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-3) * 60.0;
        say(&format!(
            "[{done}{of}] {} {} ({:.1} s; {rate:.1} cases/min)",
            r.name,
            verdict_text(r),
            r.seconds
        ));
    })?;
    let mut ex = Exploration {
        proxiers: plan.proxiers.iter().map(|p| p.label()).collect(),
        specs: specs.to_vec(),
        seed: plan.seed,
        weights: plan.generator.weights.changed(),
        shard: plan.shard.map(|s| format!("{}/{}", s.index, s.count)),
        cases: results.len() as u64,
        runs: 0,
        alike: 0,
        explained: BTreeMap::new(),
        failed: Vec::new(),
        refused: 0,
        findings: Vec::new(),
        seconds: 0.0,
        machine: machine(),
    };
    for r in results {
        ex.record(r, plan.proxiers.len() as u64);
    }
    if shrinking.enabled {
        for finding in &mut ex.findings {
            say(&format!("shrinking {} ({})", finding.id, finding.key));
            finding.shrunk = shrink_finding(plan, specs, finding, shrinking.max_runs, say)?;
        }
    }
    ex.seconds = started.elapsed().as_secs_f64();
    Ok(ex)
}

impl Exploration {
    /// Counts `r` and files it under its finding, if it has one.
    fn record(&mut self, r: CaseResult, proxiers: u64) {
        match &r.verdict {
            CaseVerdict::Refused { .. } => {
                self.refused += 1;
                return;
            }
            CaseVerdict::Alike => self.alike += 1,
            CaseVerdict::Explained { id } => *self.explained.entry(id.clone()).or_default() += 1,
            CaseVerdict::Failed { errors } => self
                .failed
                .push((r.case, errors.first().cloned().unwrap_or_default())),
            CaseVerdict::Differs { .. } | CaseVerdict::Violates { .. } => {}
        }
        self.runs += proxiers;
        let Some(key) = r.finding_key() else { return };
        match self.findings.iter_mut().find(|f| f.key == key) {
            Some(f) => f.also.push(r.case),
            None => self.findings.push(Finding {
                id: format!("F{}", self.findings.len() + 1),
                key,
                first: r,
                also: Vec::new(),
                shrunk: None,
            }),
        }
    }

    /// Shards' records of one exploration (same proxiers, seed and weights) as one.
    pub fn merge(parts: Vec<Exploration>) -> Result<Exploration> {
        let mut parts = parts.into_iter();
        let mut out = parts.next().context("nothing to merge")?;
        out.shard = None;
        for p in parts {
            anyhow::ensure!(
                p.proxiers == out.proxiers && p.seed == out.seed && p.weights == out.weights,
                "cannot merge explorations of other proxiers, seeds or weights ({:?} seed {} vs {:?} seed {})",
                p.proxiers,
                p.seed,
                out.proxiers,
                out.seed
            );
            out.cases += p.cases;
            out.runs += p.runs;
            out.alike += p.alike;
            out.refused += p.refused;
            out.seconds = out.seconds.max(p.seconds);
            for (id, n) in p.explained {
                *out.explained.entry(id).or_default() += n;
            }
            out.failed.extend(p.failed);
            for f in p.findings {
                match out.findings.iter_mut().find(|o| o.key == f.key) {
                    Some(o) if o.first.case <= f.first.case => {
                        o.also.push(f.first.case);
                        o.also.extend(f.also);
                    }
                    Some(o) => {
                        let earlier = std::mem::replace(o, f);
                        o.also.push(earlier.first.case);
                        o.also.extend(earlier.also);
                    }
                    None => out.findings.push(f),
                }
            }
        }
        out.failed.sort();
        out.findings.sort_by_key(|f| f.first.case);
        for (i, f) in out.findings.iter_mut().enumerate() {
            f.id = format!("F{}", i + 1);
            f.also.sort();
        }
        Ok(out)
    }
}

fn verdict_text(r: &CaseResult) -> String {
    match &r.verdict {
        CaseVerdict::Alike => "alike".into(),
        CaseVerdict::Explained { id } => format!("differs as known: {id}"),
        CaseVerdict::Differs { .. } => format!("DIFFERS: {}", r.finding_key().unwrap_or_default()),
        CaseVerdict::Violates { .. } => format!("BREAKS {}", r.finding_key().unwrap_or_default()),
        CaseVerdict::Failed { errors } => format!(
            "failed: {}",
            errors
                .first()
                .and_then(|e| e.lines().next())
                .unwrap_or_default()
        ),
        CaseVerdict::Refused { reason } => format!("refused: {reason}"),
    }
}

fn shrink_finding(
    plan: &Plan<'_>,
    specs: &[String],
    finding: &Finding,
    max_runs: usize,
    say: &mut dyn FnMut(&str),
) -> Result<Option<ShrunkFinding>> {
    let Some(goal) = shrink::Goal::of(&finding.first) else {
        return Ok(None);
    };
    let scenario = match &plan.cases {
        run::Cases::Files(files) => files[finding.first.case as usize].1.clone(),
        _ => plan.generator.case(plan.seed, finding.first.case),
    };
    let shrunk = shrink::shrink(plan, &scenario, &finding.first, goal, max_runs, &mut |l| {
        say(&format!("  {l}"))
    })?;
    let mut minimal = shrunk.scenario.clone();
    minimal.name = format!("found-{}-{}", plan.seed, finding.first.case);
    minimal.description = format!("Found by kpct explore: {}", finding.key);
    let file = format!("{}.yaml", minimal.name);
    let proxier_args: String = specs.iter().map(|s| format!(" --proxier '{s}'")).collect();
    let reproduce = format!("kpct explore{proxier_args} --scenario {file}");
    let comment = format!(
        "Found by `kpct explore{proxier_args} --seed {} --case {}`, shrunk in {} runs.\n\
         Reproduce: {reproduce}\n\n{}",
        plan.seed, finding.first.case, shrunk.runs, finding.key
    );
    Ok(Some(ShrunkFinding {
        scenario: library_yaml::library_yaml(&minimal, &comment)?,
        observations: shrunk.result.observations.clone(),
        runs: shrunk.runs,
        log: shrunk.log,
        bounded: shrunk.bounded,
        reproduce,
    }))
}

/// The machine an exploration ran on, as `kpct bench` prints it.
fn machine() -> String {
    let kernel = crate::kernel_features::detect()
        .map(|c| c.kernel)
        .unwrap_or_else(|_| "?".into());
    format!(
        "kernel {kernel}, {} CPUs",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    )
}
