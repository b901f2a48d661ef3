//! Which events of a publication a client's watches deliver: the events of each kind it last
//! watched, through that watch's selectors, objects moving into or out of the selection
//! included (as [`super::watch`] streams them). A real proxier's sync is judged complete only
//! once it has taken in all of them.

use super::list::selected;
use super::log::lock;
use super::query;
use super::resources::Kind;
use super::route::{self, Target};
use super::store::ChangeType;
use super::{ApiServer, Publication};
use anyhow::Result;
use serde_json::Value;
use std::collections::BTreeMap;

/// One event a client's watch receives.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivered {
    /// The object's kind (`Service`, `EndpointSlice`, …).
    pub kind: &'static str,
    /// As the watch reports it (a move out of the selection is a deletion).
    pub change: ChangeType,
    /// The object as delivered (its last state for a deletion).
    pub object: Value,
}

/// A client's latest watch of one kind: its namespace and list options.
type Watch = (Option<String>, query::ListOptions);

impl ApiServer {
    /// The events of `publication` that `client`'s watches deliver, in order: for each kind,
    /// through the selectors of the last watch the client opened on it (none: nothing of that
    /// kind).
    pub fn delivered(&self, client: &str, publication: &Publication) -> Result<Vec<Delivered>> {
        let watches = self.latest_watches(client);
        let store = lock(&self.shared.store);
        let mut out = Vec::new();
        for change in &publication.changes {
            let Some(kind) = Kind::ALL.into_iter().find(|k| k.info().kind == change.kind) else {
                continue;
            };
            let Some((namespace, opts)) = watches.get(&kind) else {
                continue;
            };
            let events = store
                .events_after(kind, change.resource_version.saturating_sub(1))
                .map_err(|c| {
                    anyhow::anyhow!(
                        "the history of resourceVersion {} is compacted (oldest {})",
                        change.resource_version,
                        c.oldest
                    )
                })?;
            let Some(event) = events.iter().find(|e| e.rv == change.resource_version) else {
                continue;
            };
            let passes = |o: &&super::store::Obj| selected(kind, namespace.as_deref(), opts, o);
            let delivered = match (
                event.prev.as_ref().filter(passes),
                event.cur.as_ref().filter(passes),
            ) {
                (None, Some(cur)) => Some((ChangeType::Added, cur)),
                (Some(_), Some(cur)) => Some((ChangeType::Modified, cur)),
                (Some(prev), None) => Some((ChangeType::Deleted, prev)),
                (None, None) => None,
            };
            if let Some((change, object)) = delivered {
                out.push(Delivered {
                    kind: kind.info().kind,
                    change,
                    object: (**object).clone(),
                });
            }
        }
        Ok(out)
    }

    /// Per kind, the last watch `client` opened (and the server accepted).
    fn latest_watches(&self, client: &str) -> BTreeMap<Kind, Watch> {
        let mut out = BTreeMap::new();
        for r in self.shared.log.requests() {
            if r.client != client || r.method != "GET" || r.status != 200 {
                continue;
            }
            let (path, query_text) = r.path.split_once('?').unwrap_or((&r.path, ""));
            let Target::Resource {
                kind,
                namespace,
                name,
                watch_path,
            } = route::resolve(path)
            else {
                continue;
            };
            let Ok(opts) = query::list_options(kind, query_text, name.as_deref()) else {
                continue;
            };
            if opts.watch || watch_path {
                out.insert(kind, (namespace, opts));
            }
        }
        out
    }
}
