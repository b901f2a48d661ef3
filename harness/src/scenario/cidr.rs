//! Addresses and prefixes of the scenario format, per family, and the dual-stack pairs that
//! Kubernetes writes either as a list (`podCIDRs`, `podIPs`) or comma-separated
//! (`--cluster-cidr=10.244.0.0/16,fd00:10:244::/56`).

use super::family::IpFamily;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What an IPv4 address must look like, for messages: std's parser refuses leading zeros,
/// which other parsers read as octal, and only says the syntax is wrong.
pub const IPV4_FORM: &str = "four decimal numbers 0-255, no leading zeros";

/// A prefix type of one family: the address, the length, the arithmetic on them, and its
/// [`Prefix`] implementation.
macro_rules! cidr_type {
    ($(#[$doc:meta])* $t:ident, $a:ty, $bits:ty) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $t {
            pub addr: $a,
            pub prefix_len: u8,
        }

        impl $t {
            pub fn new(addr: $a, prefix_len: u8) -> Option<Self> {
                (u32::from(prefix_len) <= <$bits>::BITS).then_some(Self { addr, prefix_len })
            }

            pub fn mask(&self) -> $bits {
                <$bits>::MAX
                    .checked_shl(<$bits>::BITS - u32::from(self.prefix_len))
                    .unwrap_or(0)
            }

            /// The network address (host bits cleared).
            pub fn network(&self) -> $a {
                <$a>::from(<$bits>::from(self.addr) & self.mask())
            }

            pub fn contains(&self, ip: $a) -> bool {
                <$bits>::from(ip) & self.mask() == <$bits>::from(self.network())
            }

            /// The `n`-th address of the prefix (0 = the network address).
            pub fn nth(&self, n: u32) -> Option<$a> {
                let host_bits = <$bits>::BITS - u32::from(self.prefix_len);
                (host_bits >= 32 || u64::from(n) < 1u64 << host_bits)
                    .then(|| <$a>::from(<$bits>::from(self.network()) + <$bits>::from(n)))
            }
        }

        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}/{}", self.addr, self.prefix_len)
            }
        }

        impl Prefix for $t {
            type Addr = $a;
            fn addr(&self) -> $a {
                self.addr
            }
            fn len(&self) -> u8 {
                self.prefix_len
            }
            fn network(&self) -> $a {
                <$t>::network(self)
            }
            fn contains(&self, ip: $a) -> bool {
                <$t>::contains(self, ip)
            }
            fn nth(&self, n: u32) -> Option<$a> {
                <$t>::nth(self, n)
            }
            fn last(&self) -> $a {
                <$a>::from(<$bits>::from(<$t>::network(self)) | !self.mask())
            }
        }
    };
}

cidr_type!(
    /// An IPv4 prefix such as `10.244.1.0/24`.
    Ipv4Cidr,
    Ipv4Addr,
    u32
);
cidr_type!(
    /// An IPv6 prefix such as `fd00:10:244:1::/64`.
    Ipv6Cidr,
    Ipv6Addr,
    u128
);

/// What validation asks of a prefix of either family.
pub trait Prefix: Copy + std::fmt::Display {
    type Addr: Copy + Ord + std::fmt::Display;
    fn addr(&self) -> Self::Addr;
    fn len(&self) -> u8;
    fn network(&self) -> Self::Addr;
    fn contains(&self, ip: Self::Addr) -> bool;
    fn nth(&self, n: u32) -> Option<Self::Addr>;
    /// The last address: IPv4's broadcast address.
    fn last(&self) -> Self::Addr;

    fn overlaps(&self, other: &Self) -> bool {
        self.contains(other.network()) || other.contains(self.network())
    }

    /// Lies entirely within `outer`.
    fn within(&self, outer: &Self) -> bool {
        self.len() >= outer.len() && outer.contains(self.network())
    }
}

impl std::str::FromStr for Ipv4Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (a, p) = split_cidr(s, "a.b.c.d/len")?;
        let addr: Ipv4Addr = a
            .parse()
            .map_err(|_| format!("`{a}` is not an IPv4 address ({IPV4_FORM})"))?;
        let prefix_len = prefix_len(p)?;
        Ipv4Cidr::new(addr, prefix_len).ok_or_else(|| format!("prefix length {p} is over 32"))
    }
}

impl std::str::FromStr for Ipv6Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (a, p) = split_cidr(s, "an IPv6 address/len, e.g. fd00:10:244::/56")?;
        let addr: Ipv6Addr = a
            .parse()
            .map_err(|_| format!("`{a}` is not an IPv6 address"))?;
        let prefix_len = prefix_len(p)?;
        Ipv6Cidr::new(addr, prefix_len).ok_or_else(|| format!("prefix length {p} is over 128"))
    }
}

fn split_cidr<'a>(s: &'a str, form: &str) -> Result<(&'a str, &'a str), String> {
    s.split_once('/')
        .ok_or_else(|| format!("`{s}` is not a CIDR (expected {form})"))
}

fn prefix_len(p: &str) -> Result<u8, String> {
    p.parse()
        .map_err(|_| format!("`{p}` is not a prefix length"))
}

serde_as_string!(Ipv4Cidr);
serde_as_string!(Ipv6Cidr);

/// One value per family, at least one: IPv4, IPv6, or both for a dual-stack cluster. Written
/// as one value, as a list of one or two, or (for ranges) comma-separated as Kubernetes' flags
/// take them; IPv4 comes first. Built by the constructors, which keep one family at least.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dual<V4, V6> {
    pub v4: Option<V4>,
    pub v6: Option<V6>,
}

/// A node's, pod's or client's addresses (`ip`, or `ips: [IPv4, IPv6]`).
pub type DualIp = Dual<Ipv4Addr, Ipv6Addr>;

/// A range per family (`podCIDRs`, `clusterCIDR: 10.244.0.0/16,fd00:10:244::/56`).
pub type DualCidr = Dual<Ipv4Cidr, Ipv6Cidr>;

impl<V4, V6> Dual<V4, V6> {
    /// An IPv4 value alone.
    pub fn v4(v4: V4) -> Self {
        Dual {
            v4: Some(v4),
            v6: None,
        }
    }

    /// An IPv6 value alone (an IPv6-only cluster's).
    pub fn v6_only(v6: V6) -> Self {
        Dual {
            v4: None,
            v6: Some(v6),
        }
    }

    /// The first family: IPv4 when there is an IPv4 value.
    pub fn primary_family(&self) -> IpFamily {
        if self.v4.is_some() {
            IpFamily::Ipv4
        } else {
            IpFamily::Ipv6
        }
    }

    /// Whether there is a value of `family`.
    pub fn has(&self, family: IpFamily) -> bool {
        match family {
            IpFamily::Ipv4 => self.v4.is_some(),
            IpFamily::Ipv6 => self.v6.is_some(),
        }
    }

    /// Whether there are values of both families.
    pub fn is_dual(&self) -> bool {
        self.v4.is_some() && self.v6.is_some()
    }
}

impl DualIp {
    /// The addresses, IPv4 first.
    pub fn all(&self) -> impl Iterator<Item = IpAddr> {
        self.v4
            .map(IpAddr::V4)
            .into_iter()
            .chain(self.v6.map(IpAddr::V6))
    }

    /// The address of `family`, if there is one.
    pub fn of(&self, family: IpFamily) -> Option<IpAddr> {
        match family {
            IpFamily::Ipv4 => self.v4.map(IpAddr::V4),
            IpFamily::Ipv6 => self.v6.map(IpAddr::V6),
        }
    }
}

impl DualCidr {
    /// The range of `family`, if there is one.
    pub fn of(&self, family: IpFamily) -> Option<IpCidr> {
        match family {
            IpFamily::Ipv4 => self.v4.map(IpCidr::V4),
            IpFamily::Ipv6 => self.v6.map(IpCidr::V6),
        }
    }
}

impl<V4: std::fmt::Display, V6: std::fmt::Display> std::fmt::Display for Dual<V4, V6> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.v4, &self.v6) {
            (Some(v4), Some(v6)) => write!(f, "{v4},{v6}"),
            (Some(v4), None) => write!(f, "{v4}"),
            (None, Some(v6)) => write!(f, "{v6}"),
            (None, None) => Ok(()),
        }
    }
}

/// A value of one family, as a scenario file writes it.
pub trait FamilyValue: Sized {
    fn parse_value(text: &str) -> Result<Self, String>;
}

impl FamilyValue for Ipv4Addr {
    fn parse_value(text: &str) -> Result<Self, String> {
        text.parse()
            .map_err(|_| format!("`{text}` is not an IPv4 address ({IPV4_FORM})"))
    }
}

impl FamilyValue for Ipv6Addr {
    fn parse_value(text: &str) -> Result<Self, String> {
        text.parse()
            .map_err(|_| format!("`{text}` is not an IPv6 address"))
    }
}

impl FamilyValue for Ipv4Cidr {
    fn parse_value(text: &str) -> Result<Self, String> {
        text.parse()
    }
}

impl FamilyValue for Ipv6Cidr {
    fn parse_value(text: &str) -> Result<Self, String> {
        text.parse()
    }
}

/// Parses one or two items: one of either family (IPv6 alone for an IPv6-only cluster), or
/// IPv4 then IPv6.
fn parse_dual<V4: FamilyValue, V6: FamilyValue>(items: &[String]) -> Result<Dual<V4, V6>, String> {
    match items {
        [one] if one.contains(':') => Ok(Dual::v6_only(V6::parse_value(one.trim())?)),
        [v4] => Ok(Dual::v4(V4::parse_value(v4.trim())?)),
        [v4, v6] => {
            Ok(Dual {
                v4: Some(v4_first(v4)?),
                v6: Some(V6::parse_value(v6.trim()).map_err(|e| {
                    format!("the second value must be IPv6, of the other family: {e}")
                })?),
            })
        }
        [] => Err("expected one value per family, found none".into()),
        more => Err(format!(
            "expected at most two values (IPv4, then IPv6), found {}",
            more.len()
        )),
    }
}

fn v4_first<V4: FamilyValue>(text: &str) -> Result<V4, String> {
    let text = text.trim();
    V4::parse_value(text).map_err(|e| {
        if text.contains(':') {
            format!("`{text}` is IPv6: of two values, IPv4 comes first")
        } else {
            e
        }
    })
}

impl<V4: Serialize, V6: Serialize> Serialize for Dual<V4, V6> {
    /// A single-stack value as the plain value it always was, a dual-stack one as a list.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match (&self.v4, &self.v6) {
            (Some(v4), Some(v6)) => (v4, v6).serialize(s),
            (Some(v4), None) => v4.serialize(s),
            (None, Some(v6)) => v6.serialize(s),
            (None, None) => s.serialize_none(),
        }
    }
}

impl<'de, V4: FamilyValue, V6: FamilyValue> Deserialize<'de> for Dual<V4, V6> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Items;
        impl<'de> serde::de::Visitor<'de> for Items {
            type Value = Vec<String>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a value, `IPv4,IPv6` or a list [IPv4, IPv6]")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(v.split(',').map(str::to_owned).collect())
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<String>()? {
                    items.push(item);
                }
                Ok(items)
            }
        }
        let items = d.deserialize_any(Items)?;
        parse_dual(&items).map_err(serde::de::Error::custom)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_prefixes_compute_like_ipv4_ones() {
        let c: Ipv6Cidr = "fd00:10:244:1::5/64".parse().unwrap();
        assert_eq!(c.network(), "fd00:10:244:1::".parse::<Ipv6Addr>().unwrap());
        assert!(c.contains("fd00:10:244:1::ffff".parse().unwrap()));
        assert!(!c.contains("fd00:10:244:2::1".parse().unwrap()));
        assert_eq!(c.nth(1), Some("fd00:10:244:1::1".parse().unwrap()));
        let host: Ipv6Cidr = "fd00::1/128".parse().unwrap();
        assert_eq!(host.nth(1), None);
        assert!("fd00::/129".parse::<Ipv6Cidr>().is_err());
        let all: Ipv4Cidr = "0.0.0.0/0".parse().unwrap();
        assert_eq!(all.mask(), 0);
        assert!(all.contains(Ipv4Addr::new(1, 2, 3, 4)));
    }

    #[test]
    fn pairs_read_every_kubernetes_spelling_and_refuse_a_wrong_order() {
        let one: DualCidr = serde_yaml_ng::from_str("10.244.0.0/16").unwrap();
        assert_eq!(one.v6, None);
        let commas: DualCidr = serde_yaml_ng::from_str("10.244.0.0/16,fd00:10:244::/56").unwrap();
        let list: DualCidr =
            serde_yaml_ng::from_str("[10.244.0.0/16, \"fd00:10:244::/56\"]").unwrap();
        assert_eq!(commas, list);
        assert_eq!(commas.to_string(), "10.244.0.0/16,fd00:10:244::/56");
        let ips: DualIp = serde_yaml_ng::from_str("[10.0.0.1, \"fd00::1\"]").unwrap();
        assert_eq!(ips.all().count(), 2);
        // Single-stack values serialize as before, so the exec schema of IPv4 scenarios is
        // unchanged.
        assert_eq!(
            serde_json::to_string(&DualIp::v4(Ipv4Addr::new(10, 0, 0, 1))).unwrap(),
            "\"10.0.0.1\""
        );
        assert_eq!(
            serde_json::to_string(&ips).unwrap(),
            "[\"10.0.0.1\",\"fd00::1\"]"
        );
        // An IPv6-only cluster's values: IPv6 alone, written as before.
        let v6: DualIp = serde_yaml_ng::from_str("\"fd00::1\"").unwrap();
        assert_eq!(v6, DualIp::v6_only("fd00::1".parse().unwrap()));
        assert_eq!(v6.primary_family(), IpFamily::Ipv6);
        assert_eq!(serde_json::to_string(&v6).unwrap(), "\"fd00::1\"");
        let v6: DualCidr = serde_yaml_ng::from_str("[\"fd00:10:244::/56\"]").unwrap();
        assert_eq!(v6.to_string(), "fd00:10:244::/56");
        for (bad, says) in [
            ("[\"fd00::1\", 10.0.0.1]", "IPv4 comes first"),
            ("[10.0.0.1, 10.0.0.2]", "must be IPv6"),
            ("[10.0.0.1, \"fd00::1\", \"fd00::2\"]", "at most two"),
            ("[]", "found none"),
        ] {
            let err = serde_yaml_ng::from_str::<DualIp>(bad)
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

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
    }
}
