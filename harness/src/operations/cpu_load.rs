//! A calibrated CPU load for stress runs: `--load 2x` keeps twice as many threads busy as the
//! machine has cores, so every run meets the starved scheduling a loaded CI machine gives.

use anyhow::{bail, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// How much load: busy threads per core.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoadFactor(pub f64);

impl std::str::FromStr for LoadFactor {
    type Err = anyhow::Error;
    /// `2x`, `0.5x` or a bare number: busy threads per core.
    fn from_str(s: &str) -> Result<LoadFactor> {
        let number = s.strip_suffix('x').unwrap_or(s);
        match number.parse::<f64>() {
            Ok(f) if (0.0..=16.0).contains(&f) => Ok(LoadFactor(f)),
            _ => bail!("`{s}`: a load is busy threads per core, from 0x to 16x (e.g. `2x`)"),
        }
    }
}

impl std::fmt::Display for LoadFactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x", self.0)
    }
}

/// Busy threads, spinning until dropped.
pub struct CpuLoad {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl CpuLoad {
    /// `factor` × the machine's cores threads (rounded up), each spinning on its own.
    pub fn start(factor: LoadFactor) -> CpuLoad {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let count = (factor.0 * cores as f64).ceil() as usize;
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..count)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        // Work the optimiser cannot drop; a relaxed load per round keeps the
                        // stop prompt.
                        for _ in 0..10_000 {
                            x = std::hint::black_box(
                                x.wrapping_mul(6364136223846793005).wrapping_add(1),
                            );
                        }
                    }
                })
            })
            .collect();
        CpuLoad { stop, threads }
    }

    /// How many threads are spinning.
    pub fn threads(&self) -> usize {
        self.threads.len()
    }
}

impl Drop for CpuLoad {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_reads_as_threads_per_core() {
        assert_eq!("2x".parse::<LoadFactor>().unwrap(), LoadFactor(2.0));
        assert_eq!("0.5".parse::<LoadFactor>().unwrap(), LoadFactor(0.5));
        assert!("-1x".parse::<LoadFactor>().is_err());
        assert!("lots".parse::<LoadFactor>().is_err());
    }

    #[test]
    fn a_load_spins_its_threads_and_stops_them_when_dropped() {
        let load = CpuLoad::start(LoadFactor(1.0));
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(load.threads(), cores);
        drop(load);
        assert_eq!(CpuLoad::start(LoadFactor(0.0)).threads(), 0);
    }
}
