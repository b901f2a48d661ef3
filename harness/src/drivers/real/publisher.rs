//! What the API server publishes to a real proxier: the scenario's cluster, and the sync
//! markers (see [`super::sync`]) that tell kpct when a proxier has seen all of it.

use crate::api_objects::{cluster_objects, ClusterObjects};
use crate::scenario::{IpFamily, Scenario};
use anyhow::{Context, Result};
use apiserver::{ApiServer, Publication};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use std::sync::atomic::{AtomicU64, Ordering};

/// Locks, even after a panic elsewhere (the guarded state is only a turn to publish).
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The API server, and what it has published of the sync markers (see [`super::sync`]).
pub(super) struct Publisher {
    server: ApiServer,
    /// Publications so far: the markers' annotation.
    publications: AtomicU64,
    /// Kicks so far: the kick slices' endpoint.
    kicks: AtomicU64,
    publishing: std::sync::Mutex<()>,
    /// Slices published although their Service is gone: the garbage collector's work still
    /// to do (see [`Publisher::keep_orphans`]).
    orphans: std::sync::Mutex<Vec<EndpointSlice>>,
}

impl std::ops::Deref for Publisher {
    type Target = ApiServer;
    fn deref(&self) -> &ApiServer {
        &self.server
    }
}

impl Publisher {
    /// Serves the cluster of `scenario` with the markers at their start.
    pub(super) fn start(scenario: &Scenario) -> Result<Publisher> {
        let server = ApiServer::start(with_markers(cluster_objects(scenario), scenario, 0, 0))
            .context("starting the API server")?;
        Ok(Publisher {
            server,
            publications: Default::default(),
            kicks: Default::default(),
            publishing: Default::default(),
            orphans: Default::default(),
        })
    }

    /// The cluster's objects at `state` with the markers as they stand.
    pub(super) fn objects(&self, state: &Scenario) -> ClusterObjects {
        let mut objects = cluster_objects(state);
        objects
            .endpoint_slices
            .extend(lock(&self.orphans).iter().cloned());
        with_markers(
            objects,
            state,
            self.publications.load(Ordering::SeqCst),
            self.kicks.load(Ordering::SeqCst),
        )
    }

    /// `state` published as an update, then a second publication that touches only the
    /// markers, so that every informer sees them after every other event. Returns when the
    /// first began (seconds since the epoch) and both.
    pub(super) fn update(&self, state: &Scenario) -> Result<(f64, Vec<Publication>)> {
        // One publication at a time: two nodes kicking at once must not interleave theirs.
        let _one_at_a_time = lock(&self.publishing);
        let first = self.server.publish(self.objects(state))?;
        self.publications.fetch_add(1, Ordering::SeqCst);
        let markers = self.server.publish(self.objects(state))?;
        let at = first
            .published_at
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        Ok((at, vec![first, markers]))
    }

    /// Until the next call, every publication also holds `orphans`: the slices of Services a
    /// step deletes, which a cluster's garbage collector deletes only after their owner
    /// (background cascading deletion, the default: the owner goes at once, its dependents
    /// later; https://kubernetes.io/docs/concepts/architecture/garbage-collection/). The
    /// endpointslice controller makes each slice a dependent of its Service
    /// (pkg/controller/endpointslice/reconciler.go, `ownerRef`).
    pub(super) fn keep_orphans(&self, orphans: Vec<EndpointSlice>) {
        *lock(&self.orphans) = orphans;
    }

    /// A kick: the kick slices' endpoint moves, which every family's proxier syncs for and
    /// programs nothing of (their Service is the ExternalName marker).
    pub(super) fn kick(&self, state: &Scenario) -> Result<(f64, Vec<Publication>)> {
        self.kicks.fetch_add(1, Ordering::SeqCst);
        self.update(state)
    }
}

/// The families of the cluster's pod ranges, IPv4 first.
pub(super) fn cluster_families(state: &Scenario) -> impl Iterator<Item = IpFamily> + '_ {
    [IpFamily::Ipv4, IpFamily::Ipv6]
        .into_iter()
        .filter(|f| state.topology.cluster_cidr.has(*f))
}

pub(super) fn family_label(family: IpFamily) -> &'static str {
    match family {
        IpFamily::Ipv4 => "IPv4",
        IpFamily::Ipv6 => "IPv6",
    }
}

/// `objects` with the sync markers (see [`super::sync`]): an ExternalName Service, which
/// kube-proxy skips, and per cluster family an EndpointSlice of it with no endpoints, all
/// annotated with the publication's number, so that each publication changes nothing a
/// proxier programs but its annotation.
fn with_markers(
    mut objects: ClusterObjects,
    state: &Scenario,
    publication: u64,
    kicks: u64,
) -> ClusterObjects {
    use k8s_openapi::api::core::v1::{Service, ServiceSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let annotations = Some(
        [(MARKER_ANNOTATION.to_string(), publication.to_string())]
            .into_iter()
            .collect(),
    );
    objects.services.push(Service {
        metadata: ObjectMeta {
            name: Some(MARKER.to_string()),
            namespace: Some(MARKER_NAMESPACE.to_string()),
            annotations: annotations.clone(),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ExternalName".to_string()),
            external_name: Some("kpct-sync-marker.invalid".to_string()),
            ..Default::default()
        }),
        status: None,
    });
    for family in cluster_families(state) {
        objects.endpoint_slices.push(EndpointSlice {
            metadata: ObjectMeta {
                name: Some(format!("{MARKER}-{}", family_label(family).to_lowercase())),
                namespace: Some(MARKER_NAMESPACE.to_string()),
                annotations: annotations.clone(),
                labels: Some(marker_slice_labels()),
                ..Default::default()
            },
            address_type: family_label(family).to_string(),
            endpoints: Some(Vec::new()),
            ports: None,
        });
        objects.endpoint_slices.push(kick_slice(family, kicks));
    }
    objects
}

/// The kick slice of `family` after `kicks` kicks: one endpoint, in a documentation range,
/// that moves at each kick; no ports, so no proxier programs anything of it.
fn kick_slice(family: IpFamily, kicks: u64) -> EndpointSlice {
    use k8s_openapi::api::discovery::v1::Endpoint;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let n = kicks % 250 + 1;
    let address = match family {
        IpFamily::Ipv4 => format!("192.0.2.{n}"),
        IpFamily::Ipv6 => format!("2001:db8::{n:x}"),
    };
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(format!("{KICK}-{}", family_label(family).to_lowercase())),
            namespace: Some(MARKER_NAMESPACE.to_string()),
            labels: Some(marker_slice_labels()),
            ..Default::default()
        },
        address_type: family_label(family).to_string(),
        endpoints: Some(vec![Endpoint {
            addresses: vec![address],
            ..Default::default()
        }]),
        ports: None,
    }
}

/// The labels of the marker's slices: they belong to the marker Service, and to kpct.
fn marker_slice_labels() -> std::collections::BTreeMap<String, String> {
    [
        ("kubernetes.io/service-name", MARKER),
        ("endpointslice.kubernetes.io/managed-by", "kpct"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The markers' name and namespace, and the annotation each publication changes.
const MARKER: &str = "kpct-sync-marker";
const KICK: &str = "kpct-sync-kick";
const MARKER_NAMESPACE: &str = "kube-system";
const MARKER_ANNOTATION: &str = "kpct.dev/publication";

/// The slices of `before` whose Service `after` no longer has: what a step's Service
/// deletion leaves to the garbage collector.
pub(super) fn orphaned_slices(before: &Scenario, after: &Scenario) -> Vec<EndpointSlice> {
    let services = |objects: &ClusterObjects| -> std::collections::BTreeSet<(String, String)> {
        objects
            .services
            .iter()
            .map(|s| {
                (
                    s.metadata.namespace.clone().unwrap_or_default(),
                    s.metadata.name.clone().unwrap_or_default(),
                )
            })
            .collect()
    };
    let old = cluster_objects(before);
    let kept = services(&cluster_objects(after));
    let gone: std::collections::BTreeSet<_> = services(&old).difference(&kept).cloned().collect();
    old.endpoint_slices
        .into_iter()
        .filter(|slice| {
            let owner = slice
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("kubernetes.io/service-name"));
            owner.is_some_and(|name| {
                gone.contains(&(
                    slice.metadata.namespace.clone().unwrap_or_default(),
                    name.clone(),
                ))
            })
        })
        .collect()
}
