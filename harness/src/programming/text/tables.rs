//! `*raw`, `*mangle`, `*nat`, `*filter` (and their `*ip6:` twins) and `*nft`: iptables-restore and
//! nft script bodies.

use super::*;

pub(super) fn parse_table_body(
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
pub(super) fn parse_nft_body(
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

pub(super) fn is_counters(s: &str) -> bool {
    s.strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .and_then(|s| s.split_once(':'))
        .is_some_and(|(p, b)| p.parse::<u64>().is_ok() && b.parse::<u64>().is_ok())
}

/// `[12:3456] -A ...` (iptables-save -c) -> `-A ...`.
pub(super) fn strip_rule_counters(line: &str) -> &str {
    match line.split_once(' ') {
        Some((first, rest)) if is_counters(first) => rest.trim_start(),
        _ => line,
    }
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
