//! Running the userspace tools (iptables-restore, ipset, ...) inside a namespace and keeping
//! their stderr, which the applier parses for the failing input line.

use crate::netns::Netns;

/// Which iptables flavour writes the rules. kube-proxy uses whichever the node uses; nf_tables
/// is the default of every current distribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IptablesBackend {
    #[default]
    Nft,
    Legacy,
}

impl IptablesBackend {
    pub fn restore(self) -> &'static str {
        match self {
            IptablesBackend::Nft => "iptables-restore",
            IptablesBackend::Legacy => "iptables-legacy-restore",
        }
    }

    pub fn save(self) -> &'static str {
        match self {
            IptablesBackend::Nft => "iptables-save",
            IptablesBackend::Legacy => "iptables-legacy-save",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            IptablesBackend::Nft => "nft",
            IptablesBackend::Legacy => "legacy",
        }
    }
}

/// Which of the two xtables families a table set belongs to: `iptables` (IPv4) or
/// `ip6tables` (IPv6), each with its own tools and its own tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Xtables {
    Ip,
    Ip6,
}

impl Xtables {
    pub const ALL: [Xtables; 2] = [Xtables::Ip, Xtables::Ip6];

    /// `iptables-restore`, `ip6tables-legacy-restore`, …
    pub fn restore(self, backend: IptablesBackend) -> &'static str {
        match (self, backend) {
            (Xtables::Ip, b) => b.restore(),
            (Xtables::Ip6, IptablesBackend::Nft) => "ip6tables-restore",
            (Xtables::Ip6, IptablesBackend::Legacy) => "ip6tables-legacy-restore",
        }
    }

    /// `iptables-save`, `ip6tables-legacy-save`, …
    pub fn save(self, backend: IptablesBackend) -> &'static str {
        match (self, backend) {
            (Xtables::Ip, b) => b.save(),
            (Xtables::Ip6, IptablesBackend::Nft) => "ip6tables-save",
            (Xtables::Ip6, IptablesBackend::Legacy) => "ip6tables-legacy-save",
        }
    }

    /// The nf_tables family iptables-nft keeps this family's tables in.
    pub fn nft_family(self) -> &'static str {
        match self {
            Xtables::Ip => "ip",
            Xtables::Ip6 => "ip6",
        }
    }
}

/// A tool that could not be started or exited non-zero.
pub use crate::netns::CommandError as ToolError;

/// Runs `program args` inside `ns`, feeding `stdin`, returning stdout.
pub fn run(
    ns: &Netns,
    program: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<String, ToolError> {
    ns.output_of(program, args, stdin)
}

/// The 1-based input line a restore tool blamed: iptables-restore's `Error occurred at line: N`
/// (parse errors) or `line N failed` (kernel refusals at commit), ipset's `Error in line N:`.
pub fn blamed_line(stderr: &str) -> Option<usize> {
    let number_after = |marker: &str| {
        stderr.find(marker).and_then(|i| {
            stderr[i + marker.len()..]
                .trim_start()
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse().ok())
        })
    };
    number_after("Error occurred at line:")
        .or_else(|| number_after("Error in line"))
        .or_else(|| {
            // `iptables-restore: line 12 failed`, or nf_tables' `line 4: RULE_APPEND failed`
            let i = stderr.find(" failed")?;
            let after_line = stderr[..i].rsplit("line ").next()?;
            after_line
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
}

/// stderr without iptables-restore's generic help hint and line report (the caller names the
/// line itself, as it was written).
pub fn tool_message(stderr: &str) -> String {
    stderr
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty()
                && !l.starts_with("Try `iptables")
                && !l.starts_with("Error occurred at line")
        })
        .map(without_line_report)
        .collect::<Vec<_>>()
        .join(" ")
}

/// `ipset v7.17: Error in line 19: Syntax error: ...` -> `ipset v7.17: Syntax error: ...`.
fn without_line_report(line: &str) -> String {
    match line.find("Error in line ") {
        Some(i) => match line[i..].find(": ") {
            Some(j) => format!("{}{}", &line[..i], &line[i + j + 2..]),
            None => line.to_string(),
        },
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_blamed_lines() {
        assert_eq!(
            blamed_line("iptables-restore v1.8.9 (nf_tables): Chain 'NOPE' does not exist\nError occurred at line: 4\nTry `iptables-restore -h'"),
            Some(4)
        );
        assert_eq!(blamed_line("iptables-restore: line 12 failed"), Some(12));
        assert_eq!(
            blamed_line(
                "ip6tables-restore v1.8.9 (nf_tables): \nline 4: RULE_APPEND failed (Invalid argument): rule in chain X"
            ),
            Some(4)
        );
        assert_eq!(
            blamed_line("ipset v7.17: Error in line 2: Syntax error: x"),
            Some(2)
        );
        assert_eq!(blamed_line("something else"), None);
        assert_eq!(
            tool_message("ipset v7.17: Error in line 19: Syntax error: x"),
            "ipset v7.17: Syntax error: x"
        );
        assert_eq!(
            tool_message("a: b\n\nError occurred at line: 4\nTry `iptables-restore -h' or"),
            "a: b"
        );
    }
}
