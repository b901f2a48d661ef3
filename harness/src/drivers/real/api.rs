//! `api:`: any proxier that watches the Kubernetes API, run unmodified in each node as kube-proxy
//! is, from a command line with placeholders, and synced by the one rule that needs nothing of
//! its internals but a counter of its syncs (see [`super::counter`]).
//!
//! ```text
//! api:--sync-metric=NAME@PORT [--judged-as=NAME] COMMAND [ARGS…]
//! ```
//!
//! - `--sync-metric=NAME@PORT`: a Prometheus counter of the proxier's completed syncs (a
//!   counter, or a histogram's or summary's `_count`; each of its series, one per IP family
//!   say, is waited for) served at `http://127.0.0.1:PORT/metrics` in the node's namespace.
//! - `--judged-as=NAME`: whose `expectFor` expectations judge it (by default its label).
//! - Placeholders in COMMAND and ARGS, each replaced per node: [`PLACEHOLDERS`].

use crate::scenario::{IpFamily, Scenario};
use crate::topology::NodeNs;
use anyhow::{bail, Result};
use std::path::Path;

/// What `api:` takes in its command line, and what each becomes on a node.
pub const PLACEHOLDERS: &[(&str, &str)] = &[
    (
        "{kubeconfig}",
        "the kubeconfig of the API server kpct serves on the node's loopback",
    ),
    ("{node}", "the node's name (its Node object's)"),
    (
        "{node-ip}",
        "the node's first underlay address (IPv4 when it has one)",
    ),
    (
        "{node-ips}",
        "the node's underlay addresses, comma-separated, IPv4 first",
    ),
    (
        "{cluster-cidr}",
        "the pod ranges, comma-separated, IPv4 first",
    ),
    (
        "{service-cidr}",
        "the Service ranges, comma-separated, IPv4 first",
    ),
    (
        "{dir}",
        "a directory of the node's own, writable, removed after the run",
    ),
];

/// An API-watching proxier given by its command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiProxier {
    pub(super) spec: String,
    /// The program and its arguments, placeholders unexpanded.
    pub command: Vec<String>,
    pub sync_metric: String,
    pub metrics_port: u16,
    pub judged_as: Option<String>,
    pub timeout: std::time::Duration,
}

const USAGE: &str = "expected `api:--sync-metric=NAME@PORT [--judged-as=NAME] COMMAND [ARGS…]`";

impl ApiProxier {
    /// Parses the part of `api:…` after the colon, every problem in one message; `spec` is the
    /// whole spec, its label.
    pub fn parse(spec: &str, rest: &str) -> Result<ApiProxier> {
        let mut words = rest.split_whitespace().peekable();
        let mut problems = Vec::new();
        let mut sync = None;
        let mut judged_as = None;
        while let Some(word) = words.next_if(|w| w.starts_with("--")) {
            if let Some(value) = word.strip_prefix("--sync-metric=") {
                match value.rsplit_once('@').map(|(n, p)| (n, p.parse::<u16>())) {
                    Some((name, Ok(port))) if !name.is_empty() && port > 0 => {
                        sync = Some((name.to_string(), port))
                    }
                    _ => problems.push(format!(
                        "`{word}`: expected NAME@PORT, PORT from 1 to 65535"
                    )),
                }
            } else if let Some(name) = word.strip_prefix("--judged-as=") {
                judged_as = Some(name.to_string());
            } else {
                problems.push(format!("unknown option `{word}` before the command"));
            }
        }
        let command: Vec<String> = words.map(str::to_string).collect();
        if sync.is_none() {
            problems.push("no `--sync-metric=NAME@PORT`: kpct cannot tell when it synced".into());
        }
        if command.is_empty() {
            problems.push("no command".into());
        }
        for word in &command {
            for unknown in unknown_placeholders(word) {
                problems.push(format!(
                    "unknown placeholder `{unknown}` in `{word}` (known: {})",
                    PLACEHOLDERS
                        .iter()
                        .map(|(p, _)| *p)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        if !problems.is_empty() {
            bail!("proxier `{spec}`: {}; {USAGE}", problems.join("; "));
        }
        let (sync_metric, metrics_port) = sync.unwrap_or_default();
        Ok(ApiProxier {
            spec: spec.to_string(),
            command,
            sync_metric,
            metrics_port,
            judged_as,
            timeout: super::timeout_from_env()?,
        })
    }

    /// Its program is there to run (one given by its path): checked before anything is built.
    pub fn check(&self) -> Result<()> {
        match self.command.first() {
            Some(program) if program.contains('/') && !super::is_executable(Path::new(program)) => {
                bail!(
                    "proxier `{}`: {program} is not an executable file",
                    self.spec
                )
            }
            _ => Ok(()),
        }
    }

    /// The command line for `node` of `scenario`: every placeholder replaced.
    pub fn command_for(
        &self,
        scenario: &Scenario,
        node: &NodeNs,
        kubeconfig: &Path,
        dir: &Path,
    ) -> Vec<String> {
        let joined = |cidrs: [Option<crate::scenario::IpCidr>; 2]| {
            cidrs
                .into_iter()
                .flatten()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let topo = &scenario.topology;
        let per_family =
            |d: &crate::scenario::DualCidr| joined([d.of(IpFamily::Ipv4), d.of(IpFamily::Ipv6)]);
        let ips: Vec<String> = node
            .ip
            .map(|ip| ip.to_string())
            .into_iter()
            .chain(node.ipv6.map(|ip| ip.to_string()))
            .collect();
        let values = [
            ("{kubeconfig}", kubeconfig.display().to_string()),
            ("{node}", node.name.clone()),
            ("{node-ip}", ips.first().cloned().unwrap_or_default()),
            ("{node-ips}", ips.join(",")),
            ("{cluster-cidr}", per_family(&topo.cluster_cidr)),
            ("{service-cidr}", per_family(&topo.service_cidr)),
            ("{dir}", dir.display().to_string()),
        ];
        self.command
            .iter()
            .map(|word| {
                values
                    .iter()
                    .fold(word.clone(), |w, (p, v)| w.replace(p, v))
            })
            .collect()
    }

    /// What its processes are called in messages: the program's file name.
    pub fn program_name(&self) -> String {
        self.command
            .first()
            .map(|p| {
                Path::new(p)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| p.clone())
            })
            .unwrap_or_default()
    }
}

/// The `proxier:` fields of a scenario that differ from their defaults, as the scenario spells
/// them.
pub(super) fn options_set(options: &crate::scenario::ProxierOptions) -> Vec<String> {
    let (Ok(serde_json::Value::Object(set)), Ok(serde_json::Value::Object(default))) = (
        serde_json::to_value(options),
        serde_json::to_value(crate::scenario::ProxierOptions::default()),
    ) else {
        return vec!["(unreadable)".to_string()];
    };
    set.iter()
        .filter(|(k, v)| default.get(*k) != Some(*v))
        .map(|(k, _)| format!("proxier.{k}"))
        .collect()
}

/// The `{…}` words in `word` that are not placeholders.
fn unknown_placeholders(word: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = word;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        let candidate = &rest[open..open + close + 1];
        if !PLACEHOLDERS.iter().any(|(p, _)| *p == candidate) {
            out.push(candidate.to_string());
        }
        rest = &rest[open + close + 1..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drivers::programmer::NodeProgrammer;

    #[test]
    fn every_problem_of_a_spec_is_named_at_once() {
        let e = ApiProxier::parse(
            "api:--sync-metric=x@0 --fast ./no/such {node} {nodes}",
            "--sync-metric=x@0 --fast ./no/such {node} {nodes}",
        )
        .unwrap_err()
        .to_string();
        for part in [
            "`--sync-metric=x@0`: expected NAME@PORT",
            "unknown option `--fast`",
            "unknown placeholder `{nodes}`",
        ] {
            assert!(e.contains(part), "{part} missing from: {e}");
        }
        assert!(!e.contains("`{node}`"), "{e}");
        // The file system is asked only when the proxier is built, not when it is parsed.
        let p = ApiProxier::parse(
            "api:--sync-metric=x@1 ./no/such",
            "--sync-metric=x@1 ./no/such",
        )
        .unwrap();
        let e = p.check().unwrap_err().to_string();
        assert!(e.contains("./no/such is not an executable file"), "{e}");
        let e = ApiProxier::parse("api:sh -c true", "sh -c true")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no `--sync-metric=NAME@PORT`"), "{e}");
    }

    #[test]
    fn a_scenario_with_proxier_options_is_refused_naming_them() {
        let p = ApiProxier::parse("api:--sync-metric=s@1 true", "--sync-metric=s@1 true").unwrap();
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scenarios/clusterip-cross-node.yaml"
        );
        let mut scenario = crate::scenario::load(std::path::Path::new(path)).unwrap();
        assert_eq!(p.scenario_problem(&scenario), None);
        scenario.proxier.masquerade_all = true;
        let problem = p.scenario_problem(&scenario).unwrap();
        assert!(problem.contains("(proxier.masqueradeAll)"), "{problem}");
    }

    #[test]
    fn a_spec_keeps_its_command_and_options() {
        let p = ApiProxier::parse(
            "api: --sync-metric=sync_total@9100 --judged-as=kube-proxy-ipvs sh -c x --node={node}",
            " --sync-metric=sync_total@9100 --judged-as=kube-proxy-ipvs sh -c x --node={node}",
        )
        .unwrap();
        assert_eq!(p.command, ["sh", "-c", "x", "--node={node}"]);
        assert_eq!(
            (p.sync_metric.as_str(), p.metrics_port),
            ("sync_total", 9100)
        );
        assert_eq!(p.expectations_of(), "kube-proxy-ipvs");
        assert_eq!(p.program_name(), "sh");
    }
}
