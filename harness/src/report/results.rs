//! What one `kpct run` produced, as every output ([`super::table`], [`super::junit`],
//! [`super::document`], [`super::json`]) reads it.

use crate::document::ProbeObservation;
use crate::document::StepObservation;
use crate::provenance::Environment;
use crate::run::ScenarioRun;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// A scenario × proxier run that could not complete (setup or programming failed).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunError {
    pub scenario: String,
    pub proxier: String,
    pub message: String,
    /// Until it failed.
    pub elapsed: Duration,
}

/// A scenario × proxier run this kernel cannot hold (no SCTP, no IP_VS): reported as not run
/// here, never as a pass and never left out.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NotRun {
    pub scenario: String,
    pub proxier: String,
    /// What it needs and why this kernel lacks it.
    pub reason: String,
}

/// Every run of one invocation, in the order they ran, and where they ran.
#[derive(Debug, Clone)]
pub struct Results {
    pub runs: Vec<ScenarioRun>,
    pub errors: Vec<RunError>,
    /// Runs this kernel cannot hold.
    pub not_run: Vec<NotRun>,
    pub environment: Environment,
    /// Scenario name → the file it came from, for the `kpct trace` command of a failing probe.
    pub files: BTreeMap<String, PathBuf>,
    /// Proxier label → the `--proxier` spec that builds it again (`NAME=SPEC` when named), for
    /// the suggested commands; a label missing here is its own spec.
    pub specs: BTreeMap<String, String>,
    pub started: SystemTime,
    /// The whole invocation, wall clock.
    pub elapsed: Duration,
    /// Failures a baseline accepts (`kpct run --baseline`), as (scenario, proxier, testcase:
    /// a probe's name, `STEP/converged` or `setup`): JUnit reports them skipped, not failed.
    pub accepted: std::collections::BTreeSet<(String, String, String)>,
    /// Failing probes traced again for the report's pictures (`kpct run --report`).
    pub traced: Vec<super::traced::TracedFailure>,
}

impl Results {
    /// Results of `runs` and `errors` on `environment`, with no files known and no time spent
    /// (what a caller that only renders needs: tests, `soak`).
    pub fn new(runs: Vec<ScenarioRun>, errors: Vec<RunError>, environment: Environment) -> Self {
        Results {
            runs,
            errors,
            not_run: Vec::new(),
            environment,
            files: BTreeMap::new(),
            specs: BTreeMap::new(),
            started: SystemTime::UNIX_EPOCH,
            elapsed: Duration::ZERO,
            accepted: Default::default(),
            traced: Vec::new(),
        }
    }

    /// The command that fires `probe` of `run` again with kernel tracing on (see
    /// [`crate::trace`]), ready to paste into a shell at the repository's root.
    pub fn trace_command(&self, run: &ScenarioRun, probe: &str) -> String {
        let scenario = &run.observation.scenario;
        let file = self
            .files
            .get(scenario)
            .cloned()
            .unwrap_or_else(|| PathBuf::from(format!("scenarios/{scenario}.yaml")));
        let (probe, step) = match super::probe_at(run, probe) {
            (name, Some(n)) => (name, format!(" --step {n}")),
            (name, None) => (name, String::new()),
        };
        format!(
            "sudo ci/kpct.sh trace {} {}{step} --proxier {}",
            shell_word(&file.display().to_string()),
            shell_word(probe),
            shell_word(
                self.specs
                    .get(&run.observation.proxier)
                    .unwrap_or(&run.observation.proxier)
            )
        )
    }

    /// Every probe with a violated expectation, with its run, in run order.
    pub fn failing(&self) -> Vec<(&ScenarioRun, &ProbeObservation)> {
        self.runs
            .iter()
            .flat_map(|r| r.observation.all_probes().map(move |p| (r, p)))
            .filter(|(r, p)| !super::probe_violations(r, &p.probe).is_empty())
            .collect()
    }

    /// Every step whose convergence check failed, with its run, in run order.
    pub fn not_converged(&self) -> Vec<(&ScenarioRun, &StepObservation)> {
        self.runs
            .iter()
            .flat_map(|r| r.observation.steps.iter().map(move |s| (r, s)))
            .filter(|(r, s)| super::not_converged(r, s))
            .collect()
    }

    /// Probes that ran and failed, convergence checks made and failed, runs with a violation
    /// neither owns, runs that errored.
    pub fn counts(&self) -> Counts {
        Counts {
            probes: self
                .runs
                .iter()
                .map(|r| r.observation.all_probes().count())
                .sum(),
            failed: self.failing().len(),
            convergence_checks: self.runs.iter().map(|r| r.observation.steps.len()).sum(),
            not_converged: self.not_converged().len(),
            other: self
                .runs
                .iter()
                .filter(|r| !super::run_violations(r).is_empty())
                .count(),
            errored: self.errors.len(),
            not_run: self.not_run.len(),
        }
    }

    /// The exit status every output's verdict agrees with: 1 when anything failed or errored,
    /// else 3 when some run could not run on this kernel, else 0.
    pub fn exit_code(&self) -> i32 {
        let counts = self.counts();
        if counts.any_failure() {
            1
        } else if counts.not_run > 0 {
            NOT_RUN_EXIT
        } else {
            0
        }
    }
}

/// The exit status of a run whose every run that ran passed, but some could not run here.
pub const NOT_RUN_EXIT: i32 = 3;

/// ISO 8601 in UTC, `2026-12-03T22:22:36Z`.
pub fn timestamp(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days, for days since 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub probes: usize,
    /// Probes with a violated expectation.
    pub failed: usize,
    /// One per step of every run: does every node hold what a fresh sync of its state holds.
    pub convergence_checks: usize,
    pub not_converged: usize,
    /// Runs with a violation no probe or convergence check owns.
    pub other: usize,
    pub errored: usize,
    /// Runs this kernel cannot hold (see [`NotRun`]).
    pub not_run: usize,
}

impl Counts {
    /// Whether anything failed or errored: the one rule every output and the exit status
    /// follow.
    pub fn any_failure(&self) -> bool {
        self.failed + self.not_converged + self.other + self.errored > 0
    }
}

/// `word` as one shell word: as it is when that is safe, else single-quoted.
pub fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@,+".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::{shell_word, timestamp};
    use std::time::{Duration, SystemTime};

    #[test]
    fn timestamps_are_utc_calendar_dates() {
        let at = |s: u64| timestamp(SystemTime::UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_796_336_556), "2026-12-03T22:22:36Z");
    }

    #[test]
    fn shell_words_survive_a_shell() {
        assert_eq!(shell_word("kube-proxy-iptables"), "kube-proxy-iptables");
        assert_eq!(shell_word("exec:/p --x"), "'exec:/p --x'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
