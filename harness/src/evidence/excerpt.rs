//! The part of a node's effective state that decides the fate of packets to a service address:
//! what a report shows beside a failing probe. Pure functions over read-back state.
//!
//! A [`Target`] is one address the packets may be sent to: `tcp 10.96.0.10:80`, or a bare port
//! (`tcp *:30080`, a nodePort on any local address). The selection, per iptables table:
//!
//! 1. **seeds**: rules that mention a target — a `-d ADDR/32` of a target address and/or a
//!    `--dport` of its port, or a `--match-set` of an ipset holding an entry for it — and
//!    contradict it nowhere (another `-d`, `--dport` or `-p`);
//! 2. **what they lead to**: every chain a selected rule jumps to (`-j`/`-g`), whole,
//!    transitively;
//! 3. **how packets get there**: for a chain holding seeds that is not itself reached by step 2,
//!    the rules jumping to it, transitively up to the built-in chains;
//! 4. **masquerading** (nat): `KUBE-POSTROUTING` and `KUBE-MARK-MASQ` whole (with steps 2 and 3
//!    for `KUBE-POSTROUTING`), and every `-j MASQUERADE`/`-j SNAT` rule with the path to it
//!    (step 3), whatever its chain: they decide the source the backend sees.
//!
//! Chains shown only in part say how many of their rules were left out. ipsets: the matching
//! entries of every set holding one. IPVS: the virtual services of a target, with their real
//! servers. nftables: the set and map elements that name a target (`10.96.0.10 . tcp . 80 :
//! goto service-…`, `tcp . 30080 : …`, a ClusterIP in `cluster-ips`), the rules that name one
//! inline (`ip daddr 10.96.0.10 tcp dport 80 dnat to …`) with their counters, every chain
//! these lead to, whole and transitively, and every chain with a `masquerade` or `snat` rule.

use crate::programming::effective::IpSetState;
use crate::programming::rule_key::rule_key;
use crate::programming::{builtin_chains, Table, TableRules};
use crate::scenario::Protocol;
use ipvs_genl::{ServiceKey, TableEntry};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::net::IpAddr;

/// Chains that decide masquerading, always shown (nat) when present.
pub const MASQUERADE_CHAINS: [&str; 2] = ["KUBE-POSTROUTING", "KUBE-MARK-MASQ"];

/// An address packets are sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target {
    pub protocol: Protocol,
    /// `None`: any local address (a nodePort).
    pub addr: Option<IpAddr>,
    pub port: u16,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.addr {
            Some(a) => write!(
                f,
                "{} {}",
                self.protocol.lower(),
                std::net::SocketAddr::new(a, self.port)
            ),
            None => write!(f, "{} *:{}", self.protocol.lower(), self.port),
        }
    }
}

/// Whether an ipset entry (`ip`, `ip,proto:port[,…]` or `port`) stands for `t`.
pub fn entry_matches(entry: &str, t: &Target) -> bool {
    let mut parts = entry.split(',');
    let first = parts.next().unwrap_or_default();
    let host = first.trim_end_matches("/32").trim_end_matches("/128");
    if let Ok(ip) = host.parse::<IpAddr>() {
        if Some(ip) != t.addr {
            return false;
        }
        return match parts.next() {
            None => true,
            Some(pp) => {
                let (proto, port) = pp.split_once(':').unwrap_or(("tcp", pp));
                proto.eq_ignore_ascii_case(t.protocol.lower()) && port == t.port.to_string()
            }
        };
    }
    first.parse::<u16>() == Ok(t.port)
}

/// The sets holding an entry for some target, with those entries.
fn matching_sets<'a>(
    sets: &'a [IpSetState],
    targets: &[Target],
) -> Vec<(&'a IpSetState, Vec<&'a String>)> {
    sets.iter()
        .filter_map(|s| {
            let hits: Vec<&String> = s
                .entries
                .iter()
                .filter(|e| targets.iter().any(|t| entry_matches(e, t)))
                .collect();
            (!hits.is_empty()).then_some((s, hits))
        })
        .collect()
}

/// `ipset save` lines of the sets holding an entry for a target: their `create` line and the
/// matching entries only. Empty when no set holds one.
pub fn ipset_excerpt(sets: &[IpSetState], targets: &[Target]) -> String {
    let mut out = String::new();
    for (set, hits) in matching_sets(sets, targets) {
        let _ = write!(out, "create {} {}", set.name, set.type_name);
        if !set.create_options.is_empty() {
            let _ = write!(out, " {}", set.create_options);
        }
        out.push('\n');
        for e in &hits {
            let _ = writeln!(out, "add {} {e}", set.name);
        }
        let others = set.entries.len() - hits.len();
        if others > 0 {
            let _ = writeln!(
                out,
                "# … {others} other entr{} of {} not shown",
                if others == 1 { "y" } else { "ies" },
                set.name
            );
        }
    }
    out
}

/// A parsed rule: its chain and option groups (`-d 10.96.0.10/32`, `--dport 80`, `-j X`).
struct Rule<'a> {
    line: &'a str,
    chain: String,
    groups: Vec<String>,
}

impl Rule<'_> {
    /// The arguments of the non-negated option `name`, if present.
    fn opt(&self, name: &str) -> Option<&str> {
        self.groups
            .iter()
            .find_map(|g| g.strip_prefix(name)?.strip_prefix(' '))
    }

    fn jump(&self) -> Option<&str> {
        self.opt("-j").or_else(|| self.opt("-g"))
    }

    fn sets(&self) -> impl Iterator<Item = &str> {
        self.groups.iter().filter_map(|g| {
            g.strip_prefix("--match-set ")
                .and_then(|rest| rest.split_whitespace().next())
        })
    }

    /// Whether the rule mentions `t` (directly or through `sets`) and contradicts it nowhere.
    fn mentions(&self, t: &Target, sets: &BTreeSet<&str>) -> bool {
        if self.opt("-p").is_some_and(|p| p != t.protocol.lower()) {
            return false;
        }
        let addr = match (self.opt("-d"), t.addr) {
            (Some(d), Some(a)) => Some(d == crate::scenario::IpCidr::host(a).to_string()),
            _ => None,
        };
        let port = self.opt("--dport").map(|p| p == t.port.to_string());
        if addr == Some(false) || port == Some(false) {
            return false;
        }
        addr == Some(true) || port == Some(true) || self.sets().any(|s| sets.contains(s))
    }
}

/// The iptables excerpt for `targets` (see the module documentation), in `iptables-save`
/// syntax: per table with a selected rule, the chains shown, then their selected rules. Empty
/// when nothing is selected.
pub fn iptables_excerpt(
    tables: &BTreeMap<Table, TableRules>,
    sets: &[IpSetState],
    targets: &[Target],
) -> String {
    let target_sets: Vec<(&IpSetState, Vec<&String>)> = matching_sets(sets, targets);
    let mut out = String::new();
    for (table, rules) in tables {
        let parsed: Vec<Rule> = rules
            .rules
            .iter()
            .filter_map(|line| {
                let (chain, groups) = rule_key(line)?;
                Some(Rule {
                    line,
                    chain,
                    groups,
                })
            })
            .collect();
        let selected = select(*table, rules, &parsed, targets, &target_sets);
        if selected.rules.is_empty() && selected.whole.is_empty() {
            continue;
        }
        render_table(&mut out, *table, rules, &parsed, &selected);
    }
    out
}

#[derive(Default)]
struct Selection {
    /// Indices into the parsed rules.
    rules: BTreeSet<usize>,
    /// Chains shown whole.
    whole: BTreeSet<String>,
}

fn select(
    table: Table,
    decls: &TableRules,
    parsed: &[Rule],
    targets: &[Target],
    target_sets: &[(&IpSetState, Vec<&String>)],
) -> Selection {
    let is_chain = |name: &str| decls.chains.iter().any(|c| c.name == name);
    let mut sel = Selection::default();
    // 1. seeds. A set counts for a target only when it holds an entry for that very target, so
    // a rule's `-p`/`--dport` are checked against the target its set matched.
    for (i, rule) in parsed.iter().enumerate() {
        let hit = targets.iter().any(|t| {
            let sets: BTreeSet<&str> = target_sets
                .iter()
                .filter(|(_, hits)| hits.iter().any(|e| entry_matches(e, t)))
                .map(|(s, _)| s.name.as_str())
                .collect();
            rule.mentions(t, &sets)
        });
        if hit {
            sel.rules.insert(i);
        }
    }
    let seed_chains: BTreeSet<String> =
        sel.rules.iter().map(|&i| parsed[i].chain.clone()).collect();
    // 4. masquerade chains (nat)
    let mut upward_from: Vec<String> = Vec::new();
    if table == Table::Nat {
        for chain in MASQUERADE_CHAINS {
            if is_chain(chain) {
                sel.whole.insert(chain.to_string());
            }
        }
        if is_chain(MASQUERADE_CHAINS[0]) {
            upward_from.push(MASQUERADE_CHAINS[0].to_string());
        }
        // And whatever rewrites the source, by what it does (`-j MASQUERADE`, `-j SNAT`):
        // a proxier that names its chains otherwise, or masquerades in POSTROUTING itself.
        for (i, rule) in parsed.iter().enumerate() {
            if matches!(rule.jump(), Some("MASQUERADE" | "SNAT")) {
                sel.rules.insert(i);
                upward_from.push(rule.chain.clone());
            }
        }
    }
    // 2. downward: whole chains reached from selected rules and from whole chains.
    let mut queue: Vec<String> = sel
        .rules
        .iter()
        .filter_map(|&i| parsed[i].jump().map(str::to_string))
        .chain(sel.whole.iter().cloned())
        .collect();
    let mut reached: BTreeSet<String> = BTreeSet::new();
    while let Some(chain) = queue.pop() {
        if !is_chain(&chain) || builtin_chains(table).contains(&chain.as_str()) {
            continue;
        }
        if !reached.insert(chain.clone()) {
            continue;
        }
        sel.whole.insert(chain.clone());
        for rule in parsed.iter().filter(|r| r.chain == chain) {
            if let Some(j) = rule.jump() {
                queue.push(j.to_string());
            }
        }
    }
    // 3. upward: callers of seed chains not reached downward, up to the built-in chains.
    upward_from.extend(seed_chains.into_iter().filter(|c| !reached.contains(c)));
    let mut seen: BTreeSet<String> = BTreeSet::new();
    while let Some(chain) = upward_from.pop() {
        if !seen.insert(chain.clone()) {
            continue;
        }
        for (i, rule) in parsed.iter().enumerate() {
            if rule.jump() == Some(chain.as_str()) {
                sel.rules.insert(i);
                upward_from.push(rule.chain.clone());
            }
        }
    }
    sel
}

fn render_table(
    out: &mut String,
    table: Table,
    decls: &TableRules,
    parsed: &[Rule],
    sel: &Selection,
) {
    let _ = writeln!(out, "*{}", table.name());
    let shown = |chain: &str| {
        sel.whole.contains(chain) || sel.rules.iter().any(|&i| parsed[i].chain == chain)
    };
    for c in decls.chains.iter().filter(|c| shown(&c.name)) {
        let _ = writeln!(out, ":{} {}", c.name, c.policy.as_deref().unwrap_or("-"));
    }
    for c in decls.chains.iter().filter(|c| shown(&c.name)) {
        let all: Vec<usize> = (0..parsed.len())
            .filter(|&i| parsed[i].chain == c.name)
            .collect();
        let picked: Vec<usize> = if sel.whole.contains(&c.name) {
            all.clone()
        } else {
            all.iter()
                .copied()
                .filter(|i| sel.rules.contains(i))
                .collect()
        };
        let left_out = all.len() - picked.len();
        if left_out > 0 {
            let _ = writeln!(
                out,
                "# … {left_out} other rule{} of {} not shown",
                if left_out == 1 { "" } else { "s" },
                c.name
            );
        }
        for i in picked {
            let _ = writeln!(out, "{}", parsed[i].line);
        }
    }
    out.push_str("COMMIT\n");
}

/// The IPVS virtual services of the targets (a bare-port target matches every address), with
/// their real servers, in the kernel's order.
pub fn ipvs_entries(table: &[TableEntry], targets: &[Target]) -> Vec<TableEntry> {
    table
        .iter()
        .filter(|(svc, _)| match svc.service.key {
            ServiceKey::Addr {
                protocol,
                addr,
                port,
            } => targets.iter().any(|t| {
                let addr_ok = match t.addr {
                    None => true, // a nodePort: every local address
                    Some(a) => a == addr,
                };
                addr_ok && t.port == port && ipvs_protocol(t.protocol) == protocol
            }),
            ServiceKey::FwMark { .. } => false,
        })
        .cloned()
        .collect()
}

fn ipvs_protocol(p: Protocol) -> ipvs_genl::Protocol {
    match p {
        Protocol::Tcp => ipvs_genl::Protocol::Tcp,
        Protocol::Udp => ipvs_genl::Protocol::Udp,
        Protocol::Sctp => ipvs_genl::Protocol::Sctp,
    }
}

/// Whether an nftables element (`10.96.0.10 . tcp . 80 : goto x`, `tcp . 30080 comment "…" :
/// drop`, `10.96.0.10`) stands for `t`.
fn nft_element_matches(element: &str, t: &Target) -> bool {
    let key = element.split(" : ").next().unwrap_or_default();
    let key = key.split(" comment ").next().unwrap_or_default();
    let parts: Vec<&str> = key.split(" . ").map(str::trim).collect();
    let proto_port = |proto: &str, port: &str| {
        proto.eq_ignore_ascii_case(t.protocol.lower()) && port == t.port.to_string()
    };
    match (parts.as_slice(), t.addr) {
        ([addr, proto, port], Some(a)) => *addr == a.to_string() && proto_port(proto, port),
        ([proto, port], None) => proto_port(proto, port),
        ([addr], Some(a)) => *addr == a.to_string(),
        _ => false,
    }
}

/// The chains a line sends packets to (`goto X`, `jump X`, in vmaps too).
fn nft_chain_targets(line: &str) -> Vec<String> {
    let words: Vec<&str> = line
        .split(|c: char| c.is_whitespace() || c == ',' || c == '}' || c == '{')
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .filter(|w| w[0] == "goto" || w[0] == "jump")
        .map(|w| w[1].to_string())
        .collect()
}

/// Whether an nft rule names target `t` inline: its address as a word (`ip daddr 10.96.0.10`),
/// and where the rule matches a port or a protocol, the target's (`tcp dport 80`, or a set of
/// ports holding it). A bare-port target (a nodePort) needs the rule to match its port.
fn nft_rule_matches(rule: &str, t: &Target) -> bool {
    let words: Vec<&str> = rule
        .split(|c: char| c.is_whitespace() || c == ',' || c == '{' || c == '}')
        .filter(|w| !w.is_empty())
        .collect();
    let has = |w: &str| words.contains(&w);
    let names_port = words.windows(2).any(|w| w[0] == "dport");
    let port_ok = !names_port || has(&t.port.to_string());
    let protocols = ["tcp", "udp", "sctp"];
    let proto_ok = !protocols.iter().any(|p| has(p)) || has(t.protocol.lower());
    match t.addr {
        Some(a) => has(&a.to_string()) && port_ok && proto_ok,
        None => names_port && port_ok && proto_ok,
    }
}

/// Whether an nft rule rewrites the source address: the step that decides what source the
/// backend sees, whatever its chain is called.
fn nft_rule_rewrites_source(rule: &str) -> bool {
    rule.split_whitespace()
        .any(|w| w == "masquerade" || w == "snat")
}

/// A chain's declaration lines (`type nat hook postrouting priority srcnat; policy accept;`),
/// shown even when only some of its rules are.
fn nft_is_declaration(line: &str) -> bool {
    line.starts_with("type ") || line.starts_with("policy ") || line.starts_with("comment ")
}

/// The nftables part of a node's evidence, per table, in listing order: the set and map
/// elements that name a target, under their set or map; the rules that name one inline and
/// those that rewrite the source (masquerade, snat), under their chain; and every chain a shown
/// element or rule leads to, whole and transitively. Rules keep their counters (`counter
/// packets N bytes M`) when the listing has them. Empty when nothing names a target.
pub fn nft_excerpt(
    tables: &BTreeMap<crate::programming::nft::NftTable, Vec<String>>,
    targets: &[Target],
) -> String {
    let mut out = String::new();
    for (table, listing) in tables {
        let blocks = crate::programming::nft::blocks(listing);
        // Per block: the lines picked (elements or rules); chains reached are shown whole.
        let mut picked: BTreeMap<usize, Vec<&String>> = BTreeMap::new();
        let mut wanted: Vec<String> = Vec::new();
        for (index, block) in blocks.iter().enumerate() {
            let hits: Vec<&String> = if block.kind == "chain" {
                block
                    .lines
                    .iter()
                    .filter(|l| !nft_is_declaration(l))
                    .filter(|l| targets.iter().any(|t| nft_rule_matches(l, t)))
                    .collect()
            } else {
                block
                    .lines
                    .iter()
                    .filter_map(|l| l.strip_prefix("element ").map(|e| (l, e)))
                    .filter(|(_, e)| targets.iter().any(|t| nft_element_matches(e, t)))
                    .map(|(l, _)| l)
                    .collect()
            };
            if hits.is_empty() {
                continue;
            }
            for l in &hits {
                wanted.extend(nft_chain_targets(l));
            }
            picked.insert(index, hits);
        }
        // As KUBE-POSTROUTING in iptables mode: the chains that decide the source the
        // backend sees, found by what they do (a `masquerade` or `snat` rule), whole.
        if !picked.is_empty() {
            wanted.extend(
                blocks
                    .iter()
                    .filter(|b| b.kind == "chain")
                    .filter(|b| b.lines.iter().any(|l| nft_rule_rewrites_source(l)))
                    .map(|b| b.name.clone()),
            );
        }
        let mut whole: BTreeSet<String> = BTreeSet::new();
        while let Some(chain) = wanted.pop() {
            if !whole.insert(chain.clone()) {
                continue;
            }
            if let Some(block) = blocks.iter().find(|b| b.kind == "chain" && b.name == chain) {
                for l in &block.lines {
                    wanted.extend(nft_chain_targets(l));
                }
            }
        }
        let mut shown = String::new();
        for (index, block) in blocks.iter().enumerate() {
            let is_whole = block.kind == "chain" && whole.contains(&block.name);
            let Some(hits) = picked.get(&index).filter(|_| !is_whole) else {
                if is_whole {
                    let _ = writeln!(shown, "{} {{", block.head());
                    for l in &block.lines {
                        let _ = writeln!(shown, "\t{l}");
                    }
                    shown.push_str("}\n");
                }
                continue;
            };
            let _ = writeln!(shown, "{} {{", block.head());
            let declarations = block
                .lines
                .iter()
                .filter(|l| block.kind == "chain" && nft_is_declaration(l));
            for l in declarations.chain(hits.iter().copied()) {
                let _ = writeln!(shown, "\t{l}");
            }
            let (kind, of_kind) = if block.kind == "chain" {
                (
                    "rule",
                    block
                        .lines
                        .iter()
                        .filter(|l| !nft_is_declaration(l))
                        .count(),
                )
            } else {
                (
                    "element",
                    block
                        .lines
                        .iter()
                        .filter(|l| l.starts_with("element "))
                        .count(),
                )
            };
            let others = of_kind - hits.len();
            if others > 0 {
                let _ = writeln!(shown, "\t# {others} other {kind}(s) left out");
            }
            shown.push_str("}\n");
        }
        if !shown.is_empty() {
            let _ = writeln!(out, "table {table} {{");
            for l in shown.lines() {
                let _ = writeln!(out, "\t{l}");
            }
            out.push_str("}\n");
        }
    }
    out
}

#[cfg(test)]
mod tests;
