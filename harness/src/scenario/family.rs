//! IP families as Kubernetes names them (`ipFamilies`, `addressType`), a Service's
//! `ipFamilyPolicy`, and a prefix of either family.

use super::cidr::{Ipv4Cidr, Ipv6Cidr};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `IPv4` or `IPv6`: a Service's `ipFamilies` entry, an EndpointSlice's `addressType`, the
/// family one proxier of a dual-stack node serves.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub enum IpFamily {
    #[default]
    #[serde(rename = "IPv4")]
    Ipv4,
    #[serde(rename = "IPv6")]
    Ipv6,
}

impl IpFamily {
    pub const ALL: [IpFamily; 2] = [IpFamily::Ipv4, IpFamily::Ipv6];

    pub fn of(ip: IpAddr) -> IpFamily {
        match ip {
            IpAddr::V4(_) => IpFamily::Ipv4,
            IpAddr::V6(_) => IpFamily::Ipv6,
        }
    }

    pub fn other(self) -> IpFamily {
        match self {
            IpFamily::Ipv4 => IpFamily::Ipv6,
            IpFamily::Ipv6 => IpFamily::Ipv4,
        }
    }

    /// The length of a one-address prefix: 32 or 128.
    pub fn host_prefix_len(self) -> u8 {
        match self {
            IpFamily::Ipv4 => 32,
            IpFamily::Ipv6 => 128,
        }
    }

    /// The loopback address: 127.0.0.1 or ::1.
    pub fn localhost(self) -> IpAddr {
        match self {
            IpFamily::Ipv4 => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpFamily::Ipv6 => IpAddr::V6(Ipv6Addr::LOCALHOST),
        }
    }

    /// The unspecified address: 0.0.0.0 or ::.
    pub fn unspecified(self) -> IpAddr {
        match self {
            IpFamily::Ipv4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpFamily::Ipv6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        }
    }

    pub fn is_ipv4(&self) -> bool {
        *self == IpFamily::Ipv4
    }
}

impl std::fmt::Display for IpFamily {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IpFamily::Ipv4 => "IPv4",
            IpFamily::Ipv6 => "IPv6",
        })
    }
}

/// A Service's `ipFamilyPolicy`; absent means `SingleStack` (the API server's default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum IpFamilyPolicy {
    #[default]
    SingleStack,
    PreferDualStack,
    RequireDualStack,
}

/// A prefix of either family: where a Kubernetes field takes both (`loadBalancerSourceRanges`,
/// `--nodeport-addresses`) and in the document a proxier of one family receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IpCidr {
    V4(Ipv4Cidr),
    V6(Ipv6Cidr),
}

impl IpCidr {
    /// `addr/len`, or `None` if the length is over the family's.
    pub fn new(addr: IpAddr, prefix_len: u8) -> Option<IpCidr> {
        match addr {
            IpAddr::V4(a) => Ipv4Cidr::new(a, prefix_len).map(IpCidr::V4),
            IpAddr::V6(a) => Ipv6Cidr::new(a, prefix_len).map(IpCidr::V6),
        }
    }

    /// The one-address prefix of `ip` (`/32` or `/128`).
    pub fn host(ip: IpAddr) -> IpCidr {
        match ip {
            IpAddr::V4(a) => IpCidr::V4(Ipv4Cidr {
                addr: a,
                prefix_len: 32,
            }),
            IpAddr::V6(a) => IpCidr::V6(Ipv6Cidr {
                addr: a,
                prefix_len: 128,
            }),
        }
    }

    pub fn family(&self) -> IpFamily {
        match self {
            IpCidr::V4(_) => IpFamily::Ipv4,
            IpCidr::V6(_) => IpFamily::Ipv6,
        }
    }

    pub fn addr(&self) -> IpAddr {
        match self {
            IpCidr::V4(c) => IpAddr::V4(c.addr),
            IpCidr::V6(c) => IpAddr::V6(c.addr),
        }
    }

    pub fn prefix_len(&self) -> u8 {
        match self {
            IpCidr::V4(c) => c.prefix_len,
            IpCidr::V6(c) => c.prefix_len,
        }
    }

    /// The network address (host bits cleared).
    pub fn network(&self) -> IpAddr {
        match self {
            IpCidr::V4(c) => IpAddr::V4(c.network()),
            IpCidr::V6(c) => IpAddr::V6(c.network()),
        }
    }

    /// `network/len`: the prefix as iptables, nft and ipset print it back.
    pub fn normalized(&self) -> IpCidr {
        IpCidr::new(self.network(), self.prefix_len()).unwrap_or(*self)
    }

    /// Whether `ip` (of either family) lies in the prefix; never across families.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self, ip) {
            (IpCidr::V4(c), IpAddr::V4(a)) => c.contains(a),
            (IpCidr::V6(c), IpAddr::V6(a)) => c.contains(a),
            _ => false,
        }
    }

    /// The `n`-th address (0 = the network address).
    pub fn nth(&self, n: u32) -> Option<IpAddr> {
        match self {
            IpCidr::V4(c) => c.nth(n).map(IpAddr::V4),
            IpCidr::V6(c) => c.nth(n).map(IpAddr::V6),
        }
    }

    /// The prefix of no length (`0.0.0.0/0`, `::/0`), which matches every address.
    pub fn is_zero(&self) -> bool {
        self.prefix_len() == 0
    }

    pub fn v4(&self) -> Option<Ipv4Cidr> {
        match self {
            IpCidr::V4(c) => Some(*c),
            IpCidr::V6(_) => None,
        }
    }
}

impl From<Ipv4Cidr> for IpCidr {
    fn from(c: Ipv4Cidr) -> IpCidr {
        IpCidr::V4(c)
    }
}

impl From<Ipv6Cidr> for IpCidr {
    fn from(c: Ipv6Cidr) -> IpCidr {
        IpCidr::V6(c)
    }
}

impl std::fmt::Display for IpCidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IpCidr::V4(c) => c.fmt(f),
            IpCidr::V6(c) => c.fmt(f),
        }
    }
}

impl std::str::FromStr for IpCidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.contains(':') {
            s.parse().map(IpCidr::V6)
        } else {
            s.parse().map(IpCidr::V4)
        }
    }
}

serde_as_string!(IpCidr);

/// Keeps the addresses of one family, in order.
pub fn of_family(ips: &[IpAddr], family: IpFamily) -> Vec<IpAddr> {
    ips.iter()
        .copied()
        .filter(|ip| IpFamily::of(*ip) == family)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_of_either_family_parses_prints_and_never_matches_across_families() {
        let v6: IpCidr = "fd00:10:96::5/112".parse().unwrap();
        assert_eq!(v6.family(), IpFamily::Ipv6);
        assert_eq!(v6.normalized().to_string(), "fd00:10:96::/112");
        assert!(v6.contains("fd00:10:96::ffff".parse().unwrap()));
        assert!(!v6.contains("10.96.0.1".parse().unwrap()));
        let v4: IpCidr = "10.96.0.0/12".parse().unwrap();
        assert!(!v4.contains("::ffff:10.96.0.1".parse().unwrap()));
        assert_eq!(
            IpCidr::host("fd00::1".parse().unwrap()).to_string(),
            "fd00::1/128"
        );
        assert!("fd00::/129".parse::<IpCidr>().is_err());
        assert!("10.0.0.0/33".parse::<IpCidr>().is_err());
        assert_eq!(
            serde_yaml_ng::from_str::<IpFamily>("IPv6").unwrap(),
            IpFamily::Ipv6
        );
    }
}
