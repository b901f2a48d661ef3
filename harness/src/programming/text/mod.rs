//! The programming text format: how an `exec:` proxier hands its [`Programming`] to the harness
//! on stdout, and the form [`render_text`] prints.
//!
//! It stacks the native save formats of each tool into `iptables-restore`-style sections:
//!
//! ```text
//! # Comment lines (first non-blank character `#`) and blank lines are ignored everywhere.
//! # Optional, before any section: noflush (the default) or flush.
//! restore-mode: noflush
//! # key=value (spaces around `=` allowed); only net.* keys.
//! *sysctl
//! net.ipv4.conf.all.route_localnet=1
//! COMMIT
//! # Addresses bound as /32 on kube-ipvs0; the `/32` suffix is optional.
//! *addresses
//! 10.96.0.1
//! COMMIT
//! # `ipset save` lines: create NAME TYPE [OPTIONS] / add NAME ENTRY.
//! *ipset
//! create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536
//! add KUBE-CLUSTER-IP 10.96.0.1,tcp:443
//! COMMIT
//! # *raw, *mangle, *nat, *filter: iptables-restore syntax; *ip6:raw … *ip6:filter the same
//! # for ip6tables (what the IPv6 proxier of a dual-stack node writes).
//! *nat
//! :KUBE-SERVICES - [0:0]
//! -A PREROUTING -j KUBE-SERVICES
//! COMMIT
//! # `ipvsadm -Sn` lines.
//! *ipvs
//! -A -t 10.96.0.1:443 -s rr
//! -a -t 10.96.0.1:443 -r 192.168.1.10:6443 -m -w 1
//! COMMIT
//! # An `nft -f` script (kube-proxy's nftables mode), applied as one transaction. Every
//! # command names its table with a family; `include` is refused.
//! *nft
//! add table ip kube-proxy { comment "rules for kube-proxy" ; }
//! add chain ip kube-proxy services
//! COMMIT
//! # Conntrack entries deleted after everything else is applied: those to the original
//! # destination (any address without --orig-dst) and port whose reply source is none of the
//! # --reply-src-not addresses (kube-proxy's stale UDP cleanup).
//! *conntrack
//! -p udp --orig-dst 10.96.0.10 --orig-port-dst 53 --reply-src-not 10.244.1.5,10.244.2.5
//! COMMIT
//! ```
//!
//! Each section appears at most once, in any order, and ends with `COMMIT`. Inside a table
//! section, lines are `:CHAIN POLICY [packets:bytes]` declarations (counters optional, policy
//! `-` for user chains) and rule lines starting with `-` (`-A`, `-I`, ...), optionally prefixed
//! with `[packets:bytes]` as `iptables-save -c` prints them (the counters are dropped).
//! `restore-mode: flush` makes the applier replace each listed table (plain `iptables-restore`)
//! instead of `iptables-restore --noflush`. ipset types are those of [`IpSetType`]; entries are
//! passed to `ipset` as written (it is the judge of whether they fit the type). The `*ipvs`
//! section is read by [`ipvs_genl::parse_save`], with `ipvsadm -R`'s checks (a destination must
//! follow the `-A` line of its service), plus at most one `--set TCP TCPFIN UDP` line (the
//! connection timeouts in seconds, as `ipvsadm --set` takes them; 0 keeps one as it is) and at
//! most one `--delete-others [IPv4|IPv6] [CIDR,...]` per family (remove every other address
//! service of that family, IPv4 when none is named, except those inside the CIDRs, as each
//! family's IPVS proxier cleans up services it did not make).
//!
//! Errors read `ORIGIN:LINE: what is wrong`, ORIGIN being the file name or e.g.
//! `exec:./proxier.sh stdout`.

use super::nft::NftScript;
use super::source::{Item, Origin, SourceMap};
use super::{
    ChainDecl, ConntrackCleanup, IpSet, IpSetType, Programming, RestoreMode, Serving, Table,
    TableRules, VirtualServer,
};
use crate::scenario::{IpCidr, IpFamily, Protocol};
use ipvs_genl::{
    format_save, parse_save, Destination, DestinationState, Service, ServiceState, Stats, Timeouts,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::net::IpAddr;

/// A problem in programming text, at a line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}:{line}: {message}")]
pub struct TextError {
    pub origin: String,
    /// 1-based; 0 for problems of the whole text (e.g. a missing COMMIT at end of input).
    pub line: usize,
    pub message: String,
}

/// A parsed programming with the line every item came from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ParsedText {
    pub programming: Programming,
    pub sources: SourceMap,
}

/// The kinds of section the format has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Section {
    Table(Table),
    /// An ip6tables table: `*ip6:nat`.
    Ip6Table(Table),
    Ipset,
    Ipvs,
    Addresses,
    Sysctl,
    Nft,
    Conntrack,
}

impl Section {
    pub const ALL: [Section; 14] = [
        Section::Sysctl,
        Section::Addresses,
        Section::Ipset,
        Section::Table(Table::Raw),
        Section::Table(Table::Mangle),
        Section::Table(Table::Nat),
        Section::Table(Table::Filter),
        Section::Ip6Table(Table::Raw),
        Section::Ip6Table(Table::Mangle),
        Section::Ip6Table(Table::Nat),
        Section::Ip6Table(Table::Filter),
        Section::Nft,
        Section::Ipvs,
        Section::Conntrack,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Section::Table(t) => t.name(),
            Section::Ip6Table(t) => match t {
                Table::Raw => "ip6:raw",
                Table::Mangle => "ip6:mangle",
                Table::Nat => "ip6:nat",
                Table::Filter => "ip6:filter",
            },
            Section::Ipset => "ipset",
            Section::Ipvs => "ipvs",
            Section::Addresses => "addresses",
            Section::Sysctl => "sysctl",
            Section::Nft => "nft",
            Section::Conntrack => "conntrack",
        }
    }

    fn from_name(s: &str) -> Option<Section> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// A line of input with its 1-based number.
pub(crate) type Line<'a> = (usize, &'a str);

/// Parses the programming text format (see the module documentation).
pub fn parse_text(text: &str, origin: &str) -> Result<Programming, TextError> {
    parse_text_with_sources(text, origin).map(|p| p.programming)
}

/// [`parse_text`], also returning where each item came from.
pub fn parse_text_with_sources(text: &str, origin: &str) -> Result<ParsedText, TextError> {
    parse_sections(text, origin, &Section::ALL)
}

/// Parses text that may only contain the given sections (a replay's `iptables-save` file may
/// only hold tables).
pub fn parse_sections(
    text: &str,
    origin: &str,
    allowed: &[Section],
) -> Result<ParsedText, TextError> {
    let err = |line: usize, message: String| TextError {
        origin: origin.to_string(),
        line,
        message,
    };
    let mut out = ParsedText::default();
    let mut seen = BTreeSet::new();
    let mut open: Option<(Section, usize, Vec<Line>)> = None;
    for (idx, raw) in text.lines().enumerate() {
        let lineno = idx + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some((section, start, body)) = open.as_mut() {
            if line == "COMMIT" {
                let (section, body) = (*section, std::mem::take(body));
                parse_body(section, &body, origin, &mut out)?;
                open = None;
            } else if line.starts_with('*') {
                return Err(err(
                    lineno,
                    format!(
                        "`{}` inside section *{} (opened at line {start}): missing COMMIT",
                        crate::quote::quote(line),
                        section.name()
                    ),
                ));
            } else {
                body.push((lineno, line));
            }
            continue;
        }
        if let Some(name) = line.strip_prefix('*') {
            let section = Section::from_name(name).ok_or_else(|| {
                err(
                    lineno,
                    format!(
                        "unknown section `*{name}` (expected one of {})",
                        allowed
                            .iter()
                            .map(|s| format!("*{}", s.name()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })?;
            if !allowed.contains(&section) {
                return Err(err(
                    lineno,
                    format!("section `*{name}` is not allowed here"),
                ));
            }
            if !seen.insert(section) {
                return Err(err(lineno, format!("section `*{name}` appears twice")));
            }
            open = Some((section, lineno, Vec::new()));
        } else if let Some(mode) = line.strip_prefix("restore-mode:") {
            if !seen.is_empty() {
                return Err(err(
                    lineno,
                    "`restore-mode:` must come before every section".into(),
                ));
            }
            out.programming.restore_mode = match mode.trim() {
                "noflush" => RestoreMode::NoFlush,
                "flush" => RestoreMode::Flush,
                other => {
                    return Err(err(
                        lineno,
                        format!("unknown restore mode `{other}` (noflush or flush)"),
                    ))
                }
            };
        } else {
            return Err(err(
                lineno,
                format!(
                    "`{}` outside of a section (sections start with `*name`)",
                    crate::quote::quote(line)
                ),
            ));
        }
    }
    if let Some((section, start, _)) = open {
        return Err(err(
            start,
            format!("section *{} is not closed by COMMIT", section.name()),
        ));
    }
    Ok(out)
}

fn parse_body(
    section: Section,
    body: &[Line],
    origin: &str,
    out: &mut ParsedText,
) -> Result<(), TextError> {
    match section {
        Section::Table(table) => {
            let rules = parse_table_body(table, body, origin, &mut out.sources)?;
            out.programming.iptables.insert(table, rules);
        }
        // The source map traces IPv4 tables' items only: an ip6tables error names its line by
        // its text.
        Section::Ip6Table(table) => {
            let rules = parse_table_body(table, body, origin, &mut SourceMap::default())?;
            out.programming.ip6tables.insert(table, rules);
        }
        Section::Ipset => {
            out.programming.ipsets = parse_ipset_body(body, origin, &mut out.sources)?
        }
        Section::Ipvs => {
            let section = parse_ipvs_body(body, origin, &mut out.sources)?;
            out.programming.ipvs = section.servers;
            out.programming.ipvs_timeouts = section.timeouts;
            out.programming.ipvs_delete_others = section.delete_others;
            out.programming.ipvs_clear = section.clear;
        }
        Section::Addresses => {
            out.programming.ipvs_addresses =
                Some(parse_addresses_body(body, origin, &mut out.sources)?)
        }
        Section::Sysctl => {
            out.programming.sysctls = parse_sysctl_body(body, origin, &mut out.sources)?
        }
        Section::Nft => out.programming.nft = parse_nft_body(body, origin, &mut out.sources)?,
        Section::Conntrack => {
            out.programming.conntrack_cleanup =
                parse_conntrack_body(body, origin, &mut out.sources)?
        }
    }
    Ok(())
}

fn at(origin: &str, line: usize) -> Origin {
    Origin {
        file: origin.to_string(),
        line,
    }
}

/// What an `*ipvs` section holds.
pub(crate) struct IpvsSection {
    pub(crate) servers: Vec<VirtualServer>,
    pub(crate) timeouts: Option<Timeouts>,
    pub(crate) delete_others: BTreeMap<IpFamily, Vec<IpCidr>>,
    pub(crate) clear: bool,
}

/// Renders a programming in the text format; [`parse_text`] gives it back unchanged.
pub fn render_text(p: &Programming) -> String {
    let mut out = String::new();
    if p.restore_mode == RestoreMode::Flush {
        out.push_str("restore-mode: flush\n");
    }
    if !p.sysctls.is_empty() {
        out.push_str("*sysctl\n");
        for (k, v) in &p.sysctls {
            let _ = writeln!(out, "{k}={v}");
        }
        out.push_str("COMMIT\n");
    }
    if let Some(addresses) = &p.ipvs_addresses {
        out.push_str("*addresses\n");
        for a in addresses {
            let _ = writeln!(out, "{a}");
        }
        out.push_str("COMMIT\n");
    }
    if !p.ipsets.is_empty() {
        out.push_str("*ipset\n");
        out.push_str(&render_ipsets(&p.ipsets));
        out.push_str("COMMIT\n");
    }
    for (table, rules) in &p.iptables {
        out.push_str(&render_table(*table, rules));
    }
    for (table, rules) in &p.ip6tables {
        let section = render_table(*table, rules);
        out.push_str(&format!("*ip6:{}", section.trim_start_matches('*')));
    }
    if p.touches_ipvs() {
        out.push_str("*ipvs\n");
        if p.ipvs_clear {
            out.push_str("--clear\n");
        }
        if let Some(t) = &p.ipvs_timeouts {
            let _ = writeln!(out, "{}", render_timeouts(t));
        }
        for (family, keep) in &p.ipvs_delete_others {
            let _ = writeln!(out, "{}", render_delete_others(*family, keep));
        }
        out.push_str(&render_ipvs(&p.ipvs));
        out.push_str("COMMIT\n");
    }
    if !p.nft.is_empty() {
        out.push_str("*nft\n");
        out.push_str(&p.nft.text());
        out.push_str("COMMIT\n");
    }
    if !p.conntrack_cleanup.is_empty() {
        out.push_str("*conntrack\n");
        for c in &p.conntrack_cleanup {
            let _ = writeln!(out, "{}", render_conntrack_line(c));
        }
        out.push_str("COMMIT\n");
    }
    out
}

mod addresses;
mod conntrack;
mod ipset;
mod ipvs;
mod sysctl;
mod tables;
#[cfg(test)]
mod tests;

// One section kind a room; their names are this module's.
pub(crate) use self::{addresses::*, conntrack::*, sysctl::*};
pub use self::{ipset::*, ipvs::*, tables::*};
