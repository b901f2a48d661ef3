//! WATCH streams, as the watch cache serves them (apiserver pkg/storage/cacher cacher.go
//! Watch, cache_watcher.go): newline-delimited `{"type","object"}` JSON, one flush per event,
//! the initial state first when asked (WatchList: then a bookmark annotated
//! `k8s.io/initial-events-end`), objects entering or leaving the selection as ADDED/DELETED,
//! bookmarks about every minute and just before the timeout, a too-old resourceVersion as a
//! single ERROR event (HTTP 200, as the cacher's errWatcher does).

use super::list::{selected, wait_for};
use super::query::{self, ListOptions};
use super::resources::Kind;
use super::status::{self, ApiError};
use super::store::{with_rv, Event, Obj};
use super::Shared;
use axum::body::{Body, Bytes};
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// The annotation that ends a WatchList's initial events (metav1.InitialEventsAnnotationKey).
pub(crate) const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// A watch without timeoutSeconds lasts the apiserver's minRequestTimeout (1800 s; the real
/// one adds up to as much again at random).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// The cacher's bookmark period (defaultBookmarkFrequency).
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);

/// One watch, validated.
pub(crate) struct WatchRequest {
    pub kind: Kind,
    pub namespace: Option<String>,
    pub opts: ListOptions,
    /// The parsed resourceVersion.
    pub rv: u64,
}

impl WatchRequest {
    /// Checks what the apiserver checks before streaming (an unparsable resourceVersion is a
    /// 422, storage/errors InterpretWatchError).
    pub(crate) fn new(
        kind: Kind,
        namespace: Option<String>,
        opts: ListOptions,
    ) -> Result<WatchRequest, ApiError> {
        let rv = query::parse_rv(&opts.resource_version).map_err(|body| {
            status::invalid(
                kind.info().group,
                kind.info().resource,
                "",
                &[status::FieldError {
                    cause: "FieldValueInvalid",
                    field: "resourceVersion".into(),
                    body,
                }],
            )
        })?;
        Ok(WatchRequest {
            kind,
            namespace,
            opts,
            rv,
        })
    }
}

fn frame(kind: &str, object: &Value) -> Bytes {
    let object = serde_json::to_string(object).unwrap_or_else(|_| "{}".into());
    Bytes::from(format!("{{\"type\":\"{kind}\",\"object\":{object}}}\n"))
}

fn bookmark(kind: Kind, rv: u64, initial_events_end: bool) -> Bytes {
    let mut obj = with_rv(&kind.empty_object(), rv);
    if initial_events_end {
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert(
                "annotations".into(),
                serde_json::json!({ INITIAL_EVENTS_END: "true" }),
            );
        }
    }
    frame("BOOKMARK", &obj)
}

fn error(e: &ApiError) -> Bytes {
    frame("ERROR", &serde_json::to_value(&e.0).unwrap_or(Value::Null))
}

/// The event a watcher sees for a stored change (cache_watcher.go convertToWatchEvent).
fn convert(req: &WatchRequest, event: &Event) -> Option<Bytes> {
    let passes = |obj: &Obj| selected(req.kind, req.namespace.as_deref(), &req.opts, obj);
    let cur = event.cur.as_ref().filter(|o| passes(o));
    let prev = event.prev.as_ref().filter(|o| passes(o));
    match (cur, prev) {
        (Some(obj), None) => Some(frame("ADDED", obj)),
        (Some(obj), Some(_)) => Some(frame("MODIFIED", obj)),
        // Deleted, or moved out of the selection: the last state, at the event's RV.
        (None, Some(old)) => Some(frame("DELETED", &with_rv(old, event.rv))),
        (None, None) => None,
    }
}

/// What the streaming task hands the response body: a frame to send, or word that everything
/// up to a resourceVersion has been handed over (recorded once the connection takes the
/// frames before it, see [`super::progress`]).
enum Item {
    Frame(Bytes),
    Past(u64),
}

/// Starts streaming `req` to `client`: the response body.
pub(crate) fn start(
    shared: Arc<Shared>,
    req: WatchRequest,
    stop: watch::Receiver<bool>,
    client: &str,
) -> Body {
    let (tx, rx) = mpsc::channel::<Item>(64);
    let progress = shared.progress.open(client);
    tokio::spawn(async move {
        shared.watches.fetch_add(1, Ordering::SeqCst);
        run(&shared, &req, &tx, stop).await;
        shared.watches.fetch_sub(1, Ordering::SeqCst);
    });
    let stream = futures::stream::unfold((rx, progress), |(mut rx, progress)| async move {
        loop {
            match rx.recv().await? {
                Item::Frame(bytes) => {
                    return Some((Ok::<_, std::io::Error>(bytes), (rx, progress)))
                }
                Item::Past(rv) => progress.past(rv),
            }
        }
    });
    Body::from_stream(stream)
}

async fn run(
    shared: &Shared,
    req: &WatchRequest,
    tx: &mpsc::Sender<Item>,
    mut stop: watch::Receiver<bool>,
) {
    let timeout = match req.opts.timeout_seconds {
        Some(t) if t != 0 => Duration::from_secs(u64::try_from(t).unwrap_or(0)),
        _ => DEFAULT_TIMEOUT,
    };
    let started = Instant::now();
    let deadline = started + timeout;
    let send = |bytes: Bytes| async move { tx.send(Item::Frame(bytes)).await.is_ok() };
    let Some(mut position) = initial(shared, req, tx).await else {
        return;
    };
    let mut changes = shared.rv.subscribe();
    let bookmarks = req.opts.allow_watch_bookmarks;
    let next_bookmark = |now: Instant| {
        (now + BOOKMARK_EVERY).min(
            deadline
                .checked_sub(Duration::from_secs(2))
                .unwrap_or(deadline),
        )
    };
    let mut bookmark_at = next_bookmark(started);
    loop {
        // Before reading: a publication after this point wakes the select below.
        changes.mark_unchanged();
        let (events, current) = {
            let store = super::log::lock(&shared.store);
            match store.events_after(req.kind, position) {
                Ok(events) => (events, store.rv()),
                // History forgotten under this watcher: it ends, and its client's next watch
                // from its last RV gets the 410.
                Err(_) => return,
            }
        };
        for event in &events {
            if let Some(bytes) = convert(req, event) {
                if !send(bytes).await {
                    return;
                }
            }
        }
        position = position.max(current);
        if tx.send(Item::Past(position)).await.is_err() {
            return;
        }
        let bookmark_due = tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
                false
            }
            () = tokio::time::sleep_until(deadline) => return,
            () = tokio::time::sleep_until(bookmark_at), if bookmarks => true,
            () = stopped(&mut stop) => return,
            () = tx.closed() => return,
        };
        if bookmark_due {
            if !send(bookmark(req.kind, position, false)).await {
                return;
            }
            let now = Instant::now();
            let next = next_bookmark(now);
            // Within the last 2 s the pre-timeout bookmark has been sent.
            bookmark_at = if next <= now {
                deadline + BOOKMARK_EVERY
            } else {
                next
            };
        }
    }
}

async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Sends what comes before the live events; returns the RV the live events follow, or None
/// when the stream ends here.
async fn initial(shared: &Shared, req: &WatchRequest, tx: &mpsc::Sender<Item>) -> Option<u64> {
    let send = |bytes: Bytes| async move { tx.send(Item::Frame(bytes)).await.ok() };
    let send_initial = req.opts.send_initial_events;
    if send_initial == Some(true) {
        if req.rv > 0 {
            if let Err(now) = wait_for(shared, req.rv).await {
                let _ = send(error(&status::too_large_rv(req.rv, now, 1))).await;
                return None;
            }
        }
        let (objects, at) = {
            let store = super::log::lock(&shared.store);
            (store.current(req.kind), store.rv())
        };
        for (_, obj) in objects
            .iter()
            .filter(|(_, o)| selected(req.kind, req.namespace.as_deref(), &req.opts, o))
        {
            send(frame("ADDED", obj)).await?;
        }
        // Only a watch that allows bookmarks is a WatchList (cacher.go isListWatchRequest).
        if req.opts.allow_watch_bookmarks {
            send(bookmark(req.kind, at, true)).await?;
        }
        return Some(at);
    }
    let store_rv = super::log::lock(&shared.store).rv();
    if req.rv == 0 {
        if send_initial.is_none() {
            // A legacy `/watch/` watch from "" or "0": the state, then the changes.
            let objects = super::log::lock(&shared.store)
                .snapshot(req.kind, store_rv)
                .unwrap_or_default();
            for (_, obj) in objects
                .iter()
                .filter(|(_, o)| selected(req.kind, req.namespace.as_deref(), &req.opts, o))
            {
                send(frame("ADDED", obj)).await?;
            }
        }
        return Some(store_rv);
    }
    let compacted = super::log::lock(&shared.store).compacted();
    if req.rv < compacted {
        let e = status::expired(
            format!("too old resource version: {} ({compacted})", req.rv),
            None,
        );
        let _ = send(error(&e)).await;
        return None;
    }
    Some(req.rv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ChangeType;
    use serde_json::json;

    #[test]
    fn bookmarks_carry_kind_version_and_the_end_annotation() {
        let b = bookmark(Kind::EndpointSlice, 42, true);
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert!(b.ends_with(b"\n"));
        assert_eq!(v["type"], "BOOKMARK");
        assert_eq!(v["object"]["kind"], "EndpointSlice");
        assert_eq!(v["object"]["apiVersion"], "discovery.k8s.io/v1");
        assert_eq!(v["object"]["metadata"]["resourceVersion"], "42");
        assert_eq!(
            v["object"]["metadata"]["annotations"][INITIAL_EVENTS_END],
            "true"
        );
        let plain: Value = serde_json::from_slice(&bookmark(Kind::Service, 3, false)).unwrap();
        assert!(plain["object"]["metadata"].get("annotations").is_none());
    }

    #[test]
    fn moving_across_the_selector_is_added_or_deleted() {
        let req = WatchRequest {
            kind: Kind::Service,
            namespace: None,
            opts: query::list_options(
                Kind::Service,
                "labelSelector=app%3Dweb&watch=1&resourceVersion=1",
                None,
            )
            .unwrap(),
            rv: 1,
        };
        let svc = |app: &str, rv: &str| {
            Arc::new(
                json!({"kind": "Service", "apiVersion": "v1", "metadata": {"name": "s", "namespace": "d", "labels": {"app": app}, "resourceVersion": rv}}),
            )
        };
        let ev = |prev: Option<Obj>, cur: Option<Obj>| Event {
            rv: 9,
            kind: Kind::Service,
            prev,
            cur,
        };
        let kind_of = |b: Option<Bytes>| {
            b.map(|b| {
                serde_json::from_slice::<Value>(&b).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
        };
        assert_eq!(
            kind_of(convert(
                &req,
                &ev(Some(svc("db", "3")), Some(svc("web", "9")))
            ))
            .as_deref(),
            Some("ADDED")
        );
        assert_eq!(
            kind_of(convert(
                &req,
                &ev(Some(svc("web", "3")), Some(svc("web", "9")))
            ))
            .as_deref(),
            Some("MODIFIED")
        );
        let out = convert(&req, &ev(Some(svc("web", "3")), Some(svc("db", "9")))).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            (
                v["type"].as_str(),
                v["object"]["metadata"]["resourceVersion"].as_str()
            ),
            (Some("DELETED"), Some("9"))
        );
        assert_eq!(
            v["object"]["metadata"]["labels"]["app"], "web",
            "the last state that matched"
        );
        assert!(convert(&req, &ev(Some(svc("db", "3")), Some(svc("db", "9")))).is_none());
        assert_eq!(
            ev(Some(svc("web", "3")), None).change(),
            ChangeType::Deleted
        );
    }
}
