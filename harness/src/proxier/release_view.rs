//! The cluster as a kube-proxy release's informers and EndpointSlice cache hand it to its
//! proxier, where releases differ. The cluster state kpct derives ([`ClusterState`]) is
//! v1.36's and v1.37's view; v1.34 and v1.35 differ in two ways (cmd/kube-proxy/app/server.go
//! and pkg/proxy/endpointslicecache.go, v1.35.4 against v1.36.3):
//!
//! - their Service informer filters `service.kubernetes.io/headless` as well as
//!   `service.kubernetes.io/service-proxy-name` (`labelSelector.Add(*noProxyName,
//!   *noHeadlessEndpoints)`, l.573-591 in v1.35.4), so a Service labelled headless but with a
//!   ClusterIP is never programmed; from v1.36 only the EndpointSlice informer filters the
//!   headless label (l.583-604 in v1.36.3);
//! - their EndpointSlice informer filters `service-proxy-name` too, so a slice carrying it is
//!   ignored (v1.36 uses it);
//! - of an address a Service's slices list twice, their cache keeps the first copy unless a
//!   later one is on this node (`if _, exists := endpointSet[key]; !exists || isLocal`, l.238
//!   in v1.35.4), where v1.36 keeps a later copy that is not terminating (l.247 in v1.36.3).
//!   Slices are visited in map order, so only copies within one slice have an order both
//!   releases keep.

use crate::release::Release;
use crate::scenario::cluster::{ClusterState, EndpointInfo, ListedEndpoint, NodeContext};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// `cluster` (one family's state) as `release`'s proxier on `node` is handed it.
pub fn seen_by<'a>(
    release: Release,
    cluster: &'a ClusterState,
    node: &NodeContext,
) -> Cow<'a, ClusterState> {
    if release >= Release::V1_36 {
        return Cow::Borrowed(cluster);
    }
    let mut older = cluster.clone();
    older.service_ports.retain(|sp| !sp.headless_label);
    for sp in &mut older.service_ports {
        sp.endpoints = older_cache(&sp.listed, node);
    }
    Cow::Owned(older)
}

/// The endpoint set v1.34's and v1.35's cache keeps on `node`, sorted by `IP:port`.
fn older_cache(listed: &[ListedEndpoint], node: &NodeContext) -> Vec<EndpointInfo> {
    let mut by_addr: BTreeMap<(IpAddr, u16), EndpointInfo> = BTreeMap::new();
    for l in listed.iter().filter(|l| !l.proxy_name_slice) {
        let ep = &l.endpoint;
        let key = (ep.ip, ep.port);
        if !by_addr.contains_key(&key) || ep.is_local(node) {
            by_addr.insert(key, ep.clone());
        }
    }
    by_addr.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::cluster::ServicePortInfo;

    fn ep(node: &str, ready: bool, terminating: bool) -> EndpointInfo {
        EndpointInfo {
            ip: "10.244.2.10".parse().unwrap(),
            port: 8080,
            node_name: Some(node.into()),
            ready,
            serving: ready || terminating,
            terminating,
        }
    }

    fn listed(eps: &[EndpointInfo], proxy_name_slice: bool) -> Vec<ListedEndpoint> {
        eps.iter()
            .map(|e| ListedEndpoint {
                endpoint: e.clone(),
                proxy_name_slice,
            })
            .collect()
    }

    fn node(name: &str) -> NodeContext {
        NodeContext {
            name: name.into(),
            node_ip: "192.168.1.10".parse().unwrap(),
            pod_cidr: "10.244.1.0/24".parse().unwrap(),
            local_addresses: Vec::new(),
            ipv6: None,
        }
    }

    /// A terminating copy then a running one: v1.36 keeps the running one, v1.35 the first
    /// (the terminating one) on a node where neither is local.
    #[test]
    fn a_running_copy_wins_from_v1_36_and_the_first_before() {
        let copies = listed(
            &[ep("node-b", false, true), ep("node-b", true, false)],
            false,
        );
        let newest = crate::scenario::newest_cache(&copies);
        assert_eq!(newest, [ep("node-b", true, false)]);
        assert_eq!(
            older_cache(&copies, &node("node-a")),
            [ep("node-b", false, true)]
        );
        // On the endpoint's own node the later, local copy replaces in v1.35.
        assert_eq!(
            older_cache(&copies, &node("node-b")),
            [ep("node-b", true, false)]
        );
    }

    #[test]
    fn older_releases_drop_headless_labelled_services_and_proxy_name_slices() {
        let sp = |name: &str, headless_label: bool, proxy_name_slice: bool| {
            let eps = [ep("node-b", true, false)];
            ServicePortInfo {
                namespace: "default".into(),
                name: name.into(),
                port_name: String::new(),
                type_: crate::scenario::ServiceType::ClusterIP,
                protocol: crate::scenario::Protocol::Tcp,
                cluster_ip: Some("10.96.0.10".parse().unwrap()),
                port: 80,
                node_port: None,
                external_ips: Vec::new(),
                load_balancer_vips: Vec::new(),
                load_balancer_source_ranges: Vec::new(),
                external_policy_local: false,
                internal_policy_local: false,
                session_affinity_timeout_seconds: None,
                health_check_node_port: None,
                endpoints: eps.to_vec(),
                headless_label,
                listed: listed(&eps, proxy_name_slice),
            }
        };
        let cluster = ClusterState {
            ip_family: crate::scenario::IpFamily::Ipv4,
            cluster_cidr: "10.244.0.0/16".parse().unwrap(),
            service_cidr: "10.96.0.0/12".parse().unwrap(),
            nodes: Vec::new(),
            service_ports: vec![
                sp("labelled", true, false),
                sp("sliced", false, true),
                sp("plain", false, false),
            ],
            options: Default::default(),
            ipv6: None,
            idle: false,
        };
        let n = node("node-a");
        assert!(matches!(
            seen_by(Release::V1_36, &cluster, &n),
            Cow::Borrowed(_)
        ));
        let old = seen_by(Release::V1_35, &cluster, &n);
        let names: Vec<(&str, usize)> = old
            .service_ports
            .iter()
            .map(|sp| (sp.name.as_str(), sp.endpoints.len()))
            .collect();
        assert_eq!(names, [("sliced", 0), ("plain", 1)]);
    }
}
