//! The builders the modes' unit tests share: proxier_test.go's node (`testNodeName`,
//! `testNodeIP`), its local-detector CIDR and service CIDR, and TCP service ports `ns/name:p80`
//! with ready endpoints on port 80, as upstream's `makeTestService` / `makeTestEndpointSlice`.

use crate::scenario::cluster::{ClusterState, EndpointInfo, NodeContext, ServicePortInfo};
use crate::scenario::{IpCidr, IpFamily, Protocol, ProxierOptions, ServiceType};
use std::net::IpAddr;

/// proxier_test.go's `testNodeName` / `testNodeIP`.
pub(crate) const NODE: &str = "test-node";

pub(crate) fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub(crate) fn cidr(s: &str) -> IpCidr {
    s.parse().unwrap()
}

pub(crate) fn node() -> NodeContext {
    NodeContext {
        name: NODE.into(),
        node_ip: ip("192.168.0.2"),
        pod_cidr: cidr("10.0.1.0/24"),
        local_addresses: vec![ip("10.0.1.1"), ip("192.168.0.2")],
        ipv6: None,
    }
}

/// A cluster with proxier_test.go's local-detector CIDR (10.0.0.0/8).
pub(crate) fn cluster(service_ports: Vec<ServicePortInfo>) -> ClusterState {
    ClusterState {
        ip_family: IpFamily::Ipv4,
        cluster_cidr: cidr("10.0.0.0/8"),
        service_cidr: cidr("172.30.0.0/16"),
        nodes: vec![],
        service_ports,
        options: ProxierOptions::default(),
        ipv6: None,
        idle: false,
    }
}

/// The IPv6 half of proxier_test.go's dual-stack fixtures: its node (`testNodeIPv6`,
/// 2001:db8::1) with a pod CIDR, the IPv6 local-detector CIDR (fd00:10::/64) and service CIDR
/// (fd00:10:96::/112), for the IPv6 proxier.
pub(crate) fn node6() -> NodeContext {
    NodeContext {
        name: NODE.into(),
        node_ip: ip("2001:db8::1"),
        pod_cidr: cidr("fd00:10::/64"),
        local_addresses: vec![ip("2001:db8::1"), ip("fd00:10::1")],
        ipv6: None,
    }
}

/// An IPv6 state with the given service ports.
pub(crate) fn cluster6(service_ports: Vec<ServicePortInfo>) -> ClusterState {
    ClusterState {
        ip_family: IpFamily::Ipv6,
        cluster_cidr: cidr("fd00:10::/64"),
        service_cidr: cidr("fd00:10:96::/112"),
        ..cluster(service_ports)
    }
}

/// A TCP ClusterIP service port `ns/name:p80` on port 80.
pub(crate) fn svc(ns: &str, name: &str, cluster_ip: &str) -> ServicePortInfo {
    ServicePortInfo {
        headless_label: false,
        listed: Vec::new(),
        namespace: ns.into(),
        name: name.into(),
        port_name: "p80".into(),
        type_: ServiceType::ClusterIP,
        protocol: Protocol::Tcp,
        cluster_ip: Some(ip(cluster_ip)),
        port: 80,
        node_port: None,
        external_ips: vec![],
        load_balancer_vips: vec![],
        load_balancer_source_ranges: vec![],
        external_policy_local: false,
        internal_policy_local: false,
        session_affinity_timeout_seconds: None,
        health_check_node_port: None,
        endpoints: vec![],
    }
}

pub(crate) trait With: Sized {
    fn with(mut self, f: impl FnOnce(&mut Self)) -> Self {
        f(&mut self);
        self
    }
}
impl<T> With for T {}

/// A ready, remote endpoint on port 80.
pub(crate) fn ep(addr: &str) -> EndpointInfo {
    EndpointInfo {
        ip: ip(addr),
        port: 80,
        node_name: None,
        ready: true,
        serving: true,
        terminating: false,
    }
}

pub(crate) fn local_ep(addr: &str) -> EndpointInfo {
    ep(addr).with(|e| e.node_name = Some(NODE.into()))
}

/// The services and endpoints of TestOverallIPTablesRules, and of TestOverallNFTablesRules,
/// which has the same six.
pub(crate) fn overall_cluster() -> ClusterState {
    cluster(vec![
        svc("ns1", "svc1", "172.30.0.41").with(|s| s.endpoints = vec![ep("10.180.0.1")]),
        svc("ns2", "svc2", "172.30.0.42").with(|s| {
            s.type_ = ServiceType::LoadBalancer;
            s.external_policy_local = true;
            s.node_port = Some(3001);
            s.load_balancer_vips = vec![ip("1.2.3.4")];
            s.external_ips = vec![ip("192.168.99.22")];
            s.health_check_node_port = Some(30000);
            // No node name: not local, so eTP Local has nothing to use here.
            s.endpoints = vec![ep("10.180.0.2")];
        }),
        svc("ns3", "svc3", "172.30.0.43").with(|s| {
            s.type_ = ServiceType::NodePort;
            s.node_port = Some(3003);
            s.endpoints = vec![ep("10.180.0.3")];
        }),
        svc("ns4", "svc4", "172.30.0.44").with(|s| {
            s.type_ = ServiceType::NodePort;
            s.external_ips = vec![ip("192.168.99.33")];
            s.endpoints = vec![ep("10.180.0.4"), local_ep("10.180.0.5")];
        }),
        svc("ns5", "svc5", "172.30.0.45").with(|s| {
            s.type_ = ServiceType::LoadBalancer;
            s.node_port = Some(3002);
            s.load_balancer_vips = vec![ip("5.6.7.8")];
            // Not NeedsHealthCheck (eTP Cluster): kube-proxy drops it.
            s.health_check_node_port = Some(30000);
            s.load_balancer_source_ranges = vec![cidr("203.0.113.0/25")];
            s.session_affinity_timeout_seconds = Some(10800);
            s.endpoints = vec![ep("10.180.0.3")];
        }),
        svc("ns6", "svc6", "172.30.0.46"),
    ])
}
