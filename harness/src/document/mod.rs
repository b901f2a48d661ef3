//! The observation document: what a run of one scenario against one proxier observed, in the
//! form the golden files (`snapshots/*.snap`) hold, the project's central contract. Every type
//! that document serializes is here, and nothing else: how shots become observations is
//! `observe`, how a node's programming becomes its summary is the drivers' `summary`, and how
//! two documents are compared is [`behaviour`].
//!
//! The document is deterministic by construction: scenario order, no timestamps, no random
//! values. Where a proxier picks backends at random by design (iptables statistic mode), only
//! the *set* of backends reached is recorded; IPVS's deterministic schedulers are recorded as
//! the sequence.

pub mod behaviour;

pub use behaviour::{behaviour_differences, behaviour_lines};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// The snapshot document of one scenario × proxier.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScenarioObservation {
    pub scenario: String,
    pub proxier: String,
    /// Per node: a short summary of what the kernel holds after programming.
    pub nodes: Vec<NodeSummary>,
    pub probes: Vec<ProbeObservation>,
    /// What each step changed and observed, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepObservation>,
}

/// One step of a scenario: what the nodes hold after the proxier re-synced them, whether that
/// is what a fresh sync of the same state gives, and the step's probes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepObservation {
    pub step: String,
    pub nodes: Vec<NodeSummary>,
    /// Whether every node holds what a fresh sync of the step's state programs.
    pub converged: bool,
    /// Per node, every way its state differs from a fresh node's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_converged: Vec<String>,
    pub probes: Vec<ProbeObservation>,
}

impl ScenarioObservation {
    /// Every probe, the initial ones first, then each step's in order (a step's probes are
    /// named `STEP/PROBE`).
    pub fn all_probes(&self) -> impl Iterator<Item = &ProbeObservation> {
        self.probes
            .iter()
            .chain(self.steps.iter().flat_map(|s| s.probes.iter()))
    }

    /// The YAML document compared with the golden snapshot.
    pub fn to_yaml(&self) -> Result<String> {
        serde_yaml_ng::to_string(self).context("rendering the observation")
    }
}

/// A node's programming in a few numbers, as the document records it per node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeSummary {
    pub node: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kube_ipvs0: Vec<String>,
    pub ipvs_virtual_servers: usize,
    pub ipvs_real_servers: usize,
    pub ipsets: usize,
    pub iptables_rules: usize,
    /// Rules of the IPv6 proxier's ip6tables (dual-stack and IPv6-only nodes); left out when
    /// there are none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ip6tables_rules: usize,
    /// Lines of the `nft -f` transaction the node's sync wrote (built-ins), or of the
    /// nftables tables it holds (`exec:`, `replay:`); left out when there are none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub nft_lines: usize,
    /// `ipvsadm --set` values, when the proxier sets (or the node holds) other than the
    /// kernel's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipvs_timeouts: Option<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

thread_local! {
    static EVERY_FIELD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// For `skip_serializing_if`: a field the documents leave out, written only in the wire form
/// (`report::wire`), in which a run in a VM hands its results back whole.
pub(crate) fn omitted<T>(_: &T) -> bool {
    !EVERY_FIELD.with(std::cell::Cell::get)
}

/// `serialize` with the fields documents leave out written too, however it ends.
pub(crate) fn with_every_field<R>(serialize: impl FnOnce() -> R) -> R {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            EVERY_FIELD.with(|f| f.set(false));
        }
    }
    EVERY_FIELD.with(|f| f.set(true));
    let _reset = Reset;
    serialize()
}

/// The fate of one shot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Delivered to a backend and answered from the address the client used.
    Delivered,
    /// Delivered, but the answer came back from another address (broken reverse NAT).
    DeliveredReplyUntranslated,
    /// Delivered, but nothing came back.
    DeliveredNoReply,
    /// Delivered, and the backend itself refused it (no listener).
    DeliveredRefusedByBackend,
    /// Not delivered; a TCP RST or ICMP unreachable came back.
    Rejected,
    /// Not delivered; nothing came back within the timeout.
    Dropped,
    /// Delivered to no pod, but answered from the node address it was sent to: a server on
    /// the node itself took it.
    AnsweredByNode,
}

impl Verdict {
    pub fn delivered(self) -> bool {
        matches!(
            self,
            Verdict::Delivered
                | Verdict::DeliveredReplyUntranslated
                | Verdict::DeliveredNoReply
                | Verdict::DeliveredRefusedByBackend
        )
    }
}

/// One shot, as recorded in the observation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShotObservation {
    pub verdict: Verdict,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// The packet as the backend received it (`src:port -> dst:port`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_saw: Option<String>,
    /// `preserved` or `masqueraded to IP (who)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// What the client got back (`src:port -> dst:port`, `tcp-reset`, `icmp-unreachable code N`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    #[serde(default, skip_serializing_if = "omitted")]
    pub source_ip_seen: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "omitted")]
    pub reply_translated: Option<bool>,
    /// The client's source port of this shot (differs per repetition).
    #[serde(default, skip_serializing_if = "omitted")]
    pub sport: u16,
}

/// A probe's observation (the unit of the snapshot document).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeObservation {
    pub probe: String,
    pub from: String,
    pub to: String,
    /// Every shot, when backend choice is deterministic (or there is one shot).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shots: Vec<ShotObservation>,
    /// When backend choice is random by design: the distinct outcomes, sorted, and how many
    /// shots were fired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcomes: Option<Vec<ShotObservation>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shots_fired: Option<u32>,
    /// Backends in the order reached (deterministic schedulers) or sorted (random ones).
    pub backends: Vec<String>,
    #[serde(default, skip_serializing_if = "omitted")]
    pub all: Vec<ShotObservation>,
    #[serde(default, skip_serializing_if = "omitted")]
    pub client_ip: Option<IpAddr>,
}
