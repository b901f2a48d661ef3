//! How far each client's open watch streams have got: the resourceVersion up to which a stream
//! has handed every event (or found it outside its selection) to the client's connection.
//! A proxier that says nothing of what it has taken in (no change counters) is known to have
//! been sent a publication once every one of its watches is past it.

use super::log::lock;
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Every open watch stream's client and progress.
#[derive(Default)]
pub(crate) struct Progress {
    watches: Mutex<Open>,
    moved: Condvar,
}

#[derive(Default)]
struct Open {
    next_id: u64,
    /// By id: the client and the resourceVersion its stream is past.
    streams: BTreeMap<u64, (String, u64)>,
}

/// One open stream's place in [`Progress`]; it leaves when dropped (the stream ended).
pub(crate) struct StreamProgress {
    progress: Arc<Progress>,
    id: u64,
}

/// Where `client`'s streams stand when a wait gave up.
#[derive(Debug)]
pub struct Behind {
    /// The resourceVersion each open stream is past; empty when none is open.
    pub streams: Vec<u64>,
}

impl Progress {
    /// Registers a stream of `client` that starts past nothing.
    pub(crate) fn open(self: &Arc<Self>, client: &str) -> StreamProgress {
        let mut open = lock(&self.watches);
        open.next_id += 1;
        let id = open.next_id;
        open.streams.insert(id, (client.to_string(), 0));
        StreamProgress {
            progress: Arc::clone(self),
            id,
        }
    }

    /// Waits up to `limit` until `client` has at least one open stream and every open stream
    /// of it is past `rv`.
    pub(crate) fn wait_past(&self, client: &str, rv: u64, limit: Duration) -> Result<(), Behind> {
        let deadline = Instant::now() + limit;
        let mut open = lock(&self.watches);
        loop {
            let streams: Vec<u64> = open
                .streams
                .values()
                .filter(|(c, _)| c == client)
                .map(|(_, past)| *past)
                .collect();
            if !streams.is_empty() && streams.iter().all(|past| *past >= rv) {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Behind { streams });
            }
            open = self
                .moved
                .wait_timeout(open, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }
}

impl StreamProgress {
    /// The stream has handed its client everything up to `rv`.
    pub(crate) fn past(&self, rv: u64) {
        let mut open = lock(&self.progress.watches);
        if let Some((_, past)) = open.streams.get_mut(&self.id) {
            *past = (*past).max(rv);
        }
        self.progress.moved.notify_all();
    }
}

impl Drop for StreamProgress {
    fn drop(&mut self) {
        lock(&self.progress.watches).streams.remove(&self.id);
        self.progress.moved.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_past_a_version_only_when_every_open_stream_is() {
        let progress = Arc::new(Progress::default());
        let quick = Duration::from_millis(1);
        assert!(progress
            .wait_past("a", 1, quick)
            .unwrap_err()
            .streams
            .is_empty());
        let services = progress.open("a");
        let slices = progress.open("a");
        let other = progress.open("b");
        services.past(5);
        other.past(9);
        assert_eq!(
            progress.wait_past("a", 5, quick).unwrap_err().streams,
            [5, 0]
        );
        slices.past(7);
        assert!(progress.wait_past("a", 5, quick).is_ok());
        drop(services);
        assert!(progress.wait_past("a", 7, quick).is_ok());
        assert!(progress.wait_past("a", 8, quick).is_err());
    }

    #[test]
    fn a_waiter_wakes_when_a_stream_moves() {
        let progress = Arc::new(Progress::default());
        let stream = progress.open("a");
        let waiter = {
            let progress = Arc::clone(&progress);
            std::thread::spawn(move || progress.wait_past("a", 3, Duration::from_secs(60)))
        };
        stream.past(3);
        assert!(waiter.join().unwrap().is_ok());
    }
}
