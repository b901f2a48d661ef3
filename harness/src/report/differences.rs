//! The report's side-by-side table when one run holds several proxiers (two kube-proxy
//! versions, a proxier and its next build): every probe and convergence check whose outcome
//! differs between them on the same scenario, one column per proxier.
//!
//! Outcomes are compared as sets of distinct shot outcomes (verdict, backend, source, reply):
//! one proxier's round robin and another's random choice that reach the same backends behave
//! alike, and only a difference in what happened is listed.

use super::markup::{code, text, Block, Line};
use super::results::Results;
use super::{converged_name, dedup, probe_violations, shots, spelled};
use crate::document::{ProbeObservation, ShotObservation};
use crate::run::ScenarioRun;
use std::collections::BTreeSet;

/// One probe's or convergence check's outcome under one proxier.
struct Outcome {
    /// What is compared.
    behaviour: BTreeSet<String>,
    /// Whether an expectation failed on it.
    failed: bool,
}

/// The section, when the results hold two proxiers or more; nothing otherwise.
pub fn section(results: &Results) -> Vec<Block> {
    let runs = &results.runs;
    let proxiers = dedup(runs.iter().map(|r| r.observation.proxier.clone()));
    let scenarios = dedup(runs.iter().map(|r| r.observation.scenario.clone()));
    if proxiers.len() < 2 {
        return Vec::new();
    }
    let mut rows = Vec::new();
    for scenario in &scenarios {
        let of: Vec<Vec<(String, Outcome)>> = proxiers
            .iter()
            .map(|p| {
                runs.iter()
                    .find(|r| &r.observation.scenario == scenario && &r.observation.proxier == p)
                    .map(outcomes)
                    .unwrap_or_default()
            })
            .collect();
        let checks = dedup(of.iter().flatten().map(|(check, _)| check.clone()));
        for check in checks {
            let cells: Vec<Option<&Outcome>> = of
                .iter()
                .map(|o| o.iter().find(|(c, _)| *c == check).map(|(_, o)| o))
                .collect();
            let first = cells[0].map(|o| &o.behaviour);
            if cells.iter().all(|c| c.map(|o| &o.behaviour) == first) {
                continue;
            }
            let mut row: Vec<Line> =
                vec![vec![code(scenario.as_str())], vec![code(check.as_str())]];
            row.extend(cells.iter().map(|c| vec![text(cell(*c))]));
            rows.push(row);
        }
    }
    let mut out = vec![Block::Heading(
        2,
        vec![text("Differences between proxiers")],
    )];
    if rows.is_empty() {
        out.push(Block::Para(vec![text(format!(
            "Every probe and convergence check had the same outcome under each of the {} \
             proxiers.",
            proxiers.len()
        ))]));
        return out;
    }
    out.push(Block::Para(vec![text(
        "Each probe or convergence check whose outcome differs between the proxiers on one \
         scenario. Outcomes are compared as sets (the same backends reached in another order \
         are no difference); FAIL marks a failed expectation, — a check the proxier did not run.",
    )]));
    let mut head = vec!["scenario".to_string(), "check".to_string()];
    head.extend(proxiers.iter().cloned());
    out.push(Block::Table { head, rows });
    out
}

fn cell(outcome: Option<&Outcome>) -> String {
    let Some(o) = outcome else {
        return "—".to_string();
    };
    let shown = o.behaviour.iter().cloned().collect::<Vec<_>>().join("; ");
    if o.failed {
        format!("FAIL: {shown}")
    } else {
        shown
    }
}

/// Each probe's and step's convergence check's outcome in `run`, in the run's order.
fn outcomes(run: &ScenarioRun) -> Vec<(String, Outcome)> {
    let obs = &run.observation;
    let probe = |p: &ProbeObservation| {
        (
            p.probe.clone(),
            Outcome {
                behaviour: shots(p).iter().map(shot).collect(),
                failed: !probe_violations(run, &p.probe).is_empty(),
            },
        )
    };
    let mut out: Vec<(String, Outcome)> = obs.probes.iter().map(probe).collect();
    for step in &obs.steps {
        let behaviour = if step.converged {
            BTreeSet::from(["converged".to_string()])
        } else {
            step.not_converged.iter().cloned().collect()
        };
        out.push((
            converged_name(&step.step),
            Outcome {
                behaviour,
                failed: !step.converged,
            },
        ));
        out.extend(step.probes.iter().map(probe));
    }
    out
}

/// `delivered → web-1, source preserved, reply from 10.96.0.10:80`.
fn shot(s: &ShotObservation) -> String {
    let mut out = spelled(s.verdict);
    if let Some(b) = &s.backend {
        out.push_str(&format!(" → {b}"));
    }
    if let Some(source) = &s.source {
        out.push_str(&format!(", source {source}"));
    }
    if let Some(reply) = &s.reply {
        out.push_str(&format!(", reply {reply}"));
    }
    out
}
