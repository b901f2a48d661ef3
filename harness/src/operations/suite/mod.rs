//! `kpct run`'s work: scenarios × proxiers on parallel workers, the runs this kernel cannot hold
//! handed to a VM ([`vm_share`]) or reported as not run here, every result in the table's order
//! whichever worker or machine made it, and every file written of them ([`outputs`]).

pub mod outputs;
pub mod selection;
pub mod traced;
pub mod vm_share;

use crate::operations::parallel::{self, After, Event, Job};
use crate::operations::progress::{Outcome, Progress};
use crate::probe::{DropDecision, Patience};
use crate::report::{NotRun, Results, RunError};
use crate::run::NodeProgrammer;
use anyhow::Result;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// How to run the jobs.
pub struct Options<'a> {
    /// Runs at once here.
    pub workers: usize,
    /// Decide every unanswered shot at the probe timeout, even after a traced DROP verdict.
    pub wait_out_drops: bool,
    /// Stop after the first run that fails or errors, in the table's order.
    pub fail_fast: bool,
    /// Where the runs this kernel cannot hold go, with what the child there is asked to run.
    pub vm: Option<(PathBuf, vm_share::Selection<'a>)>,
}

/// The suite's results, and the jobs that ran here (a report traces failures among them).
pub struct Ran<'a> {
    pub results: Results,
    pub here: Vec<Job<'a>>,
    pub patience: Patience,
}

/// Runs `jobs` (whose scenarios come from `files`), each here when this kernel can hold it,
/// else in the VM of `options.vm`, else reported as not run here; progress goes to stderr.
pub fn run<'a>(
    proxiers: &[Box<dyn NodeProgrammer>],
    jobs: &[Job<'a>],
    files: BTreeMap<String, PathBuf>,
    options: &Options<'_>,
) -> Result<Ran<'a>> {
    let kernel = crate::kernel_features::detect()?;
    let mut not_run = Vec::new();
    let mut vm_jobs = Vec::new();
    let mut here = Vec::new();
    for job in jobs {
        let needs: Vec<_> = selection::kernel_needs(job).into_iter().collect();
        let missing = kernel.missing(&needs);
        if missing.is_empty() {
            here.push(*job);
        } else if options.vm.is_some() {
            vm_jobs.push(job);
        } else {
            not_run.push(NotRun {
                scenario: job.scenario.name.clone(),
                proxier: job.proxier.label(),
                reason: missing
                    .iter()
                    .map(|(f, why)| format!("needs {}: {why}", f.name()))
                    .collect::<Vec<_>>()
                    .join("; "),
            });
        }
    }
    let share = match &options.vm {
        Some((runner, selection)) if !vm_jobs.is_empty() => {
            eprintln!(
                "{} run(s) need what this kernel lacks (IP_VS, SCTP): they run in a VM ({}) \
                 beside the {} here",
                vm_jobs.len(),
                runner.display(),
                here.len()
            );
            Some(vm_share::start(runner, &vm_jobs, &files, selection)?)
        }
        _ => None,
    };
    let mut results = Results {
        not_run,
        files,
        specs: proxiers.iter().map(|p| (p.label(), p.spec())).collect(),
        started: std::time::SystemTime::now(),
        ..Results::new(
            Vec::new(),
            Vec::new(),
            crate::provenance::Environment::detect(),
        )
    };
    let started = std::time::Instant::now();
    let patience = Patience {
        timeout: crate::probe::probe_timeout(),
        drops: if options.wait_out_drops {
            DropDecision::AtTimeout
        } else {
            DropDecision::AtVerdict
        },
    };
    let mut progress = Progress::stderr(here.len());
    let label = |index: usize| {
        (
            here[index].scenario.name.clone(),
            here[index].proxier.label(),
        )
    };
    let finished =
        parallel::run_jobs(&here, options.workers, patience, &mut |event| match event {
            Event::Started(index) => {
                let (scenario, proxier) = label(index);
                progress.start(&scenario, &proxier);
                After::Continue
            }
            Event::Finished(done) => {
                let (scenario, proxier) = label(done.index);
                let outcome = match &done.outcome {
                    Ok(run) if run.violations.is_empty() => Outcome::Ok,
                    Ok(_) => Outcome::Fail,
                    Err(e) => Outcome::Error(format!("{e:#}")),
                };
                progress.finish(&scenario, &proxier, &outcome, done.elapsed);
                if options.fail_fast && outcome != Outcome::Ok {
                    After::StopAfterThis
                } else {
                    After::Continue
                }
            }
        })?;
    // In job order, whatever order the runs ended in: every file written of them is what -j 1
    // writes.
    parallel::record(&mut results, &here, finished);
    if let Some(share) = share {
        eprintln!("waiting for the {} run(s) in the VM", share.runs());
        match share.finish() {
            Ok(back) => {
                results.runs.extend(back.runs);
                results.errors.extend(back.errors);
                results.not_run.extend(back.not_run);
            }
            Err(why) => results.errors.extend(vm_jobs.iter().map(|job| RunError {
                scenario: job.scenario.name.clone(),
                proxier: job.proxier.label(),
                message: why.clone(),
                elapsed: std::time::Duration::ZERO,
            })),
        }
        in_table_order(&mut results, jobs);
    }
    progress.close();
    results.elapsed = started.elapsed();
    Ok(Ran {
        results,
        here,
        patience,
    })
}

impl Ran<'_> {
    /// Traces the first failing probe of up to `runs` failing runs again (one shot each, in a
    /// fresh cluster, kernel tracing on), for the report to draw its path.
    pub fn trace_failures(&mut self, runs: usize) -> Result<()> {
        if runs == 0 || self.results.failing().is_empty() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        self.results.traced = tokio::runtime::Runtime::new()?.block_on(traced::trace_failures(
            &self.results,
            &self.here,
            runs,
            self.patience.timeout,
            |scenario, proxier, probe| {
                eprintln!("tracing {scenario} × {proxier}: probe {probe}, for the report");
            },
        ));
        self.results.elapsed += started.elapsed();
        Ok(())
    }
}

/// Sorts the results into the order of the table, as if every run had been made here.
fn in_table_order(results: &mut Results, jobs: &[Job<'_>]) {
    let position = |scenario: &str, proxier: &str| {
        jobs.iter()
            .position(|j| j.scenario.name == scenario && j.proxier.label() == proxier)
    };
    results
        .runs
        .sort_by_key(|r| position(&r.observation.scenario, &r.observation.proxier));
    results
        .errors
        .sort_by_key(|e| position(&e.scenario, &e.proxier));
    results
        .not_run
        .sort_by_key(|n| position(&n.scenario, &n.proxier));
}
