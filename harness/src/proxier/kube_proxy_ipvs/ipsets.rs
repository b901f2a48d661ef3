//! The ipsets of the IPVS proxier: names, types and comments from `ipsetInfo` (proxier.go) and
//! pkg/proxy/ipvs/ipset.go, create options from pkg/proxy/ipvs/ipset/ipset.go `createSet`, entry
//! spelling from `Entry.String`.

use crate::programming::{IpSet, IpSetType};
use crate::scenario::{IpCidr, IpFamily, Protocol};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// One set of `ipsetInfo`, in that table's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum SetName {
    LoopBack,
    ClusterIp,
    ExternalIp,
    ExternalIpLocal,
    LoadBalancer,
    LoadBalancerFw,
    LoadBalancerLocal,
    LoadBalancerSourceIp,
    LoadBalancerSourceCidr,
    NodePortTcp,
    NodePortLocalTcp,
    NodePortUdp,
    NodePortLocalUdp,
    NodePortSctp,
    NodePortLocalSctp,
    HealthCheckNodePort,
    IpvsIps,
}

impl SetName {
    /// `ipsetInfo` order (proxier.go): every one of these is created on every sync.
    pub(super) const ALL: [SetName; 17] = [
        SetName::LoopBack,
        SetName::ClusterIp,
        SetName::ExternalIp,
        SetName::ExternalIpLocal,
        SetName::LoadBalancer,
        SetName::LoadBalancerFw,
        SetName::LoadBalancerLocal,
        SetName::LoadBalancerSourceIp,
        SetName::LoadBalancerSourceCidr,
        SetName::NodePortTcp,
        SetName::NodePortLocalTcp,
        SetName::NodePortUdp,
        SetName::NodePortLocalUdp,
        SetName::NodePortSctp,
        SetName::NodePortLocalSctp,
        SetName::HealthCheckNodePort,
        SetName::IpvsIps,
    ];

    /// The set's name for a family's proxier: ipset.go's constant for IPv4; for IPv6, `NewIPSet`
    /// (pkg/proxy/ipvs/ipset.go) turns the `KUBE-` prefix into `KUBE-6-` "to ensure unique
    /// names" in dual-stack and cuts the result to ipset's 31 characters
    /// (`ipv6_names_follow_new_ip_set` checks these against that rule).
    pub(super) fn name(self, family: IpFamily) -> &'static str {
        match family {
            IpFamily::Ipv4 => self.ipv4_name(),
            IpFamily::Ipv6 => self.ipv6_name(),
        }
    }

    fn ipv6_name(self) -> &'static str {
        match self {
            SetName::LoopBack => "KUBE-6-LOOP-BACK",
            SetName::ClusterIp => "KUBE-6-CLUSTER-IP",
            SetName::ExternalIp => "KUBE-6-EXTERNAL-IP",
            SetName::ExternalIpLocal => "KUBE-6-EXTERNAL-IP-LOCAL",
            SetName::LoadBalancer => "KUBE-6-LOAD-BALANCER",
            SetName::LoadBalancerFw => "KUBE-6-LOAD-BALANCER-FW",
            SetName::LoadBalancerLocal => "KUBE-6-LOAD-BALANCER-LOCAL",
            SetName::LoadBalancerSourceIp => "KUBE-6-LOAD-BALANCER-SOURCE-IP",
            SetName::LoadBalancerSourceCidr => "KUBE-6-LOAD-BALANCER-SOURCE-CID",
            SetName::NodePortTcp => "KUBE-6-NODE-PORT-TCP",
            SetName::NodePortLocalTcp => "KUBE-6-NODE-PORT-LOCAL-TCP",
            SetName::NodePortUdp => "KUBE-6-NODE-PORT-UDP",
            SetName::NodePortLocalUdp => "KUBE-6-NODE-PORT-LOCAL-UDP",
            SetName::NodePortSctp => "KUBE-6-NODE-PORT-SCTP-HASH",
            SetName::NodePortLocalSctp => "KUBE-6-NODE-PORT-LOCAL-SCTP-HAS",
            SetName::HealthCheckNodePort => "KUBE-6-HEALTH-CHECK-NODE-PORT",
            SetName::IpvsIps => "KUBE-6-IPVS-IPS",
        }
    }

    fn ipv4_name(self) -> &'static str {
        match self {
            SetName::LoopBack => "KUBE-LOOP-BACK",
            SetName::ClusterIp => "KUBE-CLUSTER-IP",
            SetName::ExternalIp => "KUBE-EXTERNAL-IP",
            SetName::ExternalIpLocal => "KUBE-EXTERNAL-IP-LOCAL",
            SetName::LoadBalancer => "KUBE-LOAD-BALANCER",
            SetName::LoadBalancerFw => "KUBE-LOAD-BALANCER-FW",
            SetName::LoadBalancerLocal => "KUBE-LOAD-BALANCER-LOCAL",
            SetName::LoadBalancerSourceIp => "KUBE-LOAD-BALANCER-SOURCE-IP",
            SetName::LoadBalancerSourceCidr => "KUBE-LOAD-BALANCER-SOURCE-CIDR",
            SetName::NodePortTcp => "KUBE-NODE-PORT-TCP",
            SetName::NodePortLocalTcp => "KUBE-NODE-PORT-LOCAL-TCP",
            SetName::NodePortUdp => "KUBE-NODE-PORT-UDP",
            SetName::NodePortLocalUdp => "KUBE-NODE-PORT-LOCAL-UDP",
            SetName::NodePortSctp => "KUBE-NODE-PORT-SCTP-HASH",
            SetName::NodePortLocalSctp => "KUBE-NODE-PORT-LOCAL-SCTP-HASH",
            SetName::HealthCheckNodePort => "KUBE-HEALTH-CHECK-NODE-PORT",
            SetName::IpvsIps => "KUBE-IPVS-IPS",
        }
    }

    /// The set type of `ipsetInfo`.
    pub(super) fn set_type(self) -> IpSetType {
        match self {
            SetName::LoopBack | SetName::LoadBalancerSourceIp => IpSetType::HashIpPortIp,
            SetName::LoadBalancerSourceCidr => IpSetType::HashIpPortNet,
            SetName::NodePortTcp
            | SetName::NodePortLocalTcp
            | SetName::NodePortUdp
            | SetName::NodePortLocalUdp
            | SetName::HealthCheckNodePort => IpSetType::BitmapPort,
            SetName::IpvsIps => IpSetType::HashIp,
            SetName::ClusterIp
            | SetName::ExternalIp
            | SetName::ExternalIpLocal
            | SetName::LoadBalancer
            | SetName::LoadBalancerFw
            | SetName::LoadBalancerLocal
            | SetName::NodePortSctp
            | SetName::NodePortLocalSctp => IpSetType::HashIpPort,
        }
    }

    /// The `*SetComment` constants of ipset.go. They never reach ipset (no `comment` create
    /// option); they are the `-m comment` text of the iptables rules matching the set.
    pub(super) fn comment(self) -> &'static str {
        match self {
            SetName::LoopBack => "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose",
            SetName::ClusterIp => "Kubernetes service cluster ip + port for masquerade purpose",
            SetName::ExternalIp => "Kubernetes service external ip + port for masquerade and filter purpose",
            SetName::ExternalIpLocal => "Kubernetes service external ip + port with externalTrafficPolicy=local",
            SetName::LoadBalancer => "Kubernetes service lb portal",
            SetName::LoadBalancerFw => {
                "Kubernetes service load balancer ip + port for load balancer with sourceRange"
            }
            SetName::LoadBalancerLocal => {
                "Kubernetes service load balancer ip + port with externalTrafficPolicy=local"
            }
            SetName::LoadBalancerSourceIp => {
                "Kubernetes service load balancer ip + port + source IP for packet filter purpose"
            }
            SetName::LoadBalancerSourceCidr => {
                "Kubernetes service load balancer ip + port + source cidr for packet filter purpose"
            }
            SetName::NodePortTcp => "Kubernetes nodeport TCP port for masquerade purpose",
            SetName::NodePortLocalTcp => "Kubernetes nodeport TCP port with externalTrafficPolicy=local",
            SetName::NodePortUdp => "Kubernetes nodeport UDP port for masquerade purpose",
            SetName::NodePortLocalUdp => "Kubernetes nodeport UDP port with externalTrafficPolicy=local",
            SetName::NodePortSctp => {
                "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'"
            }
            SetName::NodePortLocalSctp => {
                "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'"
            }
            SetName::HealthCheckNodePort => "Kubernetes health check node port",
            SetName::IpvsIps => "Addresses on the ipvs interface",
        }
    }

    /// `getComment()` in ipset.go: the comment wrapped in double quotes, ready for a restore line.
    pub(super) fn quoted_comment(self) -> String {
        format!("\"{}\"", self.comment())
    }

    /// The options after the type in kube-proxy's `ipset create` (ipset/ipset.go `createSet` with
    /// `setIPSetDefaults`: hashsize 1024, maxelem 65536, port range 0-65535). `ipset save` prints
    /// hash sets back with `bucketsize 12 initval 0x<random>` appended (ipset v7.17 on kernel
    /// 6.x); the random initval has to be normalised away by whoever compares.
    /// Only hash sets have a family: bitmap:port sets are the same in both.
    pub(super) fn create_options(self, family: IpFamily) -> &'static str {
        match (self.set_type(), family) {
            (IpSetType::BitmapPort, _) => "range 0-65535",
            (_, IpFamily::Ipv4) => "family inet hashsize 1024 maxelem 65536",
            (_, IpFamily::Ipv6) => "family inet6 hashsize 1024 maxelem 65536",
        }
    }
}

/// `Entry.String()` for hash:ip,port: `10.0.0.1,tcp:80`.
pub(super) fn ip_port(ip: IpAddr, protocol: Protocol, port: u16) -> String {
    format!("{ip},{}:{port}", protocol.lower())
}

/// `Entry.String()` for hash:ip,port,ip: `10.0.0.1,tcp:80,10.0.0.1`.
pub(super) fn ip_port_ip(ip: IpAddr, protocol: Protocol, port: u16, ip2: IpAddr) -> String {
    format!("{ip},{}:{port},{ip2}", protocol.lower())
}

/// `Entry.String()` for hash:ip,port,net: `1.2.3.4,tcp:80,10.0.0.0/8`. kube-proxy stores the
/// `*net.IPNet` of the source range, whose `String()` is the network address form; `ipset save`
/// prints a /32 net without its prefix length.
pub(super) fn ip_port_net(ip: IpAddr, protocol: Protocol, port: u16, net: IpCidr) -> String {
    format!("{ip},{}:{port},{}", protocol.lower(), net.normalized())
}

/// `Entry.String()` for bitmap:port: `3001`.
pub(super) fn port(port: u16) -> String {
    port.to_string()
}

/// The active entries of every set (`IPSet.activeEntries` in ipset.go) of one family's proxier.
#[derive(Debug, Clone, Default)]
pub(super) struct IpSets {
    family: IpFamily,
    entries: BTreeMap<SetName, BTreeSet<String>>,
}

impl IpSets {
    pub(super) fn new(family: IpFamily) -> Self {
        Self {
            family,
            entries: BTreeMap::new(),
        }
    }

    /// The name `set` has in this family's proxier.
    pub(super) fn name(&self, set: SetName) -> &'static str {
        set.name(self.family)
    }

    pub(super) fn insert(&mut self, set: SetName, entry: String) {
        self.entries.entry(set).or_default().insert(entry);
    }

    /// `IPSet.isEmpty()`: rules matching an empty set are not written.
    pub(super) fn is_empty(&self, set: SetName) -> bool {
        match self.entries.get(&set) {
            Some(entries) => entries.is_empty(),
            None => true,
        }
    }

    /// KUBE-IPVS-IPS is replaced wholesale by `activeBindAddrs` at the end of the loop.
    pub(super) fn set_ipvs_ips(&mut self, addrs: &BTreeSet<IpAddr>) {
        self.entries.insert(
            SetName::IpvsIps,
            addrs.iter().map(IpAddr::to_string).collect(),
        );
    }

    /// All sets of `ipsetInfo`, empty ones included. Entries are in byte-wise string order, which
    /// is the order `syncIPSetEntries` adds them in (`sets.List()` sorts the strings).
    pub(super) fn to_model(&self) -> Vec<IpSet> {
        SetName::ALL
            .iter()
            .map(|&set| IpSet {
                name: set.name(self.family).to_string(),
                set_type: set.set_type(),
                create_options: set.create_options(self.family).to_string(),
                entries: self
                    .entries
                    .get(&set)
                    .map(|e| e.iter().cloned().collect())
                    .unwrap_or_default(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `NewIPSet`'s rule, applied to every IPv4 name, gives the IPv6 names written out above.
    #[test]
    fn ipv6_names_follow_new_ip_set() {
        for set in SetName::ALL {
            let v4 = set.name(IpFamily::Ipv4);
            let mut v6 = v4.replacen("KUBE-", "KUBE-6-", 1);
            v6.truncate(31);
            assert_eq!(set.name(IpFamily::Ipv6), v6, "{set:?}");
        }
        // The two cut short, as seen in a real kube-proxy log.
        assert_eq!(
            SetName::LoadBalancerSourceCidr.name(IpFamily::Ipv6),
            "KUBE-6-LOAD-BALANCER-SOURCE-CID"
        );
        assert_eq!(
            SetName::NodePortLocalSctp.name(IpFamily::Ipv6),
            "KUBE-6-NODE-PORT-LOCAL-SCTP-HAS"
        );
    }

    #[test]
    fn only_hash_sets_have_a_family() {
        assert_eq!(
            SetName::ClusterIp.create_options(IpFamily::Ipv6),
            "family inet6 hashsize 1024 maxelem 65536"
        );
        assert_eq!(
            SetName::NodePortTcp.create_options(IpFamily::Ipv6),
            "range 0-65535"
        );
    }
}
