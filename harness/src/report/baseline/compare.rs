//! Two runs' checks side by side: what regressed, what was fixed, what still fails, what is new
//! or gone, and what passed (or failed) both times but observed something else.

use super::checks::{CheckKey, CheckResult, Checks, Outcome};
use std::collections::BTreeMap;

/// How a check fared against the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    /// Passed in the baseline, fails (or errors) now: fails the run.
    Regressed,
    /// Not in the baseline and fails now: fails the run (nobody accepted it).
    NewFailure,
    /// Failed in the baseline and still does: reported, accepted.
    StillFailing,
    /// Failed in the baseline, passes now.
    Fixed,
    /// Same result, something else observed (verdicts, backends, differences).
    Changed,
    /// Not in the baseline, passes.
    NewPass,
    /// In the baseline, not run now.
    Gone,
}

impl Change {
    /// Whether it fails a run judged against the baseline.
    pub fn fails(self) -> bool {
        matches!(self, Change::Regressed | Change::NewFailure)
    }

    fn heading(self) -> &'static str {
        match self {
            Change::Regressed => "REGRESSED",
            Change::NewFailure => "NEW FAILURE",
            Change::StillFailing => "still failing (accepted by the baseline)",
            Change::Fixed => "FIXED",
            Change::Changed => "changed observation",
            Change::NewPass => "new, passing",
            Change::Gone => "gone (in the baseline, not run now)",
        }
    }
}

/// One check's change, with both results.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub key: CheckKey,
    pub change: Change,
    pub before: Option<CheckResult>,
    pub after: Option<CheckResult>,
}

/// Every check that is not simply unchanged, in scenario, proxier and check order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Comparison {
    pub entries: Vec<Entry>,
    /// Checks that came out the same.
    pub unchanged: usize,
}

/// `after` judged against `before`.
pub fn compare(before: &Checks, after: &Checks) -> Comparison {
    let mut out = Comparison::default();
    let keys: std::collections::BTreeSet<&CheckKey> =
        before.0.keys().chain(after.0.keys()).collect();
    for key in keys {
        let (b, a) = (before.0.get(key), after.0.get(key));
        let passed = |r: &CheckResult| r.outcome == Outcome::Pass;
        let change = match (b, a) {
            (None, Some(a)) if passed(a) => Change::NewPass,
            (None, Some(_)) => Change::NewFailure,
            (Some(_), None) => Change::Gone,
            (Some(b), Some(a)) => match (passed(b), passed(a)) {
                (true, false) => Change::Regressed,
                (false, true) => Change::Fixed,
                (false, false) => Change::StillFailing,
                (true, true) if b.observed != a.observed => Change::Changed,
                (true, true) => {
                    out.unchanged += 1;
                    continue;
                }
            },
            (None, None) => continue,
        };
        out.entries.push(Entry {
            key: key.clone(),
            change,
            before: b.cloned(),
            after: a.cloned(),
        });
    }
    out
}

impl Comparison {
    /// How many checks changed `change`'s way.
    pub fn count(&self, change: Change) -> usize {
        self.entries.iter().filter(|e| e.change == change).count()
    }

    /// Whether anything fails the run: a regression or a failure the baseline does not hold.
    pub fn fails(&self) -> bool {
        self.entries.iter().any(|e| e.change.fails())
    }

    /// The failures the baseline accepts, as JUnit names them: (scenario, proxier, a probe's
    /// name, `STEP/converged` or `setup`), for [`crate::report::Results::accepted`].
    pub fn accepted(&self) -> std::collections::BTreeSet<(String, String, String)> {
        self.entries
            .iter()
            .filter(|e| e.change == Change::StillFailing)
            .map(|e| {
                let testcase = match &e.key.check {
                    super::Check::Probe(name) => name.clone(),
                    super::Check::Converged(step) => format!("{step}/converged"),
                    super::Check::Run => "setup".to_string(),
                };
                (e.key.scenario.clone(), e.key.proxier.clone(), testcase)
            })
            .collect()
    }

    /// One line of counts.
    pub fn summary(&self) -> String {
        format!(
            "{} regressed, {} new failure(s), {} still failing (accepted), {} fixed, {} changed \
             observation(s), {} new passing, {} gone, {} unchanged",
            self.count(Change::Regressed),
            self.count(Change::NewFailure),
            self.count(Change::StillFailing),
            self.count(Change::Fixed),
            self.count(Change::Changed),
            self.count(Change::NewPass),
            self.count(Change::Gone),
            self.unchanged
        )
    }

    /// Scenario by scenario (and proxier), every changed check with both results; the counts
    /// last.
    pub fn render(&self) -> String {
        let mut by_run: BTreeMap<(&str, &str), Vec<&Entry>> = BTreeMap::new();
        for e in &self.entries {
            by_run
                .entry((&e.key.scenario, &e.key.proxier))
                .or_default()
                .push(e);
        }
        let mut out = String::new();
        for ((scenario, proxier), mut entries) in by_run {
            entries.sort_by_key(|e| e.change);
            out.push_str(&format!("{scenario} × {proxier}\n"));
            for e in entries {
                out.push_str(&format!("  {}: {}\n", e.change.heading(), e.key.check));
                let side = |label: &str, r: &Option<CheckResult>| match r {
                    Some(r) if !r.observed.is_empty() => {
                        format!("    {label}: {} — {}\n", word(r.outcome), r.observed)
                    }
                    Some(r) => format!("    {label}: {}\n", word(r.outcome)),
                    None => String::new(),
                };
                out.push_str(&side("was", &e.before));
                out.push_str(&side("now", &e.after));
            }
        }
        out.push_str(&format!("{}\n", self.summary()));
        out
    }
}

fn word(o: Outcome) -> &'static str {
    match o {
        Outcome::Pass => "pass",
        Outcome::Fail => "fail",
        Outcome::Error => "error",
        Outcome::NotRun => "not run",
    }
}
