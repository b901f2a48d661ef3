//! Scenario × proxier runs on several workers at once, results in job order.
//!
//! A run waits far more than it computes (a dropped probe is proven by a 2 s silence), so runs
//! overlap well even on a machine with few cores. Each run builds its own namespaces under its
//! own [`RunPrefix`](crate::netns::naming::RunPrefix) and fixes its own MACs, addresses and
//! ports inside them, so concurrent runs share nothing the kernel keys per namespace: conntrack,
//! routes, rules, sockets and the per-destination ICMP rate limit are all per network namespace
//! (older kernels share the host-wide ICMP budget, `icmp_msgs_per_sec` = 1000/s, far above the
//! few rejects per second runs send). Whatever order
//! the runs finish in, [`run_jobs`] hands results back in job order, so everything rendered from
//! them is what a serial run renders.

use crate::run::{run_scenario, NodeProgrammer, ScenarioRun};
use crate::scenario::Scenario;
use anyhow::{anyhow, Result};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// One scenario against one proxier.
#[derive(Clone, Copy)]
pub struct Job<'a> {
    pub scenario: &'a Scenario,
    pub proxier: &'a dyn NodeProgrammer,
}

/// A job that ran, successfully or not.
pub struct Finished {
    /// Its position in the job list.
    pub index: usize,
    pub outcome: Result<ScenarioRun>,
    /// Wall time of the run, teardown included.
    pub elapsed: Duration,
}

/// What the caller hears, on its own thread, as runs start and end (in the order they do).
pub enum Event<'a> {
    Started(usize),
    Finished(&'a Finished),
}

/// What the caller wants after a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    Continue,
    /// Start no job after this one in job order; results past it are discarded (jobs before it
    /// still finish), so a stopped parallel run reports exactly what a stopped serial run does.
    StopAfterThis,
}

/// The default number of workers: runs mostly wait, so four per core, but at most 16 (each run
/// holds a few threads and sockets of its own).
pub fn default_workers() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores * 4).clamp(1, 16)
}

/// Runs every job on up to `workers` threads, calling `events` as runs start and finish. Returns
/// the finished jobs in job order: all of them, or, when `events` answered
/// [`After::StopAfterThis`], those up to the first such job in job order.
pub fn run_jobs(
    jobs: &[Job<'_>],
    workers: usize,
    patience: impl Into<crate::probe::Patience>,
    events: &mut dyn FnMut(Event<'_>) -> After,
) -> Result<Vec<Finished>> {
    let patience = patience.into();
    let runtime = tokio::runtime::Runtime::new()?;
    let next = AtomicUsize::new(0);
    let stop_after = AtomicUsize::new(usize::MAX);
    let (sender, receiver) = mpsc::channel::<Message>();
    let mut finished = Vec::new();
    std::thread::scope(|scope| {
        for _ in 0..workers.clamp(1, jobs.len().max(1)) {
            let sender = sender.clone();
            let (next, stop_after, runtime) = (&next, &stop_after, &runtime);
            scope.spawn(move || loop {
                // Taken in job order, so every job before a stopping one has been taken.
                let index = next.fetch_add(1, Ordering::SeqCst);
                if index >= jobs.len() || index > stop_after.load(Ordering::SeqCst) {
                    return;
                }
                let job = jobs[index];
                if sender.send(Message::Started(index)).is_err() {
                    return;
                }
                let started = Instant::now();
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    runtime.block_on(run_scenario(job.scenario, job.proxier, patience))
                }))
                .unwrap_or_else(|panic| Err(anyhow!("the run panicked: {}", panic_text(&panic))));
                let done = Finished {
                    index,
                    outcome,
                    elapsed: started.elapsed(),
                };
                if sender.send(Message::Finished(Box::new(done))).is_err() {
                    return;
                }
            });
        }
        // Only the workers hold senders now: the loop ends when the last one is done.
        drop(sender);
        for message in receiver {
            match message {
                Message::Started(index) => {
                    events(Event::Started(index));
                }
                Message::Finished(done) => {
                    if events(Event::Finished(&done)) == After::StopAfterThis {
                        stop_after.fetch_min(done.index, Ordering::SeqCst);
                    }
                    finished.push(*done);
                }
            }
        }
    });
    let stop = stop_after.load(Ordering::SeqCst);
    finished.retain(|f| f.index <= stop);
    finished.sort_by_key(|f| f.index);
    Ok(finished)
}

enum Message {
    Started(usize),
    Finished(Box<Finished>),
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// Adds what the runs of `jobs` gave to `results`, in job order (as [`run_jobs`] returns them):
/// each a completed run or an error.
pub fn record(results: &mut crate::report::Results, jobs: &[Job<'_>], finished: Vec<Finished>) {
    for done in finished {
        match done.outcome {
            Ok(run) => results.runs.push(run),
            Err(e) => results.errors.push(crate::report::RunError {
                scenario: jobs[done.index].scenario.name.clone(),
                proxier: jobs[done.index].proxier.label(),
                message: format!("{e:#}"),
                elapsed: done.elapsed,
            }),
        }
    }
}

/// `K/N`: the K-th of N shares of a job list (1 ≤ K ≤ N), as `cargo nextest --partition
/// count:K/N` writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Shard, String> {
        let bad = || format!("`{s}`: a shard is K/N with 1 ≤ K ≤ N, e.g. 2/4");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            k.trim().parse::<usize>().map_err(|_| bad())?,
            n.trim().parse::<usize>().map_err(|_| bad())?,
        );
        if index == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl Shard {
    /// Whether the job at `position` of the full list belongs to this shard. Round robin, so
    /// shards are within one job of each other in size and the slow scenarios (grouped by
    /// name, e.g. every `*-etp-local`) spread over them; every job is in exactly one shard.
    pub fn holds(&self, position: usize) -> bool {
        position % self.count == self.index - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_split_every_job_exactly_once() {
        for bad in ["", "1", "0/2", "3/2", "a/2", "1/0", "1/2/3"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad} accepted");
        }
        let shards: Vec<Shard> = (1..=3).map(|k| format!("{k}/3").parse().unwrap()).collect();
        for position in 0..20 {
            let owners = shards.iter().filter(|s| s.holds(position)).count();
            assert_eq!(owners, 1, "job {position}");
        }
        let sizes: Vec<usize> = shards
            .iter()
            .map(|s| (0..20).filter(|p| s.holds(*p)).count())
            .collect();
        assert_eq!(sizes, [7, 7, 6]);
    }

    #[test]
    fn the_default_uses_several_workers_per_core_within_bounds() {
        let w = default_workers();
        assert!((1..=16).contains(&w), "{w}");
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(w >= cores.min(16), "{w} workers for {cores} cores");
    }
}
