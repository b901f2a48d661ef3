//! The scenario file schema, as deserialized from `scenarios/*.yaml`.
//!
//! Field names follow Kubernetes (camelCase, `spec`/`status` for Services, EndpointSlice-like
//! endpoints) so operators can paste from `kubectl get -o yaml` with little editing. Every struct
//! rejects unknown fields: a typo must be an error, never a silently ignored setting.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

pub use super::cidr::{DualCidr, DualIp, Ipv4Cidr, Ipv6Cidr, IPV4_FORM};
use super::family::{IpCidr, IpFamily, IpFamilyPolicy};

/// A port range as the API server's `--service-node-port-range` takes it: `30000-32767` (or
/// `BASE+SIZE`, e.g. `3000+100` for 3000-3100, as in k8s.io/apimachinery/pkg/util/net ParsePortRange).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    /// Kubernetes' default `--service-node-port-range`.
    pub const DEFAULT_NODE_PORTS: PortRange = PortRange {
        first: 30000,
        last: 32767,
    };

    pub fn contains(&self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }
}

impl std::fmt::Display for PortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl std::str::FromStr for PortRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!(
                "`{s}` is not a port range (expected FIRST-LAST or BASE+SIZE, e.g. 30000-32767)"
            )
        };
        let port = |t: &str| t.trim().parse::<u16>().map_err(|_| bad());
        let (first, last) = if let Some((a, b)) = s.split_once('-') {
            (port(a)?, port(b)?)
        } else if let Some((a, n)) = s.split_once('+') {
            let first = port(a)?;
            (first, first.checked_add(port(n)?).ok_or_else(bad)?)
        } else {
            return Err(bad());
        };
        if first == 0 || first > last {
            return Err(format!("port range `{s}` is empty or starts at 0"));
        }
        Ok(PortRange { first, last })
    }
}

serde_as_string!(PortRange);

/// Fields that a file may also spell with their alias (`field`, `alias`): the plural that
/// Kubernetes uses for a value per family. Locating a problem in the file tries both.
pub(crate) const ALIASES: &[(&str, &str)] = &[
    ("ip", "ips"),
    ("podCIDR", "podCIDRs"),
    ("clusterCIDR", "clusterCIDRs"),
    ("serviceCIDR", "serviceCIDRs"),
];

/// A whole scenario file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    /// Defaults to the file stem when absent.
    #[serde(default)]
    pub name: String,
    /// One line: which Kubernetes behaviour this scenario checks.
    #[serde(default)]
    pub description: String,
    pub topology: Topology,
    #[serde(default)]
    pub services: Vec<Service>,
    /// Explicit endpoint slices. A service with a selector and no slice here gets one derived
    /// from the pods its selector matches (all ready), see `cluster::ClusterState`.
    #[serde(default)]
    pub endpoint_slices: Vec<EndpointSlice>,
    /// Options handed to every proxier (the kube-proxy flags that change programming).
    #[serde(default)]
    pub proxier: ProxierOptions,
    #[serde(default)]
    pub probes: Vec<Probe>,
    /// Changes to the cluster after the initial state, in order; after each, the proxier
    /// re-syncs every node and the step's probes run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<Step>,
}

/// One change of the cluster, then a re-sync of every node, then probes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Step {
    /// Defaults to `step-N` (1-based); names the step in reports and snapshots.
    #[serde(default)]
    pub name: String,
    /// Seconds of real time to let pass before the step's changes, its re-sync and its probes
    /// (at most [`MAX_WAIT_SECONDS`]): for what only time does, such as a ClientIP affinity's
    /// `timeoutSeconds` running out, an IPVS real server draining or a conntrack entry ageing.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wait_seconds: u32,
    /// Objects created or replaced, as `kubectl apply` of whole manifests does: a Service
    /// replaces the one of the same namespace/name, an EndpointSlice every explicit slice of
    /// its Service; a pod is created (after the step's deletions).
    #[serde(default)]
    pub apply: Objects,
    /// Objects removed, by reference.
    #[serde(default)]
    pub delete: Deletions,
    /// Restart the proxier before it syncs: it programs the new state from scratch over
    /// what the node holds, as a restarted kube-proxy does, knowing nothing of earlier states.
    #[serde(default)]
    pub restart_proxier: bool,
    #[serde(default)]
    pub probes: Vec<Probe>,
}

/// The longest a step may wait (`waitSeconds`): a run is meant to take seconds, and every
/// timeout worth waiting out in a scenario can be set shorter (ClientIP affinity takes 1 s).
pub const MAX_WAIT_SECONDS: u32 = 60;

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Services, EndpointSlices and pods a step applies.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Objects {
    #[serde(default)]
    pub services: Vec<Service>,
    #[serde(default)]
    pub endpoint_slices: Vec<EndpointSlice>,
    /// Pods created by the step, written as `topology.pods` are: each gets its network
    /// namespace on its node and its echo servers, and joins every Service whose selector
    /// matches it. A pod is never replaced: one of the same name must be gone first (deleted
    /// by this step or an earlier one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<Pod>,
}

/// What a step deletes: `namespace/name` or `name` (in `default`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Deletions {
    /// Services; their explicit EndpointSlices go with them, as the garbage collector does.
    #[serde(default)]
    pub services: Vec<String>,
    /// The explicit EndpointSlices of these Services.
    #[serde(default)]
    pub endpoint_slices: Vec<String>,
    /// Pods: the pod's network namespace is removed, and it leaves every Service whose
    /// endpoints come from its selector.
    #[serde(default)]
    pub pods: Vec<String>,
}

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

fn default_namespace() -> String {
    "default".into()
}

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

/// The kube-proxy configuration knobs that change what a proxier programs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProxierOptions {
    /// `--masquerade-all`.
    #[serde(default)]
    pub masquerade_all: bool,
    /// Pass `topology.clusterCIDR` as `--cluster-cidr` (detect-local-mode ClusterCIDR). When
    /// false, kube-proxy runs with no local detector.
    #[serde(rename = "clusterCIDR", default = "yes")]
    pub cluster_cidr: bool,
    /// `--ipvs-scheduler`.
    #[serde(default = "default_scheduler")]
    pub ipvs_scheduler: String,
    /// `--ipvs-strict-arp`.
    #[serde(rename = "strictARP", default)]
    pub strict_arp: bool,
    /// `--iptables-localhost-nodeports` (iptables mode, default true): NodePorts on 127.0.0.1,
    /// with `route_localnet`. IPVS mode never serves localhost NodePorts, whatever this says.
    #[serde(default = "yes")]
    pub localhost_node_ports: bool,
    /// MASQUERADE with `--random-fully`, which both modes add when the node's iptables supports
    /// it (`HasRandomFully()`, iptables >= 1.6.2); `false` models an older iptables.
    #[serde(default = "yes")]
    pub random_fully: bool,
    /// `--iptables-masquerade-bit` (0-31, default 14 as in
    /// pkg/proxy/apis/config/v1alpha1/defaults.go): the fwmark bit both modes mark packets for
    /// masquerade with.
    #[serde(default = "default_masquerade_bit")]
    pub masquerade_bit: u8,
    /// `--nodeport-addresses`: the node addresses that serve NodePorts, as CIDRs or the one
    /// keyword `primary` (the node IP). Empty matches every address, the default of both modes.
    #[serde(default)]
    pub node_port_addresses: Vec<NodePortAddress>,
    /// `--ipvs-tcp-timeout`, `--ipvs-tcpfin-timeout`, `--ipvs-udp-timeout`, in seconds; 0 (the
    /// default) keeps the kernel's. IPVS mode only.
    #[serde(default)]
    pub ipvs_timeouts: IpvsTimeouts,
    /// `--ipvs-exclude-cidrs`: IPVS services in these CIDRs are not kube-proxy's, so its
    /// clean-up of services it did not program leaves them alone. IPVS mode only.
    #[serde(rename = "ipvsExcludeCIDRs", default)]
    pub ipvs_exclude_cidrs: Vec<IpCidr>,
    /// `conntrack.tcpBeLiberal` (`--conntrack-tcp-be-liberal`): kube-proxy sets the node's
    /// `net.netfilter.nf_conntrack_tcp_be_liberal` to 1 before it creates its proxiers
    /// (`conntrack.SetSysctls`, pkg/proxy/conntrack/sysctls.go, from `platformSetup` in
    /// cmd/kube-proxy/app/server_linux.go), and iptables mode, finding it set, writes no drop of
    /// INVALID packets (`NewProxier`, pkg/proxy/iptables/proxier.go).
    #[serde(default)]
    pub tcp_be_liberal: bool,
}

/// IPVS connection timeouts in seconds; 0 keeps the kernel's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IpvsTimeouts {
    #[serde(default)]
    pub tcp: u32,
    #[serde(default)]
    pub tcp_fin: u32,
    #[serde(default)]
    pub udp: u32,
}

impl IpvsTimeouts {
    /// Whether any timeout is set: kube-proxy only calls `ConfigureTimeouts` then.
    pub fn any(&self) -> bool {
        self.tcp > 0 || self.tcp_fin > 0 || self.udp > 0
    }
}

/// One `--nodeport-addresses` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodePortAddress {
    /// `primary`: cmd/kube-proxy/app/server.go turns it into the node IP of each family as a
    /// one-address prefix.
    Primary,
    /// Either family: each family's proxier takes those of its own.
    Cidr(IpCidr),
}

impl std::fmt::Display for NodePortAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodePortAddress::Primary => f.write_str("primary"),
            NodePortAddress::Cidr(cidr) => write!(f, "{cidr}"),
        }
    }
}

impl std::str::FromStr for NodePortAddress {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "primary" {
            return Ok(NodePortAddress::Primary);
        }
        s.parse()
            .map(NodePortAddress::Cidr)
            .map_err(|e| format!("{e}; expected a CIDR or `primary`"))
    }
}

serde_as_string!(NodePortAddress);

fn default_masquerade_bit() -> u8 {
    14
}

fn yes() -> bool {
    true
}

fn default_scheduler() -> String {
    "rr".into()
}

impl Default for ProxierOptions {
    fn default() -> Self {
        Self {
            masquerade_all: false,
            cluster_cidr: true,
            ipvs_scheduler: default_scheduler(),
            strict_arp: false,
            localhost_node_ports: true,
            random_fully: true,
            masquerade_bit: default_masquerade_bit(),
            node_port_addresses: Vec::new(),
            ipvs_timeouts: IpvsTimeouts::default(),
            ipvs_exclude_cidrs: Vec::new(),
            tcp_be_liberal: false,
        }
    }
}

/// A probe: one first packet (or one socket connection) from a source to a destination.
/// Probes are executed by the `probe` module (a later milestone); the schema is fixed here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Probe {
    pub name: String,
    /// Required, except for a `continue` probe, which goes the way its flow went.
    #[serde(default)]
    pub from: ProbeSource,
    #[serde(default)]
    pub to: ProbeTarget,
    #[serde(default)]
    pub protocol: Protocol,
    /// Fixed source port so the wire bytes are the same on every run. Defaults to
    /// 20000 + 1000 × the probe's index, so no two probes share a connection entry in IPVS's
    /// table (which, unlike conntrack, cannot be flushed without removing the services), even
    /// when a random-choice proxier makes the harness fire extra shots.
    #[serde(default)]
    pub source_port: Option<u16>,
    /// Send the probe this many times (distinct source ports from `sourcePort` upward) and
    /// record the sequence (IPVS) or set (random schedulers) of backends reached.
    #[serde(default = "one")]
    pub repeat: u32,
    #[serde(default)]
    pub expect: Option<Expectation>,
    /// Per-proxier expectations replacing `expect` for that proxier (by name), where
    /// implementations legitimately differ; the scenario's comments must say why.
    #[serde(default)]
    pub expect_for: BTreeMap<String, Expectation>,
    /// Open the probe's flow with a real socket from its source and keep it across steps
    /// under this name: an established TCP connection, or a UDP socket on its fixed source
    /// port (a DNS-style client). Needs `repeat: 1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<String>,
    /// Send the next packet of the flow kept under this name (in an earlier step) and judge
    /// where it goes. Conntrack is not flushed for it: the flow rides on its entry.
    #[serde(rename = "continue", default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<String>,
}

fn one() -> u32 {
    1
}

impl Expectation {
    /// Counts, a sequence or a cycle declare a deterministic choice: the probe's shots are exactly those
    /// the scenario asks for.
    pub fn fixes_shot_count(&self) -> bool {
        !self.counts.is_empty() || !self.sequence.is_empty() || !self.cycle.is_empty()
    }
}

impl Scenario {
    /// The family `probe` is sent in: its literal address's, else the one it picks, else its
    /// Service's primary family (IPv4 for a Service with no ClusterIP).
    pub fn probe_family(&self, probe: &Probe) -> IpFamily {
        if let Some(ip) = probe.to.ip {
            return IpFamily::of(ip);
        }
        let service = probe.to.service.as_deref().and_then(|wanted| {
            let (ns, name) = wanted.split_once('/').unwrap_or(("default", wanted));
            self.services
                .iter()
                .find(|s| s.name == name && s.namespace == ns)
        });
        probe
            .to
            .family
            .or_else(|| {
                service
                    .and_then(|svc| svc.cluster_ips().first().copied())
                    .map(IpFamily::of)
            })
            .unwrap_or_else(|| self.topology.cluster_cidr.primary_family())
    }
}

impl Probe {
    /// The expectation that applies to `proxier`.
    pub fn expectation_for(&self, proxier: &str) -> Option<&Expectation> {
        self.expect_for.get(proxier).or(self.expect.as_ref())
    }

    /// The source port of the first repetition of the probe at `index` in its scenario.
    pub fn first_source_port(&self, index: usize) -> u32 {
        match self.source_port {
            Some(port) => u32::from(port),
            None => 20000 + 1000 * index as u32,
        }
    }
}

/// Where a probe starts. Exactly one field must be set.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeSource {
    #[serde(default)]
    pub pod: Option<String>,
    /// The node's own network namespace, sourcing from its node IP (or from `address`).
    #[serde(default)]
    pub node: Option<String>,
    /// With `node`: send from this address instead of the node IP. It must be a load balancer
    /// IP of a Service (`status.loadBalancer.ingress`): a node's connection to its own LB IP
    /// leaves from that IP when something outside kube-proxy SNATs it there, and kube-proxy
    /// admits it wherever `loadBalancerSourceRanges` admit the node IP (TestLoadBalancer's
    /// "same node to LB1, SNATted to LB1", pkg/proxy/iptables/proxier_test.go).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<std::net::IpAddr>,
    /// The node's namespace, sourcing from 127.0.0.1.
    #[serde(default)]
    pub node_localhost: Option<String>,
    /// The external client on the underlay.
    #[serde(default)]
    pub external: bool,
}

/// Where a probe goes: a service address of a given kind, or a literal address.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeTarget {
    /// `namespace/name` or `name` (default namespace).
    #[serde(default)]
    pub service: Option<String>,
    /// Service port name or number.
    #[serde(default)]
    pub port: Option<TargetPort>,
    #[serde(default)]
    pub via: Option<Via>,
    /// For `via: nodePort`: which node's IP to hit (or localhost for nodeLocalhost sources).
    #[serde(default)]
    pub node: Option<String>,
    /// A literal destination instead of a service, of either family.
    #[serde(default)]
    pub ip: Option<IpAddr>,
    /// Which of the Service's families to reach it by (its ClusterIP, external IP or load
    /// balancer IP of that family, a node's address of that family for a NodePort); the
    /// Service's primary family when absent. The source then sends from its own address of
    /// that family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<IpFamily>,
    #[serde(default)]
    pub dport: Option<u16>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Via {
    ClusterIP,
    NodePort,
    #[serde(rename = "externalIP")]
    ExternalIP,
    LoadBalancer,
    /// The Service's `healthCheckNodePort` on `node`'s IP (TCP, whatever the port's protocol):
    /// answered by the node itself, where kube-proxy's health server listens.
    HealthCheckNodePort,
}

/// What Kubernetes requires of a probe's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Expectation {
    /// Exactly this set of pods (by name): every shot lands on one of them and each of them is
    /// reached by at least one shot. A proxier that pins one backend cannot pass it.
    #[serde(default)]
    pub reaches: Vec<String>,
    /// Every shot lands on one of these pods; which, and whether all are used, is the proxier's
    /// choice (e.g. one connection to a Service with several endpoints).
    #[serde(default)]
    pub reaches_one_of: Vec<String>,
    /// Exactly this many shots land on each listed pod and none elsewhere: for deterministic
    /// schedulers. The probe then fires exactly `repeat` shots (their sum), even for a proxier
    /// whose choice is random.
    #[serde(default)]
    pub counts: BTreeMap<String, u32>,
    /// The backends in the order the shots reach them, repeated from the start while shots
    /// remain (`[web-3, web-2, web-1]` for a round robin over 45 shots). Like `counts`, fixes the
    /// shot count at `repeat`.
    #[serde(default)]
    pub sequence: Vec<String>,
    /// These backends, each once in every round of as many shots, in one order that every round
    /// keeps, whichever order that is: a round robin whose order the proxier does not fix (real
    /// kube-proxy IPVS adds its real servers in Go map order, pkg/proxy/ipvs/proxier.go
    /// `syncEndpoint`: `newEndpoints.UnsortedList()`). Like `sequence`, fixes the shot count at
    /// `repeat`.
    #[serde(default)]
    pub cycle: Vec<String>,
    /// `true`: every shot lands on one and the same backend, whichever it is (session affinity,
    /// source hashing).
    #[serde(default)]
    pub same_backend: bool,
    #[serde(default)]
    pub source: Option<SourceExpectation>,
    /// The reply arrives at the client from the address it sent to.
    #[serde(default)]
    pub reply: Option<bool>,
    /// Not delivered at all: dropped, rejected or timed out.
    #[serde(default)]
    pub outcome: Option<OutcomeExpectation>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SourceExpectation {
    Preserved,
    Masqueraded,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OutcomeExpectation {
    Delivered,
    Dropped,
    Rejected,
    NotDelivered,
    /// Answered by the node the packet was sent to, from the address it was sent to, and
    /// delivered to no pod (a node-local server such as kube-proxy's health server).
    AnsweredByNode,
}

#[cfg(test)]
mod tests {
    use super::PortRange;

    #[test]
    fn port_ranges_parse_as_the_api_server_takes_them() {
        assert_eq!(
            "3000-3100".parse(),
            Ok(PortRange {
                first: 3000,
                last: 3100
            })
        );
        assert_eq!(
            "3000+100".parse(),
            Ok(PortRange {
                first: 3000,
                last: 3100
            })
        );
        assert_eq!(PortRange::DEFAULT_NODE_PORTS.to_string(), "30000-32767");
        for bad in ["3000", "a-b", "3100-3000", "0-10", "65000+1000"] {
            assert!(bad.parse::<PortRange>().is_err(), "{bad}");
        }
    }
}
