//! Comparing an iptables rule as a proxier wrote it with the rule `iptables-save` prints.
//!
//! iptables rewrites rules on the way through the kernel: it moves `-s/-d/-i/-o/-p` first, adds
//! `/32` and implicit matches (`-m tcp`), expands defaults (`--reject-with`, recent's
//! `--mask`), translates MARK shorthands to `--set-xmark` and reformats numbers. A rule is
//! reduced to its chain and the multiset of its option groups (`[!] --option args...`) with those
//! rewrites applied, which is equal for both forms of the same rule.

/// Chain and sorted option groups of a rule; `None` if the line is not an `-A`/`-I` rule.
pub fn rule_key(rule: &str) -> Option<(String, Vec<String>)> {
    let tokens = tokenize(rule);
    let mut groups: Vec<Vec<String>> = Vec::new();
    let mut negate = false;
    for (token, quoted) in tokens {
        if !quoted && token == "!" {
            negate = true;
            continue;
        }
        if !quoted && is_option(&token) {
            let name = long_to_short(&token);
            groups.push(vec![if negate {
                format!("! {name}")
            } else {
                name.to_string()
            }]);
            negate = false;
        } else if let Some(group) = groups.last_mut() {
            group.push(token);
        } else {
            return None;
        }
    }
    let head = groups.first()?.clone();
    let chain = match head.first().map(String::as_str) {
        Some("-A") => head.get(1)?.clone(),
        Some("-I") => head.get(1)?.clone(),
        _ => return None,
    };
    let mut rest: Vec<Vec<String>> = groups.into_iter().skip(1).collect();
    normalize(&mut rest);
    let mut keys: Vec<String> = rest.into_iter().map(|g| g.join(" ")).collect();
    keys.sort();
    Some((chain, keys))
}

fn is_option(token: &str) -> bool {
    token.starts_with('-')
        && token.len() > 1
        && !token[1..].starts_with(|c: char| c.is_ascii_digit())
}

fn long_to_short(option: &str) -> &str {
    match option {
        "--append" => "-A",
        "--insert" => "-I",
        "--source" | "--src" => "-s",
        "--destination" | "--dst" => "-d",
        "--protocol" => "-p",
        "--in-interface" => "-i",
        "--out-interface" => "-o",
        "--jump" => "-j",
        "--goto" => "-g",
        "--match" => "-m",
        other => other,
    }
}

fn normalize(groups: &mut Vec<Vec<String>>) {
    let has = |groups: &Vec<Vec<String>>, opt: &str| groups.iter().any(|g| g[0] == opt);
    for g in groups.iter_mut() {
        let opt = g[0].trim_start_matches("! ").to_string();
        match opt.as_str() {
            "-s" | "-d" => {
                for v in g.iter_mut().skip(1) {
                    if !v.contains('/') {
                        match v.parse::<std::net::IpAddr>() {
                            Ok(std::net::IpAddr::V4(_)) => v.push_str("/32"),
                            Ok(std::net::IpAddr::V6(_)) => v.push_str("/128"),
                            Err(_) => {}
                        }
                    }
                }
            }
            "-p" => {
                for v in g.iter_mut().skip(1) {
                    *v = v.to_ascii_lowercase();
                }
            }
            // The kernel keeps a probability as a 31-bit fraction (libxt_statistic:
            // `lround(0x80000000 * prob)`) and iptables-save prints that back with `%.11f`:
            // kube-proxy's `0.3333333333` reads back `0.33333333349`.
            "--probability" => {
                for v in g.iter_mut().skip(1) {
                    if let Ok(p) = v.parse::<f64>() {
                        let kept = (p * 2_147_483_648.0).round() / 2_147_483_648.0;
                        *v = format!("{kept:.11}");
                    }
                }
            }
            "--or-mark" => {
                let v = hex(g.get(1).map_or("", |s| s));
                *g = vec!["--set-xmark".into(), format!("{v}/{v}")];
            }
            "--xor-mark" => {
                *g = vec![
                    "--set-xmark".into(),
                    format!("{}/0x0", hex(g.get(1).map_or("", |s| s))),
                ]
            }
            "--set-mark" => {
                let value = g.get(1).cloned().unwrap_or_default();
                let (v, m) = value.split_once('/').unwrap_or((&value, "0xffffffff"));
                let (v, m) = (parse_num(v).unwrap_or(0), parse_num(m).unwrap_or(u32::MAX));
                *g = vec!["--set-xmark".into(), format!("0x{v:x}/0x{:x}", v | m)];
            }
            _ => {}
        }
        for v in g.iter_mut().skip(1) {
            *v = hex(v);
        }
    }
    // Implicit protocol matches that iptables adds after `-p`.
    groups.retain(|g| {
        !(g[0] == "-m"
            && matches!(
                g.get(1).map(String::as_str),
                Some("tcp" | "udp" | "sctp" | "icmp")
            ))
    });
    let jumps_to = |groups: &Vec<Vec<String>>, target: &str| {
        groups
            .iter()
            .any(|g| g[0] == "-j" && g.get(1).map(String::as_str) == Some(target))
    };
    // Defaults the save prints, per family (iptables' and ip6tables' REJECT answer, recent's
    // whole-address mask), are dropped: a rule is the same with or without them.
    if jumps_to(groups, "REJECT") {
        groups.retain(|g| {
            !(g[0] == "--reject-with"
                && matches!(
                    g.get(1).map(String::as_str),
                    Some("icmp-port-unreachable" | "icmp6-port-unreachable")
                ))
        });
    }
    let uses_recent = groups
        .iter()
        .any(|g| g[0] == "-m" && g.get(1).map(String::as_str) == Some("recent"));
    if uses_recent {
        groups.retain(|g| {
            !(g[0] == "--mask"
                && matches!(
                    g.get(1).map(String::as_str),
                    Some("255.255.255.255" | "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
                ))
        });
    }
    // recent matches on the source address unless told otherwise; iptables-save says so.
    if uses_recent && !has(groups, "--rsource") && !has(groups, "--rdest") {
        groups.push(vec!["--rsource".into()]);
    }
}

fn parse_num(s: &str) -> Option<u32> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// `0x00004000/0x00004000` -> `0x4000/0x4000`; anything else unchanged.
fn hex(v: &str) -> String {
    let parts: Vec<&str> = v.split('/').collect();
    let all_hex = parts
        .iter()
        .all(|p| p.starts_with("0x") && parse_num(p).is_some());
    if !all_hex {
        return v.to_string();
    }
    parts
        .iter()
        .filter_map(|p| parse_num(p))
        .map(|n| format!("0x{n:x}"))
        .collect::<Vec<_>>()
        .join("/")
}

/// Splits like a shell: whitespace-separated, double quotes group (with `\"` escapes). The flag
/// says whether the token was quoted, so a quoted `"-x"` is never read as an option.
fn tokenize(rule: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut chars = rule.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut token = String::new();
        let mut quoted = false;
        let mut had_quote = false;
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() && !quoted {
                break;
            }
            chars.next();
            match c {
                '"' => {
                    quoted = !quoted;
                    had_quote = true;
                }
                '\\' if quoted => {
                    if let Some(next) = chars.next() {
                        token.push(next);
                    }
                }
                _ => token.push(c),
            }
        }
        out.push((token, had_quote));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::rule_key;

    fn same(written: &str, saved: &str) {
        assert_eq!(rule_key(written), rule_key(saved), "\n{written}\n{saved}");
    }

    #[test]
    fn matches_iptables_save_rewrites() {
        same(
            "-A T1 -m comment --comment \"a b\" -s 10.0.0.1 -j MARK --xor-mark 0x00004000",
            "-A T1 -s 10.0.0.1/32 -m comment --comment \"a b\" -j MARK --set-xmark 0x4000/0x0",
        );
        same(
            "-A T1 -j MARK --set-mark 0x4000/0x4000",
            "-A T1 -j MARK --set-xmark 0x4000/0x4000",
        );
        same(
            "-A T1 -p TCP --dport 80 -m statistic --mode random --probability 0.5 -j RETURN",
            "-A T1 -p tcp -m tcp --dport 80 -m statistic --mode random --probability 0.50000000000 -j RETURN",
        );
        // kube-proxy writes `%0.10f`; the kernel keeps a 31-bit fraction of it.
        same(
            "-A T1 -m statistic --mode random --probability 0.3333333333 -j RETURN",
            "-A T1 -m statistic --mode random --probability 0.33333333349 -j RETURN",
        );
        same(
            "-A T1 -m recent --name KUBE-SEP-X --set --rsource -j RETURN",
            "-A T1 -m recent --set --name KUBE-SEP-X --mask 255.255.255.255 --rsource -j RETURN",
        );
        same(
            "-A T -j MARK --or-mark 0x4000",
            "-A T -j MARK --set-xmark 0x4000/0x4000",
        );
        same(
            "-A T2 -p tcp -j REJECT",
            "-A T2 -p tcp -j REJECT --reject-with icmp-port-unreachable",
        );
        // ip6tables-save's forms of the same defaults.
        same(
            "-A T3 -d fd00::a -p tcp --dport 80 -j REJECT",
            "-A T3 -d fd00::a/128 -p tcp -m tcp --dport 80 -j REJECT --reject-with icmp6-port-unreachable",
        );
        same(
            "-A T1 -m recent --name KUBE-SEP-X --set --rsource -j RETURN",
            "-A T1 -m recent --set --name KUBE-SEP-X --mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff --rsource -j RETURN",
        );
        assert_ne!(
            rule_key("-A T2 -p tcp -j REJECT"),
            rule_key("-A T2 -p tcp -j REJECT --reject-with icmp-host-prohibited")
        );
        assert_ne!(
            rule_key("-A T ! -s 10.0.0.0/8 -j X"),
            rule_key("-A T -s 10.0.0.0/8 -j X")
        );
        assert_ne!(rule_key("-A T -j X"), rule_key("-A U -j X"));
        assert_eq!(rule_key(":FOO - [0:0]"), None);
    }
}
