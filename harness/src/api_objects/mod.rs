//! A scenario's cluster as the Kubernetes API holds it: the Namespaces, Nodes, Pods, Services,
//! EndpointSlices, Endpoints, ServiceCIDRs and NetworkPolicies that kube-apiserver (with the
//! controllers that derive EndpointSlices and Endpoints) would serve for the scenario's state,
//! as `k8s-openapi` objects. What [`crate::apiserver`] serves to a real proxier.
//!
//! Only the objects' content is set here; the server-owned metadata (resourceVersion, uid,
//! creationTimestamp, generation) is the API server's to assign when it stores them.

use k8s_openapi::api::core::v1::{Endpoints, Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{NetworkPolicy, ServiceCIDR};

/// Every object of one cluster state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterObjects {
    pub namespaces: Vec<Namespace>,
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    pub services: Vec<Service>,
    pub endpoint_slices: Vec<EndpointSlice>,
    /// Core v1 Endpoints, as the endpoints controller mirrors the slices (older proxiers, such
    /// as kube-router before v2.6, watch these instead of EndpointSlices).
    pub endpoints: Vec<Endpoints>,
    pub service_cidrs: Vec<ServiceCIDR>,
    pub network_policies: Vec<NetworkPolicy>,
}
