//! The exploration: generated cases run against one proxier (checked against the invariants)
//! or two (compared), on several workers, each difference or broken invariant a finding.

use super::compare::{compare, Difference, Outcome, Signature};
use super::generate::Generator;
use super::invariants::{self, Violation};
use super::known::{Judged, KnownDifferences};
use super::library_yaml::library_yaml;
use crate::operations::parallel::{self, After, Event, Job, Shard};
use crate::run::NodeProgrammer;
use crate::scenario::Scenario;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Which cases an exploration runs.
#[derive(Debug, Clone)]
pub enum Cases {
    /// Cases 0, 1, … of the seed, at most this many (`None`: until the budget runs out).
    Generated { count: Option<u64> },
    /// These cases of the seed only (`--case`).
    Listed(Vec<u64>),
    /// These scenario files, as they are (`--scenario`): a finding's reproduction.
    Files(Vec<(String, Scenario)>),
}

/// What an exploration is told.
pub struct Plan<'p> {
    /// One proxier (invariants) or two (compared), by label in every output.
    pub proxiers: Vec<&'p dyn NodeProgrammer>,
    pub generator: Generator,
    pub seed: u64,
    pub cases: Cases,
    /// Stop starting cases after this long.
    pub budget: Option<Duration>,
    pub shard: Option<Shard>,
    pub workers: usize,
    pub probe_timeout: Duration,
    pub known: KnownDifferences,
}

/// How one case ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "verdict")]
pub enum CaseVerdict {
    /// Both runs behaved alike (or the one run broke no invariant).
    Alike,
    /// They differ as a known difference says they may.
    Explained { id: String },
    /// They differ, and nothing explains it.
    Differs {
        difference: Difference,
        error: Option<String>,
    },
    /// The one run broke invariants.
    Violates { violations: Vec<Violation> },
    /// Every run failed (an error of the harness or of every proxier alike).
    Failed { errors: Vec<String> },
    /// A proxier cannot take the case (a setting it has no way to express).
    Refused { reason: String },
}

/// One case: which, what it was, how it ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseResult {
    pub case: u64,
    pub name: String,
    pub verdict: CaseVerdict,
    /// Wall time of its runs (started at once), seconds.
    pub seconds: f64,
    /// The case as run, in the library's form, when it did not end alike or explained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    /// Each run's observation (YAML), when it did not end alike or explained.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observations: Vec<String>,
}

impl CaseResult {
    /// What the case found, in terms that survive shrinking and group alike findings: each
    /// differing probe's signature (without its name), or each broken invariant.
    pub fn finding_key(&self) -> Option<String> {
        match &self.verdict {
            CaseVerdict::Differs { difference, .. } => {
                let mut parts: Vec<String> = difference
                    .signatures
                    .iter()
                    .map(|(subject, s)| {
                        let kind = subject.split_whitespace().next().unwrap_or(subject);
                        format!("{kind}: {s}")
                    })
                    .collect();
                parts.sort();
                parts.dedup();
                Some(parts.join(" | "))
            }
            CaseVerdict::Violates { violations } => {
                let mut ids: Vec<&str> = violations.iter().map(|v| v.invariant.as_str()).collect();
                ids.sort();
                ids.dedup();
                Some(format!("invariants: {}", ids.join(", ")))
            }
            _ => None,
        }
    }
}

/// The scenario of case `case` of a plan.
fn scenario_of(plan: &Plan<'_>, case: u64) -> Scenario {
    match &plan.cases {
        Cases::Files(files) => files[case as usize].1.clone(),
        _ => plan.generator.case(plan.seed, case),
    }
}

/// The case numbers a plan runs, in order, this shard's only; `None` for "until the budget".
fn case_numbers<'a>(plan: &'a Plan<'_>) -> Box<dyn Iterator<Item = u64> + 'a> {
    let all: Box<dyn Iterator<Item = u64>> = match &plan.cases {
        Cases::Generated { count: Some(n) } => Box::new(0..*n),
        Cases::Generated { count: None } => Box::new(0..),
        Cases::Listed(cases) => Box::new(cases.clone().into_iter()),
        Cases::Files(files) => Box::new(0..files.len() as u64),
    };
    match plan.shard {
        Some(shard) => Box::new(all.filter(move |c| shard.holds(*c as usize))),
        None => all,
    }
}

/// Runs every case of `plan` (or as many as its budget allows), calling `progress` as each
/// ends (`progress` also hears how many have ended); the results in case order.
pub fn explore(
    plan: &Plan<'_>,
    progress: &mut dyn FnMut(&CaseResult, usize),
) -> Result<Vec<CaseResult>> {
    let deadline = plan.budget.map(|b| Instant::now() + b);
    let mut numbers = case_numbers(plan).peekable();
    let mut results = Vec::new();
    // Cases are made a chunk at a time (a budget may stop anywhere); within a chunk every run
    // starts as soon as a worker is free.
    const CHUNK: usize = 64;
    while numbers.peek().is_some() {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let batch: Vec<u64> = numbers.by_ref().take(CHUNK).collect();
        let scenarios: Vec<Scenario> = batch.iter().map(|c| scenario_of(plan, *c)).collect();
        let done_before = results.len();
        let mut ended = 0;
        let chunk = run_cases_until(plan, &scenarios, deadline, &mut |i, r| {
            ended += 1;
            let r = CaseResult {
                case: batch[i],
                ..r.clone()
            };
            progress(&r, done_before + ended);
        })?;
        for (i, r) in chunk {
            results.push(CaseResult {
                case: batch[i],
                ..r
            });
        }
    }
    Ok(results)
}

/// Runs `scenarios` against every proxier of `plan` and judges each, in their order.
pub(crate) fn run_cases(plan: &Plan<'_>, scenarios: &[Scenario]) -> Result<Vec<CaseResult>> {
    Ok(run_cases_until(plan, scenarios, None, &mut |_, _| {})?
        .into_iter()
        .map(|(_, r)| r)
        .collect())
}

/// Runs `scenarios` against every proxier of `plan`, each run as soon as a worker is free,
/// judging each case as its last run ends (`ended` hears it: its index and result); none
/// started after `deadline`. The cases whose runs all ended, by index, in order.
fn run_cases_until(
    plan: &Plan<'_>,
    scenarios: &[Scenario],
    deadline: Option<Instant>,
    ended: &mut dyn FnMut(usize, &CaseResult),
) -> Result<Vec<(usize, CaseResult)>> {
    let mut done: BTreeMap<usize, CaseResult> = BTreeMap::new();
    let mut jobs = Vec::new();
    let mut owners = Vec::new();
    for (i, s) in scenarios.iter().enumerate() {
        let problem = plan
            .proxiers
            .iter()
            .find_map(|p| crate::run::refusal(s, *p).err());
        if let Some(e) = problem {
            let r = case_result(
                s,
                Vec::new(),
                CaseVerdict::Refused {
                    reason: format!("{e:#}"),
                },
                0.0,
            )?;
            ended(i, &r);
            done.insert(i, r);
            continue;
        }
        for p in &plan.proxiers {
            jobs.push(Job {
                scenario: s,
                proxier: *p,
            });
            owners.push(i);
        }
    }
    let mut started_at: BTreeMap<usize, Instant> = BTreeMap::new();
    let mut outcomes: BTreeMap<usize, Vec<(usize, Outcome)>> = BTreeMap::new();
    let mut failure = None;
    parallel::run_jobs(&jobs, plan.workers, plan.probe_timeout, &mut |event| {
        match event {
            Event::Started(j) => {
                started_at.entry(owners[j]).or_insert_with(Instant::now);
            }
            Event::Finished(f) => {
                let case = owners[f.index];
                let outcome = match &f.outcome {
                    Ok(run) => Outcome::Ran(run.observation.clone()),
                    Err(e) => Outcome::Failed(format!("{e:#}")),
                };
                let runs = outcomes.entry(case).or_default();
                runs.push((f.index, outcome));
                if runs.len() == plan.proxiers.len() {
                    runs.sort_by_key(|(j, _)| *j);
                    let runs: Vec<Outcome> = outcomes
                        .remove(&case)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(_, o)| o)
                        .collect();
                    let seconds = started_at
                        .get(&case)
                        .map_or(0.0, |t| t.elapsed().as_secs_f64());
                    match judged(plan, &scenarios[case], runs, seconds) {
                        Ok(r) => {
                            ended(case, &r);
                            done.insert(case, r);
                        }
                        Err(e) => failure = Some(e),
                    }
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return After::StopAfterThis;
                }
            }
        }
        After::Continue
    })?;
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(done.into_iter().collect())
}

/// A case's result from its runs (one per proxier, in the plan's order).
fn judged(plan: &Plan<'_>, s: &Scenario, runs: Vec<Outcome>, seconds: f64) -> Result<CaseResult> {
    let observations = runs
        .iter()
        .map(|o| match o {
            Outcome::Ran(obs) => obs.to_yaml(),
            Outcome::Failed(e) => Ok(format!("error: {e}\n")),
        })
        .collect::<Result<Vec<_>>>()?;
    let verdict = judge(plan, s, runs)?;
    case_result(s, observations, verdict, seconds)
}

/// A result, keeping the case and its observations only when they are worth a look.
fn case_result(
    s: &Scenario,
    observations: Vec<String>,
    verdict: CaseVerdict,
    seconds: f64,
) -> Result<CaseResult> {
    let interesting = matches!(
        verdict,
        CaseVerdict::Differs { .. } | CaseVerdict::Violates { .. } | CaseVerdict::Failed { .. }
    );
    Ok(CaseResult {
        case: 0,
        name: s.name.clone(),
        seconds,
        scenario: if interesting {
            Some(library_yaml(s, "")?)
        } else {
            None
        },
        observations: if interesting {
            observations
        } else {
            Vec::new()
        },
        verdict,
    })
}

/// The verdict on the runs of one case (one per proxier, in the plan's order).
fn judge(plan: &Plan<'_>, s: &Scenario, outcomes: Vec<Outcome>) -> Result<CaseVerdict> {
    let errors: Vec<String> = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Failed(e) => Some(e.clone()),
            Outcome::Ran(_) => None,
        })
        .collect();
    if errors.len() == outcomes.len() {
        return Ok(CaseVerdict::Failed { errors });
    }
    match outcomes.as_slice() {
        [Outcome::Ran(run)] => {
            let violations = invariants::check(s, run);
            Ok(if violations.is_empty() {
                CaseVerdict::Alike
            } else {
                CaseVerdict::Violates { violations }
            })
        }
        [a, b] => match compare(s, a, b)? {
            None => Ok(CaseVerdict::Alike),
            Some(difference) => {
                let judged = |p: &dyn NodeProgrammer| Judged::of(&p.expectations_of());
                let error = errors.first().map(String::as_str);
                match plan.known.explaining(
                    s,
                    &judged(plan.proxiers[0]),
                    &judged(plan.proxiers[1]),
                    &difference,
                    error,
                ) {
                    Some(known) => Ok(CaseVerdict::Explained {
                        id: known.id.clone(),
                    }),
                    None => Ok(CaseVerdict::Differs {
                        difference,
                        error: errors.first().cloned(),
                    }),
                }
            }
        },
        _ => anyhow::bail!(
            "{}: {} runs for {} proxiers",
            s.name,
            outcomes.len(),
            plan.proxiers.len()
        ),
    }
}

/// The signature of one subject of a difference, for goals of shrinking.
pub fn signature_of(d: &Difference, subject: &str) -> Option<Signature> {
    d.signatures.get(subject).cloned()
}
