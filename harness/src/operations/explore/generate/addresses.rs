//! The addresses of a generated cluster: the library's conventions (README "Scenarios"), per
//! family, so a generated case reads like a written one.

use crate::scenario::{DualCidr, DualIp, IpCidr, IpFamily, Ipv4Cidr};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Which families the cluster has; IPv4 is primary when it has both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Families {
    pub v4: bool,
    pub v6: bool,
}

impl Families {
    pub const IPV4: Families = Families {
        v4: true,
        v6: false,
    };
    pub const IPV6: Families = Families {
        v4: false,
        v6: true,
    };
    pub const DUAL: Families = Families { v4: true, v6: true };

    /// Its families, primary first.
    pub fn list(self) -> Vec<IpFamily> {
        let mut out = Vec::new();
        if self.v4 {
            out.push(IpFamily::Ipv4);
        }
        if self.v6 {
            out.push(IpFamily::Ipv6);
        }
        out
    }

    fn dual<A, B>(
        self,
        v4: impl FnOnce() -> A,
        v6: impl FnOnce() -> B,
    ) -> crate::scenario::Dual<A, B> {
        crate::scenario::Dual {
            v4: self.v4.then(v4),
            v6: self.v6.then(v6),
        }
    }

    pub fn underlay(self) -> DualCidr {
        self.dual(
            || cidr4([192, 168, 1, 0], 24),
            || cidr6("fd00:192:168:1::", 64),
        )
    }

    pub fn cluster_cidr(self) -> DualCidr {
        self.dual(|| cidr4([10, 244, 0, 0], 16), || cidr6("fd00:10:244::", 56))
    }

    pub fn service_cidr(self) -> DualCidr {
        self.dual(|| cidr4([10, 96, 0, 0], 12), || cidr6("fd00:10:96::", 112))
    }

    /// Node `k`'s underlay addresses (node-a is 0: .10).
    pub fn node_ip(self, k: usize) -> DualIp {
        self.dual(
            || v4([192, 168, 1, 10 + k as u8]),
            || v6(&format!("fd00:192:168:1::{}", 10 + k)),
        )
    }

    /// Node `k`'s pod ranges.
    pub fn pod_cidr(self, k: usize) -> DualCidr {
        self.dual(
            || cidr4([10, 244, 1 + k as u8, 0], 24),
            || cidr6(&format!("fd00:10:244:{}::", 1 + k), 64),
        )
    }

    /// Pod `j` of node `k` (from .10 up).
    pub fn pod_ip(self, k: usize, j: usize) -> DualIp {
        self.dual(
            || v4([10, 244, 1 + k as u8, 10 + j as u8]),
            || v6(&format!("fd00:10:244:{}::{}", 1 + k, 10 + j)),
        )
    }

    pub fn external(self) -> DualIp {
        self.dual(|| v4([192, 168, 1, 100]), || v6("fd00:192:168:1::100"))
    }
}

/// Service `i`'s ClusterIP of `family`.
pub fn cluster_ip(family: IpFamily, i: usize) -> IpAddr {
    match family {
        IpFamily::Ipv4 => IpAddr::V4(Ipv4Addr::new(10, 96, 0, 10 + i as u8)),
        IpFamily::Ipv6 => IpAddr::V6(v6(&format!("fd00:10:96::{:x}", 10 + i))),
    }
}

/// Service `i`'s external IP of `family`, on the underlay.
pub fn external_ip(family: IpFamily, i: usize) -> IpAddr {
    underlay_host(family, 150 + i)
}

/// Service `i`'s load balancer IP of `family`, on the underlay.
pub fn load_balancer_ip(family: IpFamily, i: usize) -> IpAddr {
    underlay_host(family, 200 + i)
}

fn underlay_host(family: IpFamily, n: usize) -> IpAddr {
    match family {
        IpFamily::Ipv4 => IpAddr::V4(Ipv4Addr::new(192, 168, 1, n as u8)),
        IpFamily::Ipv6 => IpAddr::V6(v6(&format!("fd00:192:168:1::{n}"))),
    }
}

/// A source range of `family` that holds the external client, one that holds only node
/// addresses, and one that holds neither.
pub fn source_ranges(family: IpFamily) -> [IpCidr; 3] {
    let parse = |s: &str| s.parse::<IpCidr>().expect("a fixed CIDR");
    match family {
        IpFamily::Ipv4 => [
            parse("192.168.1.100/32"),
            parse("192.168.1.8/29"),
            parse("203.0.113.0/24"),
        ],
        IpFamily::Ipv6 => [
            parse("fd00:192:168:1::100/128"),
            parse("fd00:192:168:1::10/125"),
            parse("2001:db8::/64"),
        ],
    }
}

fn v4(o: [u8; 4]) -> Ipv4Addr {
    Ipv4Addr::from(o)
}

fn v6(text: &str) -> Ipv6Addr {
    text.parse().expect("a fixed IPv6 address")
}

fn cidr4(o: [u8; 4], prefix_len: u8) -> Ipv4Cidr {
    Ipv4Cidr::new(v4(o), prefix_len).expect("a fixed CIDR")
}

fn cidr6(text: &str, prefix_len: u8) -> crate::scenario::Ipv6Cidr {
    crate::scenario::Ipv6Cidr::new(v6(text), prefix_len).expect("a fixed CIDR")
}
