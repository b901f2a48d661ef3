//! The cluster's objects, versioned as etcd keeps them: one resourceVersion counter for all
//! kinds, every version of every key since the last compaction, and the event history that
//! watches replay. A state at any retained resourceVersion can be read back (lists at an
//! exact RV, continue tokens).

use super::resources::{object_key, Kind};
use anyhow::Result;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub(crate) type Obj = Arc<Value>;

/// 2026-01-01T00:00:00Z: creationTimestamps are this plus the creation RV in seconds, so
/// that the same publications give the same objects.
const BASE_TIME_SECONDS: i64 = 1_767_225_600;

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeType {
    Added,
    Modified,
    Deleted,
}

/// One stored change: the history a watch replays.
#[derive(Clone, Debug)]
pub(crate) struct Event {
    pub rv: u64,
    pub kind: Kind,
    /// The object before (None when created).
    pub prev: Option<Obj>,
    /// The object after (None when deleted).
    pub cur: Option<Obj>,
}

impl Event {
    pub(crate) fn change(&self) -> ChangeType {
        match (&self.prev, &self.cur) {
            (None, _) => ChangeType::Added,
            (Some(_), Some(_)) => ChangeType::Modified,
            (Some(_), None) => ChangeType::Deleted,
        }
    }
}

/// A resourceVersion older than the retained history.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Compacted {
    /// The compaction point: the oldest RV whose state is still known.
    pub oldest: u64,
}

/// The retained versions of one key, oldest first (None: deleted at that RV).
type Versions = Vec<(u64, Option<Obj>)>;

#[derive(Default)]
pub(crate) struct Store {
    rv: u64,
    compacted: u64,
    /// Every retained version per key (None: deleted at that RV), oldest first.
    versions: BTreeMap<(Kind, String), Versions>,
    /// Changes after `compacted`, in RV order.
    log: Vec<Event>,
}

impl Store {
    pub(crate) fn rv(&self) -> u64 {
        self.rv
    }

    pub(crate) fn compacted(&self) -> u64 {
        self.compacted
    }

    /// Makes `desired` the state, kind by kind: creations and changes in kind order, then
    /// deletions in reverse kind order (dependents before what they belong to, as the
    /// garbage collector removes them); within a kind in key order. Returns the changes.
    pub(crate) fn apply(&mut self, desired: Vec<(Kind, Vec<Value>)>) -> Result<Vec<Event>> {
        let mut wanted: BTreeMap<Kind, BTreeMap<String, Value>> = BTreeMap::new();
        for (kind, items) in desired {
            let entry = wanted.entry(kind).or_default();
            for item in items {
                entry.insert(object_key(kind, &item)?, item);
            }
        }
        let mut changes = Vec::new();
        for kind in Kind::ALL {
            for (key, item) in wanted.get(&kind).into_iter().flatten() {
                let prev = self.get(kind, key);
                let content = without_server_fields(item);
                let rv = self.rv + 1;
                let obj = match &prev {
                    None => Some(created(kind, key, content, rv)),
                    Some(old) if without_server_fields(old) != content => {
                        Some(updated(kind, old, content, rv))
                    }
                    Some(_) => None,
                };
                if let Some(obj) = obj {
                    changes.push(self.record(kind, key, prev, Some(Arc::new(obj))));
                }
            }
        }
        for kind in Kind::ALL.into_iter().rev() {
            let gone: Vec<(String, Obj)> = self
                .current(kind)
                .into_iter()
                .filter(|(key, _)| !wanted.get(&kind).is_some_and(|w| w.contains_key(key)))
                .collect();
            for (key, old) in gone {
                changes.push(self.record(kind, &key, Some(old), None));
            }
        }
        Ok(changes)
    }

    fn record(&mut self, kind: Kind, key: &str, prev: Option<Obj>, cur: Option<Obj>) -> Event {
        self.rv += 1;
        let event = Event {
            rv: self.rv,
            kind,
            prev,
            cur: cur.clone(),
        };
        self.versions
            .entry((kind, key.to_string()))
            .or_default()
            .push((self.rv, cur));
        self.log.push(event.clone());
        event
    }

    pub(crate) fn get(&self, kind: Kind, key: &str) -> Option<Obj> {
        self.versions
            .get(&(kind, key.to_string()))
            .and_then(|v| v.last())
            .and_then(|(_, obj)| obj.clone())
    }

    pub(crate) fn current(&self, kind: Kind) -> Vec<(String, Obj)> {
        self.snapshot(kind, self.rv).unwrap_or_default()
    }

    /// The objects of `kind` as they were at `rv` (at most the current RV), in key order.
    pub(crate) fn snapshot(&self, kind: Kind, rv: u64) -> Result<Vec<(String, Obj)>, Compacted> {
        if rv < self.compacted {
            return Err(Compacted {
                oldest: self.compacted,
            });
        }
        let start = (kind, String::new());
        Ok(self
            .versions
            .range(start..)
            .take_while(|((k, _), _)| *k == kind)
            .filter_map(|((_, key), versions)| {
                let (_, obj) = versions.iter().rev().find(|(v, _)| *v <= rv)?;
                Some((key.clone(), obj.clone()?))
            })
            .collect())
    }

    /// The changes of `kind` after `rv`, in order.
    pub(crate) fn events_after(&self, kind: Kind, rv: u64) -> Result<Vec<Event>, Compacted> {
        if rv < self.compacted {
            return Err(Compacted {
                oldest: self.compacted,
            });
        }
        let first = self.log.partition_point(|e| e.rv <= rv);
        Ok(self.log[first..]
            .iter()
            .filter(|e| e.kind == kind)
            .cloned()
            .collect())
    }

    /// Forgets every state older than the current one (etcd compaction).
    pub(crate) fn compact(&mut self) {
        self.compacted = self.rv;
        self.log.clear();
        let mut emptied = BTreeSet::new();
        for (key, versions) in &mut self.versions {
            if let Some(last) = versions.pop() {
                versions.clear();
                if last.1.is_some() {
                    versions.push(last);
                }
            }
            if versions.is_empty() {
                emptied.insert(key.clone());
            }
        }
        self.versions.retain(|key, _| !emptied.contains(key));
    }
}

/// The server-owned metadata, which a publication's objects do not decide.
const SERVER_FIELDS: [&str; 6] = [
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
];

fn without_server_fields(obj: &Value) -> Value {
    let mut obj = obj.clone();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in SERVER_FIELDS {
            meta.remove(field);
        }
    }
    obj
}

fn set_meta(obj: &mut Value, field: &str, value: Value) {
    if let Some(map) = obj.as_object_mut() {
        let meta = map
            .entry("metadata")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(field.to_string(), value);
        }
    }
}

/// Sets the resourceVersion of an object (as etcd3's versioner does on every read).
pub(crate) fn with_rv(obj: &Value, rv: u64) -> Value {
    let mut obj = obj.clone();
    set_meta(&mut obj, "resourceVersion", Value::String(rv.to_string()));
    obj
}

fn created(kind: Kind, key: &str, mut obj: Value, rv: u64) -> Value {
    set_meta(
        &mut obj,
        "uid",
        Value::String(uid(kind.info().kind, key, rv)),
    );
    set_meta(&mut obj, "creationTimestamp", timestamp(rv));
    if kind.generation_bump(&obj, &obj).is_some() {
        set_meta(&mut obj, "generation", Value::from(1));
    }
    with_rv(&obj, rv)
}

fn updated(kind: Kind, old: &Value, mut obj: Value, rv: u64) -> Value {
    for field in ["uid", "creationTimestamp"] {
        if let Some(value) = old.pointer(&format!("/metadata/{field}")) {
            set_meta(&mut obj, field, value.clone());
        }
    }
    if let Some(bump) = kind.generation_bump(&without_server_fields(old), &obj) {
        let generation = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        set_meta(
            &mut obj,
            "generation",
            Value::from(generation + i64::from(bump)),
        );
    }
    with_rv(&obj, rv)
}

/// `base + seconds`, as the API writes a metav1.Time.
pub(crate) fn timestamp(seconds: u64) -> Value {
    let secs = BASE_TIME_SECONDS.saturating_add(i64::try_from(seconds).unwrap_or(i64::MAX / 2));
    let time = Timestamp::from_second(secs)
        .map(Time)
        .unwrap_or(Time(Timestamp::UNIX_EPOCH));
    serde_json::to_value(time).unwrap_or(Value::Null)
}

/// A UUID-shaped uid derived from what identifies one life of an object, so that the same
/// publications give the same uids (the real server draws random v4 UUIDs; the version and
/// variant bits are set the same way).
pub(crate) fn uid(kind: &str, key: &str, rv: u64) -> String {
    let digest = Sha256::digest(format!("{kind}\0{key}\0{rv}").as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(name: &str, ip: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": "default"}, "spec": {"clusterIP": ip}})
    }

    fn key(e: &Event) -> String {
        let o = e.cur.as_ref().or(e.prev.as_ref()).unwrap();
        object_key(e.kind, o).unwrap()
    }

    fn names(objs: &[(String, Obj)]) -> Vec<String> {
        objs.iter()
            .map(|(k, o)| format!("{k}@{}", o["metadata"]["resourceVersion"].as_str().unwrap()))
            .collect()
    }

    #[test]
    fn versions_count_from_one_in_kind_then_key_order() {
        let mut store = Store::default();
        let changes = store
            .apply(vec![
                (
                    Kind::Service,
                    vec![svc("b", "10.0.0.2"), svc("a", "10.0.0.1")],
                ),
                (
                    Kind::Namespace,
                    vec![json!({"metadata": {"name": "default"}})],
                ),
            ])
            .unwrap();
        let order: Vec<_> = changes.iter().map(|e| (e.rv, key(e))).collect();
        assert_eq!(
            order,
            [
                (1, "default".into()),
                (2, "default/a".into()),
                (3, "default/b".to_string())
            ]
        );
        let a = store.get(Kind::Service, "default/a").unwrap();
        assert_eq!(a["metadata"]["resourceVersion"], "2");
        assert_eq!(a["metadata"]["creationTimestamp"], "2026-01-01T00:00:02Z");
        assert!(
            a["metadata"].get("generation").is_none(),
            "Services have no generation"
        );
        assert_eq!(a["metadata"]["uid"].as_str().unwrap().len(), 36);
    }

    #[test]
    fn unchanged_objects_keep_their_version_and_snapshots_read_the_past() {
        let mut store = Store::default();
        store
            .apply(vec![(
                Kind::Service,
                vec![svc("a", "10.0.0.1"), svc("b", "10.0.0.2")],
            )])
            .unwrap();
        let changes = store
            .apply(vec![(
                Kind::Service,
                vec![svc("a", "10.0.0.9"), svc("c", "10.0.0.3")],
            )])
            .unwrap();
        let kinds: Vec<_> = changes.iter().map(|e| (e.rv, key(e), e.change())).collect();
        assert_eq!(
            kinds,
            [
                (3, "default/a".into(), ChangeType::Modified),
                (4, "default/c".into(), ChangeType::Added),
                (5, "default/b".to_string(), ChangeType::Deleted)
            ]
        );
        assert!(store
            .apply(vec![(
                Kind::Service,
                vec![svc("a", "10.0.0.9"), svc("c", "10.0.0.3")]
            )])
            .unwrap()
            .is_empty());
        assert_eq!(
            names(&store.snapshot(Kind::Service, 2).unwrap()),
            ["default/a@1", "default/b@2"]
        );
        assert_eq!(
            names(&store.snapshot(Kind::Service, 4).unwrap()),
            ["default/a@3", "default/b@2", "default/c@4"]
        );
        assert_eq!(
            names(&store.current(Kind::Service)),
            ["default/a@3", "default/c@4"]
        );
        assert_eq!(store.events_after(Kind::Service, 3).unwrap().len(), 2);
        assert!(store.events_after(Kind::Node, 0).unwrap().is_empty());
        let a = store.get(Kind::Service, "default/a").unwrap();
        assert_eq!(
            a["metadata"]["creationTimestamp"], "2026-01-01T00:00:01Z",
            "kept from creation"
        );
    }

    #[test]
    fn compaction_forgets_older_states() {
        let mut store = Store::default();
        store
            .apply(vec![(Kind::Service, vec![svc("a", "1"), svc("b", "2")])])
            .unwrap();
        store
            .apply(vec![(Kind::Service, vec![svc("a", "3")])])
            .unwrap();
        store.compact();
        assert_eq!(
            store.snapshot(Kind::Service, 3).unwrap_err(),
            Compacted { oldest: 4 }
        );
        assert!(store.events_after(Kind::Service, 3).is_err());
        assert!(store.events_after(Kind::Service, 4).unwrap().is_empty());
        assert_eq!(
            names(&store.snapshot(Kind::Service, 4).unwrap()),
            ["default/a@3"]
        );
    }

    #[test]
    fn generation_follows_the_registry_strategies() {
        let mut store = Store::default();
        let pod = |image: &str, label: &str| json!({"metadata": {"name": "p", "namespace": "d", "labels": {"l": label}}, "spec": {"nodeName": image}});
        store.apply(vec![(Kind::Pod, vec![pod("x", "1")])]).unwrap();
        assert_eq!(
            store.get(Kind::Pod, "d/p").unwrap()["metadata"]["generation"],
            1
        );
        store.apply(vec![(Kind::Pod, vec![pod("x", "2")])]).unwrap();
        assert_eq!(
            store.get(Kind::Pod, "d/p").unwrap()["metadata"]["generation"],
            1,
            "labels are not spec"
        );
        store.apply(vec![(Kind::Pod, vec![pod("y", "2")])]).unwrap();
        assert_eq!(
            store.get(Kind::Pod, "d/p").unwrap()["metadata"]["generation"],
            2
        );
    }

    #[test]
    fn uids_are_deterministic_uuids() {
        assert_eq!(uid("Service", "a/b", 3), uid("Service", "a/b", 3));
        assert_ne!(uid("Service", "a/b", 3), uid("Service", "a/b", 4));
        assert_eq!(&uid("Service", "a/b", 3)[14..15], "4");
    }
}
