//! The kube-proxy configuration a scenario runs its proxiers with.

use crate::scenario::cidr::IpCidr;
use serde::{Deserialize, Serialize};

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
