//! The cluster state a proxier sees: services resolved to service ports, endpoints resolved to
//! IP:port with their conditions — what kube-proxy holds in its ServicePort/Endpoint maps after
//! its change trackers ran (pkg/proxy/serviceport.go, pkg/proxy/endpoint.go).
//!
//! One state per IP family, as kube-proxy runs one proxier per family on a dual-stack node
//! (pkg/proxy/metaproxier): each holds only its family's addresses (the Service's ClusterIP of
//! that family, its external and load balancer IPs and source ranges of that family, the
//! endpoints of EndpointSlices of that address type), and a Service without a ClusterIP of the
//! family is not in it at all (`serviceToServiceMap`, pkg/proxy/servicechangetracker.go).
//!
//! This is also the JSON document (`version: 1`) handed to `exec:` proxiers on stdin, so field
//! names are part of a public, versioned schema: add fields, never rename them.

use crate::scenario::{IpCidr, IpFamily, Protocol, ProxierOptions, ServiceType};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// Version of the JSON schema of [`ClusterState`] / [`ProxierInput`] for a node's first sync.
pub const SCHEMA_VERSION: u32 = 1;

/// The version of a document for a later sync (a scenario step): version 1 plus `sync`.
pub const STEP_SCHEMA_VERSION: u32 = 2;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterState {
    /// The family of every address in this state.
    pub ip_family: IpFamily,
    #[serde(rename = "clusterCIDR")]
    pub cluster_cidr: IpCidr,
    #[serde(rename = "serviceCIDR")]
    pub service_cidr: IpCidr,
    pub nodes: Vec<NodeInfo>,
    /// One entry per (service, port), ordered by namespace, name, port name.
    pub service_ports: Vec<ServicePortInfo>,
    pub options: ProxierOptions,
    /// In the IPv4 state of a dual-stack cluster, the IPv6 proxier's state (without an `ipv6`
    /// of its own); absent from a single-stack cluster's document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<Box<ClusterState>>,
    /// The state of a proxier of a family the cluster has no ranges of ([`ClusterState::idle`]):
    /// no Services, no ServiceCIDR, no cluster CIDR (`cluster_cidr` and `service_cidr` are the
    /// family's zero prefix, and mean nothing). Absent (false) from every document.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub idle: bool,
}

impl ClusterState {
    /// This state, then the IPv6 proxier's of a dual-stack cluster.
    pub fn families(&self) -> impl Iterator<Item = &ClusterState> {
        std::iter::once(self).chain(self.ipv6.as_deref())
    }

    /// The state of `family`'s proxier, if the cluster has that family.
    pub fn of(&self, family: crate::scenario::IpFamily) -> Option<&ClusterState> {
        self.families().find(|c| c.ip_family == family)
    }

    /// The state of the idle `family` proxier kube-proxy runs beside the one of an IPv6-only
    /// cluster (`self`): it runs dual-stack wherever the node supports both families, whatever
    /// the cluster (`platformCheckSupported` and `createProxier`,
    /// cmd/kube-proxy/app/server_linux.go), and IPv4 is always there. That proxier knows no
    /// Service, no ServiceCIDR (the cluster has none of its family) and no cluster CIDR (kpct
    /// configures the cluster's: its local detector is the no-op one).
    pub fn idle(&self, family: crate::scenario::IpFamily) -> ClusterState {
        let zero = IpCidr::new(family.unspecified(), 0).expect("a zero prefix");
        ClusterState {
            ip_family: family,
            cluster_cidr: zero,
            service_cidr: zero,
            nodes: Vec::new(),
            service_ports: Vec::new(),
            options: ProxierOptions {
                cluster_cidr: false,
                ..self.options.clone()
            },
            ipv6: None,
            idle: true,
        }
    }

    /// Every healthCheckNodePort of either family: the ports kube-proxy's health server
    /// listens on.
    pub fn health_check_node_ports(&self) -> std::collections::BTreeSet<u16> {
        self.families()
            .flat_map(|c| &c.service_ports)
            .filter_map(|sp| sp.health_check_node_port)
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    pub name: String,
    pub ip: IpAddr,
    #[serde(rename = "podCIDR")]
    pub pod_cidr: IpCidr,
}

/// The node being programmed, as the proxier running on it sees itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeContext {
    pub name: String,
    #[serde(rename = "nodeIP")]
    pub node_ip: IpAddr,
    #[serde(rename = "podCIDR")]
    pub pod_cidr: IpCidr,
    /// Every address on the node's interfaces other than kube-ipvs0 and loopback (node IP,
    /// bridge gateway, VXLAN address), sorted: what kube-proxy's
    /// `GetAllLocalAddressesExcept("kube-ipvs0")` returns and uses as NodePort addresses, of
    /// the state's family (IPv6 link-local addresses left out, as kube-proxy filters them).
    pub local_addresses: Vec<IpAddr>,
    /// On a dual-stack node, the node as its IPv6 proxier sees itself; absent on a
    /// single-stack node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<Box<NodeContext>>,
}

/// A ServicePort: one port of one Service (kube-proxy's `ServicePortName` + `BaseServicePortInfo`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServicePortInfo {
    pub namespace: String,
    pub name: String,
    /// Empty for an unnamed port, as in kube-proxy's ServicePortName.
    pub port_name: String,
    #[serde(rename = "type")]
    pub type_: ServiceType,
    pub protocol: Protocol,
    /// `None` for headless services (which proxiers ignore).
    #[serde(rename = "clusterIP")]
    pub cluster_ip: Option<IpAddr>,
    pub port: u16,
    pub node_port: Option<u16>,
    #[serde(rename = "externalIPs")]
    pub external_ips: Vec<IpAddr>,
    /// LoadBalancer ingress IPs with ipMode VIP (or unset); `ipMode: Proxy` ones are excluded, as
    /// in pkg/proxy/serviceport.go.
    #[serde(rename = "loadBalancerVIPs")]
    pub load_balancer_vips: Vec<IpAddr>,
    pub load_balancer_source_ranges: Vec<IpCidr>,
    pub external_policy_local: bool,
    pub internal_policy_local: bool,
    /// ClientIP affinity timeout; `None` without session affinity.
    pub session_affinity_timeout_seconds: Option<u32>,
    pub health_check_node_port: Option<u16>,
    /// The endpoints, one per `IP:port`, as kube-proxy v1.37's EndpointSlice cache holds them
    /// (`EndpointSliceCache.addEndpoints`, pkg/proxy/endpointslicecache.go: of an address
    /// listed twice, a later copy that is not terminating replaces an earlier one), sorted.
    pub endpoints: Vec<EndpointInfo>,
    /// The Service carries `service.kubernetes.io/headless`: kube-proxy v1.35 and earlier never
    /// see it (their Service informer filters the label, cmd/kube-proxy/app/server.go); the
    /// built-ins of those releases leave it out. Not in an `exec:` proxier's document.
    #[serde(skip)]
    pub headless_label: bool,
    /// Every endpoint every slice lists, in the slices' order, copies of one address included,
    /// each with whether its slice carries `service.kubernetes.io/service-proxy-name` (v1.35 and
    /// earlier filter such slices too): what an older release's cache makes of them
    /// (`crate::proxier`'s release view). Not in an `exec:` proxier's document.
    #[serde(skip)]
    pub listed: Vec<ListedEndpoint>,
}

/// One endpoint as a slice lists it (see [`ServicePortInfo::listed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedEndpoint {
    pub endpoint: EndpointInfo,
    /// Its slice is labelled `service.kubernetes.io/service-proxy-name`.
    pub proxy_name_slice: bool,
}

impl ServicePortInfo {
    /// `namespace/name:port` (or `namespace/name` for an unnamed port), kube-proxy's
    /// `ServicePortName.String()`.
    pub fn service_port_name(&self) -> String {
        if self.port_name.is_empty() {
            format!("{}/{}", self.namespace, self.name)
        } else {
            format!("{}/{}:{}", self.namespace, self.name, self.port_name)
        }
    }

    /// kube-proxy's `ExternallyAccessible()`: has a NodePort, external IPs or LB VIPs.
    pub fn externally_accessible(&self) -> bool {
        self.node_port.is_some()
            || !self.external_ips.is_empty()
            || !self.load_balancer_vips.is_empty()
    }
}

/// One endpoint address for one service port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointInfo {
    pub ip: IpAddr,
    pub port: u16,
    pub node_name: Option<String>,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
}

impl EndpointInfo {
    pub fn is_local(&self, node: &NodeContext) -> bool {
        self.node_name.as_deref() == Some(node.name.as_str())
    }
}

/// What an `exec:` proxier receives on stdin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxierInput {
    pub version: u32,
    pub cluster: ClusterState,
    pub node: NodeContext,
    /// Set for a later sync (version 2): what changed since the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<StepSync>,
}

/// What a proxier knows at a later sync of a node it programmed before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepSync {
    /// The scenario step that changed the cluster.
    pub step: String,
    /// The cluster state of the previous sync; `null` when the proxier was restarted and
    /// remembers nothing.
    pub previous: Option<ClusterState>,
}
