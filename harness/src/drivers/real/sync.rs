//! When a real kube-proxy has synced, from its metrics ([`super::metrics`]): kube-proxy has no
//! applied-generation signal, so the rules below are derived from what its code does, step by
//! step (pkg/proxy/{iptables,ipvs,nftables}/proxier.go).
//!
//! - **First sync:** every family's proxier has a successful sync (`last_synced > 0`). A
//!   proxier syncs only once its Service and EndpointSlice informers have synced
//!   (`setInitialized`), so that sync holds the whole initial state.
//! - **After a change published at T0:**
//!   1. its trackers have taken in every event of the publication: the change counters have
//!      grown by what the publication delivers. The API server ends every publication with a
//!      no-op event on a marker Service and marker EndpointSlices, which no tracker asks a sync
//!      for; an informer calls its handlers one event at a time, in order, so once the markers
//!      are counted, every earlier event's handler has returned, `Sync()` included;
//!   2. then, for each family: if it queued nothing since T0 (`last_queued < T0`), nothing of
//!      the publication concerned it; otherwise a sync that *started* after its last queued
//!      change has returned. A sync's start is bounded from the histogram: two syncs returned
//!      since a sample taken after the queue time, or one whose end minus its duration is after
//!      it.
//!
//! Metrics are the only signal and nothing announces a change of them, so they are read again
//! whenever the proxier logs a line (it logs its syncs) and otherwise at intervals that grow
//! from [`POLL`] to [`POLL_MAX`] while nothing changes: each read costs the proxier a
//! rendering of every metric, which in an emulated VM is dear.

use super::metrics::{self, Changes, Metrics, SyncMetrics};
use super::process::ProxierProcess;
use crate::netns::Netns;
use anyhow::Result;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The first interval between reads of the metrics while waiting, after a change.
const POLL: Duration = Duration::from_millis(10);

/// The longest interval between reads.
const POLL_MAX: Duration = Duration::from_millis(320);

/// The interval after one of `interval` that saw `changed` or not.
fn next_interval(interval: Duration, changed: bool) -> Duration {
    if changed {
        POLL
    } else {
        (interval * 2).min(POLL_MAX)
    }
}

/// How many lines of the proxier's log an error quotes.
const LOG_LINES: usize = 20;

/// Where to read a proxier's metrics, and the process behind them.
pub struct SyncWatch<'a> {
    pub netns: &'a Netns,
    pub address: SocketAddr,
    pub process: &'a ProxierProcess,
    pub timeout: Duration,
}

/// A metrics sample and when it was asked for (seconds since the epoch).
#[derive(Debug, Clone)]
struct Sample {
    at: f64,
    metrics: Metrics,
}

pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// How long a failed metrics read waits for the proxier's exit before it counts as the error.
const EXIT_AFTER_READ_ERROR: Duration = Duration::from_secs(2);

impl SyncWatch<'_> {
    /// Reads the metrics now; `None` while nothing serves them yet. A proxier that has exited
    /// is an error quoting its log.
    fn sample(&self, waiting_for: &str) -> Result<Option<Sample>> {
        self.process.still_running(waiting_for)?;
        let at = now();
        match metrics::read(self.netns, self.address) {
            Ok(read) => Ok(read.map(|metrics| Sample { at, metrics })),
            // A proxier killed while it answered resets the connection before kpct sees it
            // exit: its exit (awaited, at most a moment) is what to report, not the reset.
            Err(e) => match self.process.wait_exit(EXIT_AFTER_READ_ERROR) {
                Some(_) => self.process.still_running(waiting_for).map(|()| None),
                None => Err(e),
            },
        }
    }

    /// A sync failed since `before` (a family's failure counter grew): kube-proxy retries a
    /// failed sync only at its next change or `syncPeriod` (kpct's: 1 h), so waiting on would
    /// only run into the timeout.
    fn failed_since(
        &self,
        waiting_for: &str,
        before: Option<&Metrics>,
        now: &Sample,
    ) -> Result<()> {
        let failed: Vec<&String> = now
            .metrics
            .families
            .iter()
            .filter(|(family, m)| {
                let earlier = before
                    .and_then(|b| b.families.get(*family))
                    .map_or(0, |b| b.failed_syncs);
                m.failed_syncs > earlier
            })
            .map(|(family, _)| family)
            .collect();
        if failed.is_empty() {
            return Ok(());
        }
        anyhow::bail!(
            "{}'s sync failed while kpct waited for {waiting_for} ({} proxier; it retries only \
             at its next change or sync period); its log ends:\n{}",
            self.process.label(),
            failed
                .iter()
                .map(|f| f.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            self.process.log_tail(LOG_LINES)
        )
    }

    fn timed_out(&self, waiting_for: &str, last: Option<&Sample>) -> anyhow::Error {
        anyhow::anyhow!(
            "{} did not complete {waiting_for} within {} s ({}); its log ends:\n{}",
            self.process.label(),
            self.timeout.as_secs(),
            match last {
                None => format!("its metrics at {} never answered", self.address),
                Some(s) => format!("its metrics: {}", describe(&s.metrics)),
            },
            self.process.log_tail(LOG_LINES)
        )
    }

    /// Waits for the first successful sync of every family in `families` (`IPv4`, `IPv6`), and
    /// of every other family the proxier runs a proxier for: one whose metrics show up, or
    /// both when it logged that it runs dual-stack (v1.34 does on a node whose IPv6 is
    /// disabled: it checks only /proc/net/if_inet6, cmd/kube-proxy/app/server_linux.go).
    pub fn first_sync(&self, families: &[&str]) -> Result<Metrics> {
        let what = "its first sync";
        let started = Instant::now();
        let mut last: Option<Sample> = None;
        let mut interval = POLL;
        loop {
            let printed = self.process.printed();
            if let Some(s) = self.sample(what)? {
                let changed = last.as_ref().is_none_or(|l| l.metrics != s.metrics);
                interval = next_interval(interval, changed);
                self.failed_since(what, None, &s)?;
                let synced = |f: &str| {
                    s.metrics
                        .families
                        .get(f)
                        .is_some_and(|m| m.last_synced > 0.0)
                };
                let dual_stack = self
                    .process
                    .printed_text("kube-proxy running in dual-stack mode");
                let all = families
                    .iter()
                    .copied()
                    .chain(s.metrics.families.keys().map(String::as_str))
                    .chain(dual_stack.then_some(["IPv4", "IPv6"]).into_iter().flatten());
                if all.into_iter().all(synced) {
                    return Ok(s.metrics);
                }
                last = Some(s);
            } else {
                interval = next_interval(interval, false);
            }
            if started.elapsed() > self.timeout {
                return Err(self.timed_out(what, last.as_ref()));
            }
            self.process.wait_output(printed, interval);
        }
    }

    /// The metrics now, to wait from: taken before a publication, they are the baseline of
    /// [`SyncWatch::synced_after`].
    pub fn before_publication(&self) -> Result<Baseline> {
        let what = "its metrics before an update";
        let started = Instant::now();
        loop {
            let printed = self.process.printed();
            if let Some(s) = self.sample(what)? {
                return Ok(Baseline(s));
            }
            if started.elapsed() > self.timeout {
                return Err(self.timed_out(what, None));
            }
            self.process.wait_output(printed, POLL_MAX);
        }
    }

    /// Waits until the proxier has taken in every event of a publication made at `published`
    /// (seconds since the epoch) — its change counters at `baseline`'s plus `delivered` — and
    /// each family that queued a sync for it has completed one started after that.
    ///
    /// When the samples cannot prove it (every sync since the change ran between two samples,
    /// after one that started before it), `kick` publishes a change that asks every family
    /// for one more sync and programs nothing, and returns when it was published and what it
    /// delivers: the sync it causes settles the question.
    pub fn synced_after(
        &self,
        published: f64,
        baseline: Baseline,
        delivered: Changes,
        kick: &mut dyn FnMut() -> Result<(f64, Changes)>,
    ) -> Result<Metrics> {
        let what = "a sync of the update";
        let mut wanted = baseline.0.metrics.changes + delivered;
        let mut published = published;
        let started = Instant::now();
        let mut samples = vec![baseline.0];
        // Since when no sync has returned: a proof that has not come by then will not come
        // without a kick (see [`quiet_enough`]).
        let mut quiet_since = Instant::now();
        let mut interval = POLL;
        loop {
            let printed = self.process.printed();
            if let Some(s) = self.sample(what)? {
                self.failed_since(what, Some(&samples[0].metrics), &s)?;
                let covers = s.metrics.changes.covers(&wanted);
                let moved = samples
                    .last()
                    .is_some_and(|p| syncs(&p.metrics) != syncs(&s.metrics));
                let changed = samples.last().is_some_and(|p| p.metrics != s.metrics);
                interval = next_interval(interval, changed);
                samples.push(s);
                if covers {
                    if all_synced(&samples, published) {
                        return Ok(samples.pop().map(|s| s.metrics).unwrap_or_default());
                    }
                    if moved {
                        quiet_since = Instant::now();
                    }
                    if quiet_since.elapsed() >= quiet_enough(&samples) {
                        let (kicked_at, kicked) = kick()?;
                        published = kicked_at;
                        wanted = wanted + kicked;
                        quiet_since = Instant::now();
                    }
                }
            }
            if started.elapsed() > self.timeout {
                let last = samples.last();
                return Err(self.timed_out(
                    &format!(
                        "{what} (changes taken in: wanted {} + {} delivered)",
                        describe_changes(&samples[0].metrics.changes),
                        describe_changes(&delivered)
                    ),
                    last,
                ));
            }
            self.process.wait_output(printed, interval);
        }
    }
}

/// Every family's count of returned syncs.
fn syncs(m: &Metrics) -> Vec<u64> {
    m.families.values().map(|f| f.syncs).collect()
}

/// How long no sync may return, every event taken in and nothing proven, before the proxier
/// is taken to have nothing more to sync and is kicked: several times its longest sync so far
/// (a sync still running will return and settle it; under emulation syncs take seconds), at
/// least a second. A kick too early costs a sync, never a wrong answer.
fn quiet_enough(samples: &[Sample]) -> Duration {
    let longest = samples
        .windows(2)
        .flat_map(|w| {
            w[1].metrics.families.iter().filter_map(|(f, after)| {
                let before = w[0].metrics.families.get(f)?;
                (after.syncs > before.syncs).then_some(after.sync_seconds - before.sync_seconds)
            })
        })
        .fold(0.0_f64, f64::max);
    let average = samples
        .last()
        .into_iter()
        .flat_map(|s| s.metrics.families.values())
        .filter(|m| m.syncs > 0)
        .map(|m| m.sync_seconds / m.syncs as f64)
        .fold(0.0_f64, f64::max);
    Duration::from_secs_f64((longest.max(average) * 5.0).max(1.0))
}

/// Metrics sampled before a publication.
#[derive(Debug, Clone)]
pub struct Baseline(Sample);

impl Baseline {
    /// When the last sync of any family returned (seconds since the epoch; 0 before any).
    pub fn last_synced(&self) -> f64 {
        self.0
            .metrics
            .families
            .values()
            .map(|f| f.last_synced)
            .fold(0.0, f64::max)
    }
}

/// Whether, over `samples` (oldest first, the first taken before the publication, the newest
/// after every event of it was taken in), each family has either queued nothing since
/// `published` or completed a sync started after its last queued change.
fn all_synced(samples: &[Sample], published: f64) -> bool {
    let Some(newest) = samples.last() else {
        return false;
    };
    newest.metrics.families.iter().all(|(family, m)| {
        if m.last_queued < published {
            return true;
        }
        let series: Vec<(f64, SyncMetrics)> = samples
            .iter()
            .map(|s| {
                (
                    s.at,
                    s.metrics.families.get(family).copied().unwrap_or_default(),
                )
            })
            .collect();
        synced_since(&series, m.last_queued)
    })
}

/// Whether a family's samples `(taken at, metrics)` show a sync that started at or after
/// `queued` and has returned.
fn synced_since(series: &[(f64, SyncMetrics)], queued: f64) -> bool {
    let Some(&(_, newest)) = series.last() else {
        return false;
    };
    // Two syncs returned since a sample taken after `queued`: the second started after the
    // first returned, which was after that sample.
    let two_since = series
        .iter()
        .any(|(at, m)| *at >= queued && newest.syncs >= m.syncs + 2);
    // One sync returned between two samples, which succeeded (its end is at or after
    // `last_synced`) and lasted what the histogram's sum grew by: it started at or after
    // `last_synced - duration`.
    let one_after = series.windows(2).any(|w| {
        let (before, after) = (w[0].1, w[1].1);
        after.syncs == before.syncs + 1
            && after.last_synced - (after.sync_seconds - before.sync_seconds) >= queued
    });
    two_since || one_after
}

fn describe_changes(c: &Changes) -> String {
    format!("{} service, {} slice", c.services, c.endpoint_slices)
}

fn describe(m: &Metrics) -> String {
    let families: BTreeMap<&String, String> = m
        .families
        .iter()
        .map(|(f, s)| {
            (
                f,
                format!(
                    "{} sync(s), last queued {:.3}, last synced {:.3}",
                    s.syncs, s.last_queued, s.last_synced
                ),
            )
        })
        .collect();
    format!(
        "{families:?}; changes taken in: {}",
        describe_changes(&m.changes)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A proxier that dies while it answers its metrics resets the connection before kpct sees
    /// it exit: the sample reports the exit, with the log, not the reset (fresh-machine,
    /// 2026-12-08: a kube-proxy killed between two syncs was reported as `Connection reset by
    /// peer`). The server here resets the connection, then exits, every time.
    #[test]
    fn a_proxier_that_dies_while_it_answers_is_reported_as_its_exit() {
        let ns = Netns::create(&format!("kpct-diesanswering-{}", std::process::id()))
            .expect("a namespace");
        ns.run(|| {
            std::process::Command::new("ip")
                .args(["link", "set", "lo", "up"])
                .status()
        })
        .expect("in the namespace")
        .expect("ip");
        let server = "import os, socket, struct\n\
                      s = socket.socket()\n\
                      s.bind(('127.0.0.1', 10249))\n\
                      s.listen(1)\n\
                      print('listening', flush=True)\n\
                      c, _ = s.accept()\n\
                      c.recv(100)\n\
                      c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))\n\
                      c.close()\n\
                      print('reset it', flush=True)\n\
                      os._exit(9)\n";
        let scratch = ns.scratch_dir().expect("a scratch directory").to_path_buf();
        let process = ProxierProcess::start(
            &ns,
            "a metrics server",
            &scratch,
            std::path::Path::new("/usr/bin/python3"),
            &["-c".to_string(), server.to_string()],
            &[],
        )
        .expect("python3 starts");
        while !process.printed_text("listening") {
            assert!(process.exit_status().is_none(), "{}", process.log_tail(20));
            process.wait_output(process.printed(), Duration::from_secs(5));
        }
        let watch = SyncWatch {
            netns: &ns,
            address: "127.0.0.1:10249".parse().expect("an address"),
            process: &process,
            timeout: Duration::from_secs(10),
        };
        let err = watch.sample("a test").expect_err("the proxier exited");
        let text = format!("{err:#}");
        assert!(
            text.contains("exited (exit status: 9)") && text.contains("reset it"),
            "{text}"
        );
    }

    fn m(syncs: u64, sum: f64, queued: f64, synced: f64) -> SyncMetrics {
        SyncMetrics {
            last_queued: queued,
            last_synced: synced,
            syncs,
            sync_seconds: sum,
            failed_syncs: 0,
        }
    }

    #[test]
    fn a_sync_started_before_the_change_does_not_count() {
        // Queued at 100.0; a sync of 0.5 s returned at 100.2 (last_synced 100.2): it started
        // at 99.7, before the change.
        let series = [
            (100.1, m(3, 1.0, 100.0, 99.0)),
            (100.3, m(4, 1.5, 100.0, 100.2)),
        ];
        assert!(!synced_since(&series, 100.0));
        // The next one, 0.05 s ending at 100.5, started after it.
        let mut longer = series.to_vec();
        longer.push((100.6, m(5, 1.55, 100.0, 100.5)));
        assert!(synced_since(&longer, 100.0));
    }

    #[test]
    fn two_syncs_after_a_sample_taken_after_the_change_count() {
        let series = [
            (100.1, m(3, 1.0, 100.0, 99.0)),
            (100.9, m(5, 1.1, 100.0, 99.0)),
        ];
        // Both failed (last_synced did not move), yet the second started after 100.1.
        assert!(synced_since(&series, 100.0));
        // A sample from before the change proves nothing.
        let early = [
            (99.9, m(3, 1.0, 100.0, 99.0)),
            (100.9, m(5, 1.1, 100.0, 99.0)),
        ];
        assert!(!synced_since(&early, 100.0));
    }

    #[test]
    fn a_family_that_queued_nothing_since_the_publication_is_synced() {
        let sample = |v6: SyncMetrics| Sample {
            at: 100.1,
            metrics: Metrics {
                families: [
                    ("IPv4".to_string(), m(3, 1.0, 90.0, 91.0)),
                    ("IPv6".to_string(), v6),
                ]
                .into(),
                changes: Changes::default(),
            },
        };
        assert!(all_synced(&[sample(m(3, 1.0, 90.0, 91.0))], 100.0));
        assert!(!all_synced(&[sample(m(3, 1.0, 100.05, 91.0))], 100.0));
    }
}
