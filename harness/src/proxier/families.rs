//! One node's programming from a proxier per IP family, as kube-proxy's meta-proxier runs an
//! IPv4 and an IPv6 proxier side by side on a dual-stack node (pkg/proxy/metaproxier): each
//! syncs the state of its own family, and the node holds both results.

use super::release_view::seen_by;
use super::{Proxier, Resync};
use crate::programming::nft::NftScript;
use crate::programming::Programming;
use crate::scenario::cluster::{ClusterState, NodeContext};
use crate::scenario::IpFamily;
use anyhow::{bail, Context, Result};

/// The first sync of a node: the IPv4 proxier's programming, with the IPv6 proxier's added
/// where the cluster has IPv6 (`cluster.ipv6`). An IPv6-only cluster's node runs an idle IPv4
/// proxier beside its IPv6 one ([`ClusterState::idle`]): kube-proxy runs dual-stack wherever
/// the node supports both families, and IPv4 is always there.
pub fn program_node<P: Proxier + ?Sized>(
    proxier: &P,
    cluster: &ClusterState,
    node: &NodeContext,
) -> Result<Programming> {
    let program =
        |c: &ClusterState, n: &NodeContext| proxier.program(&seen_by(proxier.release(), c, n), n);
    if cluster.ip_family == IpFamily::Ipv6 {
        let (idle, idle_node) = idle_ipv4(cluster, node);
        let mut programming = program(&idle, &idle_node).context("the idle IPv4 proxier")?;
        add_family(&mut programming, program(cluster, node)?)?;
        return Ok(programming);
    }
    let mut programming = program(cluster, node)?;
    if let Some((cluster6, node6)) = ipv6_of(cluster, node)? {
        let v6 = program(cluster6, node6).context("the IPv6 proxier")?;
        add_family(&mut programming, v6)?;
    }
    Ok(programming)
}

/// A later sync of a node, each family's proxier over its own previous state.
pub fn resync_node<P: Proxier + ?Sized>(
    proxier: &P,
    resync: &Resync<'_>,
    cluster: &ClusterState,
    node: &NodeContext,
) -> Result<Programming> {
    // The current and the previous state, each as the release sees it.
    let release = proxier.release();
    let resync_as_seen = |r: &Resync<'_>, c: &ClusterState, n: &NodeContext| {
        let previous = r.previous.map(|p| seen_by(release, p, n));
        let r = Resync {
            previous: previous.as_deref(),
            ..*r
        };
        proxier.resync(&r, &seen_by(release, c, n), n)
    };
    if cluster.ip_family == IpFamily::Ipv6 {
        let (idle, idle_node) = idle_ipv4(cluster, node);
        // The idle proxier's previous state is the same idle state, unless it restarted.
        let resync4 = Resync {
            previous: resync.previous.map(|_| &idle),
            ..*resync
        };
        let mut programming =
            resync_as_seen(&resync4, &idle, &idle_node).context("the idle IPv4 proxier")?;
        let resync6 = Resync {
            existing_chains: resync.existing_ip6_chains,
            ..*resync
        };
        add_family(&mut programming, resync_as_seen(&resync6, cluster, node)?)?;
        return Ok(programming);
    }
    let mut programming = resync_as_seen(resync, cluster, node)?;
    if let Some((cluster6, node6)) = ipv6_of(cluster, node)? {
        let resync6 = Resync {
            previous: resync.previous.and_then(|p| p.ipv6.as_deref()),
            existing_chains: resync.existing_ip6_chains,
            ..*resync
        };
        let v6 = resync_as_seen(&resync6, cluster6, node6).context("the IPv6 proxier")?;
        add_family(&mut programming, v6)?;
    }
    Ok(programming)
}

/// The idle IPv4 proxier of an IPv6-only cluster's node: its state ([`ClusterState::idle`])
/// and the node as it sees itself, with no IPv4 address of its own: its node IP is
/// `127.0.0.1`, as `detectNodeIPs` (cmd/kube-proxy/app/server.go) leaves it for a family the
/// node has no IP of.
fn idle_ipv4(cluster: &ClusterState, node: &NodeContext) -> (ClusterState, NodeContext) {
    let idle = cluster.idle(IpFamily::Ipv4);
    let node = NodeContext {
        name: node.name.clone(),
        node_ip: IpFamily::Ipv4.localhost(),
        pod_cidr: idle.cluster_cidr,
        local_addresses: Vec::new(),
        ipv6: None,
    };
    (idle, node)
}

/// The IPv6 halves of a dual-stack state, if it has them.
fn ipv6_of<'a>(
    cluster: &'a ClusterState,
    node: &'a NodeContext,
) -> Result<Option<(&'a ClusterState, &'a NodeContext)>> {
    match (cluster.ipv6.as_deref(), node.ipv6.as_deref()) {
        (None, _) => Ok(None),
        (Some(c), Some(n)) => Ok(Some((c, n))),
        (Some(_), None) => bail!(
            "node {} has no IPv6 address in a dual-stack cluster",
            node.name
        ),
    }
}

/// Adds what the IPv6 proxier programs to the IPv4 proxier's programming: its `iptables` are
/// the node's `ip6tables`. What both write to one place (a sysctl, an ipset name, the restore
/// mode) must agree.
fn add_family(into: &mut Programming, v6: Programming) -> Result<()> {
    if !v6.ip6tables.is_empty() {
        bail!("the IPv6 proxier's programming holds ip6tables of its own");
    }
    if !v6.iptables.is_empty() {
        if !into.iptables.is_empty() && into.restore_mode != v6.restore_mode {
            bail!("the two families' proxiers restore iptables in different modes");
        }
        into.restore_mode = v6.restore_mode;
        into.ip6tables = v6.iptables;
    }
    if let Some(timeouts) = v6.ipvs_timeouts {
        if into.ipvs_timeouts.is_some_and(|v4| v4 != timeouts) {
            bail!("the two families' proxiers set different IPVS timeouts");
        }
        into.ipvs_timeouts = Some(timeouts);
    }
    into.ipvs.extend(v6.ipvs);
    into.ipvs_clear |= v6.ipvs_clear;
    for (family, keep) in v6.ipvs_delete_others {
        if into.ipvs_delete_others.insert(family, keep).is_some() {
            bail!("both families' proxiers clean up the IPVS services of {family}");
        }
    }
    for set in v6.ipsets {
        if into.ipsets.iter().any(|s| s.name == set.name) {
            bail!("both families' proxiers create ipset {}", set.name);
        }
        into.ipsets.push(set);
    }
    for (key, value) in v6.sysctls {
        match into.sysctls.get(&key) {
            Some(v4) if *v4 != value => {
                bail!("the IPv4 proxier sets {key}={v4}, the IPv6 proxier {key}={value}")
            }
            _ => {
                into.sysctls.insert(key, value);
            }
        }
    }
    if let Some(v6_addresses) = v6.ipvs_addresses {
        into.ipvs_addresses
            .get_or_insert_with(Vec::new)
            .extend(v6_addresses);
    }
    if !v6.nft.is_empty() {
        let lines = into
            .nft
            .lines
            .iter()
            .chain(&v6.nft.lines)
            .cloned()
            .collect();
        into.nft = NftScript::new(lines).map_err(|problems| {
            anyhow::anyhow!(
                "the two families' nft scripts do not join: {}",
                crate::programming::nft::describe(&problems)
            )
        })?;
    }
    into.conntrack_cleanup.extend(v6.conntrack_cleanup);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxier::kube_proxy_iptables::KubeProxyIptables;
    use crate::proxier::kube_proxy_ipvs::KubeProxyIpvs;
    use crate::proxier::test_cluster::{cluster6, ep, node6, svc};

    /// An IPv6-only cluster's node runs an idle IPv4 proxier beside its IPv6 one, as
    /// kube-proxy runs dual-stack wherever the node supports both families: iptables hold the
    /// IPv4 proxier's fixed chains and rules and nothing of a Service, ip6tables the Service.
    #[test]
    fn an_ipv6_only_node_runs_an_idle_ipv4_proxier() {
        use crate::proxier::kube_proxy_nftables::KubeProxyNftables;
        let mut sp = svc("default", "web", "fd00:10:96::a");
        sp.endpoints = vec![ep("fd00:10::20")];
        let cluster = cluster6(vec![sp]);
        for proxier in [
            &KubeProxyIptables::default() as &dyn Proxier,
            &KubeProxyIpvs::default(),
        ] {
            let p = program_node(proxier, &cluster, &node6()).expect("program");
            let rules = |tables: &std::collections::BTreeMap<_, crate::programming::TableRules>| {
                tables
                    .values()
                    .flat_map(|t| t.rule_lines().cloned())
                    .collect::<Vec<String>>()
            };
            let (v4, v6) = (rules(&p.iptables), rules(&p.ip6tables));
            assert!(
                v4.iter().any(|r| r.contains("KUBE-POSTROUTING"))
                    && !v4.iter().any(|r| r.contains("fd00")),
                "{}: {v4:?}",
                proxier.name()
            );
            assert!(
                v6.iter().any(|r| r.contains("fd00:10::/64")),
                "{}: {v6:?}",
                proxier.name()
            );
        }
        let p = program_node(&KubeProxyIptables::default(), &cluster, &node6()).expect("program");
        assert_eq!(
            p.sysctls
                .get("net.ipv4.conf.all.route_localnet")
                .map(String::as_str),
            Some("1"),
            "the IPv4 proxier's localhost NodePorts"
        );
        let p = program_node(&KubeProxyIpvs::default(), &cluster, &node6()).expect("program");
        assert_eq!(
            p.kube_ipvs0_addresses(),
            ["fd00:10:96::a".parse::<std::net::IpAddr>().unwrap()]
        );
        for set in &p.ipsets {
            assert!(
                set.name.starts_with("KUBE-6-") || set.entries.is_empty(),
                "the idle proxier's sets are empty: {set:?}"
            );
        }
        let p = program_node(&KubeProxyNftables::default(), &cluster, &node6()).expect("program");
        let ip: Vec<&String> = p
            .nft
            .lines
            .iter()
            .filter(|l| l.contains(" ip kube-proxy"))
            .collect();
        assert!(!ip.is_empty(), "{:?}", p.nft.lines);
        assert!(
            !ip.iter()
                .any(|l| l.contains("fd00") || l.contains("unallocated")),
            "no Service, no ServiceCIDR: {ip:?}"
        );
    }
}
