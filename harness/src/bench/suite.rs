//! `kpct bench suite`: every bundled scenario against each proxier, timed the way `kpct run`
//! runs them ([`crate::run::run_scenario`]: topology, programming, backends, probes, teardown).

use super::{human, median};
use crate::proxier::Proxier;
use crate::scenario::Scenario;
use anyhow::{anyhow, Result};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What `kpct bench suite` runs.
#[derive(Debug, Clone)]
pub struct SuiteOptions {
    /// Scenario files or globs (default `scenarios/*.yaml`).
    pub patterns: Vec<String>,
    /// Runs of each scenario × proxier; a scenario's time is the median of its runs.
    pub rounds: usize,
    pub probe_timeout: Duration,
}

impl Default for SuiteOptions {
    fn default() -> Self {
        SuiteOptions {
            patterns: vec![crate::scenario::BUNDLED.into()],
            rounds: 1,
            probe_timeout: Duration::from_secs(2),
        }
    }
}

/// One scenario's time against one proxier.
#[derive(Debug, Clone)]
pub struct ScenarioTime {
    pub scenario: String,
    /// Median of the rounds.
    pub time: Duration,
    /// Rounds with violated expectations.
    pub failed: usize,
    /// Rounds that ended in an error, with the first message.
    pub errors: usize,
    pub first_error: Option<String>,
}

/// Every scenario against one proxier.
#[derive(Debug, Clone)]
pub struct ProxierTimes {
    pub proxier: String,
    /// Wall time of all runs, divided by the number of rounds.
    pub total: Duration,
    pub scenarios: Vec<ScenarioTime>,
}

/// Runs every scenario against `proxier` `rounds` times (progress on stderr).
pub async fn time_proxier<P: Proxier + ?Sized>(
    scenarios: &[Scenario],
    proxier: &P,
    opts: &SuiteOptions,
) -> Result<ProxierTimes> {
    let rounds = opts.rounds.max(1);
    let started = Instant::now();
    let mut out = Vec::new();
    for (i, scenario) in scenarios.iter().enumerate() {
        let mut times = Vec::new();
        let (mut failed, mut errors, mut first_error) = (0, 0, None);
        for _ in 0..rounds {
            let t = Instant::now();
            match crate::run::run_scenario(scenario, proxier, opts.probe_timeout).await {
                Ok(run) => failed += usize::from(!run.violations.is_empty()),
                Err(e) => {
                    errors += 1;
                    first_error.get_or_insert_with(|| format!("{e:#}"));
                }
            }
            times.push(t.elapsed());
        }
        let time = median(&times).unwrap_or_default();
        eprintln!(
            "bench suite: [{:>3}/{}] {} × {}: {}",
            i + 1,
            scenarios.len(),
            scenario.name,
            proxier.name(),
            human(time)
        );
        out.push(ScenarioTime {
            scenario: scenario.name.clone(),
            time,
            failed,
            errors,
            first_error,
        });
    }
    Ok(ProxierTimes {
        proxier: proxier.name().to_string(),
        total: started.elapsed() / rounds as u32,
        scenarios: out,
    })
}

/// Loads the scenarios of `opts`, times them against every proxier and renders the summary.
pub async fn suite(
    proxiers: &[Box<dyn Proxier + Send + Sync>],
    opts: &SuiteOptions,
) -> Result<String> {
    let scenarios = load_all(&crate::scenario::files(&opts.patterns)?)?;
    let mut results = Vec::new();
    for proxier in proxiers {
        results.push(time_proxier(&scenarios, proxier.as_ref(), opts).await?);
    }
    Ok(render(&results, opts.rounds.max(1)))
}

fn load_all(files: &[PathBuf]) -> Result<Vec<Scenario>> {
    files
        .iter()
        .map(|f| crate::scenario::load(f).map_err(|e| anyhow!("{e}")))
        .collect()
}

/// Per proxier: total, and the per-scenario min / median / max (naming the extremes), then the
/// slowest scenarios.
pub fn render(results: &[ProxierTimes], rounds: usize) -> String {
    let mut out = String::new();
    let count = results.first().map_or(0, |r| r.scenarios.len());
    let _ = writeln!(
        out,
        "bench suite: {count} scenarios × {} proxier(s), {rounds} round(s) (a scenario's time: \
         topology, programming, backends, probes, teardown)",
        results.len()
    );
    for r in results {
        let times: Vec<Duration> = r.scenarios.iter().map(|s| s.time).collect();
        let min = r.scenarios.iter().min_by_key(|s| s.time);
        let max = r.scenarios.iter().max_by_key(|s| s.time);
        let failed = r.scenarios.iter().filter(|s| s.failed > 0).count();
        let errors = r.scenarios.iter().filter(|s| s.errors > 0).count();
        let _ = writeln!(
            out,
            "  {:<20} total {:>8}   per scenario: min {} ({}), median {}, max {} ({})",
            r.proxier,
            human(r.total),
            min.map_or("-".into(), |s| human(s.time)),
            min.map_or("-", |s| s.scenario.as_str()),
            median(&times).map_or("-".into(), human),
            max.map_or("-".into(), |s| human(s.time)),
            max.map_or("-", |s| s.scenario.as_str()),
        );
        if failed + errors > 0 {
            let _ = writeln!(
                out,
                "  {:<20} {failed} scenario(s) with violated expectations, {errors} with errors",
                ""
            );
        }
        let mut slowest: Vec<&ScenarioTime> = r.scenarios.iter().collect();
        slowest.sort_by_key(|s| std::cmp::Reverse(s.time));
        let list: Vec<String> = slowest
            .iter()
            .take(5)
            .map(|s| format!("{} {}", s.scenario, human(s.time)))
            .collect();
        let _ = writeln!(out, "  {:<20} slowest: {}", "", list.join(", "));
        for s in r.scenarios.iter().filter(|s| s.first_error.is_some()) {
            let _ = writeln!(
                out,
                "  {:<20} ERROR {}: {}",
                "",
                s.scenario,
                s.first_error.as_deref().unwrap_or_default()
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_names_extremes_and_median() {
        let t = |name: &str, ms: u64| ScenarioTime {
            scenario: name.into(),
            time: Duration::from_millis(ms),
            failed: 0,
            errors: 0,
            first_error: None,
        };
        let out = render(
            &[ProxierTimes {
                proxier: "kube-proxy-iptables".into(),
                total: Duration::from_millis(600),
                scenarios: vec![t("a", 100), t("b", 300), t("c", 200)],
            }],
            1,
        );
        assert!(out.contains("3 scenarios × 1 proxier(s)"), "{out}");
        assert!(
            out.contains("min 100.0 ms (a), median 200.0 ms, max 300.0 ms (b)"),
            "{out}"
        );
        assert!(
            out.contains("slowest: b 300.0 ms, c 200.0 ms, a 100.0 ms"),
            "{out}"
        );
    }
}
