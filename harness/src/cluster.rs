//! The cluster state a proxier sees: services resolved to service ports, endpoints resolved to
//! IP:port with their conditions — what kube-proxy holds in its ServicePort/Endpoint maps after
//! its change trackers ran (pkg/proxy/serviceport.go, pkg/proxy/endpoint.go).
//!
//! This is also the JSON document (`version: 1`) handed to `exec:` proxiers on stdin, so field
//! names are part of a public, versioned schema: add fields, never rename them.

use crate::scenario::{Ipv4Cidr, Protocol, ProxierOptions, ServiceType};
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;

/// Version of the JSON schema of [`ClusterState`] / [`ProxierInput`] for a node's first sync.
pub const SCHEMA_VERSION: u32 = 1;

/// The version of a document for a later sync (a scenario step): version 1 plus `sync`.
pub const STEP_SCHEMA_VERSION: u32 = 2;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterState {
    #[serde(rename = "clusterCIDR")]
    pub cluster_cidr: Ipv4Cidr,
    #[serde(rename = "serviceCIDR")]
    pub service_cidr: Ipv4Cidr,
    pub nodes: Vec<NodeInfo>,
    /// One entry per (service, port), ordered by namespace, name, port name.
    pub service_ports: Vec<ServicePortInfo>,
    pub options: ProxierOptions,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    pub name: String,
    pub ip: Ipv4Addr,
    #[serde(rename = "podCIDR")]
    pub pod_cidr: Ipv4Cidr,
}

/// The node being programmed, as the proxier running on it sees itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeContext {
    pub name: String,
    #[serde(rename = "nodeIP")]
    pub node_ip: Ipv4Addr,
    #[serde(rename = "podCIDR")]
    pub pod_cidr: Ipv4Cidr,
    /// Every address on the node's interfaces other than kube-ipvs0 and loopback (node IP,
    /// bridge gateway, VXLAN address), sorted: what kube-proxy's
    /// `GetAllLocalAddressesExcept("kube-ipvs0")` returns and uses as NodePort addresses.
    pub local_addresses: Vec<Ipv4Addr>,
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
    pub cluster_ip: Option<Ipv4Addr>,
    pub port: u16,
    pub node_port: Option<u16>,
    #[serde(rename = "externalIPs")]
    pub external_ips: Vec<Ipv4Addr>,
    /// LoadBalancer ingress IPs with ipMode VIP (or unset); `ipMode: Proxy` ones are excluded, as
    /// in pkg/proxy/serviceport.go.
    #[serde(rename = "loadBalancerVIPs")]
    pub load_balancer_vips: Vec<Ipv4Addr>,
    pub load_balancer_source_ranges: Vec<Ipv4Cidr>,
    pub external_policy_local: bool,
    pub internal_policy_local: bool,
    /// ClientIP affinity timeout; `None` without session affinity.
    pub session_affinity_timeout_seconds: Option<u32>,
    pub health_check_node_port: Option<u16>,
    pub endpoints: Vec<EndpointInfo>,
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
    pub ip: Ipv4Addr,
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
