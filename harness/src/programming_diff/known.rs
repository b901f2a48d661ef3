//! The known differences between the programming a real kube-proxy leaves on a node and what
//! the built-in of its mode writes, each with its reason and the kube-proxy source that
//! explains it: what the built-in deliberately leaves out (kube-proxy's own bookkeeping that
//! no packet meets), and what changed between the kube-proxy releases kpct runs.
//!
//! `harness/tests/real_programming.rs` keeps this table true: a difference it does not declare
//! fails the test, and so does an entry that declares none of the differences of the test's
//! scenarios.

use super::{Difference, RealKey, Stack};
use crate::drivers::real::Mode;
use std::fmt;

/// Which side of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    First,
    Second,
}

/// What a known difference is: something only one side holds, or lines in another order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Only {
    /// The real kube-proxy holds it, the built-in does not write it.
    Real,
    /// The built-in writes it, the real kube-proxy does not.
    BuiltIn,
    /// Both hold the same lines of the section, in another order.
    Order,
}

/// A kube-proxy release, `v1.37.2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    /// `v1.37.2` or `1.37.2` (a suffix such as `-rc.1` or `+dirty` is ignored).
    pub fn parse(s: &str) -> Option<Version> {
        let s = s.strip_prefix('v').unwrap_or(s);
        let s = s.split(['-', '+']).next()?;
        let mut parts = s.split('.').map(|p| p.parse::<u32>().ok());
        let v = Version(parts.next()??, parts.next()??, parts.next()??);
        parts.next().is_none().then_some(v)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The releases a known difference holds for: from `since` (included) until `before`
/// (excluded), either end open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Versions {
    pub since: Option<Version>,
    pub before: Option<Version>,
}

impl Versions {
    pub const ALL: Versions = Versions {
        since: None,
        before: None,
    };

    pub const fn before(v: Version) -> Versions {
        Versions {
            since: None,
            before: Some(v),
        }
    }

    pub const fn since(v: Version) -> Versions {
        Versions {
            since: Some(v),
            before: None,
        }
    }

    pub fn contains(&self, v: Version) -> bool {
        self.since.is_none_or(|s| v >= s) && self.before.is_none_or(|b| v < b)
    }
}

impl fmt::Display for Versions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.since, self.before) {
            (None, None) => write!(f, "every version"),
            (Some(s), None) => write!(f, "{s} and later"),
            (None, Some(b)) => write!(f, "before {b}"),
            (Some(s), Some(b)) => write!(f, "{s} to before {b}"),
        }
    }
}

/// One known difference between a real kube-proxy and the built-in of its mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownDifference {
    pub mode: Mode,
    pub versions: Versions,
    /// The clusters it shows in (empty: every cluster).
    pub stacks: &'static [Stack],
    pub only: Only,
    /// What differs as [`Difference::what`] names it, `*` standing for any run of characters
    /// and `%` for any run without a `:`, a space or a backtick (a chain's name: `chain
    /// endpoint-%`` is the chain, not its rules).
    pub what: &'static str,
    /// Why the built-in differs.
    pub reason: &'static str,
    /// The kube-proxy source (file and function, or the upstream change) that explains it.
    pub source: &'static str,
}

impl KnownDifference {
    /// Whether this declares `d` (of a real kube-proxy, first, with the built-in, second).
    pub fn declares(&self, d: &Difference) -> bool {
        let only = match d.side() {
            Some(Side::First) => Only::Real,
            Some(Side::Second) => Only::BuiltIn,
            None => Only::Order,
        };
        only == self.only
            && (self.stacks.is_empty() || self.stacks.contains(&d.stack))
            && wildcard_match(self.what, d.what())
    }
}

impl fmt::Display for KnownDifference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let only = match self.only {
            Only::Real => "only kube-proxy",
            Only::BuiltIn => "only the built-in",
            Only::Order => "in another order",
        };
        write!(
            f,
            "{} mode, {}: {only}: {} — {} ({})",
            self.mode.name(),
            self.versions,
            self.what,
            self.reason,
            self.source
        )
    }
}

/// The known differences that apply to a real kube-proxy `key`.
pub fn applying_to(key: RealKey) -> impl Iterator<Item = &'static KnownDifference> {
    KNOWN_DIFFERENCES
        .iter()
        .filter(move |k| k.mode == key.mode && k.versions.contains(key.version))
}

/// Whether `text` matches `pattern`, where `*` matches any run of characters and `%` any run
/// of characters other than `:`, ` ` and `` ` ``.
pub fn wildcard_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // Positions of `pattern` that match the text read so far, as a set (no backtracking).
    let mut at = vec![false; p.len() + 1];
    at[0] = true;
    let close = |at: &mut Vec<bool>| {
        for i in 0..p.len() {
            if at[i] && matches!(p[i], '*' | '%') {
                at[i + 1] = true;
            }
        }
    };
    close(&mut at);
    for c in t {
        let mut next = vec![false; p.len() + 1];
        for i in 0..p.len() {
            if !at[i] {
                continue;
            }
            match p[i] {
                '*' => next[i] = true,
                '%' if !matches!(c, ':' | ' ' | '`') => next[i] = true,
                '%' => {}
                literal if literal == c => next[i + 1] = true,
                _ => {}
            }
        }
        at = next;
        close(&mut at);
    }
    at[p.len()]
}

const V1_36: Version = Version(1, 36, 0);

/// Every known difference.
pub static KNOWN_DIFFERENCES: &[KnownDifference] = &[
    // ---- iptables mode, every version kpct runs ----
    KnownDifference {
        mode: Mode::Iptables,
        versions: Versions::ALL,
        stacks: &[],
        only: Only::Real,
        what: "chain KUBE-PROXY-CANARY (table *)",
        reason: "an empty chain in mangle, nat and filter whose disappearance tells kube-proxy \
                 that another program flushed its tables; no rule jumps to it",
        source: "NewProxier: ipt.Monitor(kubeProxyCanaryChain, …), pkg/proxy/iptables/proxier.go",
    },
    KnownDifference {
        mode: Mode::Iptables,
        versions: Versions::ALL,
        stacks: &[],
        only: Only::Real,
        what: "rule `-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name *\
               ct_state_invalid_dropped_pkts -j DROP` (table *)",
        reason: "the INVALID drop also counts its packets in an nfacct object (the metric \
                 kubeproxy_iptables_ct_state_invalid_dropped_packets_total) where the kernel \
                 has nfacct; the same verdict for the same packets",
        source: "syncProxyRules, metrics.IPTablesCTStateInvalidDroppedNFAcctCounter, \
                 pkg/proxy/iptables/proxier.go",
    },
    KnownDifference {
        mode: Mode::Iptables,
        versions: Versions::ALL,
        stacks: &[],
        only: Only::BuiltIn,
        what: "rule `-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP` (table *)",
        reason: "the built-in's INVALID drop, without the nfacct counter (see above)",
        source: "syncProxyRules, pkg/proxy/iptables/proxier.go",
    },
    KnownDifference {
        mode: Mode::Iptables,
        versions: Versions::ALL,
        stacks: &[],
        only: Only::Real,
        what: "rule `-A KUBE-NODEPORTS -d 127.0.0.0/8 * -m nfacct --nfacct-name \
               *localhost_nps_accepted_pkts -j KUBE-EXT-*` (table *)",
        reason: "a rule before a localhost NodePort's own that only counts its packets (the \
                 metric kubeproxy_iptables_localhost_nodeports_accepted_packets_total) and \
                 jumps where that rule jumps",
        source: "syncProxyRules, metrics.LocalhostNodePortAcceptedNFAcctCounter, \
                 pkg/proxy/iptables/proxier.go",
    },
    // ---- before v1.36: an IPv6 proxier on a node whose IPv6 is disabled ----
    KnownDifference {
        mode: Mode::Iptables,
        versions: Versions::before(V1_36),
        stacks: &[Stack::Ipv4Only],
        only: Only::Real,
        what: "* (table ip6:*)",
        reason: "kube-proxy decides a node supports IPv6 from /proc/net/if_inet6 alone and \
                 runs an idle IPv6 proxier on an IPv4-only cluster's node whose IPv6 is \
                 disabled; v1.36 also reads net.ipv6.conf.all.disable_ipv6",
        source: "platformCheckSupported, cmd/kube-proxy/app/server_linux.go (v1.36.0)",
    },
    KnownDifference {
        mode: Mode::Nftables,
        versions: Versions::before(V1_36),
        stacks: &[Stack::Ipv4Only],
        only: Only::Real,
        what: "nftables `ip6 kube-proxy*",
        reason: "the idle IPv6 proxier of a node whose IPv6 is disabled (see iptables mode)",
        source: "platformCheckSupported, cmd/kube-proxy/app/server_linux.go (v1.36.0)",
    },
    // ---- nftables mode from v1.36: endpoints reached by dnat maps, hairpin by a set ----
    KnownDifference {
        mode: Mode::Nftables,
        versions: Versions::since(V1_36),
        stacks: &[],
        only: Only::Real,
        what: "nftables `ip* kube-proxy › chain *: meta l4proto * dnat *`",
        reason: "a Service without session affinity DNATs in its service (or local) chain (one \
                 endpoint: `dnat to`; more: `dnat … to numgen random mod N map`), with no chain per \
                 endpoint; the built-in models the per-endpoint chains of v1.33-v1.35, which \
                 pick the same endpoints with the same probabilities",
        source: "writeServiceToEndpointRules, pkg/proxy/nftables/proxier.go (v1.36.0)",
    },
    KnownDifference {
        mode: Mode::Nftables,
        versions: Versions::since(V1_36),
        stacks: &[],
        only: Only::BuiltIn,
        what: "nftables `ip* kube-proxy › chain endpoint-*",
        reason: "the per-endpoint chains v1.36 writes only for Services with session affinity \
                 (see the dnat maps above)",
        source: "writeServiceToEndpointJumps, pkg/proxy/nftables/proxier.go (v1.36.0)",
    },
    KnownDifference {
        mode: Mode::Nftables,
        versions: Versions::since(V1_36),
        stacks: &[],
        only: Only::BuiltIn,
        what: "nftables `ip* kube-proxy › chain *: numgen random mod * vmap *",
        reason: "the jump to per-endpoint chains of a Service without affinity (see above)",
        source: "writeServiceToEndpointJumps, pkg/proxy/nftables/proxier.go (v1.36.0)",
    },
    KnownDifference {
        mode: Mode::Nftables,
        versions: Versions::since(V1_36),
        stacks: &[],
        only: Only::BuiltIn,
        what: "nftables `ip* kube-proxy › chain mark-for-masquerade*",
        reason: "v1.36 marks for masquerade inline (`meta mark set meta mark | MARK`), and a \
                 hairpin connection by the hairpin-connections set rather than per endpoint",
        source: "setupNFTables, pkg/proxy/nftables/proxier.go (v1.36.0)",
    },
    KnownDifference {
        mode: Mode::Nftables,
        versions: Versions::since(V1_36),
        stacks: &[],
        only: Only::BuiltIn,
        what: "nftables `ip* kube-proxy › chain *: *jump mark-for-masquerade*",
        reason: "the jumps to mark-for-masquerade (see above): v1.36 marks the traffic of a \
                 ClusterIP from outside the cluster once, in the services chain, and hairpin \
                 traffic in the masquerading chain",
        source: "setupNFTables, pkg/proxy/nftables/proxier.go (v1.36.0)",
    },
    KnownDifference {
        mode: Mode::Nftables,
        versions: Versions::since(V1_36),
        stacks: &[],
        only: Only::Real,
        what: "nftables `ip* kube-proxy › chain *: *meta mark set meta mark | 0x* comment \
               \"masquerade*\"`",
        reason: "the mark for masquerade set inline where the built-in jumps to \
                 mark-for-masquerade: in the external chains, and once in the services chain \
                 for all ClusterIP traffic from outside the cluster (the cluster-ips set; with \
                 masqueradeAll, all of it) where the built-in marks it in each service chain",
        source: "writeServiceRules and setupNFTables, pkg/proxy/nftables/proxier.go (v1.36.0)",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        assert!(wildcard_match("a*c", "abc"));
        assert!(wildcard_match("a*c", "ac"));
        assert!(!wildcard_match("a*c", "abd"));
        assert!(wildcard_match("*", ""));
        assert!(wildcard_match("a*b*c", "a-b-b-c"));
        assert!(!wildcard_match("ab*ba", "aba"));
        assert!(wildcard_match("exact", "exact"));
        assert!(!wildcard_match("exact", "exactly"));
        assert!(wildcard_match(
            "chain endpoint-%`",
            "chain endpoint-AB/c/tcp/__1.2/80`"
        ));
        assert!(!wildcard_match(
            "chain endpoint-%`",
            "chain endpoint-AB: dnat to 1.2.3.4:80`"
        ));
        assert!(wildcard_match("a%", "abc"));
    }

    #[test]
    fn versions() {
        assert_eq!(Version::parse("v1.37.2"), Some(Version(1, 37, 2)));
        assert_eq!(Version::parse("1.34.4-rc.0"), Some(Version(1, 34, 4)));
        assert_eq!(Version::parse("Kubernetes"), None);
        let before = Versions::before(Version(1, 35, 0));
        assert!(before.contains(Version(1, 34, 4)));
        assert!(!before.contains(Version(1, 35, 0)));
        assert!(Versions::since(Version(1, 35, 0)).contains(Version(1, 37, 2)));
    }
}
