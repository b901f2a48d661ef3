//! IP families as Kubernetes names them (`ipFamilies`, `addressType`), a Service's
//! `ipFamilyPolicy`, and a prefix of either family.

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
    fn a_family_reads_as_kubernetes_writes_it() {
        assert_eq!(
            serde_yaml_ng::from_str::<IpFamily>("IPv6").unwrap(),
            IpFamily::Ipv6
        );
        assert_eq!(IpFamily::Ipv4.to_string(), "IPv4");
    }
}
