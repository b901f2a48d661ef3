//! nftables programming: an `nft -f` script, the tables it writes, and those tables as the
//! kernel lists them.
//!
//! kube-proxy's nftables mode writes its whole state as one `nft -f` transaction into tables of
//! its own (`ip kube-proxy`, `ip6 kube-proxy`; pkg/proxy/nftables/proxier.go). The script is
//! kept as written: nft is the judge of its syntax and the kernel of its meaning. What the
//! suite checks itself is the one thing it must know before running it: every command names
//! its table with an explicit family, so the applier knows which tables to record for a
//! rollback and nothing outside them can be touched (an `include` would read files of the
//! host, and is refused).

use crate::netns::Netns;
use std::collections::BTreeMap;
use std::fmt;

/// The nftables address families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NftFamily {
    Ip,
    Ip6,
    Inet,
    Arp,
    Bridge,
    Netdev,
}

impl NftFamily {
    pub const ALL: [NftFamily; 6] = [
        NftFamily::Ip,
        NftFamily::Ip6,
        NftFamily::Inet,
        NftFamily::Arp,
        NftFamily::Bridge,
        NftFamily::Netdev,
    ];

    pub fn name(self) -> &'static str {
        match self {
            NftFamily::Ip => "ip",
            NftFamily::Ip6 => "ip6",
            NftFamily::Inet => "inet",
            NftFamily::Arp => "arp",
            NftFamily::Bridge => "bridge",
            NftFamily::Netdev => "netdev",
        }
    }

    pub fn from_name(s: &str) -> Option<NftFamily> {
        Self::ALL.into_iter().find(|f| f.name() == s)
    }

    /// From the kernel's NFPROTO_* number (include/uapi/linux/netfilter.h).
    pub fn from_nfproto(n: u8) -> Option<NftFamily> {
        Some(match n {
            1 => NftFamily::Inet,
            2 => NftFamily::Ip,
            3 => NftFamily::Arp,
            5 => NftFamily::Netdev,
            7 => NftFamily::Bridge,
            10 => NftFamily::Ip6,
            _ => return None,
        })
    }
}

/// One nftables table, by family and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NftTable {
    pub family: NftFamily,
    pub name: String,
}

impl fmt::Display for NftTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.family.name(), self.name)
    }
}

impl NftTable {
    /// The tables iptables-nft (and ebtables-/arptables-nft) keep their rules in: the
    /// iptables part of a programming owns them, and they hold xtables expressions that `nft`
    /// lists but cannot load back.
    pub fn owned_by_iptables(&self) -> bool {
        let names: &[&str] = match self.family {
            NftFamily::Ip | NftFamily::Ip6 => &["filter", "nat", "mangle", "raw", "security"],
            NftFamily::Arp => &["filter"],
            NftFamily::Bridge => &["filter", "nat", "broute"],
            NftFamily::Inet | NftFamily::Netdev => &[],
        };
        names.contains(&self.name.as_str())
    }
}

/// An `nft -f` script and the tables its commands name, in order of first mention.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NftScript {
    pub lines: Vec<String>,
    pub tables: Vec<NftTable>,
}

/// A line of a script that does not say which table it writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptError {
    /// 0-based index into the script's lines.
    pub index: usize,
    pub message: String,
}

/// The messages of `problems`, joined for one error line.
pub fn describe(problems: &[ScriptError]) -> String {
    problems
        .iter()
        .map(|p| p.message.as_str())
        .collect::<Vec<_>>()
        .join("; ")
}

/// The objects a top-level nft command acts on; each is followed by `[FAMILY] TABLE`.
const OBJECTS: [&str; 14] = [
    "table",
    "chain",
    "rule",
    "set",
    "map",
    "element",
    "flowtable",
    "counter",
    "quota",
    "limit",
    "ct",
    "secmark",
    "synproxy",
    "tunnel",
];

/// The top-level commands a sync may write (no `list`, `monitor` or `export`: they print, and
/// the applier reads nft's output only for errors).
const VERBS: [&str; 8] = [
    "add", "create", "insert", "replace", "delete", "destroy", "flush", "reset",
];

impl NftScript {
    /// Checks that every top-level command of `lines` names its table with an explicit family
    /// (`add chain ip kube-proxy services`, `table ip kube-proxy {`), and records the tables.
    /// All problems, not just the first.
    pub fn new(lines: Vec<String>) -> Result<NftScript, Vec<ScriptError>> {
        let mut tables: Vec<NftTable> = Vec::new();
        let mut problems = Vec::new();
        let mut depth = 0usize;
        for (index, line) in lines.iter().enumerate() {
            for command in top_level_commands(line, &mut depth) {
                match command_table(&command) {
                    Ok(Some(t)) if t.owned_by_iptables() => problems.push(ScriptError {
                        index,
                        message: format!(
                            "table {t} belongs to iptables (iptables-nft keeps its rules there): \
                             write its rules in an iptables section"
                        ),
                    }),
                    Ok(Some(t)) => {
                        if !tables.contains(&t) {
                            tables.push(t);
                        }
                    }
                    Ok(None) => {}
                    Err(message) => problems.push(ScriptError { index, message }),
                }
            }
        }
        if depth != 0 {
            problems.push(ScriptError {
                index: lines.len().saturating_sub(1),
                message: format!("{depth} `{{` not closed at the end of the script"),
            });
        }
        if problems.is_empty() && tables.is_empty() && !lines.is_empty() {
            problems.push(ScriptError {
                index: 0,
                message: "the script names no table (`add table FAMILY NAME`)".into(),
            });
        }
        if problems.is_empty() {
            Ok(NftScript { lines, tables })
        } else {
            Err(problems)
        }
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The script as `nft -f` reads it, one line per line (so nft's line numbers are indices
    /// + 1).
    pub fn text(&self) -> String {
        let mut s = self.lines.join("\n");
        s.push('\n');
        s
    }
}

/// The top-level commands that start on `line`: its text at brace depth 0, split at `;`,
/// with `depth` carried across lines. Quoted strings and `#` comments open no brace.
fn top_level_commands(line: &str, depth: &mut usize) -> Vec<String> {
    let mut commands = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in line.chars() {
        let outside = *depth == 0;
        match c {
            '"' => quoted = !quoted,
            _ if quoted => {}
            '#' => break,
            '{' => {
                *depth += 1;
                continue;
            }
            '}' => {
                *depth = depth.saturating_sub(1);
                continue;
            }
            ';' if outside => {
                commands.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        if outside {
            current.push(c);
        }
    }
    commands.push(current);
    commands
        .into_iter()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect()
}

/// The table a top-level command names; `None` for a command that names none (a lone `{`).
fn command_table(command: &str) -> Result<Option<NftTable>, String> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let (object_at, verb) = match words.first().copied() {
        Some(v) if VERBS.contains(&v) => (1, Some(v)),
        Some("table") => (0, None),
        Some("include") => {
            return Err("`include` is refused: a proxier's script must be self-contained".into())
        }
        Some(other) => {
            return Err(format!(
                "`{}` is not a command that writes a table (expected one of {}, or `table FAMILY NAME {{`)",
                crate::quote::quote(other),
                VERBS.join(", ")
            ))
        }
        None => return Ok(None),
    };
    let object = words.get(object_at).copied().unwrap_or_default();
    if !OBJECTS.contains(&object) {
        return Err(format!(
            "`{}` after `{}` is not an nftables object (expected one of {})",
            crate::quote::quote(object),
            verb.unwrap_or("table"),
            OBJECTS.join(", ")
        ));
    }
    let (family, name) = (words.get(object_at + 1), words.get(object_at + 2));
    match (family.and_then(|f| NftFamily::from_name(f)), name) {
        (Some(family), Some(name)) => Ok(Some(NftTable {
            family,
            name: name.to_string(),
        })),
        _ => Err(format!(
            "`{}` does not name its table with a family (`{} {object} ip kube-proxy …`): \
             nft's default family `ip` is not assumed",
            crate::quote::quote(command),
            verb.unwrap_or("table")
        )),
    }
}

/// The node's nftables tables (over nfnetlink: a tool run costs ~0.2 s in the emulated VM),
/// but for the suite's own table of drop verdicts, which is there while probes fire and is not
/// the proxier's state ([`crate::probe::drop_verdicts`]).
pub fn list_tables(ns: &Netns) -> Result<Vec<NftTable>, NftError> {
    let tables =
        crate::netfilter::tables::nft_tables(ns).map_err(|e| NftError::Tables(format!("{e:#}")))?;
    Ok(tables
        .into_iter()
        .filter(|(family, name)| {
            !(*family == crate::netfilter::verdict_table::FAMILY
                && name == crate::netfilter::verdict_table::TABLE)
        })
        .filter_map(|(family, name)| {
            Some(NftTable {
                family: NftFamily::from_nfproto(family)?,
                name,
            })
        })
        .collect())
}

/// Whether `ns` holds none of the nf_tables tables iptables-nft keeps for `family` (`ip6` for
/// ip6tables), so that its save tool would print nothing; `None` when the kernel could not say.
pub fn holds_no_xtables(ns: &Netns, family: super::tools::Xtables) -> Option<bool> {
    let nft_family = match family {
        super::tools::Xtables::Ip => NftFamily::Ip,
        super::tools::Xtables::Ip6 => NftFamily::Ip6,
    };
    let tables = list_tables(ns).ok()?;
    Some(
        !tables
            .iter()
            .any(|t| t.family == nft_family && t.owned_by_iptables()),
    )
}

/// Reading a node's nftables state failed.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error("listing nftables tables over netlink: {0}")]
    Tables(String),
    #[error(transparent)]
    Tool(#[from] crate::netns::CommandError),
}

/// `nft list table` of `table` (with its counters and element timers, so loading it back
/// restores it), or `None` when the node has no such table.
pub fn save_table(ns: &Netns, table: &NftTable) -> Result<Option<String>, NftError> {
    if !list_tables(ns)?.contains(table) {
        return Ok(None);
    }
    Ok(Some(ns.output_of(
        "nft",
        &["list", "table", table.family.name(), &table.name],
        None,
    )?))
}

/// Every table of the node that iptables does not own, listed without state (`nft -s`) and
/// normalised by [`normalize_listing`].
pub fn read_tables(ns: &Netns) -> Result<BTreeMap<NftTable, Vec<String>>, NftError> {
    read_tables_listed(ns, true)
}

/// [`read_tables`] with the rules' state: `counter packets N bytes M` where a rule counts.
pub fn read_tables_with_counters(ns: &Netns) -> Result<BTreeMap<NftTable, Vec<String>>, NftError> {
    read_tables_listed(ns, false)
}

fn read_tables_listed(
    ns: &Netns,
    stateless: bool,
) -> Result<BTreeMap<NftTable, Vec<String>>, NftError> {
    let mut out = BTreeMap::new();
    for table in list_tables(ns)? {
        if table.owned_by_iptables() {
            continue;
        }
        let mut args = vec!["list", "table", table.family.name(), &table.name];
        if stateless {
            args.insert(0, "-s");
        }
        let listing = ns.output_of("nft", &args, None)?;
        out.insert(table, normalize_listing(&listing));
    }
    Ok(out)
}

/// `nft list table` output as lines to compare: trimmed, blank lines dropped, each set or map
/// element on a line of its own (`element 10.96.0.10 . tcp . 80 : goto service-…`, sorted: the
/// kernel lists them in hash order), and what the data path changes left out: the `expires`
/// countdown of timed elements, and the elements of `dynamic` sets, which packets add (session
/// affinity) and no sync writes.
pub fn normalize_listing(listing: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut dynamic = false;
    let mut elements: Option<String> = None;
    for raw in listing.lines() {
        let line = raw.trim();
        if let Some(acc) = elements.as_mut() {
            acc.push(' ');
            acc.push_str(line);
        } else if let Some(rest) = line.strip_prefix("elements = {") {
            elements = Some(rest.to_string());
        } else {
            if line.is_empty() {
                continue;
            }
            if line.starts_with("set ") || line.starts_with("map ") {
                dynamic = false;
            }
            if line.starts_with("flags ") && line.split([' ', ',']).any(|f| f == "dynamic") {
                dynamic = true;
            }
            out.push(line.to_string());
            continue;
        }
        // An element list ends with the line that closes its brace.
        let Some(body) = elements
            .as_deref()
            .and_then(|e| e.trim_end().strip_suffix('}'))
        else {
            continue;
        };
        if !dynamic {
            let mut items: Vec<String> = split_elements(body)
                .into_iter()
                .map(|e| format!("element {}", without_expires(e)))
                .collect();
            items.sort();
            out.extend(items);
        }
        elements = None;
    }
    out
}

/// The elements of an `elements = { … }` body, split at the commas outside braces (a
/// concatenation is joined by ` . `, a verdict map's values hold no comma).
fn split_elements(body: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start, mut quoted) = (0usize, 0usize, false);
    for (i, c) in body.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '{' if !quoted => depth += 1,
            '}' if !quoted => depth = depth.saturating_sub(1),
            ',' if !quoted && depth == 0 => {
                out.push(body[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(body[start..].trim());
    out.into_iter().filter(|e| !e.is_empty()).collect()
}

/// A block directly inside a table of a normalised listing: `chain services {`, `set x {`,
/// `map y {` (kind and name), with the lines it holds besides nested blocks' (a chain's rules,
/// and its `type … hook …` line for a base chain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub kind: String,
    pub name: String,
    pub lines: Vec<String>,
}

impl Block {
    /// The block's opening line as the listing prints it (`chain services`).
    pub fn head(&self) -> String {
        format!("{} {}", self.kind, self.name)
    }
}

/// The blocks of a normalised table listing, in order.
pub fn blocks(listing: &[String]) -> Vec<Block> {
    let mut out: Vec<Block> = Vec::new();
    let mut depth = 0usize;
    for line in listing {
        if line == "}" {
            depth = depth.saturating_sub(1);
        } else if let Some(head) = line.strip_suffix(" {") {
            depth += 1;
            if depth == 2 {
                let mut words = head.split_whitespace();
                if let (Some(kind), Some(name)) = (words.next(), words.next()) {
                    out.push(Block {
                        kind: kind.to_string(),
                        name: name.to_string(),
                        lines: Vec::new(),
                    });
                }
            }
        } else if depth == 2 {
            if let Some(last) = out.last_mut() {
                last.lines.push(line.clone());
            }
        }
    }
    out
}

/// The normalised listing of `table` as lines that each say where they stand: a block's opening
/// line as its path (`ip kube-proxy › chain services`), every other line after its path
/// (`ip kube-proxy › chain services: jump cluster-ips-check`); closing braces are left out. A
/// difference between two nodes then names the chain or set it is in.
pub fn located_lines(table: &NftTable, listing: &[String]) -> Vec<String> {
    let mut path: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for line in listing {
        if line == "}" {
            path.pop();
        } else if let Some(block) = line.strip_suffix(" {") {
            if path.is_empty() && block.starts_with("table ") {
                path.push(table.to_string());
            } else {
                path.push(block.to_string());
            }
            out.push(path.join(" › "));
        } else {
            let at = if path.is_empty() {
                table.to_string()
            } else {
                path.join(" › ")
            };
            out.push(format!("{at}: {line}"));
        }
    }
    out
}

/// `10.0.0.1 timeout 30m expires 9m59s992ms` -> `10.0.0.1 timeout 30m`.
fn without_expires(element: &str) -> String {
    // An element arrives split from its list, without the `,` or `}` that ended it.
    let mut words = element.split(' ');
    let mut kept = Vec::new();
    while let Some(w) = words.next() {
        if w == "expires" {
            words.next();
        } else {
            kept.push(w);
        }
    }
    kept.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(lines: &[&str]) -> Result<NftScript, Vec<ScriptError>> {
        NftScript::new(lines.iter().map(|l| l.to_string()).collect())
    }

    #[test]
    fn tables_are_read_from_commands_and_blocks() {
        let s = script(&[
            "add table ip kube-proxy { comment \"rules for kube-proxy\" ; }",
            "flush table ip kube-proxy",
            "add chain ip kube-proxy services",
            "add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips",
            "table ip6 kube-proxy {",
            "  chain services {",
            "    jump x; counter",
            "  }",
            "}",
            "add element ip kube-proxy service-ips { 10.96.0.10 . tcp . 80 : goto service-x }",
        ])
        .unwrap();
        assert_eq!(
            s.tables.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["ip kube-proxy", "ip6 kube-proxy"]
        );
    }

    #[test]
    fn every_command_without_a_table_is_reported() {
        let problems = script(&[
            "add table kube-proxy",
            "include \"/etc/passwd\"",
            "list ruleset",
            "add table ip ok; add chain x",
            "flush table ip nat",
            "add table ip open {",
        ])
        .unwrap_err();
        let at: Vec<(usize, &str)> = problems
            .iter()
            .map(|p| (p.index, p.message.split(' ').next().unwrap_or_default()))
            .collect();
        assert_eq!(at.len(), 6, "{problems:?}");
        assert!(problems[0].message.contains("family"), "{problems:?}");
        assert!(problems[1].message.contains("include"), "{problems:?}");
        assert!(problems[2].message.contains("`list`"), "{problems:?}");
        assert_eq!(problems[3].index, 3);
        assert!(problems[4].message.contains("iptables"), "{problems:?}");
        assert!(problems[5].message.contains("not closed"), "{problems:?}");
    }

    #[test]
    fn quoted_braces_and_comments_do_not_count() {
        let s = script(&[
            "add table ip t { comment \"a { b ; c\" ; } # add x",
            "add chain ip t c",
        ])
        .unwrap();
        assert_eq!(s.tables.len(), 1);
    }

    #[test]
    fn listings_leave_out_what_packets_change() {
        let listing = "table ip kube-proxy {\n\
            \tset affinity-x {\n\t\ttype ipv4_addr\n\t\tflags dynamic,timeout\n\t\ttimeout 3h\n\
            \t\telements = { 10.0.0.1 expires 2h59m59s988ms,\n\t\t\t     10.0.0.2 expires 1s }\n\t}\n\n\
            \tset static {\n\t\ttype ipv4_addr\n\t\tflags timeout\n\
            \t\telements = { 10.0.0.4 timeout 1h expires 59m,\n\t\t\t     10.0.0.3 timeout 1h expires 3s }\n\t}\n}\n";
        assert_eq!(
            normalize_listing(listing),
            [
                "table ip kube-proxy {",
                "set affinity-x {",
                "type ipv4_addr",
                "flags dynamic,timeout",
                "timeout 3h",
                "}",
                "set static {",
                "type ipv4_addr",
                "flags timeout",
                "element 10.0.0.3 timeout 1h",
                "element 10.0.0.4 timeout 1h",
                "}",
                "}",
            ]
        );
    }

    #[test]
    fn located_lines_name_their_block() {
        let t = NftTable {
            family: NftFamily::Ip,
            name: "kube-proxy".into(),
        };
        let listing: Vec<String> = [
            "table ip kube-proxy {",
            "comment \"rules for kube-proxy\"",
            "chain services {",
            "jump x",
            "}",
            "}",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            located_lines(&t, &listing),
            [
                "ip kube-proxy",
                "ip kube-proxy: comment \"rules for kube-proxy\"",
                "ip kube-proxy › chain services",
                "ip kube-proxy › chain services: jump x",
            ]
        );
    }

    #[test]
    fn blocks_are_counted() {
        let listing: Vec<String> = normalize_listing(
            "table ip t {\n\tset s {\n\t\ttype ipv4_addr\n\t}\n\n\tchain a {\n\t}\n\n\tchain b {\n\t\tjump a\n\t\tjump a\n\t}\n}\n",
        );
        let got: Vec<(String, String, usize)> = blocks(&listing)
            .into_iter()
            .map(|b| (b.kind, b.name, b.lines.len()))
            .collect();
        assert_eq!(
            got,
            [
                ("set".into(), "s".into(), 1),
                ("chain".into(), "a".into(), 0),
                ("chain".into(), "b".into(), 2),
            ]
        );
    }

    #[test]
    fn iptables_tables_are_known() {
        let t = |f, n: &str| NftTable {
            family: f,
            name: n.into(),
        };
        assert!(t(NftFamily::Ip, "nat").owned_by_iptables());
        assert!(t(NftFamily::Ip6, "filter").owned_by_iptables());
        assert!(!t(NftFamily::Ip, "kube-proxy").owned_by_iptables());
        assert!(!t(NftFamily::Inet, "filter").owned_by_iptables());
    }
}
