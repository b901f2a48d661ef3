//! One scenario against one proxier: build the topology, program every node, fire every probe,
//! and produce the observation document plus the list of violated expectations.

use crate::backends::Backends;
use crate::observe::{self, NodeAddress, ProbeObservation};
use crate::probe;
use crate::programming::Programming;
use crate::proxier::Proxier;
use crate::scenario::{self, Scenario};
use crate::topology::naming::{BRIDGE_IF, UNDERLAY_IF, VXLAN_IF};
use crate::topology::{NodeNs, Topology};
use anyhow::{Context, Result};
use serde::Serialize;
use std::time::Duration;

/// The snapshot document of one scenario × proxier.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioObservation {
    pub scenario: String,
    pub proxier: String,
    /// Per node: a short summary of what the kernel holds after programming.
    pub nodes: Vec<NodeSummary>,
    pub probes: Vec<ProbeObservation>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NodeSummary {
    pub node: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kube_ipvs0: Vec<String>,
    pub ipvs_virtual_servers: usize,
    pub ipvs_real_servers: usize,
    pub ipsets: usize,
    pub iptables_rules: usize,
}

/// The outcome of running a scenario: what was observed, and which expectations failed.
#[derive(Debug, Clone)]
pub struct ScenarioRun {
    pub observation: ScenarioObservation,
    /// One line per violated expectation (empty when the proxier conforms).
    pub violations: Vec<String>,
}

impl ScenarioObservation {
    /// The YAML document compared with the golden snapshot.
    pub fn to_yaml(&self) -> Result<String> {
        serde_yaml_ng::to_string(self).context("rendering the observation")
    }
}

/// Everything a node owns, labelled, so masquerade sources can be named in observations.
pub fn node_addresses(topo: &Topology) -> Vec<NodeAddress> {
    let mut out = Vec::new();
    for node in topo.nodes() {
        out.push(NodeAddress {
            ip: node.ip,
            label: format!("{} {UNDERLAY_IF}", node.name),
        });
        out.push(NodeAddress {
            ip: node.gateway_ip(),
            label: format!("{} {BRIDGE_IF}", node.name),
        });
        out.push(NodeAddress {
            ip: node.vtep_ip(),
            label: format!("{} {VXLAN_IF}", node.name),
        });
    }
    out
}

fn summarize(node: &NodeNs, p: &Programming) -> NodeSummary {
    NodeSummary {
        node: node.name.clone(),
        kube_ipvs0: p.ipvs_addresses.iter().map(|a| a.to_string()).collect(),
        ipvs_virtual_servers: p.ipvs.len(),
        ipvs_real_servers: p.ipvs.iter().map(|v| v.destinations.len()).sum(),
        ipsets: p.ipsets.len(),
        iptables_rules: p.iptables.values().map(|t| t.rules.len()).sum(),
    }
}

/// Runs `scenario` against `proxier` in freshly built namespaces, removed afterwards.
pub async fn run_scenario(
    scenario: &Scenario,
    proxier: &dyn Proxier,
    probe_timeout: Duration,
) -> Result<ScenarioRun> {
    let topo = Topology::build(scenario)
        .await
        .with_context(|| format!("building the topology of {}", scenario.name))?;
    let cluster = scenario::cluster_state(scenario);
    let mut nodes = Vec::new();
    for node in topo.nodes() {
        let ctx = scenario::node_context(scenario, &node.name)
            .with_context(|| format!("node {} is not in the scenario", node.name))?;
        let programming = proxier
            .program(&cluster, &ctx)
            .with_context(|| format!("{} programming node {}", proxier.name(), node.name))?;
        crate::programming::apply(node, &programming)
            .with_context(|| format!("applying {}'s programming to node {}", proxier.name(), node.name))?;
        nodes.push(summarize(node, &programming));
    }
    let _backends = Backends::start(&topo, &scenario.topology.pods)?;
    let addresses = node_addresses(&topo);
    let mut probes = Vec::new();
    let mut violations = Vec::new();
    for (index, spec) in scenario.probes.iter().enumerate() {
        let plan = probe::plan(scenario, &topo, index)?;
        let shots = probe::fire(&topo, &plan, probe_timeout)
            .with_context(|| format!("firing probe {}", plan.name))?;
        let obs = observe::observe_probe(&plan, &shots, &addresses, proxier.random_backend_choice());
        if let Some(expect) = spec.expectation_for(proxier.name()) {
            violations.extend(
                observe::check(expect, &obs, &addresses)
                    .into_iter()
                    .map(|v| format!("{} [{}]: {v}", scenario.name, proxier.name())),
            );
        }
        probes.push(obs);
    }
    Ok(ScenarioRun {
        observation: ScenarioObservation {
            scenario: scenario.name.clone(),
            proxier: proxier.name().to_string(),
            nodes,
            probes,
        },
        violations,
    })
}
