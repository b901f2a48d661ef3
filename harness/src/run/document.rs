//! The observation document of one scenario × proxier: what the golden snapshot holds.

use crate::observe::{NodeAddress, ProbeObservation};
use crate::proxier::programmer::NodeSummary;
use crate::topology::naming::{BRIDGE_IF, UNDERLAY_IF, VXLAN_IF};
use crate::topology::Topology;
use anyhow::{Context, Result};
use serde::Serialize;
use std::net::IpAddr;

/// The snapshot document of one scenario × proxier.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioObservation {
    pub scenario: String,
    pub proxier: String,
    /// Per node: a short summary of what the kernel holds after programming.
    pub nodes: Vec<NodeSummary>,
    pub probes: Vec<ProbeObservation>,
    /// What each step changed and observed, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepObservation>,
}

/// One step of a scenario: what the nodes hold after the proxier re-synced them, whether that
/// is what a fresh sync of the same state gives, and the step's probes.
#[derive(Debug, Clone, Serialize)]
pub struct StepObservation {
    pub step: String,
    pub nodes: Vec<NodeSummary>,
    /// Whether every node holds what a fresh sync of the step's state programs.
    pub converged: bool,
    /// Per node, every way its state differs from a fresh node's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
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

/// Everything a node owns, labelled, so masquerade sources can be named in observations.
pub fn node_addresses(topo: &Topology) -> Vec<NodeAddress> {
    let mut out = Vec::new();
    for node in topo.nodes() {
        for ip in node.underlay_ips() {
            out.push(NodeAddress {
                ip,
                label: format!("{} {UNDERLAY_IF}", node.name),
            });
        }
        let gateways = node
            .gateway_ip()
            .map(IpAddr::V4)
            .into_iter()
            .chain(node.gateway_ip_v6().map(IpAddr::V6));
        for ip in gateways {
            out.push(NodeAddress {
                ip,
                label: format!("{} {BRIDGE_IF}", node.name),
            });
        }
        let vteps = node
            .vtep_ip()
            .map(IpAddr::V4)
            .into_iter()
            .chain(node.vtep_ip_v6().map(IpAddr::V6));
        for ip in vteps {
            out.push(NodeAddress {
                ip,
                label: format!("{} {VXLAN_IF}", node.name),
            });
        }
    }
    out
}
