//! `--nodeport-addresses`, shared by both kube-proxy modes as pkg/proxy/util/nodeport_addresses.go
//! is: which node addresses serve NodePorts.

use crate::cluster::NodeContext;
use crate::scenario::{Ipv4Cidr, NodePortAddress};
use std::collections::BTreeSet;
use std::net::Ipv4Addr;

/// kube-proxy's `NodePortAddresses` for IPv4.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodePortAddresses {
    cidrs: Vec<Ipv4Cidr>,
    match_all: bool,
    contains_ipv4_loopback: bool,
}

impl NodePortAddresses {
    /// `primary` first becomes `nodeIP/32`, as cmd/kube-proxy/app/server.go rewrites the flag
    /// (a loopback node IP gives nothing); then `NewNodePortAddresses`: no CIDR means
    /// `0.0.0.0/0`, a zero CIDR matches all and ends the list, and a CIDR holding 127.0.0.0 (or
    /// a loopback base address) makes localhost NodePorts possible.
    pub(crate) fn new(entries: &[NodePortAddress], node_ip: Ipv4Addr) -> Self {
        let mut cidrs: Vec<Ipv4Cidr> = entries
            .iter()
            .filter_map(|entry| match entry {
                NodePortAddress::Primary => (!node_ip.is_loopback())
                    .then(|| Ipv4Cidr::new(node_ip, 32))
                    .flatten(),
                NodePortAddress::Cidr(cidr) => Some(*cidr),
            })
            .collect();
        if cidrs.is_empty() {
            cidrs.push(ZERO);
        }
        let mut npa = NodePortAddresses {
            cidrs: Vec::new(),
            match_all: false,
            contains_ipv4_loopback: false,
        };
        for cidr in cidrs {
            if cidr.addr.is_loopback() || cidr.contains(Ipv4Addr::new(127, 0, 0, 0)) {
                npa.contains_ipv4_loopback = true;
            }
            if cidr.prefix_len == 0 {
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

    /// `GetNodeIPs`: the node's interface addresses (loopback's 127.0.0.1 included) inside any
    /// CIDR. kube-proxy dedups through a Go map, so its order is random; sorted here, so the
    /// rules built from it are the same on every run.
    pub(crate) fn node_ips(&self, node: &NodeContext) -> Vec<Ipv4Addr> {
        let interface_addresses = node
            .local_addresses
            .iter()
            .copied()
            .chain([Ipv4Addr::LOCALHOST]);
        interface_addresses
            .filter(|ip| self.cidrs.iter().any(|c| c.contains(*ip)))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }
}

const ZERO: Ipv4Cidr = Ipv4Cidr {
    addr: Ipv4Addr::UNSPECIFIED,
    prefix_len: 0,
};

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
        }
    }

    fn npa(entries: &[&str]) -> NodePortAddresses {
        let entries: Vec<NodePortAddress> = entries.iter().map(|e| e.parse().unwrap()).collect();
        NodePortAddresses::new(&entries, node().node_ip)
    }

    fn ips(list: &[&str]) -> Vec<Ipv4Addr> {
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
}
