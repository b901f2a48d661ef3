//! `--nodeport-addresses`, shared by every kube-proxy mode as pkg/proxy/util/nodeport_addresses.go
//! is: which node addresses serve NodePorts, for the family of one proxier.

use crate::scenario::cluster::NodeContext;
use crate::scenario::{IpCidr, IpFamily, NodePortAddress};
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

/// kube-proxy's `NodePortAddresses` for one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodePortAddresses {
    cidrs: Vec<IpCidr>,
    match_all: bool,
    contains_ipv4_loopback: bool,
}

impl NodePortAddresses {
    /// `primary` first becomes the node IP of each family as a one-address prefix, as
    /// cmd/kube-proxy/app/server.go rewrites the flag (a loopback node IP gives nothing); then
    /// `NewNodePortAddresses(family, …)`: only the CIDRs of the node IP's family count, none
    /// means `0.0.0.0/0` or `::/0` (even with CIDRs of the other family), a zero CIDR matches
    /// all and ends the list, and an IPv4 CIDR holding 127.0.0.0 (or a loopback base address)
    /// makes localhost NodePorts possible.
    pub(crate) fn new(entries: &[NodePortAddress], node_ip: IpAddr) -> Self {
        let family = IpFamily::of(node_ip);
        let mut cidrs: Vec<IpCidr> = entries
            .iter()
            .filter_map(|entry| match entry {
                NodePortAddress::Primary => (!node_ip.is_loopback()).then(|| IpCidr::host(node_ip)),
                NodePortAddress::Cidr(cidr) => Some(*cidr),
            })
            .filter(|cidr| cidr.family() == family)
            .collect();
        if cidrs.is_empty() {
            cidrs.extend(IpCidr::new(family.unspecified(), 0));
        }
        let mut npa = NodePortAddresses {
            cidrs: Vec::new(),
            match_all: false,
            contains_ipv4_loopback: false,
        };
        for cidr in cidrs {
            if family == IpFamily::Ipv4
                && (cidr.addr().is_loopback()
                    || cidr.contains(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0))))
            {
                npa.contains_ipv4_loopback = true;
            }
            if cidr.is_zero() {
                npa.cidrs = vec![cidr];
                npa.match_all = true;
                break;
            }
            npa.cidrs.push(cidr);
        }
        npa
    }

    pub(crate) fn match_all(&self) -> bool {
        self.match_all
    }

    pub(crate) fn contains_ipv4_loopback(&self) -> bool {
        self.contains_ipv4_loopback
    }

    /// `GetNodeIPs`: the node's interface addresses (loopback's included) inside any CIDR.
    /// kube-proxy dedups through a Go map, so its order is random; sorted here, so the rules
    /// built from it are the same on every run.
    pub(crate) fn node_ips(&self, node: &NodeContext) -> Vec<IpAddr> {
        let localhost = IpFamily::of(node.node_ip).localhost();
        let interface_addresses = node.local_addresses.iter().copied().chain([localhost]);
        interface_addresses
            .filter(|ip| self.cidrs.iter().any(|c| c.contains(*ip)))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }
}

/// Where kube-proxy's service health server listens on a node (`newServiceHealthServer`,
/// pkg/proxy/healthcheck/service_health.go l.60-86 in v1.37.2): each family's proxier on its
/// family's wildcard when `--nodeport-addresses` (or the mode's default, `default`, when it is
/// empty) matches every address, otherwise only on the node addresses inside it
/// (`nodePortAddresses.GetNodeIPs`). With `[127.0.0.0/8]` a connection to the node IP is
/// refused: nothing listens there.
pub fn health_server_addresses(
    entries: &[NodePortAddress],
    default: &[NodePortAddress],
    node: &NodeContext,
) -> Vec<IpAddr> {
    let entries = if entries.is_empty() { default } else { entries };
    std::iter::once(node)
        .chain(node.ipv6.as_deref())
        .flat_map(|n| {
            let npa = NodePortAddresses::new(entries, n.node_ip);
            if npa.match_all() {
                vec![IpFamily::of(n.node_ip).unspecified()]
            } else {
                npa.node_ips(n)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeContext {
        NodeContext {
            name: "node-a".into(),
            node_ip: "192.168.1.10".parse().unwrap(),
            pod_cidr: "10.244.1.0/24".parse().unwrap(),
            local_addresses: ["10.244.1.1", "192.168.1.10", "192.168.1.20"]
                .iter()
                .map(|a| a.parse().unwrap())
                .collect(),
            ipv6: None,
        }
    }

    fn npa(entries: &[&str]) -> NodePortAddresses {
        let entries: Vec<NodePortAddress> = entries.iter().map(|e| e.parse().unwrap()).collect();
        NodePortAddresses::new(&entries, node().node_ip)
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn empty_and_zero_match_all_and_allow_localhost() {
        for entries in [&[][..], &["0.0.0.0/0"], &["192.168.1.0/24", "0.0.0.0/0"]] {
            let n = npa(entries);
            assert!(n.match_all() && n.contains_ipv4_loopback(), "{entries:?}");
        }
    }

    #[test]
    fn primary_is_the_node_ip() {
        let n = npa(&["primary"]);
        assert!(!n.match_all() && !n.contains_ipv4_loopback());
        assert_eq!(n.node_ips(&node()), ips(&["192.168.1.10"]));
    }

    #[test]
    fn cidrs_select_interface_addresses_loopback_included() {
        let n = npa(&["192.168.1.0/24", "127.0.0.0/8"]);
        assert!(!n.match_all() && n.contains_ipv4_loopback());
        assert_eq!(
            n.node_ips(&node()),
            ips(&["127.0.0.1", "192.168.1.10", "192.168.1.20"])
        );
        assert_eq!(npa(&["172.16.0.0/12"]).node_ips(&node()), ips(&[]));
    }

    #[test]
    fn each_family_takes_its_own_cidrs_and_primary_address() {
        let v6 = NodeContext {
            name: "node-a".into(),
            node_ip: "fd00:192:168:1::10".parse().unwrap(),
            pod_cidr: "fd00:10:244:1::/64".parse().unwrap(),
            local_addresses: ips(&["fd00:10:244:1::1", "fd00:192:168:1::10"]),
            ipv6: None,
        };
        let entries = |list: &[&str]| -> Vec<NodePortAddress> {
            list.iter().map(|e| e.parse().unwrap()).collect()
        };
        // Only IPv4 CIDRs given: the IPv6 proxier matches all of its family.
        let only_v4 = NodePortAddresses::new(&entries(&["192.168.1.0/24"]), v6.node_ip);
        assert!(only_v4.match_all() && !only_v4.contains_ipv4_loopback());
        let primary = NodePortAddresses::new(&entries(&["primary"]), v6.node_ip);
        assert_eq!(primary.node_ips(&v6), ips(&["fd00:192:168:1::10"]));
        let mixed = NodePortAddresses::new(
            &entries(&["192.168.1.0/24", "fd00:10:244::/48", "::1/128"]),
            v6.node_ip,
        );
        assert!(!mixed.match_all());
        assert_eq!(mixed.node_ips(&v6), ips(&["::1", "fd00:10:244:1::1"]));
    }
}
