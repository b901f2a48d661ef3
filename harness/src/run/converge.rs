//! Whether a node re-synced by a step holds what a fresh node synced to the same state holds.

use crate::drivers::programmer::RunProgrammer;
use crate::ipvs_connections::ipvs_table;
use crate::scenario::cluster::ClusterState;
use crate::scenario::{self, Scenario};
use crate::topology::{NodeNs, Topology};
use anyhow::{Context, Result};
use std::time::Duration;

/// For each node: how what it holds differs from what `programmer` programs into a fresh node
/// for the same `cluster` (each line names the node), and how long programming the fresh
/// nodes took.
pub(super) async fn convergence_check(
    topo: &Topology,
    state: &Scenario,
    cluster: &ClusterState,
    step: &str,
    programmer: &mut dyn RunProgrammer,
    flushed_before: &mut std::collections::BTreeMap<String, Vec<String>>,
) -> Result<(Vec<String>, Duration)> {
    let read = |node: &NodeNs| {
        crate::programming::effective_state(
            &node.netns,
            &crate::programming::ReadOptions::default(),
        )
        .with_context(|| format!("reading back node {}", node.name))
    };
    // Every twin first, then all programmed at once (a real proxier starts on each in
    // parallel), then each compared with its node.
    let mut twins = Vec::new();
    for spec in &state.topology.nodes {
        let ctx = scenario::node_context(state, &spec.name)
            .with_context(|| format!("node {} is not in the scenario", spec.name))?;
        let twin = if programmer.twins_need_addresses() {
            topo.fresh_addressed_twin(spec, &state.topology.underlay)
                .await?
        } else {
            topo.fresh_twin(spec)?
        };
        twins.push((ctx, twin));
    }
    let started = std::time::Instant::now();
    let fresh: Vec<(&crate::scenario::cluster::NodeContext, &NodeNs)> =
        twins.iter().map(|(ctx, twin)| (ctx, twin)).collect();
    programmer
        .program_fresh_all(step, cluster, &fresh)
        .context("programming fresh nodes to compare with")?;
    let programming = started.elapsed();
    let mut out = Vec::new();
    for (spec, (_, twin)) in state.topology.nodes.iter().zip(&twins) {
        let node = topo.node(&spec.name)?;
        let state = read(node)?;
        // A flushed chain may wait for one sync; still there at the next check, it is stale.
        let flushed = crate::convergence::flushed_chains(&state);
        let waited = flushed_before.insert(spec.name.clone(), flushed.clone());
        let mut allowed = crate::draining::draining_lines(&ipvs_table(node)?);
        allowed.extend(
            flushed
                .into_iter()
                .filter(|c| !waited.as_ref().is_some_and(|w| w.contains(c))),
        );
        let differences = crate::convergence::differences(&state, &read(twin)?, &allowed);
        out.extend(
            differences
                .into_iter()
                .map(|d| format!("{}: {d}", spec.name)),
        );
    }
    Ok((out, programming))
}
