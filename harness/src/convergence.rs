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
//! One thing a fresh node cannot have is allowed: an IPVS real server at weight 0 that still
//! holds connections is draining (graceful termination keeps it until they end,
//! pkg/proxy/ipvs/graceful_termination.go). Once drained it must go, and a later check says so.

use crate::programming::EffectiveState;
use std::collections::BTreeMap;

/// Every difference between the `updated` node and a `fresh` one, in section order.
/// `draining`: `ipvsadm -Sn` lines of the updated node's real servers that are at weight 0 and
/// still hold connections.
pub fn differences(
    updated: &EffectiveState,
    fresh: &EffectiveState,
    draining: &[String],
) -> Vec<String> {
    let (mut updated, fresh) = (sections(&updated.to_text()), sections(&fresh.to_text()));
    if let Some(ipvs) = updated.get_mut("ipvs") {
        ipvs.retain(|line| !draining.contains(line));
    }
    let mut out = Vec::new();
    let names: std::collections::BTreeSet<&String> = updated.keys().chain(fresh.keys()).collect();
    let empty = Vec::new();
    for section in names {
        let have = updated.get(section).unwrap_or(&empty);
        let want = fresh.get(section).unwrap_or(&empty);
        let before = out.len();
        for (line, n) in surplus(have, want) {
            out.push(format!("stale {}{}", describe(section, &line), times(n)));
        }
        for (line, n) in surplus(want, have) {
            out.push(format!("missing {}{}", describe(section, &line), times(n)));
        }
        if out.len() == before && have != want {
            let first = have
                .iter()
                .zip(want)
                .find(|(a, b)| a != b)
                .map(|(a, _)| a.clone())
                .unwrap_or_default();
            out.push(format!(
                "{} in another order than a fresh sync writes them (first out of place: `{}`)",
                section_name(section),
                first
            ));
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

/// The `-a` lines of the real servers of `table` at weight 0 that still hold connections.
pub fn draining_lines(table: &[ipvs_genl::TableEntry]) -> Vec<String> {
    let draining: Vec<ipvs_genl::TableEntry> = table
        .iter()
        .map(|(svc, dests)| {
            let kept = dests
                .iter()
                .filter(|d| d.destination.weight == 0 && d.active_conns + d.inactive_conns > 0)
                .cloned()
                .collect();
            (svc.clone(), kept)
        })
        .collect();
    ipvs_genl::format_save(&draining)
        .lines()
        .filter(|l| l.starts_with("-a "))
        .map(str::to_string)
        .collect()
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
            ipsets: Vec::new(),
            ipvs: None,
            kube_ipvs0: None,
            sysctls: BTreeMap::new(),
        }
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
