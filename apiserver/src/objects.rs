//! The cluster state the server serves: every object of it, as the API defines them.

use k8s_openapi::api::core::v1::{Endpoints, Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{NetworkPolicy, ServiceCIDR};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

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

impl ClusterObjects {
    /// Namespaces and nodes by name, namespaced objects by namespace then name.
    pub fn sort(&mut self) {
        fn key(meta: &ObjectMeta) -> (Option<String>, Option<String>) {
            (meta.namespace.clone(), meta.name.clone())
        }
        self.namespaces.sort_by_key(|o| key(&o.metadata));
        self.nodes.sort_by_key(|o| key(&o.metadata));
        self.pods.sort_by_key(|o| key(&o.metadata));
        self.services.sort_by_key(|o| key(&o.metadata));
        self.endpoint_slices.sort_by_key(|o| key(&o.metadata));
        self.endpoints.sort_by_key(|o| key(&o.metadata));
        self.service_cidrs.sort_by_key(|o| key(&o.metadata));
        self.network_policies.sort_by_key(|o| key(&o.metadata));
    }
}
