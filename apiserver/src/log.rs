//! What clients asked and sent: the evidence of which requests a proxier made (and how they
//! were answered) and of the events it reported.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// One request, as it arrived and as it was answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    /// The client named when the listener it came through was opened (a node name).
    pub client: String,
    pub method: String,
    /// Path and query as sent (`/api/v1/services?watch=true&…`).
    pub path: String,
    pub user_agent: Option<String>,
    pub accept: Option<String>,
    /// The HTTP status of the answer (a watch's is its first line: 200).
    pub status: u16,
}

/// An event a client created or patched, kept as sent.
#[derive(Clone, Debug, PartialEq)]
pub struct PostedEvent {
    pub client: String,
    /// `POST`, `PATCH` or `PUT`.
    pub method: String,
    pub path: String,
    /// The body it sent: the event, or the patch.
    pub body: serde_json::Value,
}

/// Locks, even after a panic elsewhere (every change under these locks is one push or one
/// map update, so the data stays whole).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Default)]
pub(crate) struct Log {
    requests: Mutex<Vec<RequestRecord>>,
    events: Mutex<Vec<PostedEvent>>,
}

impl Log {
    pub(crate) fn request(&self, record: RequestRecord) {
        lock(&self.requests).push(record);
    }

    pub(crate) fn event(&self, event: PostedEvent) {
        lock(&self.events).push(event);
    }

    pub(crate) fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.requests).clone()
    }

    pub(crate) fn events(&self) -> Vec<PostedEvent> {
        lock(&self.events).clone()
    }
}
