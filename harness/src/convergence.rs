//! The convergence check: after a step, a node's state as the kernel holds it must be what the
//! same proxier programs into a fresh node for the same cluster state. A stale chain, set
//! entry, virtual server or address left by an earlier sync, or a piece an update forgot, is a
//! difference named exactly.
//!
//! Both sides are read back from the kernel ([`EffectiveState`], normalised) and compared line
//! by line in the programming text format, per section: a line on one side only is stale (only
//! on the updated node) or missing (only on the fresh one); the same lines in another order
//! (iptables rules are evaluated in order) is a difference too.
//!
//! The order between Service ports of the rules of the chains every Service port writes into
//! (`KUBE-SERVICES`, `KUBE-NODEPORTS`, `KUBE-EXTERNAL-SERVICES`, `KUBE-PROXY-FIREWALL`, in
//! table nat and filter) is not a difference: kube-proxy writes them as it ranges over its
//! `svcPortMap`, a Go map (`syncProxyRules`, pkg/proxy/iptables/proxier.go), so two syncs of
//! one cluster state order them differently. Its own tests compare them sorted by Service,
//! related rules keeping their order (`sortIPTablesRules`, pkg/proxy/iptables/proxier_test.go);
//! here they are sorted by Service *port* (the comment up to its first space), since the ports
//! of one Service are map keys of their own too.
//!
//! One thing a fresh node cannot have is allowed: an IPVS real server at weight 0 that still
//! holds connections is draining (graceful termination keeps it until they end,
//! pkg/proxy/ipvs/graceful_termination.go). Once drained it must go, and a later check says so.

use crate::programming::EffectiveState;
use std::collections::BTreeMap;

/// Every difference between the `updated` node and a `fresh` one, in section order.
/// `allowed`: lines the updated node may hold that a fresh one cannot: the `ipvsadm -Sn` lines
/// of real servers at weight 0 that still hold connections ([`crate::draining::draining_lines`]), and the
/// nftables service chains flushed to be deleted at the next sync ([`flushed_chains`]).
pub fn differences(
    updated: &EffectiveState,
    fresh: &EffectiveState,
    allowed: &[String],
) -> Vec<String> {
    line_differences(updated, fresh, allowed, &[])
        .into_iter()
        .map(|d| match d {
            LineDifference::OnlyInFirst { what, times: n } => format!("stale {what}{}", times(n)),
            LineDifference::OnlyInSecond { what, times: n } => {
                format!("missing {what}{}", times(n))
            }
            LineDifference::Order { section, first } => format!(
                "{section} in another order than a fresh sync writes them (first out of place: \
                 `{first}`)"
            ),
        })
        .collect()
}

/// One way two states differ ([`line_differences`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum LineDifference {
    /// What the first state holds `times` times more than the second (`what` names it as a
    /// person would: ``rule `-A …` (table nat)``, ``nftables `ip kube-proxy › chain …: …` ``).
    OnlyInFirst { what: String, times: usize },
    /// What the second state holds `times` times more than the first.
    OnlyInSecond { what: String, times: usize },
    /// Both hold the same lines of `section` (`rules of table nat`, …), in another order.
    Order { section: String, first: String },
}

/// Every difference between two states, in section order, compared as [`differences`] does
/// (rules of `KUBE-SERVICES`/`KUBE-NODEPORTS` by Service, nftables lines by chain); the lines
/// of `allowed_first` and `allowed_second` are left out of the first and the second state.
pub fn line_differences(
    first: &EffectiveState,
    second: &EffectiveState,
    allowed_first: &[String],
    allowed_second: &[String],
) -> Vec<LineDifference> {
    let (mut first_sections, mut second_sections) = (
        with_located_nft(by_service(sections(&first.to_text())), first),
        with_located_nft(by_service(sections(&second.to_text())), second),
    );
    for (sections, allowed) in [
        (&mut first_sections, allowed_first),
        (&mut second_sections, allowed_second),
    ] {
        for lines in sections.values_mut() {
            lines.retain(|line| !allowed.contains(line));
        }
    }
    let mut out = Vec::new();
    let names: std::collections::BTreeSet<&String> = first_sections
        .keys()
        .chain(second_sections.keys())
        .collect();
    let empty = Vec::new();
    for section in names {
        let have = first_sections.get(section).unwrap_or(&empty);
        let want = second_sections.get(section).unwrap_or(&empty);
        let before = out.len();
        for (line, times) in surplus(have, want) {
            out.push(LineDifference::OnlyInFirst {
                what: describe(section, &line),
                times,
            });
        }
        for (line, times) in surplus(want, have) {
            out.push(LineDifference::OnlyInSecond {
                what: describe(section, &line),
                times,
            });
        }
        if out.len() == before && have != want {
            let first = have
                .iter()
                .zip(want)
                .find(|(a, b)| a != b)
                .map(|(a, _)| a.clone())
                .unwrap_or_default();
            out.push(LineDifference::Order {
                section: section_name(section),
                first,
            });
        }
    }
    out
}

/// The `nft` section as lines that name their table and chain, so a difference says where it
/// is, blocks in name order (the kernel lists them in creation order, which an update changes;
/// only the order of lines inside a chain matters); dropped when the node has no nftables
/// table.
fn with_located_nft(
    mut sections: BTreeMap<String, Vec<String>>,
    state: &EffectiveState,
) -> BTreeMap<String, Vec<String>> {
    sections.remove("nft");
    if !state.nft.is_empty() {
        let mut lines: Vec<String> = state
            .nft
            .iter()
            .flat_map(|(table, listing)| crate::programming::nft::located_lines(table, listing))
            .collect();
        lines.sort_by(|a, b| block_of(a).cmp(block_of(b)));
        sections.insert("nft".into(), lines);
    }
    sections
}

/// The chains whose rules for different Service ports may come in any order, each Service
/// port's rules keeping theirs: every rule kube-proxy writes into them inside its loop over
/// `svcPortMap` has a comment that starts with the Service port's name.
const SERVICE_ORDERED_CHAINS: [&str; 4] = [
    "KUBE-SERVICES",
    "KUBE-NODEPORTS",
    "KUBE-EXTERNAL-SERVICES",
    "KUBE-PROXY-FIREWALL",
];

/// `sections` with the rules of [`SERVICE_ORDERED_CHAINS`] that name a Service port in their
/// comment stably sorted by it, as `sortIPTablesRules` does by Service; every other line,
/// among them the rules that "must be the last rule" of the chain, stays where it is.
fn by_service(mut sections: BTreeMap<String, Vec<String>>) -> BTreeMap<String, Vec<String>> {
    for lines in sections.values_mut() {
        for chain in SERVICE_ORDERED_CHAINS {
            let prefix = format!("-A {chain} ");
            let service = |rule: &str| {
                rule_comment(rule)
                    .filter(|c| !c.contains("must be the last rule"))
                    .and_then(|c| c.split(' ').next().map(str::to_string))
                    .filter(|s| s.contains('/'))
            };
            let places: Vec<usize> = (0..lines.len())
                .filter(|&i| lines[i].starts_with(&prefix) && service(&lines[i]).is_some())
                .collect();
            let mut rules: Vec<String> = places.iter().map(|&i| lines[i].clone()).collect();
            rules.sort_by_key(|rule| service(rule));
            for (i, rule) in places.into_iter().zip(rules) {
                lines[i] = rule;
            }
        }
    }
    sections
}

/// The text of a rule's `--comment` (quoted or not).
fn rule_comment(rule: &str) -> Option<String> {
    let rest = rule.split_once("--comment ")?.1;
    Some(match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next().unwrap_or_default().to_string(),
        None => rest.split(' ').next().unwrap_or_default().to_string(),
    })
}

/// The block path a located line belongs to (`ip kube-proxy › chain services`).
fn block_of(located: &str) -> &str {
    located.split_once(": ").map_or(located, |(path, _)| path)
}

/// The located lines of the empty service chains of `state` (a `/` in the name: kube-proxy's
/// `isServiceChainName`): nftables mode flushes a stale chain in one sync and deletes it in the
/// next, kernels before 6.2 being slow to see it unreferenced (pkg/proxy/nftables/proxier.go).
pub fn flushed_chains(state: &EffectiveState) -> Vec<String> {
    let mut out = Vec::new();
    for (table, listing) in &state.nft {
        for block in crate::programming::nft::blocks(listing) {
            if block.kind == "chain" && block.lines.is_empty() && block.name.contains('/') {
                out.push(format!("{table} › chain {}", block.name));
            }
        }
    }
    out
}

fn times(n: usize) -> String {
    if n > 1 {
        format!(" (×{n})")
    } else {
        String::new()
    }
}

/// Section name (`nat`, `ipset`, …) -> its lines, in order.
fn sections(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if line == "COMMIT" {
            current = None;
        } else if let Some(name) = line.strip_prefix('*').filter(|_| current.is_none()) {
            current = Some(name.to_string());
            out.entry(name.to_string()).or_default();
        } else if let Some(section) = &current {
            out.entry(section.clone())
                .or_default()
                .push(line.to_string());
        }
    }
    out
}

/// Lines of `a` not matched by one of `b` (as multisets), with their counts.
fn surplus(a: &[String], b: &[String]) -> Vec<(String, usize)> {
    let mut count: BTreeMap<&String, isize> = BTreeMap::new();
    for line in a {
        *count.entry(line).or_default() += 1;
    }
    for line in b {
        *count.entry(line).or_default() -= 1;
    }
    // In `a`'s order, each line once.
    let mut seen = std::collections::BTreeSet::new();
    a.iter()
        .filter(|l| seen.insert(*l))
        .filter_map(|l| {
            let n = count[l];
            (n > 0).then(|| (l.clone(), n as usize))
        })
        .collect()
}

fn section_name(section: &str) -> String {
    match section {
        "ipset" => "ipset entries".into(),
        "ipvs" => "IPVS services".into(),
        "addresses" => "kube-ipvs0 addresses".into(),
        "sysctl" => "sysctls".into(),
        "nft" => "nftables lines".into(),
        table => format!("rules of table {table}"),
    }
}

/// What one line of a section stands for, as a person would name it.
fn describe(section: &str, line: &str) -> String {
    match section {
        "ipset" => match line.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["create", name, ..] => format!("ipset {name}"),
            ["add", name, entry, ..] => format!("ipset {name} entry {entry}"),
            _ => format!("ipset line `{line}`"),
        },
        "ipvs" => {
            if line.starts_with("-A ") {
                format!("IPVS virtual server `{line}`")
            } else if line.starts_with("-a ") {
                format!("IPVS real server `{line}`")
            } else {
                format!("IPVS setting `{line}`")
            }
        }
        "addresses" => match line.strip_prefix("# ") {
            Some(state) => format!("kube-ipvs0 state `{state}`"),
            None => format!("kube-ipvs0 address {line}"),
        },
        "sysctl" => format!("sysctl {line}"),
        "nft" => format!("nftables `{line}`"),
        table => match line.strip_prefix(':') {
            Some(decl) => {
                let name = decl.split_whitespace().next().unwrap_or(decl);
                format!("chain {name} (table {table})")
            }
            None => format!("rule `{line}` (table {table})"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::programming::effective::normalize_iptables_save;

    fn state(save: &str) -> EffectiveState {
        EffectiveState {
            iptables: normalize_iptables_save(save),
            ip6tables: BTreeMap::new(),
            ipsets: Vec::new(),
            ipvs: None,
            kube_ipvs0: None,
            sysctls: BTreeMap::new(),
            nft: BTreeMap::new(),
        }
    }

    #[test]
    fn services_may_come_in_any_order_their_rules_may_not() {
        let save = |rules: &[&str]| {
            state(&format!(
                "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-A - [0:0]\n:KUBE-SVC-B - [0:0]\n{}\nCOMMIT\n",
                rules.join("\n")
            ))
        };
        let a1 = r#"-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m comment --comment "ns/a:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-A"#;
        let a2 = r#"-A KUBE-SERVICES -d 1.2.3.4/32 -p tcp -m comment --comment "ns/a:http external IP" -m tcp --dport 80 -j KUBE-SVC-A"#;
        let b = r#"-A KUBE-SERVICES -d 10.96.0.20/32 -p tcp -m comment --comment "ns/b:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-B"#;
        let last = r#"-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"#;
        let fresh = save(&[a1, a2, b, last]);
        assert!(differences(&save(&[b, a1, a2, last]), &fresh, &[]).is_empty());
        assert_eq!(
            differences(&save(&[a2, a1, b, last]), &fresh, &[]).len(),
            1,
            "one Service's rules keep their order"
        );
        assert_eq!(
            differences(&save(&[last, a1, a2, b]), &fresh, &[]).len(),
            1,
            "the last rule stays last"
        );
    }

    /// Two syncs of one cluster state by a real kube-proxy: every chain a Service port writes
    /// into, in nat and filter, in the order of a Go map; the ports of one Service are keys of
    /// their own. Comments as `syncProxyRules` writes them (pkg/proxy/iptables/proxier.go).
    #[test]
    fn service_ports_may_come_in_any_order_in_every_chain_they_share() {
        let filter = [
            [r#"-A KUBE-NODEPORTS -p tcp -m comment --comment "ns/a:p80 health check node port" -m tcp --dport 30000 -j ACCEPT"#].as_slice(),
            &[r#"-A KUBE-NODEPORTS -p tcp -m comment --comment "ns/b health check node port" -m tcp --dport 30001 -j ACCEPT"#],
            &[
                r#"-A KUBE-EXTERNAL-SERVICES -d 192.168.99.22/32 -p tcp -m comment --comment "ns/a:p80 has no local endpoints" -m tcp --dport 80 -j DROP"#,
                r#"-A KUBE-EXTERNAL-SERVICES -p tcp -m comment --comment "ns/a:p80 has no local endpoints" -m addrtype --dst-type LOCAL -m tcp --dport 30002 -j DROP"#,
            ],
            &[r#"-A KUBE-EXTERNAL-SERVICES -p tcp -m comment --comment "ns/a:p81 has no local endpoints" -m addrtype --dst-type LOCAL -m tcp --dport 30003 -j DROP"#],
            &[r#"-A KUBE-SERVICES -d 10.96.0.30/32 -p tcp -m comment --comment "ns/c:p80 has no endpoints" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable"#],
            &[r#"-A KUBE-SERVICES -d 10.96.0.30/32 -p tcp -m comment --comment "ns/c:p81 has no endpoints" -m tcp --dport 81 -j REJECT --reject-with icmp-port-unreachable"#],
            &[r#"-A KUBE-PROXY-FIREWALL -d 5.6.7.8/32 -p tcp -m comment --comment "ns/a:p80 traffic not accepted by KUBE-FW-A" -m tcp --dport 80 -j DROP"#],
            &[r#"-A KUBE-PROXY-FIREWALL -d 5.6.7.9/32 -p tcp -m comment --comment "ns/b traffic not accepted by KUBE-FW-B" -m tcp --dport 80 -j DROP"#],
        ];
        let nat = [
            [
                r#"-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m comment --comment "ns/a:p80 cluster IP" -m tcp --dport 80 -j KUBE-SVC-A80"#,
                r#"-A KUBE-SERVICES -d 1.2.3.4/32 -p tcp -m comment --comment "ns/a:p80 loadbalancer IP" -m tcp --dport 80 -j KUBE-FW-A80"#,
            ]
            .as_slice(),
            &[r#"-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m comment --comment "ns/a:p81 cluster IP" -m tcp --dport 81 -j KUBE-SVC-A81"#],
            &[r#"-A KUBE-SERVICES -d 10.96.0.20/32 -p tcp -m comment --comment "ns/b cluster IP" -m tcp --dport 80 -j KUBE-SVC-B"#],
            &[r#"-A KUBE-NODEPORTS -p tcp -m comment --comment ns/a:p80 -m tcp --dport 30002 -j KUBE-EXT-A80"#],
            &[r#"-A KUBE-NODEPORTS -p tcp -m comment --comment ns/a:p81 -m tcp --dport 30003 -j KUBE-EXT-A81"#],
        ];
        let last = [
            r#"-A KUBE-SERVICES -d 192.168.1.2/32 -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -j KUBE-NODEPORTS"#,
            r#"-A KUBE-SERVICES -d 127.0.0.1/32 -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -j KUBE-NODEPORTS"#,
        ];
        let save = |filter: Vec<&str>, nat: Vec<&str>| {
            let chains = ":KUBE-SERVICES - [0:0]\n:KUBE-NODEPORTS - [0:0]\n:KUBE-EXTERNAL-SERVICES - [0:0]\n:KUBE-PROXY-FIREWALL - [0:0]\n";
            state(&format!(
                "*filter\n{chains}{}\nCOMMIT\n*nat\n{chains}:KUBE-SVC-A80 - [0:0]\n:KUBE-SVC-A81 - [0:0]\n:KUBE-SVC-B - [0:0]\n:KUBE-FW-A80 - [0:0]\n:KUBE-EXT-A80 - [0:0]\n:KUBE-EXT-A81 - [0:0]\n{}\n{}\nCOMMIT\n",
                filter.join("\n"),
                nat.join("\n"),
                last.join("\n"),
            ))
        };
        let fresh = save(filter.concat(), nat.concat());
        // The map's other order: every group of one Service port's rules moved, none split.
        let reversed = |groups: &[&[&'static str]]| -> Vec<&'static str> {
            groups
                .iter()
                .rev()
                .flat_map(|g| g.iter().copied())
                .collect()
        };
        let updated = save(reversed(&filter), reversed(&nat));
        assert_ne!(updated.to_text(), fresh.to_text());
        assert_eq!(differences(&updated, &fresh, &[]), Vec::<String>::new());
        // One Service port's own rules keep their order.
        let mut swapped = nat.concat();
        swapped.swap(0, 1);
        assert_eq!(
            differences(&save(filter.concat(), swapped), &fresh, &[]).len(),
            1
        );
        let mut swapped = filter.concat();
        swapped.swap(2, 3);
        assert_eq!(
            differences(&save(swapped, nat.concat()), &fresh, &[]).len(),
            1
        );
    }

    #[test]
    fn names_the_nftables_chain_a_difference_is_in() {
        use crate::programming::nft::{normalize_listing, NftFamily, NftTable};
        let with = |listing: &str| {
            let mut s = state("");
            s.nft.insert(
                NftTable {
                    family: NftFamily::Ip,
                    name: "kube-proxy".into(),
                },
                normalize_listing(listing),
            );
            s
        };
        let fresh = with("table ip kube-proxy {\n\tchain services {\n\t\tjump a\n\t}\n}\n");
        let updated = with(
            "table ip kube-proxy {\n\tchain services {\n\t\tjump b\n\t}\n\tchain old {\n\t}\n}\n",
        );
        assert_eq!(
            differences(&updated, &fresh, &[]),
            [
                "stale nftables `ip kube-proxy › chain old`",
                "stale nftables `ip kube-proxy › chain services: jump b`",
                "missing nftables `ip kube-proxy › chain services: jump a`",
            ]
        );
        // Chains in another order are the same table (the kernel lists them as they were
        // created); rules in another order are not.
        let ab = with("table ip kube-proxy {\n\tchain a {\n\t\tjump x\n\t\tjump y\n\t}\n\tchain b {\n\t}\n}\n");
        let ba = with("table ip kube-proxy {\n\tchain b {\n\t}\n\tchain a {\n\t\tjump x\n\t\tjump y\n\t}\n}\n");
        let ab_swapped = with("table ip kube-proxy {\n\tchain a {\n\t\tjump y\n\t\tjump x\n\t}\n\tchain b {\n\t}\n}\n");
        assert!(differences(&ba, &ab, &[]).is_empty());
        assert_eq!(differences(&ab_swapped, &ab, &[]).len(), 1);
        // An emptied service chain (a `/` in its name) is one flushed to be deleted later.
        let flushed = with("table ip kube-proxy {\n\tchain endpoint-X-ns/svc/tcp/p__10.0.0.1/80 {\n\t}\n\tchain b {\n\t}\n}\n");
        let allowed = flushed_chains(&flushed);
        assert_eq!(
            allowed,
            ["ip kube-proxy › chain endpoint-X-ns/svc/tcp/p__10.0.0.1/80"]
        );
        let bare = with("table ip kube-proxy {\n\tchain b {\n\t}\n}\n");
        assert_eq!(differences(&flushed, &bare, &[]).len(), 1);
        assert!(differences(&flushed, &bare, &allowed).is_empty());
        assert_eq!(
            differences(&state(""), &fresh, &[]).len(),
            3,
            "a missing table is missing all of it"
        );
        assert!(differences(&fresh, &fresh, &[]).is_empty());
    }

    #[test]
    fn names_stale_and_missing_chains_and_rules() {
        let fresh = state("*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -j KUBE-SVC-B\n:KUBE-SVC-B - [0:0]\nCOMMIT\n");
        let updated = state(
            "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-A - [0:0]\n-A KUBE-SVC-A -j ACCEPT\nCOMMIT\n",
        );
        assert_eq!(
            differences(&updated, &fresh, &[]),
            [
                "stale chain KUBE-SVC-A (table nat)",
                "stale rule `-A KUBE-SVC-A -j ACCEPT` (table nat)",
                "missing chain KUBE-SVC-B (table nat)",
                "missing rule `-A KUBE-SERVICES -j KUBE-SVC-B` (table nat)",
            ]
        );
        assert!(differences(&fresh, &fresh, &[]).is_empty());
    }

    #[test]
    fn the_same_rules_in_another_order_differ() {
        let a = state("*filter\n:X - [0:0]\n-A X -j ACCEPT\n-A X -j DROP\nCOMMIT\n");
        let b = state("*filter\n:X - [0:0]\n-A X -j DROP\n-A X -j ACCEPT\nCOMMIT\n");
        assert_eq!(
            differences(&a, &b, &[]),
            ["rules of table filter in another order than a fresh sync writes them (first out of place: `-A X -j ACCEPT`)"]
        );
    }
}
