//! Benchmarks: numbers printed, never asserted (timing depends on the machine).
//!
//! - [`topology`]: setup and teardown cost of namespaces, veths, bridges and VXLAN;
//! - [`suite`]: every bundled scenario against each proxier, timed;
//! - [`scale`]: a synthetic cluster of N services × E endpoints, per proxier and size: time to
//!   compute and to apply the programming, and pod → ClusterIP latency through it.

mod explore;
pub mod scale;
pub mod suite;
mod topology;

pub use explore::{explore, ExploreBench};
pub use scale::{scale, scale_scenario, ScaleOptions};
pub use suite::{suite, SuiteOptions};
pub use topology::{synthetic_scenario, topology};

use std::time::Duration;

/// Milliseconds, for printing.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The `p`-th percentile (0–100) of `samples` by the nearest-rank method: the smallest sample
/// such that at least p % of the samples are at or below it. `None` for no samples.
pub fn percentile(samples: &[Duration], p: f64) -> Option<Duration> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((p.clamp(0.0, 100.0) / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// The median (nearest rank: the lower middle of an even count).
pub fn median(samples: &[Duration]) -> Option<Duration> {
    percentile(samples, 50.0)
}

/// Human-readable duration: µs below 1 ms, ms below 1 s, seconds above.
pub fn human(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 0.001 {
        format!("{:.0} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else if s < 100.0 {
        format!("{s:.2} s")
    } else {
        format!("{s:.0} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms_list(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&m| Duration::from_millis(m)).collect()
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        assert_eq!(percentile(&[], 50.0), None);
        let one = ms_list(&[7]);
        assert_eq!(median(&one), Some(Duration::from_millis(7)));
        assert_eq!(percentile(&one, 90.0), Some(Duration::from_millis(7)));
        // Unsorted input; 1..=10.
        let ten = ms_list(&[10, 3, 1, 2, 9, 4, 8, 5, 7, 6]);
        assert_eq!(median(&ten), Some(Duration::from_millis(5)));
        assert_eq!(percentile(&ten, 90.0), Some(Duration::from_millis(9)));
        assert_eq!(percentile(&ten, 91.0), Some(Duration::from_millis(10)));
        assert_eq!(percentile(&ten, 100.0), Some(Duration::from_millis(10)));
        assert_eq!(percentile(&ten, 0.0), Some(Duration::from_millis(1)));
        let three = ms_list(&[30, 10, 20]);
        assert_eq!(median(&three), Some(Duration::from_millis(20)));
    }

    #[test]
    fn human_units() {
        assert_eq!(human(Duration::from_micros(250)), "250 µs");
        assert_eq!(human(Duration::from_micros(2500)), "2.5 ms");
        assert_eq!(human(Duration::from_millis(8071)), "8.07 s");
        assert_eq!(human(Duration::from_secs(265)), "265 s");
    }
}
