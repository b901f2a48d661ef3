//! `kpct bench suite`: every bundled scenario against each proxier (a real kube-proxy beside
//! the built-in of its mode, too), timed the way `kpct run`
//! runs them ([`crate::run::run_scenario`]: topology, programming, backends, probes, teardown),
//! once one run at a time and once on several workers ([`crate::operations::parallel`]), side by side in one
//! run so the ratio is measured on the same machine under the same load; then once more one at a
//! time with every drop waited out to the probe timeout ([`crate::probe::drop_verdicts`] off), for what
//! deciding drops at their verdict saves — and every pass's observations compared with the
//! first's.

use super::{human, median};
use crate::operations::parallel::{self, After, Event, Job};
use crate::probe::{DropDecision, Patience};
use crate::run::NodeProgrammer;
use crate::scenario::Scenario;
use anyhow::{anyhow, Result};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What `kpct bench suite` runs.
#[derive(Debug, Clone)]
pub struct SuiteOptions {
    /// Scenario files or globs (none: the library, [`crate::scenario::library`]).
    pub patterns: Vec<String>,
    /// Rounds of each pass; a scenario's time is the median of its serial runs.
    pub rounds: usize,
    pub probe_timeout: Duration,
    /// Workers of the parallel pass (the serial pass has one).
    pub workers: usize,
}

impl Default for SuiteOptions {
    fn default() -> Self {
        SuiteOptions {
            patterns: Vec::new(),
            rounds: 1,
            probe_timeout: Duration::from_secs(2),
            workers: parallel::default_workers(),
        }
    }
}

/// One scenario's time against one proxier.
#[derive(Debug, Clone, Default)]
pub struct ScenarioTime {
    pub scenario: String,
    /// Median of the serial rounds.
    pub time: Duration,
    /// Runs (of either pass) with violated expectations.
    pub failed: usize,
    /// Runs (of either pass) that ended in an error, with the first message.
    pub errors: usize,
    pub first_error: Option<String>,
    /// Runs whose observation differs from the first serial run's.
    pub divergent: usize,
    /// The first such run: its round and pass, and how its observation differs.
    pub first_divergence: Option<String>,
    /// Violated expectations of the first run that had any, with its round and pass.
    pub first_violations: Option<String>,
}

/// Every scenario against one proxier.
#[derive(Debug, Clone)]
pub struct ProxierTimes {
    pub proxier: String,
    /// Wall time of all runs one at a time, divided by the number of rounds.
    pub serial: Duration,
    /// The same on [`SuiteOptions::workers`] workers.
    pub parallel: Duration,
    pub workers: usize,
    /// One at a time again, every drop decided at the probe timeout.
    pub serial_waited: Duration,
    /// Shots of the serial pass that ended at their DROP verdict, per round.
    pub drops_at_verdict: usize,
    pub scenarios: Vec<ScenarioTime>,
    /// Every step's sync of all nodes in the serial runs: the update over the stepped nodes,
    /// and the same state programmed into fresh twins (the convergence check's reference).
    pub update_syncs: Vec<Duration>,
    pub fresh_syncs: Vec<Duration>,
}

/// Runs every scenario against `proxier`, serially then in parallel, `rounds` times each
/// (progress on stderr).
pub fn time_proxier(
    scenarios: &[Scenario],
    proxier: &dyn NodeProgrammer,
    opts: &SuiteOptions,
) -> Result<ProxierTimes> {
    let rounds = opts.rounds.max(1);
    let jobs: Vec<Job> = scenarios
        .iter()
        .map(|scenario| Job { scenario, proxier })
        .collect();
    let mut times: Vec<ScenarioTime> = scenarios
        .iter()
        .map(|s| ScenarioTime {
            scenario: s.name.clone(),
            ..ScenarioTime::default()
        })
        .collect();
    let mut serial_samples: Vec<Vec<Duration>> = vec![Vec::new(); scenarios.len()];
    let mut reference: Vec<Option<String>> = vec![None; scenarios.len()];
    let (mut serial, mut parallel_total) = (Duration::ZERO, Duration::ZERO);
    let (mut serial_waited, mut drops_at_verdict) = (Duration::ZERO, 0);
    let (mut update_syncs, mut fresh_syncs) = (Vec::new(), Vec::new());
    let passes = [
        (1, DropDecision::AtVerdict),
        (opts.workers, DropDecision::AtVerdict),
        (1, DropDecision::AtTimeout),
    ];
    for round in 1..=rounds {
        for (pass, (workers, drops)) in passes.into_iter().enumerate() {
            let patience = Patience {
                timeout: opts.probe_timeout,
                drops,
            };
            let waited = if drops == DropDecision::AtTimeout {
                ", drops waited out"
            } else {
                ""
            };
            let started = Instant::now();
            let mut done = 0;
            let finished = parallel::run_jobs(&jobs, workers, patience, &mut |event| {
                if let Event::Finished(f) = event {
                    done += 1;
                    eprintln!(
                        "bench suite: -j {workers}{waited} [{done:>3}/{}] {} × {}: {}",
                        jobs.len(),
                        scenarios[f.index].name,
                        proxier.label(),
                        human(f.elapsed)
                    );
                }
                After::Continue
            })?;
            let wall = started.elapsed();
            let first_pass = pass == 0;
            match pass {
                0 => serial += wall,
                1 => parallel_total += wall,
                _ => serial_waited += wall,
            }
            for f in finished {
                let t = &mut times[f.index];
                if first_pass {
                    serial_samples[f.index].push(f.elapsed);
                }
                match f.outcome {
                    Ok(run) => {
                        if first_pass {
                            update_syncs.extend(&run.timing.step_syncs);
                            fresh_syncs.extend(&run.timing.fresh_syncs);
                            drops_at_verdict += run.drops_at_verdict.len();
                        }
                        let which = format!("round {round}, -j {workers}{waited}");
                        t.failed += usize::from(!run.violations.is_empty());
                        if !run.violations.is_empty() && t.first_violations.is_none() {
                            let texts = run.violations.join("; ");
                            t.first_violations = Some(format!("{which}: {texts}"));
                        }
                        let yaml = run.observation.to_yaml()?;
                        match &reference[f.index] {
                            None => reference[f.index] = Some(yaml),
                            Some(first) if *first != yaml => {
                                t.divergent += 1;
                                t.first_divergence.get_or_insert_with(|| {
                                    let diff = similar::TextDiff::from_lines(first, &yaml)
                                        .unified_diff()
                                        .context_radius(1)
                                        .to_string();
                                    format!("{which}, against round 1's first pass:\n{diff}")
                                });
                            }
                            Some(_) => {}
                        }
                    }
                    Err(e) => {
                        t.errors += 1;
                        t.first_error.get_or_insert_with(|| format!("{e:#}"));
                    }
                }
            }
        }
    }
    for (t, samples) in times.iter_mut().zip(&serial_samples) {
        t.time = median(samples).unwrap_or_default();
    }
    Ok(ProxierTimes {
        proxier: proxier.label(),
        serial: serial / rounds as u32,
        parallel: parallel_total / rounds as u32,
        workers: opts.workers,
        serial_waited: serial_waited / rounds as u32,
        drops_at_verdict: drops_at_verdict / rounds,
        scenarios: times,
        update_syncs,
        fresh_syncs,
    })
}

/// Loads the scenarios of `opts`, times them against every proxier (built-ins, `exec:`,
/// `replay:`, a real kube-proxy: one after the other, so the figures are side by side from one
/// run) and renders the summary.
pub fn suite(proxiers: &[Box<dyn NodeProgrammer>], opts: &SuiteOptions) -> Result<String> {
    let scenarios = load_all(&crate::scenario::files(&opts.patterns)?)?;
    let mut results = Vec::new();
    for proxier in proxiers {
        results.push(time_proxier(&scenarios, proxier.as_ref(), opts)?);
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
        "bench suite: {count} scenarios × {} proxier(s), {rounds} round(s), one run at a time \
         (-j 1), then on {} workers, then one at a time with every drop waited out, in this run \
         (a scenario's time: topology, programming, backends, probes, teardown)",
        results.len(),
        results.first().map_or(0, |r| r.workers)
    );
    for r in results {
        let times: Vec<Duration> = r.scenarios.iter().map(|s| s.time).collect();
        let min = r.scenarios.iter().min_by_key(|s| s.time);
        let max = r.scenarios.iter().max_by_key(|s| s.time);
        let failed = r.scenarios.iter().filter(|s| s.failed > 0).count();
        let errors = r.scenarios.iter().filter(|s| s.errors > 0).count();
        let _ = writeln!(
            out,
            "  {:<20} -j 1 {:>8}   -j {} {:>8}   {:.1}× faster",
            r.proxier,
            human(r.serial),
            r.workers,
            human(r.parallel),
            r.serial.as_secs_f64() / r.parallel.as_secs_f64().max(1e-9),
        );
        let _ = writeln!(
            out,
            "  {:<20} -j 1, drops waited out {:>8}: deciding {} shot(s) at their DROP verdict \
             made -j 1 {:.1}× faster",
            "",
            human(r.serial_waited),
            r.drops_at_verdict,
            r.serial_waited.as_secs_f64() / r.serial.as_secs_f64().max(1e-9),
        );
        let _ = writeln!(
            out,
            "  {:<20} per scenario (-j 1): min {} ({}), median {}, max {} ({})",
            "",
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
        let divergent: Vec<&str> = r
            .scenarios
            .iter()
            .filter(|s| s.divergent > 0)
            .map(|s| s.scenario.as_str())
            .collect();
        let _ = writeln!(
            out,
            "  {:<20} {} scenario(s) observed differently between runs (all passes){}",
            "",
            divergent.len(),
            if divergent.is_empty() {
                String::new()
            } else {
                format!(": {}", divergent.join(", "))
            }
        );
        // Which run, and how: a flake is found from this, not from a count.
        for s in &r.scenarios {
            let heads = [
                ("violated", &s.first_violations),
                ("differs", &s.first_divergence),
            ];
            for (head, text) in heads {
                if let Some(text) = text {
                    let _ = writeln!(out, "  {:<20} {} {head} first in {text}", "", s.scenario);
                }
            }
        }
        if !r.update_syncs.is_empty() {
            let _ =
                writeln!(
                out,
                "  {:<20} step syncs (-j 1, all nodes): {} updates, median {} (max {}); the same \
                 states into fresh nodes: median {} (max {})",
                "",
                r.update_syncs.len(),
                median(&r.update_syncs).map_or("-".into(), human),
                r.update_syncs.iter().max().map_or("-".into(), |d| human(*d)),
                median(&r.fresh_syncs).map_or("-".into(), human),
                r.fresh_syncs.iter().max().map_or("-".into(), |d| human(*d)),
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
            ..ScenarioTime::default()
        };
        let out = render(
            &[ProxierTimes {
                proxier: "kube-proxy-iptables".into(),
                serial: Duration::from_millis(600),
                parallel: Duration::from_millis(200),
                workers: 8,
                serial_waited: Duration::from_millis(900),
                drops_at_verdict: 3,
                scenarios: vec![t("a", 100), t("b", 300), t("c", 200)],
                update_syncs: [30, 40, 50].map(Duration::from_millis).to_vec(),
                fresh_syncs: [20, 30, 40].map(Duration::from_millis).to_vec(),
            }],
            1,
        );
        assert!(out.contains("3 scenarios × 1 proxier(s)"), "{out}");
        assert!(
            out.contains("-j 1 600.0 ms   -j 8 200.0 ms   3.0× faster"),
            "{out}"
        );
        assert!(out.contains("0 scenario(s) observed differently"), "{out}");
        assert!(!out.contains("first in"), "{out}");
        assert!(
            out.contains("drops waited out 900.0 ms: deciding 3 shot(s) at their DROP verdict made -j 1 1.5× faster"),
            "{out}"
        );
        assert!(
            out.contains("3 updates, median 40.0 ms (max 50.0 ms); the same states into fresh nodes: median 30.0 ms (max 40.0 ms)"),
            "{out}"
        );
        assert!(
            out.contains("min 100.0 ms (a), median 200.0 ms, max 300.0 ms (b)"),
            "{out}"
        );
        assert!(
            out.contains("slowest: b 300.0 ms, c 200.0 ms, a 100.0 ms"),
            "{out}"
        );
    }

    /// A flaky scenario is named with the round and pass of its first divergent run, and how
    /// its observation differed; a violated expectation likewise.
    #[test]
    fn render_says_where_a_run_diverged() {
        let out = render(
            &[ProxierTimes {
                proxier: "kube-proxy-ipvs".into(),
                serial: Duration::from_millis(600),
                parallel: Duration::from_millis(200),
                workers: 4,
                serial_waited: Duration::from_millis(900),
                drops_at_verdict: 0,
                scenarios: vec![ScenarioTime {
                    scenario: "transition-many-updates".into(),
                    time: Duration::from_millis(100),
                    failed: 1,
                    divergent: 1,
                    first_divergence: Some(
                        "round 2, -j 4, against round 1's first pass:\n-a\n+b\n".into(),
                    ),
                    first_violations: Some("round 2, -j 4: web-final: reached only web-2".into()),
                    ..ScenarioTime::default()
                }],
                update_syncs: Vec::new(),
                fresh_syncs: Vec::new(),
            }],
            3,
        );
        assert!(
            out.contains("transition-many-updates violated first in round 2, -j 4: web-final: reached only web-2"),
            "{out}"
        );
        assert!(
            out.contains("transition-many-updates differs first in round 2, -j 4, against round 1's first pass:\n-a\n+b"),
            "{out}"
        );
    }
}
