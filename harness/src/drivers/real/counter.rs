//! When an `api:` proxier has synced: the rule for a proxier kpct knows nothing of but a
//! counter of its completed syncs (`--sync-metric`).
//!
//! - **Sent:** every watch the proxier has open has been handed every event of the
//!   publication (the API server tracks each stream, [`apiserver::ApiServer::wait_sent`]);
//!   at the start, the initial state. At least one watch must be open.
//! - **Then two syncs:** from a sample of the counter taken after that, every series of it (one
//!   per IP family, say; a series that appears later counts from 0) grows by two. The first
//!   may have started before the proxier took the events in; the second started after the
//!   first returned, so after the sample. Its caches held the publication then, unless taking
//!   in an event handed to its connection took longer than a whole sync.
//!
//! - **Kicks:** a proxier that syncs only on changes would not sync a second time, so once
//!   the counter has grown and then not moved for [`QUIET`], kpct kicks it (never before its
//!   first growth: a proxier still starting is left alone): it publishes a change of nothing a
//!   proxier programs (an endpoint of a slice whose Service is an ExternalName, which
//!   kube-proxy syncs for). A proxier that ignores kicks must sync periodically instead
//!   (kube-router: `--ipvs-sync-period=1s`). One that does neither never completes the second
//!   sync, and the wait ends with an error saying so. A kick too early costs a sync, never a
//!   wrong answer. A proxier kpct knows (kube-proxy) is synced by a rule of its own
//!   ([`super::sync`]) that needs fewer syncs.

use super::metrics;
use super::process::ProxierProcess;
use crate::netns::Netns;
use anyhow::{bail, Result};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How often the counter is read while nothing else wakes the wait.
const POLL: Duration = Duration::from_millis(50);

/// How long the counter must stay still before kpct kicks the proxier.
const QUIET: Duration = Duration::from_millis(500);

/// How many lines of the proxier's log an error quotes.
const LOG_LINES: usize = 20;

/// Where to read an `api:` proxier's sync counter, and the process behind it.
pub struct CounterWatch<'a> {
    pub netns: &'a Netns,
    pub address: SocketAddr,
    pub metric: &'a str,
    pub process: &'a ProxierProcess,
    pub timeout: Duration,
}

impl CounterWatch<'_> {
    /// The counter now; `None` while nothing serves the metrics yet, or serves them broken (a
    /// metrics server starting or restarting, as kube-router's does, closes connections it
    /// accepted). An exited proxier is an error quoting its log; served metrics without the
    /// counter are counted as no sync (a Prometheus client shows a counter from its first
    /// increment on).
    fn read(&self, waiting_for: &str) -> Result<Option<Series>> {
        self.process.still_running(waiting_for)?;
        Ok(metrics::fetch(self.netns, self.address)
            .ok()
            .flatten()
            .map(|text| counter(&text, self.metric)))
    }

    /// Waits, from when every watch was sent the publication (`sent`, which the caller has
    /// waited for), for two more completed syncs. `started` is when the whole wait began, for
    /// the timeout.
    pub fn two_syncs(
        &self,
        waiting_for: &str,
        started: Instant,
        kick: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()> {
        let mut from: Option<Series> = None;
        let mut last: Option<Series> = None;
        let mut still_since = Instant::now();
        loop {
            let printed = self.process.printed();
            if let Some(now) = self.read(waiting_for)? {
                let moved_since_base = from.as_ref().is_some_and(|base| *base != now);
                if last.as_ref() != Some(&now) {
                    still_since = Instant::now();
                } else if moved_since_base && still_since.elapsed() >= QUIET {
                    kick()?;
                    still_since = Instant::now();
                }
                let base = from.get_or_insert_with(|| now.clone());
                let grown = |(series, value): (&String, &f64)| {
                    *value >= base.get(series).copied().unwrap_or(0.0) + 2.0
                };
                if !now.is_empty() && now.iter().all(grown) {
                    return Ok(());
                }
                last = Some(now);
            }
            if started.elapsed() > self.timeout {
                bail!(
                    "{} did not complete {waiting_for} within {} s: {}; a proxier run by `api:` \
                     must sync at least twice after each change (on kpct's kicks, or \
                     periodically: kube-router's --ipvs-sync-period=1s); its log ends:\n{}",
                    self.process.label(),
                    self.timeout.as_secs(),
                    match (from, last) {
                        (Some(from), Some(last)) => format!(
                            "`{}` went from {from:?} to {last:?} after it was sent every event",
                            self.metric
                        ),
                        _ => format!("its metrics at {} never answered", self.address),
                    },
                    self.process.log_tail(LOG_LINES)
                );
            }
            self.process.wait_output(printed, POLL);
        }
    }
}

/// A counter's value by series (its labels as exposed, `""` for none).
type Series = BTreeMap<String, f64>;

/// The series of `name` in a Prometheus text exposition (none before its first increment).
pub fn counter(text: &str, name: &str) -> Series {
    metrics::samples(text)
        .filter(|(series, _, _)| *series == name)
        .map(|(_, labels, value)| (labels.to_string(), value))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_adds_its_series_and_ignores_look_alikes() {
        let text = "# HELP x_count syncs\n\
                    x_count{family=\"4\"} 3\n\
                    x_count{family=\"6\"} 2\n\
                    x_count_total 100\n\
                    x_sum 0.5\n";
        let x = counter(text, "x_count");
        assert_eq!(
            x.into_iter().collect::<Vec<_>>(),
            [
                ("family=\"4\"".to_string(), 3.0),
                ("family=\"6\"".to_string(), 2.0)
            ]
        );
        assert!(counter(text, "y_count").is_empty());
    }
}
