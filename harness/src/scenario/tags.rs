//! Tags, derived from what a scenario holds (never written by hand, so they cannot drift): what
//! `kpct run --tag`/`--exclude-tag` select by, so that a proxier's CI runs the part of the
//! library its proxier supports (an IPv4-only proxier: `--exclude-tag ipv6`).

use super::{Protocol, Scenario, ServiceType, SessionAffinity, TrafficPolicy};
use std::collections::BTreeSet;

/// Every tag, with what earns it (the README's list).
pub const TAGS: &[(&str, &str)] = &[
    ("ipv4", "the cluster has IPv4 pod ranges"),
    ("ipv6", "the cluster has IPv6 pod ranges"),
    ("dual-stack", "both"),
    ("tcp", "a probe uses TCP"),
    ("udp", "a probe uses UDP"),
    (
        "sctp",
        "a probe or a pod port uses SCTP (needs SCTP in the kernel)",
    ),
    ("nodeport", "a NodePort or LoadBalancer Service"),
    ("loadbalancer", "a LoadBalancer Service"),
    ("external-ip", "a Service with externalIPs"),
    ("source-ranges", "a Service with loadBalancerSourceRanges"),
    (
        "session-affinity",
        "a Service with sessionAffinity: ClientIP",
    ),
    ("etp-local", "a Service with externalTrafficPolicy: Local"),
    ("itp-local", "a Service with internalTrafficPolicy: Local"),
    ("transition", "the scenario has steps"),
    ("proxier-options", "it sets `proxier:` options"),
    (
        "ipvs-existing",
        "a node starts with IPVS services (needs IP_VS in every mode)",
    ),
];

impl Scenario {
    /// Its tags (see [`TAGS`]).
    pub fn tags(&self) -> BTreeSet<&'static str> {
        let mut tags = BTreeSet::new();
        let mut tag = |name: &'static str, earned: bool| {
            if earned {
                tags.insert(name);
            }
        };
        let topo = &self.topology;
        let v4 = topo.cluster_cidr.has(super::IpFamily::Ipv4);
        let v6 = topo.cluster_cidr.has(super::IpFamily::Ipv6);
        tag("ipv4", v4);
        tag("ipv6", v6);
        tag("dual-stack", v4 && v6);
        let probes = |p: Protocol| self.probes.iter().any(|probe| probe.protocol == p);
        tag("tcp", probes(Protocol::Tcp));
        tag("udp", probes(Protocol::Udp));
        tag("sctp", self.uses_sctp());
        let any =
            |f: &dyn Fn(&super::ServiceSpec) -> bool| self.services.iter().any(|s| f(&s.spec));
        tag(
            "nodeport",
            any(&|s| matches!(s.type_, ServiceType::NodePort | ServiceType::LoadBalancer)),
        );
        tag(
            "loadbalancer",
            any(&|s| s.type_ == ServiceType::LoadBalancer),
        );
        tag("external-ip", any(&|s| !s.external_ips.is_empty()));
        tag(
            "source-ranges",
            any(&|s| !s.load_balancer_source_ranges.is_empty()),
        );
        tag(
            "session-affinity",
            any(&|s| s.session_affinity == SessionAffinity::ClientIP),
        );
        tag(
            "etp-local",
            any(&|s| s.external_traffic_policy == Some(TrafficPolicy::Local)),
        );
        tag(
            "itp-local",
            any(&|s| s.internal_traffic_policy == Some(TrafficPolicy::Local)),
        );
        tag("transition", !self.steps.is_empty());
        tag(
            "proxier-options",
            self.proxier != super::ProxierOptions::default(),
        );
        tag("ipvs-existing", self.has_existing_ipvs());
        tags
    }
}

/// Whether every one of `tags` is a known tag: an unknown one is an error naming the known
/// ones (a typo would otherwise select nothing, or everything).
pub fn check_tags(tags: &[String]) -> Result<(), String> {
    let unknown: Vec<&str> = tags
        .iter()
        .map(String::as_str)
        .filter(|t| !TAGS.iter().any(|(known, _)| known == t))
        .collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "unknown tag(s) {}; known: {}",
            unknown.join(", "),
            TAGS.iter().map(|(t, _)| *t).collect::<Vec<_>>().join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn library(file: &str) -> Scenario {
        let path = format!("{}/../scenarios/{file}", env!("CARGO_MANIFEST_DIR"));
        crate::scenario::load(std::path::Path::new(&path)).unwrap()
    }

    #[test]
    fn tags_follow_what_the_scenario_holds() {
        let plain = library("clusterip-cross-node.yaml").tags();
        assert_eq!(plain.into_iter().collect::<Vec<_>>(), ["ipv4", "tcp"]);
        let dual = library("dual-stack-clusterip.yaml").tags();
        assert!(
            ["ipv4", "ipv6", "dual-stack"]
                .iter()
                .all(|t| dual.contains(t)),
            "{dual:?}"
        );
        let etp = library("nodeport-etp-local.yaml").tags();
        assert!(
            etp.contains("nodeport") && etp.contains("etp-local"),
            "{etp:?}"
        );
        let sctp = library("sctp-services.yaml").tags();
        assert!(sctp.contains("sctp"), "{sctp:?}");
        let steps = library("transition-scale-down-up.yaml").tags();
        assert!(steps.contains("transition"), "{steps:?}");
        let masq = library("masquerade-all.yaml").tags();
        assert!(masq.contains("proxier-options"), "{masq:?}");
    }

    #[test]
    fn the_documentation_lists_every_tag() {
        let doc = include_str!("../../../docs/ci.md");
        for (tag, earned) in TAGS {
            let row = format!("| `{tag}` | {earned} |");
            assert!(doc.contains(&row), "docs/ci.md lacks {row}");
        }
    }

    #[test]
    fn an_unknown_tag_is_named_with_the_known_ones() {
        assert!(check_tags(&["ipv6".into(), "nodeport".into()]).is_ok());
        let e = check_tags(&["ipv7".into()]).unwrap_err();
        assert!(
            e.starts_with("unknown tag(s) ipv7; known: ipv4, ipv6"),
            "{e}"
        );
    }
}
