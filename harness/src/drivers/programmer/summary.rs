//! A node's programming in a few numbers: what the observation document records per node.

use crate::document::NodeSummary;
use crate::programming::{EffectiveState, Programming, KERNEL_IPVS_TIMEOUTS};
use crate::topology::NodeNs;

/// What a computed programming holds (the built-ins).
pub(crate) fn summarize(node: &NodeNs, p: &Programming) -> NodeSummary {
    NodeSummary {
        node: node.name.clone(),
        kube_ipvs0: p
            .kube_ipvs0_addresses()
            .iter()
            .map(|a| a.to_string())
            .collect(),
        ipvs_virtual_servers: p.ipvs.len(),
        ipvs_real_servers: p.ipvs.iter().map(|v| v.destinations.len()).sum(),
        ipsets: p.ipsets.len(),
        iptables_rules: p.iptables.values().map(|t| t.rule_lines().count()).sum(),
        ip6tables_rules: p.ip6tables.values().map(|t| t.rule_lines().count()).sum(),
        nft_lines: p.nft.lines.len(),
        ipvs_timeouts: p.ipvs_timeouts.as_ref().map(timeouts_summary),
    }
}

/// What a node holds, read back (proxiers that program the node themselves).
pub(crate) fn summarize_effective(node: &NodeNs, state: &EffectiveState) -> NodeSummary {
    NodeSummary {
        node: node.name.clone(),
        kube_ipvs0: state
            .kube_ipvs0
            .as_ref()
            .map(|d| d.addresses.iter().map(|(a, _)| a.to_string()).collect())
            .unwrap_or_default(),
        ipvs_virtual_servers: state.ipvs.as_ref().map_or(0, |t| t.servers.len()),
        ipvs_real_servers: state
            .ipvs
            .as_ref()
            .map_or(0, |t| t.servers.iter().map(|v| v.destinations.len()).sum()),
        ipsets: state.ipsets.len(),
        iptables_rules: state.iptables.values().map(|t| t.rules.len()).sum(),
        ip6tables_rules: state.ip6tables.values().map(|t| t.rules.len()).sum(),
        nft_lines: nft_lines_kept(state),
        ipvs_timeouts: state
            .ipvs
            .as_ref()
            .map(|t| t.timeouts)
            .filter(|t| *t != KERNEL_IPVS_TIMEOUTS)
            .map(|t| timeouts_summary(&t)),
    }
}

/// The lines of the nftables tables a node holds, without the service chains a sync flushed to
/// delete later (an empty `chain NAME {` … `}`: two lines each). When kube-proxy deletes those
/// depends on the clock (a sync over a second after the one that flushed them, `staleChains`,
/// pkg/proxy/nftables/proxier.go), not on the state: counting them made the same run's
/// summary differ from run to run. The convergence check still sees them.
fn nft_lines_kept(state: &EffectiveState) -> usize {
    let all: usize = state.nft.values().map(Vec::len).sum();
    all.saturating_sub(2 * crate::convergence::flushed_chains(state).len())
}

fn timeouts_summary(t: &ipvs_genl::Timeouts) -> String {
    format!("tcp {}s, tcpfin {}s, udp {}s", t.tcp, t.tcp_fin, t.udp)
}
