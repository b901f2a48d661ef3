//! One scenario against one proxier: build the topology, program every node, fire every probe,
//! and produce the observation document plus the list of violated expectations.

use crate::backends::Backends;
use crate::cluster::{ClusterState, NodeContext};
use crate::evidence::{Collector, ProbeEvidence};
use crate::flows::KeptFlows;
use crate::observe::{self, NodeAddress, ProbeObservation};
use crate::probe::{self, Patience};
use crate::programming::Programming;
use crate::programming::{Applier, ApplyOptions, EffectiveState, KERNEL_IPVS_TIMEOUTS};
use crate::proxier::exec::{input_for, step_input_for, ExecProxier};
use crate::proxier::replay::Replay;
use crate::proxier::{Proxier, Resync};
use crate::scenario::{self, Probe, Scenario, TargetPort};
use crate::topology::naming::RunPrefix;
use crate::topology::naming::{BRIDGE_IF, UNDERLAY_IF, VXLAN_IF};
use crate::topology::{NodeNs, Topology};
use anyhow::{Context, Result};
use serde::Serialize;
use std::net::IpAddr;
use std::time::Duration;

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

#[derive(Debug, Clone, Serialize)]
pub struct NodeSummary {
    pub node: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kube_ipvs0: Vec<String>,
    pub ipvs_virtual_servers: usize,
    pub ipvs_real_servers: usize,
    pub ipsets: usize,
    pub iptables_rules: usize,
    /// Rules of the IPv6 proxier's ip6tables (dual-stack and IPv6-only nodes); left out when
    /// there are none.
    #[serde(skip_serializing_if = "is_zero")]
    pub ip6tables_rules: usize,
    /// Lines of the `nft -f` transaction the node's sync wrote (built-ins), or of the
    /// nftables tables it holds (`exec:`, `replay:`); left out when there are none.
    #[serde(skip_serializing_if = "is_zero")]
    pub nft_lines: usize,
    /// `ipvsadm --set` values, when the proxier sets (or the node holds) other than the
    /// kernel's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipvs_timeouts: Option<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
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
    /// The shots that ended at a traced DROP verdict instead of the timeout, as (probe, where
    /// the kernel dropped it); not part of the observation, which is the same either way.
    pub drops_at_verdict: Vec<(String, probe::DropVerdict)>,
}

/// Wall-clock time of a scenario run's parts.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// When the run began.
    pub started: std::time::SystemTime,
    /// Building the namespaces, programming the nodes and starting the backends.
    pub setup: Duration,
    /// Each probe, in the scenario's order (the same order as the observation's
    /// [`ScenarioObservation::all_probes`]).
    pub probes: Vec<Duration>,
    /// Each step's re-sync of every node (the convergence check excluded).
    pub step_syncs: Vec<Duration>,
    /// For each step, programming the same state into a fresh twin of every node (the
    /// convergence check's reference): a first sync of the state, to compare the update with.
    pub fresh_syncs: Vec<Duration>,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            started: std::time::SystemTime::UNIX_EPOCH,
            setup: Duration::ZERO,
            probes: Vec::new(),
            step_syncs: Vec::new(),
            fresh_syncs: Vec::new(),
        }
    }
}

impl Timing {
    /// Setup, every probe and every step's sync (teardown, after the run, is not counted).
    pub fn total(&self) -> Duration {
        self.setup + self.probes.iter().sum::<Duration>() + self.step_syncs.iter().sum::<Duration>()
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

fn summarize(node: &NodeNs, p: &Programming) -> NodeSummary {
    NodeSummary {
        node: node.name.clone(),
        kube_ipvs0: p
            .kube_ipvs0_addresses()
            .iter()
            .map(|a| a.to_string())
            .collect(),
        ipvs_virtual_servers: p.ipvs.len(),
        ipvs_real_servers: p.ipvs.iter().map(|v| v.destinations.len()).sum(),
        ipsets: p.ipsets.len(),
        iptables_rules: p.iptables.values().map(|t| t.rule_lines().count()).sum(),
        ip6tables_rules: p.ip6tables.values().map(|t| t.rule_lines().count()).sum(),
        nft_lines: p.nft.lines.len(),
        ipvs_timeouts: p.ipvs_timeouts.as_ref().map(timeouts_summary),
    }
}

/// How many endpoints a probe's target could be answered by (an upper bound over nodes and
/// traffic policies: every usable endpoint of the service port). A literal `ip`/`dport` is
/// looked up among the Service addresses (ClusterIP, externalIPs, LB VIPs, NodePorts on any
/// node address), so a probe naming an address rather than a Service is judged the same way.
fn candidate_backends(cluster: &ClusterState, scenario: &Scenario, probe: &Probe) -> usize {
    // The state of the probe's family: that family's proxier is the one that answers it.
    let Some(cluster) = cluster.of(scenario.probe_family(probe)) else {
        return 1;
    };
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

    /// A later sync of a node programmed before (a step of a scenario). By default a full sync
    /// as the first one, over whatever the node holds.
    fn resync_node(
        &self,
        resync: &Resync<'_>,
        cluster: &ClusterState,
        ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        let _ = resync;
        self.program_node(cluster, ctx, node)
    }

    /// Why this proxier cannot run `scenario`'s steps, if it cannot (checked before anything
    /// is built).
    fn steps_problem(&self, scenario: &Scenario) -> Option<String> {
        let _ = scenario;
        None
    }

    /// What this proxier programs into a fresh node for the state after step `step`: the
    /// convergence check's reference. By default its first sync of that state.
    fn program_fresh(
        &self,
        step: &str,
        cluster: &ClusterState,
        ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        let _ = step;
        self.program_node(cluster, ctx, node)
    }
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
        let programming = crate::proxier::families::program_node(self, cluster, ctx)
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

    fn resync_node(
        &self,
        resync: &Resync<'_>,
        cluster: &ClusterState,
        ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        let programming = crate::proxier::families::resync_node(self, resync, cluster, ctx)
            .with_context(|| format!("{} re-syncing node {}", self.name(), node.name))?;
        crate::programming::apply(node, &programming)
            .with_context(|| format!("applying {}'s update to node {}", self.name(), node.name))?;
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

    /// Runs the program again with the new state and what changed (input version 2); what it
    /// prints is applied over the node as it is.
    fn resync_node(
        &self,
        resync: &Resync<'_>,
        cluster: &ClusterState,
        ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        let input = step_input_for(cluster, ctx, resync.step, resync.previous);
        let sync = self
            .sync_node(&node.netns, &input, &applier()?)
            .with_context(|| format!("{} at step `{}`", self.label(), resync.step))?;
        if !sync.missing.is_empty() {
            anyhow::bail!(
                "{} on node {} at step `{}`: the kernel does not hold {} item(s) of its \
                 programming, e.g. {}",
                self.label(),
                node.name,
                resync.step,
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
    /// A replay of a scenario with steps holds one capture per step: `DIR/<step>/<node>/`.
    fn steps_problem(&self, scenario: &Scenario) -> Option<String> {
        let missing: Vec<String> = scenario
            .steps
            .iter()
            .enumerate()
            .map(|(k, st)| scenario::step_name(st, k))
            .filter(|name| !self.at_step(name).dir.is_dir())
            .collect();
        (!missing.is_empty()).then(|| {
            format!(
                "{} has no capture for step(s) {}: a replay of a scenario with steps holds one \
                 capture per step, {}/<step>/<node>/",
                self.label(),
                missing.join(", "),
                self.dir.display()
            )
        })
    }
    fn random_choice(&self) -> bool {
        true
    }
    /// Makes the node hold exactly the step's capture: a capture lists everything the real
    /// node held after the step, and cannot say what went, so its tables replace the node's
    /// and IPVS services it does not list are deleted.
    fn resync_node(
        &self,
        resync: &Resync<'_>,
        _cluster: &ClusterState,
        _ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        let replay = self.at_step(resync.step);
        let (_, effective) = replay
            .sync_node_replacing(&node.netns, &node.name, &applier()?)
            .with_context(|| format!("{} at step `{}`", replay.label(), resync.step))?;
        Ok(summarize_effective(node, &effective))
    }
    fn program_fresh(
        &self,
        step: &str,
        cluster: &ClusterState,
        ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        self.at_step(step).program_node(cluster, ctx, node)
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
        ip6tables_rules: state.ip6tables.values().map(|t| t.rules.len()).sum(),
        nft_lines: state.nft.values().map(Vec::len).sum(),
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
    /// The cluster state the nodes are synced to (the initial one, or the last step's).
    pub cluster: ClusterState,
    /// Per node, what the kernel holds after the first programming.
    pub nodes: Vec<NodeSummary>,
    /// The healthCheckNodePorts the nodes serve.
    health_checks: std::collections::BTreeSet<u16>,
}

/// Builds `scenario`'s topology in fresh namespaces and programs every node with `proxier`.
pub async fn stage<P: NodeProgrammer + ?Sized>(scenario: &Scenario, proxier: &P) -> Result<Staged> {
    stage_with_prefix(scenario, proxier, RunPrefix::next()).await
}

/// [`stage`] under a given namespace prefix (labs use a stable one).
pub async fn stage_with_prefix<P: NodeProgrammer + ?Sized>(
    scenario: &Scenario,
    proxier: &P,
    prefix: RunPrefix,
) -> Result<Staged> {
    let topo = Topology::build_with_prefix(scenario, prefix)
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
        health_checks: cluster.health_check_node_ports(),
        backends,
        topo,
        cluster,
        nodes,
    })
}

/// What a step did to the staged cluster.
pub struct Advanced {
    /// The scenario as it stands after the step (its probes are the step's).
    pub state: scenario::StepState,
    /// Per node, what the kernel holds after the re-sync.
    pub nodes: Vec<NodeSummary>,
    /// The re-sync of every node.
    pub sync: Duration,
}

impl Staged {
    /// Applies step `k` of `scenario`: deletes its pods (servers stopped, namespaces gone),
    /// serves new healthCheckNodePorts, and re-syncs every node with `proxier`, which knows the
    /// previous state unless the step restarts it. Steps must be applied in order.
    pub async fn advance<P: NodeProgrammer + ?Sized>(
        &mut self,
        scenario: &Scenario,
        k: usize,
        proxier: &P,
    ) -> Result<Advanced> {
        let step = scenario
            .steps
            .get(k)
            .ok_or_else(|| anyhow::anyhow!("{} has no step {}", scenario.name, k + 1))?;
        if let Some(why) = proxier.steps_problem(scenario) {
            anyhow::bail!("{}: {why}", scenario.name);
        }
        let state = scenario::state_at(scenario, Some(k));
        let cluster = scenario::cluster_state(&state.scenario);
        for pod in &step.delete.pods {
            let (_, pod) = pod.split_once('/').unwrap_or(("", pod));
            self.backends.stop_pod(pod).await;
            self.topo.delete_pod(pod).await?;
        }
        let new_ports: Vec<u16> = cluster
            .health_check_node_ports()
            .difference(&self.health_checks)
            .copied()
            .collect();
        self.backends.serve_health_checks(&self.topo, &new_ports)?;
        self.health_checks.extend(new_ports);
        let synced = std::time::Instant::now();
        let previous = (!step.restart_proxier).then_some(&self.cluster);
        let name = scenario::step_name(step, k);
        let nodes = resync_nodes(
            &self.topo,
            &state.scenario,
            &cluster,
            &name,
            previous,
            proxier,
        )?;
        let sync = synced.elapsed();
        self.cluster = cluster;
        Ok(Advanced { state, nodes, sync })
    }
}

/// Runs `scenario` against `proxier` in freshly built namespaces, removed afterwards: the
/// initial probes, then each step (its changes, a re-sync of every node, the convergence
/// check, its probes).
pub async fn run_scenario<P: NodeProgrammer + ?Sized>(
    scenario: &Scenario,
    proxier: &P,
    patience: impl Into<Patience>,
) -> Result<ScenarioRun> {
    let patience = patience.into();
    if !scenario.steps.is_empty() {
        if let Some(why) = proxier.steps_problem(scenario) {
            anyhow::bail!("{}: {why}", scenario.name);
        }
    }
    let (started_at, started) = (std::time::SystemTime::now(), std::time::Instant::now());
    let mut staged = stage(scenario, proxier).await?;
    let mut timing = Timing {
        started: started_at,
        setup: started.elapsed(),
        probes: Vec::new(),
        step_syncs: Vec::new(),
        fresh_syncs: Vec::new(),
    };
    let mut judged = Judged::default();
    let mut flows = KeptFlows::default();
    // One verdict table for the run (creating and deleting it costs ~70 ms in the emulated
    // VM), marking only while a group's probes fire.
    let mut verdicts = patience.verdict_watch(&staged.topo)?;
    let probes = ProbeGroup {
        state: scenario,
        cluster: &staged.cluster,
        step: None,
        timeout: patience.timeout,
    }
    .run(
        &staged.topo,
        proxier,
        verdicts.as_mut(),
        &mut flows,
        &mut judged,
        &mut timing,
    )?;
    let mut steps = Vec::new();
    let mut flushed_before = std::collections::BTreeMap::new();
    for (k, step) in scenario.steps.iter().enumerate() {
        let name = scenario::step_name(step, k);
        let context = || format!("{} step `{name}`", scenario.name);
        let advanced = staged
            .advance(scenario, k, proxier)
            .await
            .with_context(context)?;
        timing.step_syncs.push(advanced.sync);
        if step.restart_proxier {
            // A restarted kube-proxy has forgotten the chains it flushed and flushes them again.
            flushed_before.clear();
        }
        let state = &advanced.state.scenario;
        let (not_converged, fresh_sync) = convergence_check(
            &staged.topo,
            state,
            &staged.cluster,
            &name,
            proxier,
            &mut flushed_before,
        )
        .with_context(context)?;
        timing.fresh_syncs.push(fresh_sync);
        judged.violations.extend(not_converged.iter().map(|d| {
            format!(
                "{} [{}]: {d} after step `{name}` (a fresh node synced to the same state \
                 differs)",
                scenario.name,
                proxier.label()
            )
        }));
        let probes = ProbeGroup {
            state,
            cluster: &staged.cluster,
            step: Some(&name),
            timeout: patience.timeout,
        }
        .run(
            &staged.topo,
            proxier,
            verdicts.as_mut(),
            &mut flows,
            &mut judged,
            &mut timing,
        )
        .with_context(context)?;
        steps.push(StepObservation {
            step: name,
            nodes: advanced.nodes,
            converged: not_converged.is_empty(),
            not_converged,
            probes,
        });
    }
    Ok(ScenarioRun {
        observation: ScenarioObservation {
            scenario: scenario.name.clone(),
            proxier: proxier.label(),
            nodes: staged.nodes.clone(),
            probes,
            steps,
        },
        violations: judged.violations,
        evidence: judged.evidence,
        timing,
        drops_at_verdict: judged.drops_at_verdict,
    })
}

/// Violations and evidence gathered over a run, and how its shots ended.
#[derive(Default)]
struct Judged {
    violations: Vec<String>,
    evidence: Vec<ProbeEvidence>,
    drops_at_verdict: Vec<(String, probe::DropVerdict)>,
}

/// The chains each iptables table of `node` holds, as kube-proxy reads them before a sync.
fn existing_chains(
    node: &NodeNs,
    family: crate::programming::tools::Xtables,
) -> Result<std::collections::BTreeMap<crate::programming::Table, std::collections::BTreeSet<String>>>
{
    let save = crate::programming::tools::run(
        &node.netns,
        family.save(crate::programming::tools::IptablesBackend::default()),
        &[],
        None,
    )
    .with_context(|| format!("reading the chains of node {}", node.name))?;
    Ok(
        crate::programming::effective::normalize_iptables_save(&save)
            .into_iter()
            .map(|(table, rules)| (table, rules.chains.into_iter().map(|c| c.name).collect()))
            .collect(),
    )
}

/// The IPVS table of `node` with connection counts; empty when the kernel has no IPVS.
fn ipvs_table(node: &NodeNs) -> Result<Vec<ipvs_genl::TableEntry>> {
    match ipvs_genl::IpvsHandle::in_netns(node.netns.path()) {
        Ok(mut handle) => handle
            .table()
            .with_context(|| format!("reading the IPVS table of node {}", node.name)),
        Err(ipvs_genl::Error::FamilyMissing) => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("opening IPVS on node {}", node.name)),
    }
}

/// Every node re-synced by `proxier` to `cluster`, knowing `previous` (`None`: restarted).
fn resync_nodes<P: NodeProgrammer + ?Sized>(
    topo: &Topology,
    state: &Scenario,
    cluster: &ClusterState,
    step: &str,
    previous: Option<&ClusterState>,
    proxier: &P,
) -> Result<Vec<NodeSummary>> {
    let mut out = Vec::new();
    for node in topo.nodes() {
        let ctx = scenario::node_context(state, &node.name)
            .with_context(|| format!("node {} is not in the scenario", node.name))?;
        // Only a cluster with a proxier of the family has its chains to read.
        let has = |family| cluster.of(family).is_some();
        let chains = if has(crate::scenario::IpFamily::Ipv4) {
            existing_chains(node, crate::programming::tools::Xtables::Ip)?
        } else {
            Default::default()
        };
        let ip6_chains = if has(crate::scenario::IpFamily::Ipv6) {
            existing_chains(node, crate::programming::tools::Xtables::Ip6)?
        } else {
            Default::default()
        };
        let ipvs = ipvs_table(node)?;
        let nft = crate::programming::nft::read_tables(&node.netns)
            .with_context(|| format!("reading the nftables tables of node {}", node.name))?;
        let resync = Resync {
            step,
            previous,
            existing_chains: &chains,
            existing_ip6_chains: &ip6_chains,
            nft: &nft,
            ipvs: &ipvs,
        };
        out.push(proxier.resync_node(&resync, cluster, &ctx, node)?);
    }
    Ok(out)
}

/// For each node: how what it holds differs from what `proxier` programs into a fresh node
/// for the same `cluster` (each line names the node), and how long programming the fresh
/// nodes took.
fn convergence_check<P: NodeProgrammer + ?Sized>(
    topo: &Topology,
    state: &Scenario,
    cluster: &ClusterState,
    step: &str,
    proxier: &P,
    flushed_before: &mut std::collections::BTreeMap<String, Vec<String>>,
) -> Result<(Vec<String>, Duration)> {
    let read = |node: &NodeNs| {
        crate::programming::effective_state(
            &node.netns,
            &crate::programming::ReadOptions::default(),
        )
        .with_context(|| format!("reading back node {}", node.name))
    };
    let (mut out, mut programming) = (Vec::new(), Duration::ZERO);
    for spec in &state.topology.nodes {
        let node = topo.node(&spec.name)?;
        let ctx = scenario::node_context(state, &spec.name)
            .with_context(|| format!("node {} is not in the scenario", spec.name))?;
        let twin = topo.fresh_twin(spec)?;
        let started = std::time::Instant::now();
        proxier
            .program_fresh(step, cluster, &ctx, &twin)
            .with_context(|| format!("programming a fresh node {} to compare with", spec.name))?;
        programming += started.elapsed();
        let state = read(node)?;
        // A flushed chain may wait for one sync; still there at the next check, it is stale.
        let flushed = crate::convergence::flushed_chains(&state);
        let waited = flushed_before.insert(spec.name.clone(), flushed.clone());
        let mut allowed = crate::convergence::draining_lines(&ipvs_table(node)?);
        allowed.extend(
            flushed
                .into_iter()
                .filter(|c| !waited.as_ref().is_some_and(|w| w.contains(c))),
        );
        let differences = crate::convergence::differences(&state, &read(&twin)?, &allowed);
        out.extend(
            differences
                .into_iter()
                .map(|d| format!("{}: {d}", spec.name)),
        );
    }
    Ok((out, programming))
}

/// The probes of the initial state or of one step.
struct ProbeGroup<'a> {
    /// The scenario as it stands (its `probes` are the group's).
    state: &'a Scenario,
    cluster: &'a ClusterState,
    /// The step's name; observations of its probes are named `STEP/PROBE`.
    step: Option<&'a str>,
    /// How long a shot waits for its answer (or for its drop, with a verdict watch).
    timeout: Duration,
}

impl ProbeGroup<'_> {
    fn run<P: NodeProgrammer + ?Sized>(
        &self,
        topo: &Topology,
        proxier: &P,
        verdicts: Option<&mut probe::VerdictWatch>,
        flows: &mut KeptFlows,
        judged: &mut Judged,
        timing: &mut Timing,
    ) -> Result<Vec<ProbeObservation>> {
        let (scenario, cluster) = (self.state, self.cluster);
        let addresses = node_addresses(topo);
        let mut collector = Collector::new(topo);
        let mut observed = Vec::new();
        let mut verdicts = verdicts;
        for (index, spec) in scenario.probes.iter().enumerate() {
            let probe_started = std::time::Instant::now();
            let expectation = spec.expectation_for(&proxier.label());
            let (plan, shots) = if let Some(flow) = &spec.continues {
                let (plan, shot) = flows
                    .continue_flow(topo, flow)
                    .with_context(|| format!("continuing flow `{flow}` in probe {}", spec.name))?;
                (plan, vec![shot])
            } else {
                let mut plan = probe::plan(scenario, topo, index)?;
                if let Some(flow) = &spec.keep {
                    let shot = flows
                        .open(topo, flow, &plan, self.timeout)
                        .with_context(|| format!("keeping flow `{flow}`"))?;
                    (plan, vec![shot])
                } else {
                    // A random choice needs enough shots to show the whole set reached, unless
                    // the expectation itself declares a deterministic choice (counts, sequence).
                    if proxier.random_choice() && !expectation.is_some_and(|e| e.fixes_shot_count())
                    {
                        let candidates = candidate_backends(cluster, scenario, spec);
                        plan.repeat = plan.repeat.max(shots_to_reach_all(candidates));
                    }
                    let shots = probe::fire_keeping(
                        topo,
                        &plan,
                        self.timeout,
                        &flows.entries(),
                        verdicts.as_deref_mut(),
                    )
                    .with_context(|| format!("firing probe {}", plan.name))?;
                    (plan, shots)
                }
            };
            let mut obs =
                observe::observe_probe(&plan, &shots, &addresses, proxier.random_choice());
            if let Some(step) = self.step {
                obs.probe = format!("{step}/{}", spec.name);
            }
            judged.drops_at_verdict.extend(
                shots
                    .iter()
                    .filter_map(|s| s.dropped_at.clone())
                    .map(|at| (obs.probe.clone(), at)),
            );
            if let Some(expect) = expectation {
                let found = observe::check(expect, &obs, &addresses);
                if !found.is_empty() {
                    let mut evidence = collector.collect(scenario, spec, &plan, expect, &found);
                    evidence.probe = obs.probe.clone();
                    judged.evidence.push(evidence);
                }
                judged.violations.extend(
                    found
                        .into_iter()
                        .map(|v| format!("{} [{}]: {v}", scenario.name, proxier.label())),
                );
            }
            observed.push(obs);
            timing.probes.push(probe_started.elapsed());
        }
        if let Some(v) = verdicts {
            // Inert before anything programs the nodes again.
            v.disarm()?;
        }
        Ok(observed)
    }
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
