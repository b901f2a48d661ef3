//! The Kubernetes API server kpct serves to real proxiers (kube-proxy, kube-router and other
//! client-go programs) run unmodified in each node's namespace: the scenario's cluster as
//! `k8s-openapi` objects, served over plain HTTP with the semantics client-go relies on —
//! resourceVersions, LIST with pagination, WATCH with bookmarks and WatchList, 410 Expired,
//! label and field selectors, Statuses worded as the real apiserver words them (its sources
//! are cited where a behaviour comes from). Everything else a proxier might try is refused
//! as RBAC refuses kube-proxy's identity, and every request is recorded.
//!
//! It runs on its own thread and tokio runtime, so that callers stay synchronous, and it is
//! deterministic: the same publications give byte-identical answers.

mod delivery;
mod discovery;
mod http;
mod list;
mod listen;
mod log;
mod objects;
mod progress;
mod query;
mod raw;
mod reply;
mod resources;
mod route;
mod selector;
mod status;
mod store;
mod watch;
mod writes;

pub use delivery::Delivered;
pub use listen::{bind, loopback_up};
pub use log::{PostedEvent, RequestRecord};
pub use objects::ClusterObjects;
pub use progress::Behind;
pub use raw::answer_raw;
pub use store::ChangeType;

use anyhow::{anyhow, Context, Result};
use log::lock;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// The port the server listens on inside a node's namespace: kube-apiserver's secure port,
/// so a kubeconfig looks as it would on a real node.
pub const API_PORT: u16 = 6443;

/// What every connection shares.
pub(crate) struct Shared {
    pub(crate) store: Mutex<store::Store>,
    /// The cluster's resourceVersion, published after each change: what watches wait on.
    pub(crate) rv: tokio::sync::watch::Sender<u64>,
    pub(crate) log: log::Log,
    pub(crate) events: Mutex<writes::EventStore>,
    /// Watch streams open now.
    pub(crate) watches: AtomicUsize,
    /// How far each open watch stream has got.
    pub(crate) progress: Arc<progress::Progress>,
}

impl Default for Shared {
    fn default() -> Shared {
        Shared {
            store: Mutex::new(store::Store::default()),
            rv: tokio::sync::watch::Sender::new(0),
            log: log::Log::default(),
            events: Mutex::new(writes::EventStore::default()),
            watches: AtomicUsize::new(0),
            progress: Arc::default(),
        }
    }
}

impl Shared {
    /// Makes `objects` the state (see [`ApiServer::publish`]): the events it made and the
    /// resourceVersion after them, which watches are then woken for.
    fn publish(&self, objects: ClusterObjects) -> Result<(Vec<store::Event>, u64)> {
        let desired = resources::objects_by_kind(&objects)?;
        let (events, rv) = {
            let mut store = lock(&self.store);
            let events = store.apply(desired)?;
            (events, store.rv())
        };
        self.rv.send_replace(rv);
        Ok((events, rv))
    }
}

/// The server: one thread running its own runtime; dropping it stops everything.
pub struct ApiServer {
    shared: Arc<Shared>,
    runtime: tokio::runtime::Handle,
    /// Per client, the signal that ends its listeners and connections, and the listeners'
    /// tasks.
    clients: Mutex<BTreeMap<String, Client>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Client {
    stop: tokio::sync::watch::Sender<bool>,
    listeners: Vec<tokio::task::JoinHandle<()>>,
}

impl Client {
    /// Signals the stop and waits (briefly) until every listener is closed, so that a
    /// connection attempt after [`ApiServer::stop_listening`] is refused.
    fn stop(self) {
        self.stop.send_replace(true);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while self.listeners.iter().any(|l| !l.is_finished())
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}

/// One change a publication made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub resource_version: u64,
    /// The object's kind (`Service`, `EndpointSlice`, …).
    pub kind: &'static str,
    pub namespace: Option<String>,
    pub name: String,
    pub change: ChangeType,
}

/// What [`ApiServer::publish`] made visible.
#[derive(Clone, Debug)]
pub struct Publication {
    /// Taken before any of the changes could reach a client: a proxier's reaction to them
    /// (e.g. its last-queued timestamp) can only be later.
    pub published_at: SystemTime,
    /// The cluster's resourceVersion afterwards (unchanged when nothing changed).
    pub resource_version: u64,
    /// In the order clients see them.
    pub changes: Vec<Change>,
}

impl ApiServer {
    /// Starts the server with `objects` as the cluster's initial state (resourceVersions from
    /// 1 upward, in publication order). It serves nobody until told where to listen.
    pub fn start(objects: ClusterObjects) -> Result<ApiServer> {
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (shutdown, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("kpct-apiserver".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                match runtime {
                    Ok(runtime) => {
                        let _ = handle_tx.send(Ok(runtime.handle().clone()));
                        runtime.block_on(async {
                            let _ = shutdown_rx.await;
                        });
                    }
                    Err(e) => {
                        let _ = handle_tx.send(Err(e));
                    }
                }
            })
            .context("starting the API server thread")?;
        let runtime = handle_rx
            .recv()
            .map_err(|_| anyhow!("the API server thread ended before its runtime started"))?
            .context("building the API server runtime")?;
        let server = ApiServer {
            shared: Arc::new(Shared::default()),
            runtime,
            clients: Mutex::new(BTreeMap::new()),
            shutdown: Some(shutdown),
            thread: Some(thread),
        };
        server.publish(objects)?;
        Ok(server)
    }

    /// Serves plain HTTP on `listener`, requests recorded under `client`. A node's proxier
    /// reaches the server on its node's loopback: the caller binds 127.0.0.1:[`API_PORT`]
    /// ([`bind`]) on a thread inside the node's network namespace (a socket stays in the
    /// namespace it was made in), with `lo` up there ([`loopback_up`]).
    pub fn serve_on(&self, listener: std::net::TcpListener, client: &str) -> Result<SocketAddr> {
        self.serve(listener, client)
    }

    /// Serves on `addr` in the caller's namespace (port 0 picks one): for tests.
    pub fn listen_on(&self, addr: SocketAddr, client: &str) -> Result<SocketAddr> {
        let listener = listen::bind(addr).with_context(|| format!("listening on {addr}"))?;
        self.serve(listener, client)
    }

    fn serve(&self, listener: std::net::TcpListener, client: &str) -> Result<SocketAddr> {
        let local = listener.local_addr()?;
        let listener = {
            let _entered = self.runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let mut clients = lock(&self.clients);
        let entry = clients.entry(client.to_string()).or_insert_with(|| Client {
            stop: tokio::sync::watch::Sender::new(false),
            listeners: Vec::new(),
        });
        let ctx = Arc::new(reply::ClientCtx {
            shared: Arc::clone(&self.shared),
            client: client.to_string(),
            stop: entry.stop.subscribe(),
            local,
        });
        entry
            .listeners
            .push(self.runtime.spawn(listen::serve(listener, ctx)));
        Ok(local)
    }

    /// Stops serving `client`: its listeners close and so does every connection it has open,
    /// watches included, as when its node goes away.
    pub fn stop_listening(&self, client: &str) {
        let removed = lock(&self.clients).remove(client);
        if let Some(client) = removed {
            client.stop();
        }
    }

    /// Makes `objects` the cluster's state. Each created object becomes an ADDED, each
    /// changed one a MODIFIED, each gone one a DELETED event, at increasing resourceVersions:
    /// creations and changes kind by kind (Namespaces, Nodes, ServiceCIDRs, Pods, Services,
    /// EndpointSlices, Endpoints, NetworkPolicies), then deletions in the reverse kind order
    /// (EndpointSlices before their Service, as the garbage collector removes them); within a
    /// kind by namespace and name. Unchanged objects keep their resourceVersion.
    pub fn publish(&self, objects: ClusterObjects) -> Result<Publication> {
        let published_at = SystemTime::now();
        let (events, rv) = self.shared.publish(objects)?;
        let changes = events
            .iter()
            .map(|e| {
                let obj = e.cur.as_ref().or(e.prev.as_ref());
                let meta = |f: &str| {
                    obj.and_then(|o| o.pointer(&format!("/metadata/{f}")))
                        .and_then(|v| v.as_str())
                        .map(str::to_string)
                };
                Change {
                    resource_version: e.rv,
                    kind: e.kind.info().kind,
                    namespace: meta("namespace"),
                    name: meta("name").unwrap_or_default(),
                    change: e.change(),
                }
            })
            .collect();
        Ok(Publication {
            published_at,
            resource_version: rv,
            changes,
        })
    }

    /// Forgets the history up to now, as an etcd compaction does: a watch, exact list or
    /// continue from an older resourceVersion then gets 410 Expired, which is how a client's
    /// relist is exercised.
    pub fn compact(&self) {
        lock(&self.shared.store).compact();
    }

    /// The cluster's resourceVersion now.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.store).rv()
    }

    /// Waits up to `limit` until `client` has a watch open and every watch it has open has
    /// been handed every event up to `resource_version` (or passed it by as outside its
    /// selection): the proxier has been sent all of a publication.
    pub fn wait_sent(
        &self,
        client: &str,
        resource_version: u64,
        limit: std::time::Duration,
    ) -> std::result::Result<(), Behind> {
        self.shared
            .progress
            .wait_past(client, resource_version, limit)
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.log.requests()
    }

    /// Every event clients created, patched or replaced, as they sent it, in order.
    pub fn events(&self) -> Vec<PostedEvent> {
        self.shared.log.events()
    }

    #[cfg(test)]
    pub(crate) fn open_watches(&self) -> usize {
        self.shared
            .watches
            .load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let clients = std::mem::take(&mut *lock(&self.clients));
        for client in clients.into_values() {
            client.stop.send_replace(true);
        }
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A kubeconfig (JSON, which every YAML reader takes) for `http://SERVER` without
/// credentials, its current context set: what a proxier is pointed at.
pub fn kubeconfig(server: SocketAddr, user: &str) -> String {
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kpct", "cluster": {"server": format!("http://{server}")}}],
        "users": [{"name": user, "user": {}}],
        "contexts": [{"name": "kpct", "context": {"cluster": "kpct", "user": user}}],
        "current-context": "kpct",
        "preferences": {},
    });
    serde_json::to_string_pretty(&config).unwrap_or_default()
}

#[cfg(test)]
mod tests;
