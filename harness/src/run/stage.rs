//! A scenario's namespaces built and every node programmed: what probes are fired at; and a
//! step applied to it.

use crate::backends::Backends;
use crate::document::NodeSummary;
use crate::drivers::programmer::{NodeProgrammer, RunProgrammer};
use crate::netns::naming::RunPrefix;
use crate::proxier::Resync;
use crate::scenario::cluster::ClusterState;
use crate::scenario::{self, Scenario};
use crate::topology::{NodeNs, Topology};
use anyhow::{Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

/// A scenario's namespaces built, every node programmed by the proxier and the backends
/// serving: what probes are fired at. Dropping it ends the proxier's run (a real proxier's
/// processes stop), stops the backends, then removes the namespaces.
pub struct Staged<'p> {
    /// What programs this run's nodes; first, so it goes before the namespaces it works in.
    pub(crate) programmer: Box<dyn RunProgrammer + 'p>,
    pub backends: Backends,
    pub topo: Topology,
    /// The cluster state the nodes are synced to (the initial one, or the last step's).
    pub cluster: ClusterState,
    /// Per node, what the kernel holds after the first programming.
    pub nodes: Vec<NodeSummary>,
    /// Why the proxier cannot apply the scenario's steps, if it cannot.
    steps_problem: Option<String>,
    /// The healthCheckNodePorts the harness's stand-in health servers listen on (none when
    /// the proxier serves them itself).
    health_checks: BTreeSet<u16>,
    /// Where each node's stand-in health server listens, by node.
    health_addresses: BTreeMap<String, Vec<IpAddr>>,
}

/// Builds `scenario`'s topology in fresh namespaces and programs every node with `proxier`.
pub async fn stage<'p, P: NodeProgrammer + ?Sized>(
    scenario: &Scenario,
    proxier: &'p P,
) -> Result<Staged<'p>> {
    stage_with_prefix(scenario, proxier, RunPrefix::next()).await
}

/// [`stage`] under a given namespace prefix (labs use a stable one).
pub async fn stage_with_prefix<'p, P: NodeProgrammer + ?Sized>(
    scenario: &Scenario,
    proxier: &'p P,
    prefix: RunPrefix,
) -> Result<Staged<'p>> {
    let topo = Topology::build_with_prefix(scenario, prefix)
        .await
        .with_context(|| format!("building the topology of {}", scenario.name))?;
    let cluster = scenario::cluster_state(scenario);
    let mut programmer = proxier.begin(scenario)?;
    let contexts = topo
        .nodes()
        .iter()
        .map(|node| {
            scenario::node_context(scenario, &node.name)
                .with_context(|| format!("node {} is not in the scenario", node.name))
        })
        .collect::<Result<Vec<_>>>()?;
    let first: Vec<(
        &crate::scenario::cluster::NodeContext,
        &crate::topology::NodeNs,
    )> = contexts.iter().zip(topo.nodes()).collect();
    let nodes = programmer.program_nodes(&cluster, &first)?;
    let mut backends = Backends::start(&topo, &scenario.topology.pods)?;
    let health_checks = if programmer.serves_health_checks() {
        BTreeSet::new()
    } else {
        cluster.health_check_node_ports()
    };
    let health_addresses: BTreeMap<String, Vec<IpAddr>> = contexts
        .iter()
        .zip(topo.nodes())
        .map(|(ctx, node)| {
            let at = proxier
                .health_check_addresses(ctx, &scenario.proxier)
                .unwrap_or_else(|| {
                    std::iter::once(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
                        .chain(node.ipv6.map(IpAddr::V6))
                        .collect()
                });
            (node.name.clone(), at)
        })
        .collect();
    let addresses_of = |name: &str| {
        health_addresses
            .get(name)
            .cloned()
            .with_context(|| format!("no node {name}"))
    };
    backends.serve_health_checks(
        &topo,
        &Vec::from_iter(health_checks.iter().copied()),
        &addresses_of,
    )?;
    Ok(Staged {
        programmer,
        steps_problem: proxier.steps_problem(scenario),
        health_checks,
        health_addresses,
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

impl Staged<'_> {
    /// Applies step `k` of `scenario`: lets its `waitSeconds` of real time pass (nothing
    /// changes meanwhile: the proxier, the backends and every kept flow stay as they are),
    /// deletes its pods (servers stopped, namespaces gone),
    /// creates its new pods (namespaces built on their nodes, servers started), serves new
    /// healthCheckNodePorts, and re-syncs every node, whose proxier knows the previous state
    /// unless the step restarts it. Steps must be applied in order.
    pub async fn advance(&mut self, scenario: &Scenario, k: usize) -> Result<Advanced> {
        let step = scenario
            .steps
            .get(k)
            .ok_or_else(|| anyhow::anyhow!("{} has no step {}", scenario.name, k + 1))?;
        if let Some(why) = &self.steps_problem {
            anyhow::bail!("{}: {why}", scenario.name);
        }
        if step.wait_seconds > 0 {
            super::drain::wait_out_probe_connections(&self.topo).await?;
            tokio::time::sleep(Duration::from_secs(u64::from(step.wait_seconds))).await;
        }
        let state = scenario::state_at(scenario, Some(k));
        let cluster = scenario::cluster_state(&state.scenario);
        for pod in &step.delete.pods {
            let (_, pod) = pod.split_once('/').unwrap_or(("", pod));
            self.backends.stop_pod(pod).await;
            self.topo.delete_pod(pod).await?;
        }
        // After the deletions, as the state has them: a pod deleted and created again in one
        // step is a new pod, in a new namespace.
        for pod in &step.apply.pods {
            self.topo.add_pod(pod).await?;
            self.backends.start_pod(&self.topo, pod)?;
        }
        if !self.programmer.serves_health_checks() {
            let new_ports: Vec<u16> = cluster
                .health_check_node_ports()
                .difference(&self.health_checks)
                .copied()
                .collect();
            let health_addresses = &self.health_addresses;
            let addresses_of = |name: &str| {
                health_addresses
                    .get(name)
                    .cloned()
                    .with_context(|| format!("no node {name}"))
            };
            self.backends
                .serve_health_checks(&self.topo, &new_ports, &addresses_of)?;
            self.health_checks.extend(new_ports);
        }
        let synced = std::time::Instant::now();
        let previous = (!step.restart_proxier).then_some(&self.cluster);
        let name = scenario::step_name(step, k);
        self.programmer.advance(
            self.topo.nodes(),
            &state.scenario,
            &name,
            step.restart_proxier,
        )?;
        let mut nodes = Vec::new();
        for node in self.topo.nodes() {
            nodes.push(resync_node(
                node,
                &state.scenario,
                &cluster,
                &name,
                previous,
                self.programmer.as_mut(),
                Sync::Step,
            )?);
        }
        let sync = synced.elapsed();
        for k in super::drain::wait_out_ended_connections(&self.topo).await? {
            nodes[k] = resync_node(
                &self.topo.nodes()[k],
                &state.scenario,
                &cluster,
                &name,
                Some(&cluster),
                self.programmer.as_mut(),
                Sync::Drained,
            )
            .with_context(|| {
                format!(
                    "node {} once the ended connections holding its real servers expired",
                    self.topo.nodes()[k].name
                )
            })?;
        }
        self.cluster = cluster;
        Ok(Advanced { state, nodes, sync })
    }
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

/// Why a node is synced again.
#[derive(Clone, Copy)]
enum Sync {
    /// A step changed the cluster ([`RunProgrammer::resync_node`]).
    Step,
    /// Ended connections that held real servers expired ([`RunProgrammer::drained`]).
    Drained,
}

/// `node` re-synced by `programmer` to `cluster` for `sync`, knowing `previous` (`None`:
/// restarted).
fn resync_node(
    node: &NodeNs,
    state: &Scenario,
    cluster: &ClusterState,
    step: &str,
    previous: Option<&ClusterState>,
    programmer: &mut dyn RunProgrammer,
    sync: Sync,
) -> Result<NodeSummary> {
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
    let ipvs = crate::ipvs_connections::ipvs_table(node)?;
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
    match sync {
        Sync::Step => programmer.resync_node(&resync, cluster, &ctx, node),
        Sync::Drained => programmer.drained(&resync, cluster, &ctx, node),
    }
}
