//! Failing probes traced again for the report: the first failing probe of each failing run,
//! fired once more in a fresh cluster of the same scenario and proxier with kernel tracing on
//! (as `kpct trace` does), and drawn ([`crate::report::picture`]).

use crate::operations::parallel::Job;
use crate::report::picture::Picture;
use crate::report::traced::TracedFailure;
use crate::report::Results;
use std::time::Duration;

/// Traces the first failing probe of each run that has one, up to `limit` runs, in run order;
/// `before` is told each before it is traced (for progress).
pub async fn trace_failures(
    results: &Results,
    jobs: &[Job<'_>],
    limit: usize,
    probe_timeout: Duration,
    mut before: impl FnMut(&str, &str, &str),
) -> Vec<TracedFailure> {
    let mut firsts: Vec<(&crate::run::ScenarioRun, &crate::document::ProbeObservation)> =
        Vec::new();
    for (run, probe) in results.failing() {
        if !firsts.iter().any(|(r, _)| std::ptr::eq(*r, run)) {
            firsts.push((run, probe));
        }
    }
    let mut out = Vec::new();
    for (run, probe) in firsts.into_iter().take(limit) {
        let obs = &run.observation;
        let Some(job) = jobs
            .iter()
            .find(|j| j.scenario.name == obs.scenario && j.proxier.label() == obs.proxier)
        else {
            continue;
        };
        before(&obs.scenario, &obs.proxier, &probe.probe);
        let (name, step) = crate::report::probe_at(run, &probe.probe);
        let violations: Vec<String> = crate::report::probe_violations(run, &probe.probe)
            .into_iter()
            .cloned()
            .collect();
        let picture = crate::trace::trace(job.scenario, step, name, job.proxier, probe_timeout)
            .await
            .map(|trace| Picture::from_trace(&trace, &violations))
            .map_err(|e| format!("{e:#}"));
        out.push(TracedFailure {
            scenario: obs.scenario.clone(),
            proxier: obs.proxier.clone(),
            probe: probe.probe.clone(),
            picture,
        });
    }
    out
}
