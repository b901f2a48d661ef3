//! Results of `kpct run`: the table it prints ([`table`]), the JUnit XML of `--junit`
//! ([`junit`]) and the Markdown/HTML document of `--report` ([`document`]).

pub mod document;
pub mod junit;
pub mod markup;

pub use junit::junit;

use crate::run::ScenarioRun;
use std::fmt::Write as _;

/// The violated-expectation lines of `run` that concern probe `probe`.
pub fn probe_violations<'a>(run: &'a ScenarioRun, probe: &str) -> Vec<&'a String> {
    let tag = format!("probe `{probe}`");
    run.violations.iter().filter(|v| v.contains(&tag)).collect()
}

/// One row per probe shot outcome: scenario, proxier, probe, verdict, observed translation, and
/// PASS/FAIL against the scenario's declared expectations; the summary also counts the
/// `errored` scenario runs that produced no observation.
pub fn table(runs: &[ScenarioRun], errored: usize) -> String {
    let mut rows: Vec<[String; 6]> = Vec::new();
    for run in runs {
        let obs = &run.observation;
        for probe in &obs.probes {
            let failed = !probe_violations(run, &probe.probe).is_empty();
            let shots = if probe.shots.is_empty() {
                probe.outcomes.clone().unwrap_or_default()
            } else {
                probe.shots.clone()
            };
            let verdicts: Vec<String> = dedup(shots.iter().map(|s| format!("{:?}", s.verdict)));
            let seen: Vec<String> =
                dedup(shots.iter().map(|s| match (&s.backend, &s.backend_saw) {
                    // One entry per distinct path: each shot has its own source port.
                    (Some(b), Some(saw)) => {
                        format!("{b}: {}", saw.replace(&format!(":{} ", s.sport), ":* "))
                    }
                    _ => s.reply.clone().unwrap_or_else(|| "-".into()),
                }));
            rows.push([
                obs.scenario.clone(),
                obs.proxier.clone(),
                probe.probe.clone(),
                verdicts.join(", "),
                seen.join("; "),
                if failed { "FAIL".into() } else { "pass".into() },
            ]);
        }
    }
    let header = [
        "scenario", "proxier", "probe", "verdict", "observed", "result",
    ];
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(cell.len()).min(70);
        }
    }
    let mut out = String::new();
    if rows.is_empty() {
        let _ = writeln!(out, "no probe ran");
        let _ = writeln!(out, "{}", summary(0, 0, errored));
        return out;
    }
    let line = |out: &mut String, cells: &[String]| {
        let mut parts = Vec::new();
        for (cell, w) in cells.iter().zip(&widths) {
            parts.push(format!("{cell:<w$}", w = *w));
        }
        let _ = writeln!(out, "{}", parts.join("  ").trim_end());
    };
    line(&mut out, &header.map(String::from));
    line(
        &mut out,
        &widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>(),
    );
    for row in &rows {
        line(&mut out, row);
    }
    let failed = rows.iter().filter(|r| r[5] == "FAIL").count();
    let _ = writeln!(out, "\n{}", summary(rows.len(), failed, errored));
    for run in runs {
        for v in &run.violations {
            let _ = writeln!(out, "  FAIL {v}");
        }
    }
    out
}

/// `N probe(s), P passed, F failed`, and the runs that could not run at all when there are.
fn summary(probes: usize, failed: usize, errored: usize) -> String {
    let mut s = format!(
        "{probes} probe(s), {} passed, {failed} failed",
        probes - failed
    );
    if errored > 0 {
        s.push_str(&format!("; {errored} scenario run(s) errored (below)"));
    }
    s
}

fn dedup(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}
