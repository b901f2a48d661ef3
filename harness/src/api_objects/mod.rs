//! A scenario's cluster as the Kubernetes API holds it: the Namespaces, Nodes, Pods, Services,
//! EndpointSlices, Endpoints, ServiceCIDRs and NetworkPolicies that kube-apiserver (with the
//! controllers that derive EndpointSlices and Endpoints) would serve for the scenario's state,
//! as `k8s-openapi` objects. What [`apiserver`] serves to a real proxier.
//!
//! Only the objects' content is set here; the server-owned metadata (resourceVersion, uid,
//! creationTimestamp, generation) is the API server's to assign when it stores them. So are
//! the references that need a uid: the `ownerReferences` the EndpointSlice controller puts on
//! its slices (`newEndpointSlice`, k8s.io/endpointslice utils.go) and the `uid` of an
//! endpoint's `targetRef`, which are left out.
//!
//! Where the real value is random or a time (a controller slice's generated name, a condition's
//! transition time), a fixed value derived from the content stands in, so the same state always
//! gives identical objects. Every list is sorted: namespaces and nodes by name, the namespaced
//! objects by namespace then name.
//!
//! A Service whose scenario gives explicit `endpointSlices` is served without its selector:
//! those slices replace the selector's endpoints in kpct (`scenario::cluster_state`), and the
//! only cluster whose EndpointSlices are exactly hand-made ones is one whose Service has no
//! selector (with one, the EndpointSlice controller would add its own slices, and kube-proxy
//! would merge them).

mod cluster;
mod endpoints;
mod services;
#[cfg(test)]
mod tests;

use crate::scenario::Scenario;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;

/// Every object of one cluster state: the API server's input.
pub use apiserver::ClusterObjects;

/// `kubernetes.io/service-name` (discovery/v1 `LabelServiceName`): the Service a slice belongs to.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// `endpointslice.kubernetes.io/managed-by` (discovery/v1 `LabelManagedBy`).
pub const LABEL_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// The EndpointSlice controller's name in [`LABEL_MANAGED_BY`]
/// (pkg/controller/endpointslice `ControllerName`).
pub const ENDPOINTSLICE_CONTROLLER: &str = "endpointslice-controller.k8s.io";
/// [`LABEL_MANAGED_BY`] of the scenario's explicit slices: hand-made, so not the controller's,
/// which leaves them alone.
pub const SCENARIO_MANAGER: &str = "kpct";
/// `service.kubernetes.io/headless` (core/v1 `IsHeadlessService`): on the slices and Endpoints
/// of a Service without a ClusterIP; kube-proxy's EndpointSlice informer skips them.
pub const LABEL_HEADLESS: &str = "service.kubernetes.io/headless";
/// `service.kubernetes.io/service-proxy-name` (pkg/proxy/apis `LabelServiceProxyName`): a
/// Service with it belongs to another proxy, and kube-proxy's Service informer skips it.
pub use crate::scenario::LABEL_SERVICE_PROXY_NAME;
/// `endpoints.kubernetes.io/managed-by` and the endpoints controller's value
/// (pkg/controller/endpoint `LabelManagedBy`, `ControllerName`).
pub const LABEL_ENDPOINTS_MANAGED_BY: &str = "endpoints.kubernetes.io/managed-by";
pub const ENDPOINTS_CONTROLLER: &str = "endpoint-controller";

/// The objects a cluster holds in the scenario state `state` (the initial one, or
/// `scenario::state_at(s, Some(k)).scenario` after step k), which must be valid.
pub fn cluster_objects(state: &Scenario) -> ClusterObjects {
    let stored = services::stored_services(state);
    let mut objects = ClusterObjects {
        namespaces: cluster::namespaces(state),
        nodes: cluster::nodes(state),
        pods: cluster::pods(state),
        services: stored.iter().map(services::service).collect(),
        endpoint_slices: endpoints::endpoint_slices(state, &stored),
        endpoints: endpoints::endpoints(state, &stored),
        service_cidrs: vec![cluster::service_cidr(state)],
        // kpct has no NetworkPolicies; kube-router lists them all the same.
        network_policies: Vec::new(),
    };
    objects.sort();
    objects
}

/// Metadata of a namespaced object: its name, namespace and labels (none when empty, as the
/// API server drops an empty map).
fn namespaced_meta(namespace: &str, name: &str, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        labels: (!labels.is_empty()).then_some(labels),
        ..ObjectMeta::default()
    }
}

/// `(k, v)` pairs as a label map.
fn labels<const N: usize>(pairs: [(&str, &str); N]) -> BTreeMap<String, String> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}
