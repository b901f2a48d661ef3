//! A programming as one of the tools would show it, for reading and diffing without a kernel.

use super::text::{render_ipsets, render_ipvs, render_table, render_text, render_timeouts};
use super::Programming;
use std::fmt::Write;

/// How to show a programming.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum View {
    /// The suite's text format: every section (sysctls, addresses, ipsets, tables, nft, IPVS).
    Text,
    /// The iptables tables as `iptables-restore` input (what `iptables-save` would print).
    IptablesSave,
    /// The ip6tables tables as `ip6tables-restore` input (a dual-stack node's IPv6 proxier).
    Ip6tablesSave,
    /// The IPVS services as `ipvsadm -Sn` lines (timeouts as `ipvsadm --set`).
    Ipvsadm,
    /// The ipsets as `ipset save` lines.
    Ipset,
    /// The `nft -f` transaction (nftables mode).
    Nft,
}

/// `p` shown as `view`.
pub fn render(p: &Programming, view: View) -> String {
    match view {
        View::Text => render_text(p),
        View::IptablesSave => p
            .iptables
            .iter()
            .map(|(table, rules)| render_table(*table, rules))
            .collect(),
        View::Ip6tablesSave => p
            .ip6tables
            .iter()
            .map(|(table, rules)| render_table(*table, rules))
            .collect(),
        View::Ipvsadm => {
            let mut out = String::new();
            if let Some(t) = &p.ipvs_timeouts {
                let _ = writeln!(out, "# ipvsadm {}", render_timeouts(t));
            }
            out.push_str(&render_ipvs(&p.ipvs));
            out
        }
        View::Ipset => render_ipsets(&p.ipsets),
        View::Nft if p.nft.is_empty() => String::new(),
        View::Nft => p.nft.text(),
    }
}
