//! The programming two proxiers leave on each node of a scenario, compared: after the initial
//! sync and after each step, every node's [effective state](crate::programming::effective_state)
//! under one proxier against the same node's under the other.
//!
//! [`read_programming`] stages the scenario ([`crate::run::stage`]), reads every node, applies
//! the steps one by one ([`crate::run::Staged::advance`]) and reads every node after each; no
//! probe is fired. [`compare`] compares two such readings node by node as the convergence check
//! compares an updated node with a fresh one ([`crate::convergence::line_differences`]: rules of
//! `KUBE-SERVICES`/`KUBE-NODEPORTS` sorted by Service as upstream's tests sort them, nftables
//! lines by chain), leaving out on each side the nftables service chains a sync flushed to
//! delete at the next one ([`crate::convergence::flushed_chains`]).
//!
//! A real kube-proxy and the built-in of its mode are expected to leave the same programming,
//! but for what [`known`] declares: what the built-in deliberately leaves out, and what changed
//! between kube-proxy releases. [`Declared`] sorts a comparison's differences into declared
//! ones and the rest. `kpct diff-programming` prints it.

pub mod known;

pub use known::{KnownDifference, Only, Side, Version, Versions, KNOWN_DIFFERENCES};

use crate::convergence::LineDifference;
use crate::drivers::real::{Mode, RealProxier};
use crate::programming::{EffectiveState, ReadOptions};
use crate::run::NodeProgrammer;
use crate::scenario::{self, Scenario};
use crate::topology::Topology;
use anyhow::{Context, Result};
use std::fmt;

/// The phase before any step: the proxier's first sync of every node.
pub const INITIAL: &str = "initial sync";

/// The sysctls read on every node: every one a kube-proxy (and so a built-in) may write
/// (`NewProxier` of each mode, `platformSetup`'s conntrack sysctls). `net.ipv4.vs.*` read as
/// absent on a kernel without IPVS.
pub const SYSCTLS: [&str; 10] = [
    "net.ipv4.conf.all.route_localnet",
    "net.ipv4.conf.all.arp_ignore",
    "net.ipv4.conf.all.arp_announce",
    "net.ipv4.ip_forward",
    "net.ipv4.vs.conntrack",
    "net.ipv4.vs.expire_nodest_conn",
    "net.ipv4.vs.expire_quiescent_template",
    "net.ipv4.vs.conn_reuse_mode",
    "net.netfilter.nf_conntrack_tcp_be_liberal",
    "net.bridge.bridge-nf-call-iptables",
];

/// The IP families of a scenario's cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stack {
    Ipv4Only,
    Ipv6Only,
    DualStack,
}

impl Stack {
    pub fn of(scenario: &Scenario) -> Stack {
        let cluster = scenario::cluster_state(scenario);
        match (cluster.ip_family, cluster.ipv6.is_some()) {
            (_, true) => Stack::DualStack,
            (crate::scenario::IpFamily::Ipv4, false) => Stack::Ipv4Only,
            (crate::scenario::IpFamily::Ipv6, false) => Stack::Ipv6Only,
        }
    }
}

/// What one proxier left on every node of a scenario, phase by phase.
#[derive(Debug, Clone)]
pub struct ProgrammingTrace {
    pub scenario: String,
    pub stack: Stack,
    pub proxier: String,
    /// The initial sync ([`INITIAL`]), then each step, in order.
    pub phases: Vec<Phase>,
}

/// Every node's state after one sync of the whole cluster.
#[derive(Debug, Clone)]
pub struct Phase {
    /// [`INITIAL`] or the step's name.
    pub name: String,
    /// In the topology's order.
    pub nodes: Vec<NodeState>,
}

/// One node's effective state.
#[derive(Debug, Clone)]
pub struct NodeState {
    pub node: String,
    pub state: EffectiveState,
}

/// Stages `scenario` in fresh namespaces with `proxier` and reads every node's effective state
/// after the initial sync and after each step (no probe is fired); the namespaces are removed
/// afterwards.
pub async fn read_programming<P: NodeProgrammer + ?Sized>(
    scenario: &Scenario,
    proxier: &P,
) -> Result<ProgrammingTrace> {
    crate::run::refusal(scenario, proxier)?;
    let mut staged = crate::run::stage(scenario, proxier).await?;
    let mut phases = vec![Phase {
        name: INITIAL.to_string(),
        nodes: read_nodes(&staged.topo)?,
    }];
    for (k, step) in scenario.steps.iter().enumerate() {
        let name = scenario::step_name(step, k);
        staged
            .advance(scenario, k)
            .await
            .with_context(|| format!("{} step `{name}`", scenario.name))?;
        phases.push(Phase {
            name,
            nodes: read_nodes(&staged.topo)?,
        });
    }
    Ok(ProgrammingTrace {
        scenario: scenario.name.clone(),
        stack: Stack::of(scenario),
        proxier: proxier.label(),
        phases,
    })
}

/// Every node's effective state, with [`SYSCTLS`].
fn read_nodes(topo: &Topology) -> Result<Vec<NodeState>> {
    let options = ReadOptions {
        sysctls: SYSCTLS.iter().map(|s| s.to_string()).collect(),
        ..ReadOptions::default()
    };
    topo.nodes()
        .iter()
        .map(|node| {
            let state = crate::programming::effective_state(&node.netns, &options)
                .with_context(|| format!("reading back node {}", node.name))?;
            Ok(NodeState {
                node: node.name.clone(),
                state,
            })
        })
        .collect()
}

/// One way a node's programming differs between two proxiers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Difference {
    pub scenario: String,
    /// The scenario's cluster.
    pub stack: Stack,
    /// [`INITIAL`] or a step's name.
    pub phase: String,
    pub node: String,
    pub line: LineDifference,
}

impl Difference {
    /// The side holding what the other lacks, or `None` for an order difference.
    pub fn side(&self) -> Option<Side> {
        match self.line {
            LineDifference::OnlyInFirst { .. } => Some(Side::First),
            LineDifference::OnlyInSecond { .. } => Some(Side::Second),
            LineDifference::Order { .. } => None,
        }
    }

    /// What differs, as [`LineDifference`] names it (`rule `…` (table nat)`, or the section of
    /// an order difference).
    pub fn what(&self) -> &str {
        match &self.line {
            LineDifference::OnlyInFirst { what, .. }
            | LineDifference::OnlyInSecond { what, .. } => what,
            LineDifference::Order { section, .. } => section,
        }
    }

    /// One line, naming the sides by their labels.
    pub fn describe(&self, first: &str, second: &str) -> String {
        let times = |n: usize| {
            if n > 1 {
                format!(" (×{n})")
            } else {
                String::new()
            }
        };
        let what = match &self.line {
            LineDifference::OnlyInFirst { what, times: n } => {
                format!("only {first}: {what}{}", times(*n))
            }
            LineDifference::OnlyInSecond { what, times: n } => {
                format!("only {second}: {what}{}", times(*n))
            }
            LineDifference::Order { section, first } => {
                format!("{section} in another order (first out of place: `{first}`)")
            }
        };
        format!("{} › {} › {}: {what}", self.scenario, self.phase, self.node)
    }
}

/// Every difference between the programming of `first` and `second` (readings of the same
/// scenario), phase by phase and node by node.
pub fn compare(first: &ProgrammingTrace, second: &ProgrammingTrace) -> Result<Vec<Difference>> {
    anyhow::ensure!(
        first.scenario == second.scenario && first.phases.len() == second.phases.len(),
        "{} and {} are readings of different scenarios",
        first.proxier,
        second.proxier
    );
    let mut out = Vec::new();
    for (a, b) in first.phases.iter().zip(&second.phases) {
        for (na, nb) in a.nodes.iter().zip(&b.nodes) {
            anyhow::ensure!(
                na.node == nb.node,
                "node {} read where node {} was",
                nb.node,
                na.node
            );
            let lines = crate::convergence::line_differences(
                &na.state,
                &nb.state,
                &crate::convergence::flushed_chains(&na.state),
                &crate::convergence::flushed_chains(&nb.state),
            );
            out.extend(lines.into_iter().map(|line| Difference {
                scenario: first.scenario.clone(),
                stack: first.stack,
                phase: a.name.clone(),
                node: na.node.clone(),
                line,
            }));
        }
    }
    Ok(out)
}

/// A real kube-proxy's mode and version, the key of its [`KNOWN_DIFFERENCES`] with the
/// built-in of its mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RealKey {
    pub mode: Mode,
    pub version: Version,
}

impl RealKey {
    /// The mode of `real`, and the version its binary answers `--version` with
    /// (`Kubernetes v1.37.2`).
    pub fn of(real: &RealProxier) -> Result<RealKey> {
        let said = crate::drivers::real::version_text(&real.binary)?;
        let version = said
            .split_whitespace()
            .find_map(Version::parse)
            .with_context(|| {
                format!(
                    "{} --version said `{}`, not a version",
                    real.binary.display(),
                    said.trim()
                )
            })?;
        Ok(RealKey {
            mode: real.mode,
            version,
        })
    }
}

impl fmt::Display for RealKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kube-proxy {} mode {}", self.version, self.mode.name())
    }
}

/// The differences of a real kube-proxy (the first side) with the built-in of its mode (the
/// second), sorted by the known differences that declare them.
#[derive(Debug, Clone, Default)]
pub struct Declared {
    /// Each difference a known one declares, with it.
    pub declared: Vec<(Difference, &'static KnownDifference)>,
    /// The differences nothing declares.
    pub undeclared: Vec<Difference>,
}

impl Declared {
    /// `differences` (of the real kube-proxy `key`, first, with its mode's built-in, second)
    /// sorted by [`KNOWN_DIFFERENCES`].
    pub fn sort(key: RealKey, differences: Vec<Difference>) -> Declared {
        let known: Vec<&'static KnownDifference> = known::applying_to(key).collect();
        let mut out = Declared::default();
        for d in differences {
            match known.iter().find(|k| k.declares(&d)) {
                Some(k) => out.declared.push((d, k)),
                None => out.undeclared.push(d),
            }
        }
        out
    }

    /// The known differences applying to `key` that declare none of these differences.
    pub fn unseen(&self, key: RealKey) -> Vec<&'static KnownDifference> {
        known::applying_to(key)
            .filter(|k| {
                !self
                    .declared
                    .iter()
                    .any(|(_, used)| std::ptr::eq(*used, *k))
            })
            .collect()
    }
}

/// The readings of `scenario` under `first` and `second`, one after the other, and every
/// difference between them.
pub async fn diff_programming(
    scenario: &Scenario,
    first: &dyn NodeProgrammer,
    second: &dyn NodeProgrammer,
) -> Result<Vec<Difference>> {
    let a = read_programming(scenario, first)
        .await
        .with_context(|| format!("{} under {}", scenario.name, first.label()))?;
    let b = read_programming(scenario, second)
        .await
        .with_context(|| format!("{} under {}", scenario.name, second.label()))?;
    compare(&a, &b)
}
