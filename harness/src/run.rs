//! One scenario against one proxier: build the topology, program every node, fire every probe,
//! and produce the observation document plus the list of violated expectations.

use crate::backends::Backends;
use crate::cluster::{ClusterState, NodeContext};
use crate::evidence::{Collector, ProbeEvidence};
use crate::observe::{self, NodeAddress, ProbeObservation};
use crate::probe;
use crate::programming::Programming;
use crate::programming::{Applier, ApplyOptions, EffectiveState, KERNEL_IPVS_TIMEOUTS};
use crate::proxier::exec::{input_for, ExecProxier};
use crate::proxier::replay::Replay;
use crate::proxier::Proxier;
use crate::scenario::{self, Probe, Scenario, TargetPort};
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
    /// `ipvsadm --set` values, when the proxier sets (or the node holds) other than the
    /// kernel's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipvs_timeouts: Option<String>,
}

/// The outcome of running a scenario: what was observed, and which expectations failed.
#[derive(Debug, Clone)]
pub struct ScenarioRun {
    pub observation: ScenarioObservation,
    /// One line per violated expectation (empty when the proxier conforms).
    pub violations: Vec<String>,
    /// For each probe with a violated expectation: its spec and the relevant kernel state of
    /// the nodes involved, read before teardown (empty, and nothing read, when all pass).
    pub evidence: Vec<ProbeEvidence>,
    /// How long it took; not part of the observation, which must not vary from run to run.
    pub timing: Timing,
}

/// Wall-clock time of a scenario run's parts.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// When the run began.
    pub started: std::time::SystemTime,
    /// Building the namespaces, programming the nodes and starting the backends.
    pub setup: Duration,
    /// Each probe, in the scenario's order (the same order as the observation's probes).
    pub probes: Vec<Duration>,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            started: std::time::SystemTime::UNIX_EPOCH,
            setup: Duration::ZERO,
            probes: Vec::new(),
        }
    }
}

impl Timing {
    /// Setup and every probe (teardown, after the run, is not counted).
    pub fn total(&self) -> Duration {
        self.setup + self.probes.iter().sum::<Duration>()
    }
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
        for ip in node.underlay_ips() {
            out.push(NodeAddress {
                ip,
                label: format!("{} {UNDERLAY_IF}", node.name),
            });
        }
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
        ipvs_timeouts: p.ipvs_timeouts.as_ref().map(timeouts_summary),
    }
}

/// How many endpoints a probe's target could be answered by (an upper bound over nodes and
/// traffic policies: every usable endpoint of the service port). A literal `ip`/`dport` is
/// looked up among the Service addresses (ClusterIP, externalIPs, LB VIPs, NodePorts on any
/// node address), so a probe naming an address rather than a Service is judged the same way.
fn candidate_backends(cluster: &ClusterState, scenario: &Scenario, probe: &Probe) -> usize {
    let port = match (&probe.to.service, probe.to.ip, probe.to.dport) {
        (Some(wanted), _, _) => {
            let (ns, name) = wanted.split_once('/').unwrap_or(("default", wanted));
            cluster
                .service_ports
                .iter()
                .filter(|sp| sp.namespace == ns && sp.name == name)
                .find(|sp| match &probe.to.port {
                    None => true,
                    Some(TargetPort::Number(n)) => sp.port == *n,
                    Some(TargetPort::Name(n)) => sp.port_name == *n,
                })
        }
        (None, Some(ip), Some(dport)) => {
            let node_ip = scenario.topology.nodes.iter().any(|n| n.owns(ip));
            cluster.service_ports.iter().find(|sp| {
                sp.protocol == probe.protocol
                    && ((sp.port == dport
                        && (sp.cluster_ip == Some(ip)
                            || sp.external_ips.contains(&ip)
                            || sp.load_balancer_vips.contains(&ip)))
                        || (node_ip && sp.node_port == Some(dport)))
            })
        }
        _ => None,
    };
    port.map(|sp| {
        // Only endpoints a proxier may pick: ready ones, else serving+terminating ones
        // (pkg/proxy/topology.go). Extra shots at a Service with none would only feed the
        // kernel's ICMP rate limit and turn REJECTs into apparent drops.
        let ready = sp.endpoints.iter().filter(|e| e.ready).count();
        if ready > 0 {
            ready
        } else {
            sp.endpoints
                .iter()
                .filter(|e| e.serving && e.terminating)
                .count()
        }
    })
    .unwrap_or(1)
}

/// Shots needed so that, when each picks one of `n` backends uniformly at random, the chance
/// that some backend is never picked is below 1e-12 (union bound: n·(1−1/n)^k). Fixed by `n`
/// alone, so the number of shots — and so the recorded set — is the same on every run.
pub fn shots_to_reach_all(n: usize) -> u32 {
    if n <= 1 {
        return 1;
    }
    let miss = 1.0 - 1.0 / n as f64;
    let k = ((1e-12 / n as f64).ln() / miss.ln()).ceil();
    (k as u32).clamp(1, 900)
}

/// Whatever the runner can point at a node: a pure [`Proxier`] (programming computed, then
/// applied by the harness), or an `exec:`/`replay:` proxier that syncs the namespace itself.
/// Shared by the workers of a parallel run ([`crate::parallel`]), so `Send + Sync`.
pub trait NodeProgrammer: Send + Sync {
    fn label(&self) -> String;
    /// Backend choice random by design: record sets of backends, not sequences.
    fn random_choice(&self) -> bool;
    fn program_node(
        &self,
        cluster: &ClusterState,
        ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary>;
}

impl<P: Proxier + ?Sized> NodeProgrammer for P {
    fn label(&self) -> String {
        self.name().to_string()
    }
    fn random_choice(&self) -> bool {
        self.random_backend_choice()
    }
    fn program_node(
        &self,
        cluster: &ClusterState,
        ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        let programming = self
            .program(cluster, ctx)
            .with_context(|| format!("{} programming node {}", self.name(), node.name))?;
        crate::programming::apply(node, &programming).with_context(|| {
            format!(
                "applying {}'s programming to node {}",
                self.name(),
                node.name
            )
        })?;
        Ok(summarize(node, &programming))
    }
}

/// The applier settings an external proxier's output is applied with.
fn applier() -> Result<Applier> {
    Ok(Applier::new(ApplyOptions::for_running_kernel()?))
}

impl NodeProgrammer for ExecProxier {
    fn label(&self) -> String {
        format!("exec:{}", self.program)
    }
    /// Unknown: an external proxier may balance at random, so only sets are recorded.
    fn random_choice(&self) -> bool {
        true
    }
    fn program_node(
        &self,
        cluster: &ClusterState,
        ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        let sync = self
            .sync_node(&node.netns, &input_for(cluster, ctx), &applier()?)
            .with_context(|| self.label())?;
        if !sync.missing.is_empty() {
            anyhow::bail!(
                "{} on node {}: the kernel does not hold {} item(s) of its programming, e.g. {}",
                self.label(),
                node.name,
                sync.missing.len(),
                sync.missing[0]
            );
        }
        Ok(summarize_effective(node, &sync.effective))
    }
}

impl NodeProgrammer for Replay {
    fn label(&self) -> String {
        format!("replay:{}", self.dir.display())
    }
    fn random_choice(&self) -> bool {
        true
    }
    fn program_node(
        &self,
        _cluster: &ClusterState,
        _ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        let (_, effective) = self
            .sync_node(&node.netns, &node.name, &applier()?)
            .with_context(|| self.label())?;
        Ok(summarize_effective(node, &effective))
    }
}

fn summarize_effective(node: &NodeNs, state: &EffectiveState) -> NodeSummary {
    NodeSummary {
        node: node.name.clone(),
        kube_ipvs0: state
            .kube_ipvs0
            .as_ref()
            .map(|d| d.addresses.iter().map(|(a, _)| a.to_string()).collect())
            .unwrap_or_default(),
        ipvs_virtual_servers: state.ipvs.as_ref().map_or(0, |t| t.servers.len()),
        ipvs_real_servers: state
            .ipvs
            .as_ref()
            .map_or(0, |t| t.servers.iter().map(|v| v.destinations.len()).sum()),
        ipsets: state.ipsets.len(),
        iptables_rules: state.iptables.values().map(|t| t.rules.len()).sum(),
        ipvs_timeouts: state
            .ipvs
            .as_ref()
            .map(|t| t.timeouts)
            .filter(|t| *t != KERNEL_IPVS_TIMEOUTS)
            .map(|t| timeouts_summary(&t)),
    }
}

fn timeouts_summary(t: &ipvs_genl::Timeouts) -> String {
    format!("tcp {}s, tcpfin {}s, udp {}s", t.tcp, t.tcp_fin, t.udp)
}

/// A scenario's namespaces built, every node programmed by the proxier and the backends
/// serving: what probes are fired at. Dropping it stops the backends, then removes the
/// namespaces.
pub struct Staged {
    pub backends: Backends,
    pub topo: Topology,
    pub cluster: ClusterState,
    /// Per node, what the kernel holds after programming.
    pub nodes: Vec<NodeSummary>,
}

/// Builds `scenario`'s topology in fresh namespaces and programs every node with `proxier`.
pub async fn stage<P: NodeProgrammer + ?Sized>(scenario: &Scenario, proxier: &P) -> Result<Staged> {
    let topo = Topology::build(scenario)
        .await
        .with_context(|| format!("building the topology of {}", scenario.name))?;
    let cluster = scenario::cluster_state(scenario);
    let mut nodes = Vec::new();
    for node in topo.nodes() {
        let ctx = scenario::node_context(scenario, &node.name)
            .with_context(|| format!("node {} is not in the scenario", node.name))?;
        nodes.push(proxier.program_node(&cluster, &ctx, node)?);
    }
    let backends = Backends::for_scenario(&topo, scenario, &cluster)?;
    Ok(Staged {
        backends,
        topo,
        cluster,
        nodes,
    })
}

/// Runs `scenario` against `proxier` in freshly built namespaces, removed afterwards.
pub async fn run_scenario<P: NodeProgrammer + ?Sized>(
    scenario: &Scenario,
    proxier: &P,
    probe_timeout: Duration,
) -> Result<ScenarioRun> {
    let (started_at, started) = (std::time::SystemTime::now(), std::time::Instant::now());
    let staged = stage(scenario, proxier).await?;
    let mut timing = Timing {
        started: started_at,
        setup: started.elapsed(),
        probes: Vec::new(),
    };
    let (topo, cluster) = (&staged.topo, &staged.cluster);
    let addresses = node_addresses(topo);
    let mut probes = Vec::new();
    let mut violations = Vec::new();
    let mut evidence = Vec::new();
    let mut collector = Collector::new(topo);
    for (index, spec) in scenario.probes.iter().enumerate() {
        let probe_started = std::time::Instant::now();
        let mut plan = probe::plan(scenario, topo, index)?;
        let expectation = spec.expectation_for(&proxier.label());
        // A random choice needs enough shots to show the whole set reached, unless the
        // expectation itself declares a deterministic choice (counts, sequence).
        if proxier.random_choice() && !expectation.is_some_and(|e| e.fixes_shot_count()) {
            let candidates = candidate_backends(cluster, scenario, spec);
            plan.repeat = plan.repeat.max(shots_to_reach_all(candidates));
        }
        let shots = probe::fire(topo, &plan, probe_timeout)
            .with_context(|| format!("firing probe {}", plan.name))?;
        let obs = observe::observe_probe(&plan, &shots, &addresses, proxier.random_choice());
        if let Some(expect) = expectation {
            let found = observe::check(expect, &obs, &addresses);
            if !found.is_empty() {
                evidence.push(collector.collect(scenario, spec, &plan, expect, &found));
            }
            violations.extend(
                found
                    .into_iter()
                    .map(|v| format!("{} [{}]: {v}", scenario.name, proxier.label())),
            );
        }
        probes.push(obs);
        timing.probes.push(probe_started.elapsed());
    }
    Ok(ScenarioRun {
        observation: ScenarioObservation {
            scenario: scenario.name.clone(),
            proxier: proxier.label(),
            nodes: staged.nodes.clone(),
            probes,
        },
        violations,
        evidence,
        timing,
    })
}

#[cfg(test)]
mod tests {
    use super::shots_to_reach_all;

    #[test]
    fn shot_counts_make_missing_a_backend_negligible() {
        assert_eq!(shots_to_reach_all(0), 1);
        assert_eq!(shots_to_reach_all(1), 1);
        for n in 2..=8usize {
            let k = shots_to_reach_all(n);
            let p_miss = n as f64 * (1.0 - 1.0 / n as f64).powi(k as i32);
            assert!(p_miss < 1e-12, "n={n} k={k} p={p_miss}");
        }
        assert_eq!(shots_to_reach_all(2), 41);
    }
}
