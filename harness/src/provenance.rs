//! What a run's results were produced on: kpct's own version and commit, the kernel and the
//! tool versions the applier drives. Carried by reports, JUnit and JSON so a result read later
//! (a CI artifact, a bug report) says where it came from.

use serde::Serialize;
use std::process::Command;

/// The machine a run ran on, as the tools themselves report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Environment {
    /// `0.1.0 (commit 1a2b3c4d5e6f)`: the crate version and the git commit it was built from.
    pub kpct: String,
    /// The running kernel's release (`uname -r`).
    pub kernel: String,
    /// `iptables --version` of the iptables the applier uses, e.g. `iptables v1.8.9 (nf_tables)`.
    pub iptables: String,
    /// `ipset --version`.
    pub ipset: String,
    /// `ipvsadm --version`; on a kernel without IP_VS (where it cannot start) the installed
    /// package's version.
    pub ipvsadm: String,
}

/// kpct's version and the commit it was built from (build.rs; `unknown` outside a checkout).
pub fn kpct_version() -> String {
    format!(
        "{} (commit {})",
        env!("CARGO_PKG_VERSION"),
        option_env!("KPCT_COMMIT").unwrap_or("unknown")
    )
}

impl Environment {
    /// Asks the kernel and each tool. Read-only: nothing in any namespace changes.
    pub fn detect() -> Environment {
        Environment {
            kpct: kpct_version(),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|e| format!("unknown ({e})")),
            iptables: tool_version("iptables", &["--version"]),
            ipset: tool_version("ipset", &["--version"]),
            ipvsadm: match try_version("ipvsadm", &["--version"]) {
                Ok(v) => v,
                Err(why) => match try_version("dpkg-query", &["-W", "-f", "${Version}", "ipvsadm"])
                {
                    Ok(v) => format!("ipvsadm package {v} (`ipvsadm --version` fails: {why})"),
                    Err(_) => format!("unknown ({why})"),
                },
            },
        }
    }

    /// The fields as `(label, value)` rows, in the order reports show them.
    pub fn rows(&self) -> [(&'static str, &str); 5] {
        [
            ("kpct", &self.kpct),
            ("kernel", &self.kernel),
            ("iptables", &self.iptables),
            ("ipset", &self.ipset),
            ("ipvsadm", &self.ipvsadm),
        ]
    }
}

fn tool_version(program: &str, args: &[&str]) -> String {
    try_version(program, args).unwrap_or_else(|why| format!("unknown ({why})"))
}

/// The first line the tool prints, or why there is none.
fn try_version(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    let first = |bytes: &[u8]| {
        String::from_utf8_lossy(bytes)
            .lines()
            .find(|l| !l.trim().is_empty())
            .map(|l| l.trim().to_string())
    };
    match (out.status.success(), first(&out.stdout)) {
        (true, Some(line)) => Ok(line),
        _ => Err(first(&out.stderr).unwrap_or_else(|| format!("{program} exited {}", out.status))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_tools_as_they_report_themselves() {
        let env = Environment::detect();
        assert!(env.kpct.starts_with(env!("CARGO_PKG_VERSION")), "{env:?}");
        assert!(
            !env.kernel.is_empty() && !env.kernel.starts_with("unknown"),
            "{env:?}"
        );
        // ci/install-deps.sh installs every one of them.
        assert!(env.iptables.starts_with("iptables v"), "{env:?}");
        assert!(env.ipset.starts_with("ipset v"), "{env:?}");
        assert!(env.ipvsadm.contains("1."), "{env:?}");
    }
}
