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
    ChainDecl, ConntrackCleanup, IpSet, IpSetType, Programming, RestoreMode, Table, TableRules,
    VirtualServer,
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

fn parse_table_body(
    table: Table,
    body: &[Line],
    origin: &str,
    sources: &mut SourceMap,
) -> Result<TableRules, TextError> {
    let mut rules = TableRules::default();
    for &(lineno, line) in body {
        let err = |message: String| TextError {
            origin: origin.to_string(),
            line: lineno,
            message,
        };
        if let Some(decl) = line.strip_prefix(':') {
            let mut parts = decl.split_whitespace();
            let name = parts
                .next()
                .filter(|n| !n.is_empty())
                .ok_or_else(|| err("chain declaration without a name".into()))?;
            let policy = parts
                .next()
                .ok_or_else(|| err(format!("chain {name} has no policy (`-` for a user chain)")))?;
            if let Some(extra) = parts.next().filter(|c| !is_counters(c)) {
                return Err(err(format!(
                    "unexpected `{extra}` after the policy of chain {name}"
                )));
            }
            if rules.chains.iter().any(|c| c.name == name) {
                return Err(err(format!(
                    "chain {name} declared twice in table {}",
                    table.name()
                )));
            }
            sources.insert(
                Item::Chain {
                    table,
                    index: rules.chains.len(),
                },
                at(origin, lineno),
            );
            rules.chains.push(ChainDecl {
                name: name.to_string(),
                policy: (policy != "-").then(|| policy.to_string()),
            });
        } else {
            let rule = strip_rule_counters(line);
            if !rule.starts_with('-') {
                return Err(err(format!(
                    "`{}` in table {} is neither a chain declaration (`:CHAIN POLICY`) nor a rule (`-A CHAIN ...`)",
                    crate::quote::quote(line),
                    table.name()
                )));
            }
            sources.insert(
                Item::Rule {
                    table,
                    index: rules.rules.len(),
                },
                at(origin, lineno),
            );
            rules.rules.push(rule.to_string());
        }
    }
    Ok(rules)
}

/// An `*nft` section: the script as written, each line traced to its origin; the first line
/// that names no table is the error.
fn parse_nft_body(
    body: &[Line],
    origin: &str,
    sources: &mut SourceMap,
) -> Result<NftScript, TextError> {
    let script =
        NftScript::new(body.iter().map(|(_, l)| l.to_string()).collect()).map_err(|problems| {
            let first = &problems[0];
            TextError {
                origin: origin.to_string(),
                line: body.get(first.index).map_or(0, |(n, _)| *n),
                message: first.message.clone(),
            }
        })?;
    for (index, (lineno, _)) in body.iter().enumerate() {
        sources.insert(Item::NftLine { index }, at(origin, *lineno));
    }
    Ok(script)
}

fn is_counters(s: &str) -> bool {
    s.strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .and_then(|s| s.split_once(':'))
        .is_some_and(|(p, b)| p.parse::<u64>().is_ok() && b.parse::<u64>().is_ok())
}

/// `[12:3456] -A ...` (iptables-save -c) -> `-A ...`.
fn strip_rule_counters(line: &str) -> &str {
    match line.split_once(' ') {
        Some((first, rest)) if is_counters(first) => rest.trim_start(),
        _ => line,
    }
}

/// Parses `ipset save` lines (`create`/`add`); also used for a replay's `ipset-save` file.
pub(crate) fn parse_ipset_body(
    body: &[Line],
    origin: &str,
    sources: &mut SourceMap,
) -> Result<Vec<IpSet>, TextError> {
    let mut sets: Vec<IpSet> = Vec::new();
    for &(lineno, line) in body {
        let err = |message: String| TextError {
            origin: origin.to_string(),
            line: lineno,
            message,
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        let command = words.first().copied().unwrap_or_default();
        let name = words.get(1).copied();
        match command {
            "create" => {
                let name = name.ok_or_else(|| err("`create` without a set name".into()))?;
                let type_name = words
                    .get(2)
                    .copied()
                    .ok_or_else(|| err(format!("set {name} has no type")))?;
                let set_type = IpSetType::from_name(type_name).ok_or_else(|| {
                    err(format!(
                        "unknown ipset type `{type_name}` for set {name} (supported: {})",
                        IpSetType::ALL
                            .iter()
                            .map(|t| t.name())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
                if sets.iter().any(|s| s.name == name) {
                    return Err(err(format!("set {name} created twice")));
                }
                sources.insert(Item::Set { set: sets.len() }, at(origin, lineno));
                sets.push(IpSet {
                    name: name.to_string(),
                    set_type,
                    create_options: words[3..].join(" "),
                    entries: Vec::new(),
                });
            }
            "add" => {
                let name = name.ok_or_else(|| err("`add` without a set name".into()))?;
                if words.len() < 3 {
                    return Err(err(format!("`add {name}` without an entry")));
                }
                let index = sets.iter().position(|s| s.name == name).ok_or_else(|| {
                    err(format!(
                        "entry for set {name}, which no earlier `create` line defines"
                    ))
                })?;
                let set = &mut sets[index];
                sources.insert(
                    Item::SetEntry {
                        set: index,
                        entry: set.entries.len(),
                    },
                    at(origin, lineno),
                );
                set.entries.push(words[2..].join(" "));
            }
            other => {
                return Err(err(format!(
                    "unsupported ipset command `{other}` (only `create` and `add`)"
                )))
            }
        }
    }
    Ok(sets)
}

/// Parses `ipvsadm -Sn` lines; also used for a replay's `ipvsadm-Sn` file.
/// The `*ipvs` section: `ipvsadm -Sn` lines, at most one `--set TCP TCPFIN UDP` and at most
/// one `--delete-others [CIDRs]`.
pub(crate) fn parse_ipvs_body(
    body: &[Line],
    origin: &str,
    sources: &mut SourceMap,
) -> Result<IpvsSection, TextError> {
    let (directives, body): (Vec<Line>, Vec<Line>) = body.iter().partition(|(_, l)| {
        matches!(
            l.split_whitespace().next(),
            Some("--set" | "--delete-others")
        )
    });
    let (delete_lines, set_lines): (Vec<Line>, Vec<Line>) = directives
        .into_iter()
        .partition(|(_, l)| l.starts_with("--delete-others"));
    let mut delete_others: BTreeMap<IpFamily, Vec<IpCidr>> = BTreeMap::new();
    for &(lineno, line) in &delete_lines {
        let err = |message: String| TextError {
            origin: origin.to_string(),
            line: lineno,
            message,
        };
        let (family, keep) = parse_delete_others(line).map_err(err)?;
        if delete_others.insert(family, keep).is_some() {
            return Err(err(format!("`--delete-others` for {family} appears twice")));
        }
        sources.insert(Item::IpvsDeleteOthers(family), at(origin, lineno));
    }
    let timeouts = single_directive(&set_lines, origin, parse_timeouts)?;
    if let (Some(_), Some((lineno, _))) = (&timeouts, set_lines.first()) {
        sources.insert(Item::IpvsTimeouts, at(origin, *lineno));
    }
    Ok(IpvsSection {
        servers: parse_ipvs_servers(&body, origin, sources)?,
        timeouts,
        delete_others,
    })
}

/// What an `*ipvs` section holds.
pub(crate) struct IpvsSection {
    pub(crate) servers: Vec<VirtualServer>,
    pub(crate) timeouts: Option<Timeouts>,
    pub(crate) delete_others: BTreeMap<IpFamily, Vec<IpCidr>>,
}

/// The value of a directive that may appear once: its lines parsed with `parse`.
fn single_directive<T>(
    lines: &[Line],
    origin: &str,
    parse: fn(&str) -> Result<T, String>,
) -> Result<Option<T>, TextError> {
    let err = |lineno: usize, message: String| TextError {
        origin: origin.to_string(),
        line: lineno,
        message,
    };
    match lines {
        [] => Ok(None),
        [(lineno, line)] => parse(line).map(Some).map_err(|m| err(*lineno, m)),
        [_, (lineno, line), ..] => {
            let name = line.split_whitespace().next().unwrap_or_default();
            Err(err(*lineno, format!("`{name}` appears twice")))
        }
    }
}

/// `--delete-others [IPv4|IPv6] [CIDR,CIDR...]`: the family pruned (IPv4 when not named) and
/// the CIDRs whose services are kept, all of that family.
fn parse_delete_others(line: &str) -> Result<(IpFamily, Vec<IpCidr>), String> {
    let mut words: Vec<&str> = line.split_whitespace().skip(1).collect();
    let family = match words.first() {
        Some(&"IPv4") => Some(IpFamily::Ipv4),
        Some(&"IPv6") => Some(IpFamily::Ipv6),
        _ => None,
    };
    if family.is_some() {
        words.remove(0);
    }
    let family = family.unwrap_or(IpFamily::Ipv4);
    let keep = match words.as_slice() {
        [] => Vec::new(),
        [list] => list
            .split(',')
            .map(|c| {
                c.parse::<IpCidr>()
                    .map_err(|e| format!("`{}`: {e}", crate::quote::quote(line)))
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => {
            return Err(format!(
                "`{}`: expected `--delete-others [IPv4|IPv6] [CIDR[,CIDR...]]` (the family pruned, \
                 the kept CIDRs)",
                crate::quote::quote(line)
            ))
        }
    };
    if let Some(other) = keep.iter().find(|c| c.family() != family) {
        return Err(format!(
            "`{}`: {other} is not an {family} CIDR: each family's line keeps its own",
            crate::quote::quote(line)
        ));
    }
    Ok((family, keep))
}

/// The `--delete-others` line of one family; IPv4's does not name its family.
pub(crate) fn render_delete_others(family: IpFamily, keep: &[IpCidr]) -> String {
    let mut line = "--delete-others".to_string();
    if family == IpFamily::Ipv6 {
        line.push_str(" IPv6");
    }
    if !keep.is_empty() {
        let list: Vec<String> = keep.iter().map(|c| c.to_string()).collect();
        line.push(' ');
        line.push_str(&list.join(","));
    }
    line
}

/// `--set TCP TCPFIN UDP`, seconds, as `ipvsadm --set` takes them.
fn parse_timeouts(line: &str) -> Result<Timeouts, String> {
    let words: Vec<&str> = line.split_whitespace().skip(1).collect();
    let [tcp, tcp_fin, udp] = words.as_slice() else {
        return Err(format!(
            "`{}`: expected `--set TCP TCPFIN UDP` (three timeouts in seconds)",
            crate::quote::quote(line)
        ));
    };
    let secs = |w: &str| {
        w.parse::<u32>().map_err(|_| {
            format!(
                "`{}`: `{w}` is not a number of seconds",
                crate::quote::quote(line)
            )
        })
    };
    Ok(Timeouts {
        tcp: secs(tcp)?,
        tcp_fin: secs(tcp_fin)?,
        udp: secs(udp)?,
    })
}

fn parse_ipvs_servers(
    body: &[Line],
    origin: &str,
    sources: &mut SourceMap,
) -> Result<Vec<VirtualServer>, TextError> {
    let text: String = body.iter().map(|(_, l)| format!("{l}\n")).collect();
    let table = parse_save(&text).map_err(|e| TextError {
        origin: origin.to_string(),
        line: body
            .get(e.line.wrapping_sub(1))
            .map(|(n, _)| *n)
            .unwrap_or(0),
        message: format!("{}: `{}`", e.message, crate::quote::quote(e.text.trim())),
    })?;
    let servers: Vec<VirtualServer> = table
        .into_iter()
        .map(|(service, destinations)| VirtualServer {
            service,
            destinations,
        })
        .collect();
    // Origins: -A lines are the services in order; a -a line's service is found by parsing it
    // after a synthetic -A of the same service (the parse above already validated everything).
    let mut service_index = 0;
    let mut dest_counts = vec![0usize; servers.len()];
    for &(lineno, line) in body {
        let first = line.split_whitespace().next().unwrap_or_default();
        if matches!(first, "-A" | "--add-service") {
            sources.insert(
                Item::Service {
                    service: service_index,
                },
                at(origin, lineno),
            );
            service_index += 1;
        } else if let Some(key) = destination_service(line) {
            if let Some(service) = servers.iter().position(|vs| vs.service.key == key) {
                sources.insert(
                    Item::Destination {
                        service,
                        destination: dest_counts[service],
                    },
                    at(origin, lineno),
                );
                dest_counts[service] += 1;
            }
        }
    }
    Ok(servers)
}

/// The service key of an `-a` line, by re-parsing it after an `-A` line for the same service.
fn destination_service(line: &str) -> Option<ipvs_genl::ServiceKey> {
    const SERVICE_OPTS: [&str; 8] = [
        "-t",
        "--tcp-service",
        "-u",
        "--udp-service",
        "--sctp-service",
        "-f",
        "--fwmark-service",
        "--sctp",
    ];
    let tokens: Vec<&str> = line.split_whitespace().collect();
    let spec = tokens.windows(2).find_map(|w| {
        SERVICE_OPTS
            .contains(&w[0])
            .then(|| format!("{} {}", w[0], w[1]))
    })?;
    let parsed = parse_save(&format!("-A {spec}\n{line}\n")).ok()?;
    parsed.into_iter().next().map(|(svc, _)| svc.key)
}

/// Parses one address per line, `A.B.C.D`, `A.B.C.D/32`, `X::Y` or `X::Y/128`.
pub(crate) fn parse_addresses_body(
    body: &[Line],
    origin: &str,
    sources: &mut SourceMap,
) -> Result<Vec<IpAddr>, TextError> {
    let mut out = Vec::new();
    for &(lineno, line) in body {
        let err = |message: String| TextError {
            origin: origin.to_string(),
            line: lineno,
            message,
        };
        let addr = parse_host_address(line).map_err(err)?;
        if out.contains(&addr) {
            return Err(err(format!("address {addr} listed twice")));
        }
        sources.insert(Item::Address { index: out.len() }, at(origin, lineno));
        out.push(addr);
    }
    Ok(out)
}

/// An address without prefix or with its family's host prefix (/32, /128).
pub(crate) fn parse_host_address(text: &str) -> Result<IpAddr, String> {
    let (addr, prefix) = match text.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (text, None),
    };
    let addr = addr
        .parse::<IpAddr>()
        .map_err(|_| format!("malformed IP address `{text}`"))?;
    let host = IpFamily::of(addr).host_prefix_len().to_string();
    if let Some(p) = prefix.filter(|p| *p != host) {
        return Err(format!(
            "address `{text}`: kube-ipvs0 addresses are /{host}, not /{p}"
        ));
    }
    Ok(addr)
}

/// An address of either family.
fn parse_ip(text: &str) -> Result<IpAddr, String> {
    text.parse()
        .map_err(|_| format!("malformed IP address `{text}`"))
}

/// `key=value` lines (`key = value`, as `sysctl -a` prints, too), each key once.
pub(crate) fn parse_sysctl_body(
    body: &[Line],
    origin: &str,
    sources: &mut SourceMap,
) -> Result<BTreeMap<String, String>, TextError> {
    let mut sysctls = BTreeMap::new();
    for (lineno, line) in body {
        let err = |message| TextError {
            origin: origin.to_string(),
            line: *lineno,
            message,
        };
        let (key, value) = parse_sysctl_line(line).map_err(err)?;
        let item = Item::Sysctl { key: key.clone() };
        if let Some(first) = sources.get(&item) {
            return Err(err(format!(
                "sysctl `{key}` is set twice (also line {})",
                first.line
            )));
        }
        sources.insert(
            item,
            Origin {
                file: origin.to_string(),
                line: *lineno,
            },
        );
        sysctls.insert(key, value);
    }
    Ok(sysctls)
}

fn parse_sysctl_line(line: &str) -> Result<(String, String), String> {
    let (key, value) = line
        .split_once('=')
        .ok_or_else(|| format!("`{}` is not `key=value`", crate::quote::quote(line)))?;
    let (key, value) = (key.trim(), value.trim());
    let key_ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !key_ok {
        return Err(format!("malformed sysctl name `{key}`"));
    }
    if !key.starts_with("net.") {
        return Err(format!(
            "sysctl `{key}` is not per network namespace (only net.* keys are allowed)"
        ));
    }
    if value.is_empty() {
        return Err(format!("sysctl `{key}` has no value"));
    }
    Ok((key.to_string(), value.to_string()))
}

fn parse_conntrack_body(
    body: &[Line],
    origin: &str,
    sources: &mut SourceMap,
) -> Result<Vec<ConntrackCleanup>, TextError> {
    let mut out = Vec::new();
    for &(lineno, line) in body {
        let cleanup = parse_conntrack_line(line).map_err(|message| TextError {
            origin: origin.to_string(),
            line: lineno,
            message,
        })?;
        sources.insert(
            Item::ConntrackCleanup { index: out.len() },
            at(origin, lineno),
        );
        out.push(cleanup);
    }
    Ok(out)
}

fn parse_conntrack_line(line: &str) -> Result<ConntrackCleanup, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    if !words.len().is_multiple_of(2) {
        return Err(format!(
            "`{}`: expected OPTION VALUE pairs (-p, --orig-dst, --orig-port-dst, --reply-src-not)",
            crate::quote::quote(line)
        ));
    }
    let (mut protocol, mut orig_dst, mut orig_dport, mut serving) = (None, None, None, None);
    for pair in words.chunks(2) {
        let (option, value) = (pair[0], pair[1]);
        match option {
            "-p" => {
                protocol = Some(match value {
                    "tcp" => Protocol::Tcp,
                    "udp" => Protocol::Udp,
                    "sctp" => Protocol::Sctp,
                    other => return Err(format!("unknown protocol `{other}` (tcp, udp or sctp)")),
                })
            }
            "--orig-dst" => orig_dst = Some(parse_ip(value)?),
            "--orig-port-dst" => {
                orig_dport = Some(
                    value
                        .parse::<u16>()
                        .ok()
                        .filter(|p| *p != 0)
                        .ok_or_else(|| format!("`{value}` is not a port (1-65535)"))?,
                )
            }
            "--reply-src-not" => {
                serving = Some(
                    value
                        .split(',')
                        .map(parse_ip)
                        .collect::<Result<Vec<_>, _>>()?,
                )
            }
            other => {
                return Err(format!(
                    "unknown option `{}` (-p, --orig-dst, --orig-port-dst, --reply-src-not)",
                    crate::quote::quote(other)
                ))
            }
        }
    }
    let serving: Vec<IpAddr> = serving.ok_or("missing `--reply-src-not IP[,IP...]`")?;
    let families: BTreeSet<bool> = serving
        .iter()
        .chain(&orig_dst)
        .map(IpAddr::is_ipv4)
        .collect();
    if families.len() > 1 {
        return Err("addresses of both families: a cleanup deletes entries of one".into());
    }
    Ok(ConntrackCleanup {
        protocol: protocol.ok_or("missing `-p PROTOCOL`")?,
        orig_dst,
        orig_dport: orig_dport.ok_or("missing `--orig-port-dst PORT`")?,
        serving,
    })
}

/// One `*conntrack` line.
pub(crate) fn render_conntrack_line(c: &ConntrackCleanup) -> String {
    let mut out = format!("-p {}", c.protocol.lower());
    if let Some(dst) = c.orig_dst {
        let _ = write!(out, " --orig-dst {dst}");
    }
    let serving: Vec<String> = c.serving.iter().map(|a| a.to_string()).collect();
    let _ = write!(
        out,
        " --orig-port-dst {} --reply-src-not {}",
        c.orig_dport,
        serving.join(",")
    );
    out
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
    if !p.ipvs.is_empty() || p.ipvs_timeouts.is_some() || !p.ipvs_delete_others.is_empty() {
        out.push_str("*ipvs\n");
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

/// `--set TCP TCPFIN UDP`.
pub(crate) fn render_timeouts(t: &Timeouts) -> String {
    format!("--set {} {} {}", t.tcp, t.tcp_fin, t.udp)
}

/// One table as an `iptables-restore` section, `*table` to `COMMIT`.
pub fn render_table(table: Table, rules: &TableRules) -> String {
    let mut out = format!("*{}\n", table.name());
    for c in &rules.chains {
        let _ = writeln!(
            out,
            ":{} {} [0:0]",
            c.name,
            c.policy.as_deref().unwrap_or("-")
        );
    }
    for r in &rules.rules {
        let _ = writeln!(out, "{r}");
    }
    out.push_str("COMMIT\n");
    out
}

/// `ipset save` lines for the sets.
pub fn render_ipsets(sets: &[IpSet]) -> String {
    let mut out = String::new();
    for s in sets {
        let _ = write!(out, "create {} {}", s.name, s.set_type.name());
        if !s.create_options.is_empty() {
            let _ = write!(out, " {}", s.create_options);
        }
        out.push('\n');
        for e in &s.entries {
            let _ = writeln!(out, "add {} {e}", s.name);
        }
    }
    out
}

/// `ipvsadm -Sn` lines for the virtual servers, in the given order (ipvsadm itself sorts).
pub fn render_ipvs(servers: &[VirtualServer]) -> String {
    let mut out = String::new();
    for vs in servers {
        out.push_str(&render_service_line(&vs.service));
        for d in &vs.destinations {
            out.push_str(&render_destination_line(&vs.service, d));
        }
    }
    out
}

fn service_state(
    service: &Service,
    dests: Vec<Destination>,
) -> (ServiceState, Vec<DestinationState>) {
    (
        ServiceState {
            service: service.clone(),
            stats: Stats::default(),
        },
        dests
            .into_iter()
            .map(|destination| DestinationState {
                destination,
                active_conns: 0,
                inactive_conns: 0,
                persistent_conns: 0,
                stats: Stats::default(),
            })
            .collect(),
    )
}

/// The `-A` line of a service, as `ipvsadm -Sn` prints it.
pub fn render_service_line(service: &Service) -> String {
    format_save(&[service_state(service, Vec::new())])
}

/// The `-a` line of one destination, as `ipvsadm -Sn` prints it.
pub fn render_destination_line(service: &Service, dest: &Destination) -> String {
    // format_save prints the service line first; the destination line is what follows.
    let both = format_save(&[service_state(service, vec![dest.clone()])]);
    both.split_once('\n')
        .map(|(_, d)| d.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipvs_genl::{ForwardMethod, Protocol, ServiceKey};

    fn sample() -> Programming {
        let key = ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "10.96.0.1".parse().unwrap(),
            port: 443,
        };
        let mut dest = Destination::new("192.168.1.10".parse().unwrap(), 6443);
        dest.forward = ForwardMethod::Masq;
        let mut p = Programming {
            ipsets: vec![IpSet {
                name: "KUBE-CLUSTER-IP".into(),
                set_type: IpSetType::HashIpPort,
                create_options: "family inet hashsize 1024 maxelem 65536".into(),
                entries: vec!["10.96.0.1,tcp:443".into()],
            }],
            ipvs: vec![VirtualServer {
                service: Service::new(key, "rr"),
                destinations: vec![dest],
            }],
            ipvs_addresses: Some(vec!["10.96.0.1".parse().unwrap()]),
            restore_mode: RestoreMode::Flush,
            ..Default::default()
        };
        p.iptables.insert(
            Table::Nat,
            TableRules {
                chains: vec![
                    ChainDecl {
                        name: "PREROUTING".into(),
                        policy: Some("ACCEPT".into()),
                    },
                    ChainDecl {
                        name: "KUBE-SERVICES".into(),
                        policy: None,
                    },
                ],
                rules: vec![
                    "-A PREROUTING -m comment --comment \"kube svc\" -j KUBE-SERVICES".into(),
                ],
            },
        );
        p.sysctls.insert("net.ipv4.vs.conntrack".into(), "1".into());
        p
    }

    #[test]
    fn documented_example_parses() {
        let source = include_str!("text.rs");
        let start = source.find("//! ```text\n").unwrap() + "//! ```text\n".len();
        let end = start + source[start..].find("//! ```\n").unwrap();
        let example: String = source[start..end]
            .lines()
            .map(|l| format!("{}\n", l.trim_start_matches("//!").trim_start()))
            .collect();
        let p = parse_text(&example, "doc").unwrap();
        assert_eq!(
            (
                p.sysctls.len(),
                p.kube_ipvs0_addresses().len(),
                p.ipsets.len()
            ),
            (1, 1, 1)
        );
        assert_eq!((p.iptables.len(), p.ipvs.len()), (1, 1));
    }

    #[test]
    fn round_trips() {
        let p = sample();
        let text = render_text(&p);
        assert_eq!(parse_text(&text, "t").unwrap(), p, "{text}");
        assert!(
            text.contains("-a -t 10.96.0.1:443 -r 192.168.1.10:6443 -m -w 1\n"),
            "{text}"
        );
    }

    #[test]
    fn ipvs_timeouts_round_trip_and_are_checked() {
        let mut p = sample();
        p.ipvs_timeouts = Some(Timeouts {
            tcp: 7200,
            tcp_fin: 0,
            udp: 30,
        });
        let text = render_text(&p);
        assert!(text.contains("*ipvs\n--set 7200 0 30\n-A -t"), "{text}");
        let parsed = parse_text_with_sources(&text, "t").unwrap();
        assert_eq!(parsed.programming, p);
        let line = text.lines().position(|l| l.starts_with("--set")).unwrap() + 1;
        assert_eq!(parsed.sources.get(&Item::IpvsTimeouts).unwrap().line, line);
        refused_in_ipvs_section(&[
            ("--set 1 2", "expected `--set TCP TCPFIN UDP`"),
            ("--set 1 two 3", "`two` is not a number of seconds"),
            ("--set 1 2 3\n--set 1 2 3", "`--set` appears twice"),
        ]);
    }

    /// Each `*ipvs` body is refused with an error containing its message.
    fn refused_in_ipvs_section(cases: &[(&str, &str)]) {
        for (bad, message) in cases {
            let err = parse_text(&format!("*ipvs\n{bad}\nCOMMIT\n"), "t").unwrap_err();
            assert!(err.to_string().contains(message), "{bad}: {err}");
        }
    }

    /// Both families' host addresses; an empty section still asks for the device (IPVS mode
    /// keeps it when its last address goes); a wider prefix is refused.
    #[test]
    fn addresses_of_both_families_and_an_empty_device() {
        let p = parse_text("*addresses\n10.96.0.1/32\nfd00:10:96::a\nCOMMIT\n", "t").unwrap();
        assert_eq!(
            p.kube_ipvs0_addresses(),
            [
                "10.96.0.1".parse::<IpAddr>().unwrap(),
                "fd00:10:96::a".parse().unwrap()
            ]
        );
        assert_eq!(parse_text(&render_text(&p), "t").unwrap(), p);
        let empty = parse_text("*addresses\nCOMMIT\n", "t").unwrap();
        assert_eq!(empty.ipvs_addresses, Some(vec![]));
        assert_eq!(render_text(&empty), "*addresses\nCOMMIT\n");
        assert_eq!(parse_text("", "t").unwrap().ipvs_addresses, None);
        for (bad, message) in [
            ("fd00::1/64", "kube-ipvs0 addresses are /128, not /64"),
            ("10.0.0.1/24", "kube-ipvs0 addresses are /32, not /24"),
        ] {
            let err = parse_text(&format!("*addresses\n{bad}\nCOMMIT\n"), "t").unwrap_err();
            assert!(err.to_string().contains(message), "{bad}: {err}");
        }
    }

    #[test]
    fn delete_others_round_trips_and_is_checked() {
        let mut p = sample();
        p.ipvs_delete_others =
            BTreeMap::from([(IpFamily::Ipv4, vec!["192.168.1.50/32".parse().unwrap()])]);
        let text = render_text(&p);
        assert!(
            text.contains("*ipvs\n--delete-others 192.168.1.50/32\n"),
            "{text}"
        );
        assert_eq!(parse_text(&text, "t").unwrap(), p);
        p.ipvs_delete_others = BTreeMap::from([(IpFamily::Ipv4, Vec::new())]);
        assert!(render_text(&p).contains("*ipvs\n--delete-others\n"));
        assert_eq!(parse_text(&render_text(&p), "t").unwrap(), p);
        // Each family's proxier cleans up its own family.
        p.ipvs_delete_others = BTreeMap::from([
            (IpFamily::Ipv4, Vec::new()),
            (IpFamily::Ipv6, vec!["fd00:1::/64".parse().unwrap()]),
        ]);
        let text = render_text(&p);
        assert!(
            text.contains("*ipvs\n--delete-others\n--delete-others IPv6 fd00:1::/64\n"),
            "{text}"
        );
        assert_eq!(parse_text(&text, "t").unwrap(), p);
        assert_eq!(
            parse_text("*ipvs\n--delete-others IPv4\nCOMMIT\n", "t")
                .unwrap()
                .ipvs_delete_others,
            BTreeMap::from([(IpFamily::Ipv4, Vec::new())])
        );
        refused_in_ipvs_section(&[
            ("--delete-others 10.0.0.0/33", "prefix length"),
            ("--delete-others a b", "expected `--delete-others"),
            ("--delete-others\n--delete-others", "for IPv4 appears twice"),
            (
                "--delete-others IPv6\n--delete-others IPv6 fd00::/8",
                "for IPv6 appears twice",
            ),
            ("--delete-others IPv6 10.0.0.0/8", "is not an IPv6 CIDR"),
            ("--delete-others fd00::/8", "is not an IPv4 CIDR"),
        ]);
    }

    #[test]
    fn records_origins() {
        let text = render_text(&sample());
        let parsed = parse_text_with_sources(&text, "out").unwrap();
        let line_of = |item: Item| parsed.sources.get(&item).map(|o| o.line).unwrap();
        let find = |needle: &str| text.lines().position(|l| l.starts_with(needle)).unwrap() + 1;
        assert_eq!(
            line_of(Item::Rule {
                table: Table::Nat,
                index: 0
            }),
            find("-A PREROUTING")
        );
        assert_eq!(
            line_of(Item::Destination {
                service: 0,
                destination: 0
            }),
            find("-a -t")
        );
        assert_eq!(line_of(Item::SetEntry { set: 0, entry: 0 }), find("add "));
    }

    #[test]
    fn errors_name_origin_and_line() {
        let e = |t: &str| parse_text(t, "proxier stdout").unwrap_err().to_string();
        assert_eq!(
            e("*ipset\ncreate S hash:nope\nCOMMIT\n"),
            "proxier stdout:2: unknown ipset type `hash:nope` for set S (supported: hash:ip, hash:ip,port, hash:ip,port,ip, hash:ip,port,net, hash:net, bitmap:port)"
        );
        assert!(e(
            "# x\n*ipvs\n-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.2:80 -r 10.1.1.1:80 -m\nCOMMIT\n"
        )
        .starts_with("proxier stdout:4: destination for service TCP 10.0.0.2:80"),);
        assert_eq!(
            e("*addresses\n10.0.0.300\nCOMMIT\n"),
            "proxier stdout:2: malformed IP address `10.0.0.300`"
        );
        assert_eq!(
            e("*nat\n-A X -j Y\n"),
            "proxier stdout:1: section *nat is not closed by COMMIT"
        );
        assert!(e("*sysctl\nkernel.pid_max=1\nCOMMIT\n").contains(":2: sysctl `kernel.pid_max`"));
        assert!(e("*ipset\nadd S 1.2.3.4\nCOMMIT\n").contains(":2: entry for set S"));
        assert!(e("*nat\nCOMMIT\n*nat\nCOMMIT\n").contains(":3: section `*nat` appears twice"));
    }

    #[test]
    fn accepts_iptables_save_with_counters_and_comments() {
        let text = "# Generated by iptables-save v1.8.9\n*filter\n:INPUT ACCEPT [12:345]\n[1:2] -A INPUT -j ACCEPT\nCOMMIT\n# Completed\n";
        let p = parse_text(text, "f").unwrap();
        let t = &p.iptables[&Table::Filter];
        assert_eq!(t.rules, vec!["-A INPUT -j ACCEPT".to_string()]);
        assert_eq!(t.chains[0].policy.as_deref(), Some("ACCEPT"));
    }
}
