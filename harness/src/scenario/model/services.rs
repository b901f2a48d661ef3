//! Services and EndpointSlices, as the Kubernetes API spells them.

use super::*;
use crate::scenario::cidr::IpCidr;
use crate::scenario::family::{IpFamily, IpFamilyPolicy};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub enum Protocol {
    #[default]
    #[serde(rename = "TCP")]
    Tcp,
    #[serde(rename = "UDP")]
    Udp,
    #[serde(rename = "SCTP")]
    Sctp,
}

impl Protocol {
    /// Lower-case, as ipset entries and iptables `-p` spell it.
    pub fn lower(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }

    pub fn upper(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }
}

/// `service.kubernetes.io/service-proxy-name` (pkg/proxy/apis `LabelServiceProxyName`): a
/// Service with it belongs to another proxy, and kube-proxy's Service informer skips it.
pub const LABEL_SERVICE_PROXY_NAME: &str = "service.kubernetes.io/service-proxy-name";

/// A Service: `name`, `namespace`, `labels` and `annotations` stand for `metadata`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Service {
    pub name: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// `metadata.labels`. kube-proxy leaves a Service labelled
    /// `service.kubernetes.io/service-proxy-name` (any value) to the proxy it names; the
    /// EndpointSlice and endpoints controllers copy the labels onto the Service's slices and
    /// Endpoints.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`, served as written (no built-in proxier reads any).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    pub spec: ServiceSpec,
    #[serde(default)]
    pub status: ServiceStatus,
}

impl Service {
    /// The Service's ClusterIPs, primary first: `clusterIPs`, or `clusterIP` alone; empty for
    /// a headless Service.
    pub fn cluster_ips(&self) -> Vec<IpAddr> {
        let spec = &self.spec;
        let texts: Vec<&str> = if spec.cluster_ips.is_empty() {
            spec.cluster_ip.as_deref().into_iter().collect()
        } else {
            spec.cluster_ips.iter().map(String::as_str).collect()
        };
        texts.into_iter().filter_map(|t| t.parse().ok()).collect()
    }

    /// Labelled for another proxy (`service.kubernetes.io/service-proxy-name`, any value):
    /// kube-proxy's Service informer leaves it out (label selector
    /// `!service.kubernetes.io/service-proxy-name`, cmd/kube-proxy/app/server.go).
    pub fn is_for_another_proxy(&self) -> bool {
        self.labels.contains_key(LABEL_SERVICE_PROXY_NAME)
    }

    /// `clusterIP: None` (or `clusterIPs: [None]`): a headless Service, which proxiers skip.
    pub fn is_headless(&self) -> bool {
        let spec = &self.spec;
        spec.cluster_ip.as_deref() == Some("None")
            || spec.cluster_ips.first().map(String::as_str) == Some("None")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ServiceType {
    #[default]
    ClusterIP,
    NodePort,
    LoadBalancer,
    ExternalName,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum TrafficPolicy {
    #[default]
    Cluster,
    Local,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum SessionAffinity {
    #[default]
    None,
    ClientIP,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceSpec {
    #[serde(rename = "type", default)]
    pub type_: ServiceType,
    /// `None` (the string) makes the service headless; absent is an error for non-ExternalName
    /// unless `clusterIPs` gives it.
    #[serde(rename = "clusterIP", default)]
    pub cluster_ip: Option<String>,
    /// The ClusterIP of each family, primary first (`clusterIPs[0]` is `clusterIP`); one per
    /// family in `ipFamilies`. kpct allocates none: a dual-stack Service lists both.
    #[serde(rename = "clusterIPs", default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_ips: Vec<String>,
    /// The Service's families, primary first; inferred from `clusterIPs` when absent, as the
    /// API server does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_families: Vec<IpFamily>,
    /// `SingleStack` when absent; `RequireDualStack` needs a dual-stack cluster,
    /// `PreferDualStack` takes both families only where the cluster has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_family_policy: Option<IpFamilyPolicy>,
    #[serde(default)]
    pub selector: Option<BTreeMap<String, String>>,
    pub ports: Vec<ServicePort>,
    /// Either family: each family's proxier takes those of its own (`MapIPsByIPFamily`).
    #[serde(rename = "externalIPs", default)]
    pub external_ips: Vec<IpAddr>,
    #[serde(default)]
    pub external_traffic_policy: Option<TrafficPolicy>,
    #[serde(default)]
    pub internal_traffic_policy: Option<TrafficPolicy>,
    /// Either family, filtered per family like `externalIPs`.
    #[serde(default)]
    pub load_balancer_source_ranges: Vec<IpCidr>,
    #[serde(default)]
    pub session_affinity: SessionAffinity,
    #[serde(default)]
    pub session_affinity_config: Option<SessionAffinityConfig>,
    #[serde(default)]
    pub health_check_node_port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionAffinityConfig {
    #[serde(rename = "clientIP")]
    pub client_ip: ClientIpConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientIpConfig {
    pub timeout_seconds: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServicePort {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub protocol: Protocol,
    pub port: u16,
    /// Defaults to `port`.
    #[serde(default)]
    pub target_port: Option<TargetPort>,
    #[serde(default)]
    pub node_port: Option<u16>,
}

/// `targetPort`: a number, or the name of a container port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TargetPort {
    Number(u16),
    Name(String),
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceStatus {
    #[serde(default)]
    pub load_balancer: LoadBalancerStatus,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoadBalancerStatus {
    #[serde(default)]
    pub ingress: Vec<LoadBalancerIngress>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoadBalancerIngress {
    pub ip: IpAddr,
    #[serde(default)]
    pub ip_mode: Option<IpMode>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum IpMode {
    VIP,
    Proxy,
}

/// An EndpointSlice, tied to its Service by `service` (the `kubernetes.io/service-name` label).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndpointSlice {
    pub service: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// The family of every address in the slice (`IPv4` when absent); only the proxier of
    /// that family reads it.
    #[serde(default, skip_serializing_if = "IpFamily::is_ipv4")]
    pub address_type: IpFamily,
    /// `metadata.labels` beside the ones every slice gets (`kubernetes.io/service-name`, its
    /// manager): `service.kubernetes.io/headless` keeps it from every kube-proxy's
    /// EndpointSlice informer, `service.kubernetes.io/service-proxy-name` from v1.35's and
    /// earlier (cmd/kube-proxy/app/server.go).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    pub ports: Vec<EndpointPort>,
    pub endpoints: Vec<Endpoint>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndpointPort {
    #[serde(default)]
    pub name: Option<String>,
    pub port: u16,
    #[serde(default)]
    pub protocol: Protocol,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Endpoint {
    pub addresses: Vec<IpAddr>,
    #[serde(default)]
    pub conditions: EndpointConditions,
    /// Defaults to the node of the pod owning the address.
    #[serde(default)]
    pub node_name: Option<String>,
}

/// EndpointConditions; each absent condition defaults on its own as the EndpointSlice API says
/// and kube-proxy reads it (ready and serving true, terminating false).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndpointConditions {
    #[serde(default)]
    pub ready: Option<bool>,
    #[serde(default)]
    pub serving: Option<bool>,
    #[serde(default)]
    pub terminating: Option<bool>,
}
