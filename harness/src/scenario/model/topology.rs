//! The machines of a scenario: nodes, their pods and the external client.

use super::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Topology {
    /// The underlay subnet shared by node IPs and the external client; `IPv4,IPv6` for a
    /// dual-stack underlay.
    pub underlay: DualCidr,
    /// The cluster's pod CIDR per family (`--cluster-cidr`); every node's podCIDRs lie inside.
    #[serde(rename = "clusterCIDR", alias = "clusterCIDRs")]
    pub cluster_cidr: DualCidr,
    /// The service CIDR per family (ClusterIPs lie inside it). Informational for proxiers.
    #[serde(
        rename = "serviceCIDR",
        alias = "serviceCIDRs",
        default = "default_service_cidr"
    )]
    pub service_cidr: DualCidr,
    /// The API server's `--service-node-port-range`: where nodePorts and healthCheckNodePorts
    /// must lie (default 30000-32767).
    #[serde(default = "default_node_port_range")]
    pub service_node_port_range: PortRange,
    pub nodes: Vec<Node>,
    #[serde(default)]
    pub pods: Vec<Pod>,
    #[serde(default)]
    pub external: Option<External>,
}

fn default_node_port_range() -> PortRange {
    PortRange::DEFAULT_NODE_PORTS
}

fn default_service_cidr() -> DualCidr {
    DualCidr::v4(Ipv4Cidr {
        addr: Ipv4Addr::new(10, 96, 0, 0),
        prefix_len: 12,
    })
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Node {
    pub name: String,
    /// The node's underlay address per family (its InternalIPs): `ip`, or `ips: [IPv4, IPv6]`.
    #[serde(alias = "ips")]
    pub ip: DualIp,
    /// More underlay addresses on the same interface, of either family the node has an `ip`
    /// of (the node still sources its own traffic from `ip`: an IPv4 one is kernel-secondary,
    /// an IPv6 one deprecated), e.g. a second address serving NodePorts.
    #[serde(
        rename = "secondaryIPs",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub secondary_ips: Vec<std::net::IpAddr>,
    /// `podCIDR`, or `podCIDRs: [IPv4, IPv6]` on a dual-stack node.
    #[serde(rename = "podCIDR", alias = "podCIDRs")]
    pub pod_cidr: DualCidr,
    /// IPVS services on the node before any proxier runs (another load balancer's, such as
    /// keepalived's), in `ipvsadm -Sn` lines, with `net.ipv4.vs.conntrack=1` as such a load
    /// balancer sets on a node with netfilter. Needs IP_VS in the kernel, in every mode.
    #[serde(
        rename = "existingIPVS",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub existing_ipvs: String,
}

impl Node {
    /// Whether `ip` is one of the node's underlay addresses (`ip`, of either family, or a
    /// secondary one).
    pub fn owns(&self, ip: impl Into<std::net::IpAddr>) -> bool {
        let ip = ip.into();
        self.secondary_ips.contains(&ip)
            || match ip {
                std::net::IpAddr::V4(v4) => self.ip.v4 == Some(v4),
                std::net::IpAddr::V6(v6) => self.ip.v6 == Some(v6),
            }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pod {
    pub name: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    pub node: String,
    /// Must lie in the node's podCIDR and not be its network, gateway (.1) or broadcast address;
    /// `ips: [IPv4, IPv6]` (`podIPs`) on a dual-stack node, the IPv6 one in its IPv6 podCIDR.
    #[serde(alias = "ips")]
    pub ip: DualIp,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Container ports the pod listens on (an echo server answers on each).
    #[serde(default)]
    pub ports: Vec<ContainerPort>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerPort {
    #[serde(default)]
    pub name: Option<String>,
    pub container_port: u16,
    #[serde(default)]
    pub protocol: Protocol,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct External {
    #[serde(default = "default_external_name")]
    pub name: String,
    /// `ip`, or `ips: [IPv4, IPv6]` on a dual-stack underlay.
    #[serde(alias = "ips")]
    pub ip: DualIp,
}

fn default_external_name() -> String {
    "client".into()
}

pub(super) fn default_namespace() -> String {
    "default".into()
}
